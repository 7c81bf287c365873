"""``/api/v1/tokens``: access tokens (``det token create|list|describe|edit|revoke``).

A user manages their own tokens; an admin anyone's."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Blueprint, request

from det.master import limits
from det.master.api._common import body, current_user, db, int_list_arg, pagination
from det.master.errors import InvalidArgument, PermissionDenied
from det.master.services import tokens as svc
from det.master.services import users

bp = Blueprint("tokens", __name__)


def _may_manage(user_id: int) -> None:
    me = current_user()
    if not me.admin and me.id != user_id:
        raise PermissionDenied("only an admin may manage another user's access tokens")


@bp.post("/api/v1/tokens")
def create() -> Any:
    data = body()
    user_id = data.get("userId")
    if isinstance(user_id, bool) or not isinstance(user_id, int):
        raise InvalidArgument("userId: required integer")
    description = limits.text("description", data.get("description"), limits.NAME)
    _may_manage(user_id)
    with db() as conn:
        users.get_user(conn, user_id)
        token_id, token = svc.create(
            conn,
            user_id,
            lifespan=data.get("lifespan"),
            description=description,
            now=dt.datetime.now(dt.UTC),
        )
    return {"token": token, "tokenId": token_id}


@bp.get("/api/v1/tokens")
def list_() -> Any:
    me = current_user()
    username = request.args.get("username") or None
    show_inactive = (request.args.get("showInactive") or "").lower() == "true"
    token_ids = int_list_arg("tokenIds")
    with db() as conn:
        user_id = users.get_user_by_name(conn, username).id if username else None
        if not me.admin:
            if user_id is not None and user_id != me.id:
                raise PermissionDenied("only an admin may list another user's access tokens")
            user_id = me.id
        found = svc.list_tokens(
            conn,
            user_id=user_id,
            token_ids=token_ids,
            show_inactive=show_inactive or bool(token_ids),
        )
    return {"tokenInfo": found, "pagination": pagination(0, 0, len(found))}


@bp.patch("/api/v1/tokens/<int:token_id>")
def patch(token_id: int) -> Any:
    data = body()
    description = data.get("description")
    if description is not None:
        description = limits.text("description", description, limits.NAME)
    revoke = data.get("setRevoked")
    if revoke is not None and not isinstance(revoke, bool):
        raise InvalidArgument("setRevoked: must be a boolean")
    with db() as conn:
        _may_manage(int(svc.get(conn, token_id)["user_id"]))
        info = svc.patch(conn, token_id, description=description, revoke=bool(revoke))
    return {"tokenInfo": info}
