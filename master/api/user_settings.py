"""``/api/v1/users/setting``: the caller's own WebUI settings (Determined's GetUserSetting,
PostUserSetting, ResetUserSetting). A user session only: a task acting for a user neither reads
nor changes them."""

from __future__ import annotations

from flask import Blueprint

from det.master.api._common import current_user, db, reads
from det.master.api._contract import contract
from det.master.schemas import d
from det.master.services import user_settings as svc
from det.master.wire import Empty

bp = Blueprint("user_settings", __name__)


@bp.get("/api/v1/users/setting")
@contract("GetUserSetting")
def get_settings() -> d.v1GetUserSettingResponse:
    with reads() as conn:
        found = svc.get(conn, current_user().id)
    return {"settings": [svc.wire(s) for s in found]}  # type: ignore[misc]


@bp.post("/api/v1/users/setting")
@contract("PostUserSetting")
def post_settings(body: d.v1PostUserSettingRequest) -> Empty:
    settings = svc.parse(body.get("settings"))
    with db() as conn:
        svc.post(conn, current_user().id, settings)
    return {}


@bp.post("/api/v1/users/setting/reset")
@contract("ResetUserSetting")
def reset_settings() -> Empty:
    with db() as conn:
        svc.reset(conn, current_user().id)
    return {}
