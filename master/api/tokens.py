"""``/api/v1/tokens``: access tokens (``det token create|list|describe|edit|revoke``).

A user manages their own tokens; an admin anyone's. Only an admin creates tokens that never
expire or live longer than a year (services/tokens.py)."""

from __future__ import annotations

import datetime as dt

from flask import Blueprint

from det.master import limits
from det.master.api._common import current_user, db, pagination
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, PermissionDenied
from det.master.schemas import d
from det.master.schemas.requests import AccessTokensQuery
from det.master.services import tokens as svc
from det.master.services import users

bp = Blueprint("tokens", __name__)


def _may_manage(user_id: int) -> None:
    me = current_user()
    if not me.admin and me.id != user_id:
        raise PermissionDenied("only an admin may manage another user's access tokens")


@bp.post("/api/v1/tokens")
@contract("PostAccessToken")
def create(body: d.v1PostAccessTokenRequest) -> d.v1PostAccessTokenResponse:
    data = body
    user_id = data.get("userId")
    if user_id is None:
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
            by_admin=current_user().admin,
        )
    return {"token": token, "tokenId": token_id}


@bp.get("/api/v1/tokens")
@contract("GetAccessTokens", params=AccessTokensQuery)
def list_(params: AccessTokensQuery) -> d.v1GetAccessTokensResponse:
    me = current_user()
    username = params.username
    show_inactive = params.showInactive
    token_ids = params.tokenIds
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
    if params.orderBy == "ORDER_BY_DESC":
        found.reverse()
    offset, limit = params.offset, params.limit
    page = found[offset : (offset + limit) if limit > 0 else None]
    return {"tokenInfo": page, "pagination": pagination(offset, limit, len(found))}


@bp.patch("/api/v1/tokens/<int:token_id>")
@contract("PatchAccessToken")
def patch(token_id: int, body: d.v1PatchAccessTokenRequest) -> d.v1PatchAccessTokenResponse:
    data = body
    description = data.get("description")
    if description is not None:
        description = limits.text("description", description, limits.NAME)
    revoke = data.get("setRevoked")
    with db() as conn:
        _may_manage(int(svc.get(conn, token_id)["user_id"]))
        info = svc.patch(conn, token_id, description=description, revoke=bool(revoke))
    return {"tokenInfo": info}
