"""``det token`` (alias ``tkn``): access tokens, long-lived bearer tokens for scripts and CI.

The same verbs and flags as Determined's ``det token``: ``create [USERNAME] [-e DAYS]
[-d TEXT]``, ``list [USERNAME] [--show-inactive]``, ``describe ID...``, ``edit ID -d TEXT``,
``revoke ID`` and ``login TOKEN`` (which saves the token as the active login for the master).
A user manages their own tokens; an admin anyone's (the master enforces it)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import CliError, UsageError
from det.cli.session import QueryValue, Session, TokenStore, canonical_master
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d

HEADERS = ["ID", "User ID", "Description", "Created At", "Expires At", "Revoked", "Token Type"]


def _show(args: argparse.Namespace, tokens: Sequence[d.v1TokenInfo]) -> None:
    if args.json:
        render.print_json(list(tokens))
        return
    rows = [
        [
            t.get("id"),
            t.get("userId"),
            t.get("description") or "",
            render.when(t.get("createdAt")),
            render.when(t.get("expiry")),
            bool(t.get("revoked")),
            t.get("tokenType") or "",
        ]
        for t in tokens
    ]
    render.table(HEADERS, rows)


def list_(args: argparse.Namespace) -> None:
    params: dict[str, QueryValue] = {"showInactive": "true" if args.show_inactive else "false"}
    if args.username:
        params["username"] = args.username
    resp = cast("d.v1GetAccessTokensResponse", session(args).get("/api/v1/tokens", params=params))
    _show(args, resp.get("tokenInfo") or [])


def describe(args: argparse.Namespace) -> None:
    params = {"tokenIds": [str(i) for i in args.token_id], "showInactive": "true"}
    resp = cast("d.v1GetAccessTokensResponse", session(args).get("/api/v1/tokens", params=params))
    found = resp.get("tokenInfo") or []
    missing = set(args.token_id) - {t.get("id") for t in found}
    if missing:
        raise CliError(f"no access token with id {', '.join(map(str, sorted(missing)))}")
    _show(args, found)


def create(args: argparse.Namespace) -> None:
    s = session(args)
    username = args.username or s.user
    if not username:
        raise UsageError("give the USERNAME to create a token for")
    user = cast("d.v1GetUserByUsernameResponse", s.get(f"/api/v1/users/{username}/by-username"))
    body: JSONObject = {"userId": user["user"]["id"]}
    if args.expiration_days is not None:
        if args.expiration_days < -1 or args.expiration_days == 0:
            raise UsageError("--expiration-days: a number of days >= 1, or -1 for no expiry")
        # Determined sends a Go duration in hours; -1 asks for a token that does not expire.
        body["lifespan"] = "-1" if args.expiration_days == -1 else f"{24 * args.expiration_days}h"
    if args.description is not None:
        body["description"] = args.description
    resp = cast("d.v1PostAccessTokenResponse", s.post("/api/v1/tokens", body))
    if args.json:
        render.print_json(resp)
    else:
        print(f"TokenID: {resp.get('tokenId')}\nAccess-Token: {resp.get('token')}")


def _patch(args: argparse.Namespace, body: JSONObject) -> d.v1PatchAccessTokenResponse:
    token_id = int(args.token_id)
    return cast(
        "d.v1PatchAccessTokenResponse",
        session(args).patch(f"/api/v1/tokens/{token_id}", {"tokenId": token_id, **body}),
    )


def edit(args: argparse.Namespace) -> None:
    if args.description is None:
        raise UsageError("nothing to change: give --description")
    resp = _patch(args, {"description": args.description, "setRevoked": False})
    if args.json:
        render.print_json(resp)
    else:
        print(f"Updated token {args.token_id}")


def revoke(args: argparse.Namespace) -> None:
    _patch(args, {"setRevoked": True})
    print(f"Revoked token {args.token_id}")


def login(args: argparse.Namespace) -> None:
    master = canonical_master(args.master)
    me = cast("d.v1GetMeResponse", Session(master, args.token).get("/api/v1/me"))
    username = me["user"]["username"]
    TokenStore(master).set(username, args.token)
    print(f"Authenticated as {username}.")


def _token_id(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a token id: {value!r}") from None


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "token", aliases, "manage access tokens")
    p = verb(sub, "list ls", list_, "list access tokens (yours, or USERNAME's for an admin)")
    p.add_argument("username", nargs="?")
    p.add_argument("--show-inactive", action="store_true", help="include revoked and expired")
    add_json(p)
    p = verb(sub, "describe", describe, "show access tokens by id")
    p.add_argument("token_id", type=_token_id, nargs="+")
    add_json(p)
    p = verb(sub, "create", create, "create an access token (printed once)")
    p.add_argument("username", nargs="?", help="default: the logged-in user")
    p.add_argument("-e", "--expiration-days", type=int, help="lifetime in days; -1: no expiry")
    p.add_argument("-d", "--description")
    add_json(p)
    p = verb(sub, "edit", edit, "change a token's description")
    p.add_argument("token_id", type=_token_id)
    p.add_argument("-d", "--description")
    add_json(p)
    p = verb(sub, "revoke", revoke, "revoke an access token")
    p.add_argument("token_id", type=_token_id)
    p = verb(sub, "login", login, "log in with an access token")
    p.add_argument("token")
