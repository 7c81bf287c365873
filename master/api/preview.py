"""``POST /api/v1/preview-hp-search``: what a config's searcher would do (``det preview-search``)."""

from __future__ import annotations

from flask import Blueprint

from det.master.api._common import state
from det.master.api._contract import contract
from det.master.schemas import d
from det.master.services import preview as svc

bp = Blueprint("preview", __name__)


@bp.post("/api/v1/preview-hp-search")
@contract("PreviewHPSearch")
def preview_hp_search(body: d.v1PreviewHPSearchRequest) -> d.v1PreviewHPSearchResponse:
    return svc.preview_search(state(), body.get("config"))
