"""``POST /api/v1/preview-hp-search``: what a config's searcher would do (``det preview-search``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from det.master.api._common import body, state
from det.master.services import preview as svc

bp = Blueprint("preview", __name__)


@bp.post("/api/v1/preview-hp-search")
def preview_hp_search() -> Any:
    return svc.preview_search(state(), body().get("config"))
