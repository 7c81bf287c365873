"""``det user``: login, logout, whoami, create, change-password, list, rename, activate,
deactivate, edit."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from det.cli import render
from det.cli._util import add_json, noun, session, true_or_false, verb
from det.cli.errors import CliAPIError, CliError, UsageError
from det.cli.session import Session, TokenStore, canonical_master, login
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d


def _password(prompt: str) -> str:
    if sys.stdin.isatty():
        return getpass.getpass(prompt)
    # Scripts and tests pipe the password in.
    return sys.stdin.readline().rstrip("\n")


def do_login(args: argparse.Namespace) -> None:
    user = args.username or args.user or input("Username: ")
    password = os.environ.get("DET_PASS")
    if password is None:
        password = _password(f"Password for user '{user}': ")
    login(canonical_master(args.master), user, password)
    print(f"logged in as {user}")


def do_logout(args: argparse.Namespace) -> None:
    master = canonical_master(args.master)
    store = TokenStore(master)
    user = args.user or store.active_user()
    if user and store.token(user):
        try:
            Session(master, store.token(user), user).post("/api/v1/auth/logout")
        except CliAPIError as e:
            if e.status != 401:  # an already revoked or expired token: logged out all the same
                raise
        finally:
            store.drop(user)
    print("logged out")


def whoami(args: argparse.Namespace) -> None:
    me = cast("d.v1GetMeResponse", session(args).get("/api/v1/me"))["user"]
    print(f"You are logged in as user '{me['username']}'")


def create(args: argparse.Namespace) -> None:
    password = args.password
    if password is None:
        password = _password(f"Password for user '{args.username}': ")
    body: JSONObject = {
        "user": {"username": args.username, "admin": args.admin, "active": True},
        "password": password,
    }
    session(args).post("/api/v1/users", body)
    print(f"created user {args.username}")


def change_password(args: argparse.Namespace) -> None:
    s = session(args)
    target = args.target_user or s.user
    user = cast("d.v1GetUserByUsernameResponse", s.get(f"/api/v1/users/{target}/by-username"))[
        "user"
    ]
    password = (
        args.password
        if args.password is not None
        else _password(f"New password for user '{target}': ")
    )
    if not password:
        raise UsageError("the new password must not be empty")
    s.patch(f"/api/v1/users/{user['id']}", {"password": password})
    if target == s.user and target is not None:
        login(s.master, target, password)
    print(f"password changed for {target}")


def rename(args: argparse.Namespace) -> None:
    s = session(args)
    user = cast(
        "d.v1GetUserByUsernameResponse", s.get(f"/api/v1/users/{args.target_user}/by-username")
    )["user"]
    s.patch(f"/api/v1/users/{user['id']}", {"username": args.new_username})
    print(f"renamed user {args.target_user} to {args.new_username}")


def link_agent_user(args: argparse.Namespace) -> None:
    """Determined's ``det user link-with-agent-user``: the user's task containers run as this
    uid/gid (admins only; ``--unlink``: as the image's user again)."""
    s = session(args)
    user = cast(
        "d.v1GetUserByUsernameResponse", s.get(f"/api/v1/users/{args.det_username}/by-username")
    )["user"]
    if args.unlink:
        s.patch(f"/api/v1/users/{user['id']}", {"agentUserGroup": {}})
        print(f"{args.det_username}'s tasks run as their image's user")
        return
    missing = [
        f"--{k.replace('_', '-')}"
        for k in ("agent_uid", "agent_gid", "agent_user", "agent_group")
        if getattr(args, k) is None
    ]
    if missing:
        raise UsageError(f"{', '.join(missing)} required (or --unlink)")
    link = {
        "agentUid": args.agent_uid,
        "agentGid": args.agent_gid,
        "agentUser": args.agent_user,
        "agentGroup": args.agent_group,
    }
    s.patch(f"/api/v1/users/{user['id']}", {"agentUserGroup": link})
    print(
        f"{args.det_username}'s tasks run as {args.agent_user} ({args.agent_uid}),"
        f" group {args.agent_group} ({args.agent_gid})"
    )


def _user_id(s: Session, username: str) -> int:
    path = f"/api/v1/users/{quote(username, safe='')}/by-username"
    user_id = cast("d.v1GetUserByUsernameResponse", s.get(path))["user"].get("id")
    if user_id is None:
        raise CliError(f"user '{username}' has no id in the master's answer")
    return int(user_id)


def _set_active(active: bool) -> Callable[[argparse.Namespace], None]:
    """Determined's ``det user activate|deactivate USER`` (deprecated there for ``det user edit
    USER --active true|false``, which does the same)."""

    def run(args: argparse.Namespace) -> None:
        s = session(args)
        s.patch(f"/api/v1/users/{_user_id(s, args.username)}", {"active": active})
        print(f"{'activated' if active else 'deactivated'} user {args.username}")

    return run


# Determined's ``det user edit`` flags: (flag, the PatchUser field, the name its message gives).
_EDITS = (
    ("display_name", "displayName", "Display Name"),
    ("remote", "remote", "Remote"),
    ("activate", "active", "Active"),
    ("username", "username", "Username"),
    ("admin", "admin", "Admin"),
)


def edit(args: argparse.Namespace) -> None:
    """Determined's ``det user edit USER [--display-name N] [--username N] [--remote B]
    [--active B] [--admin B]``: one PATCH with the fields given, and the same message."""
    body = {field: getattr(args, flag) for flag, field, _ in _EDITS}
    body = {k: v for k, v in body.items() if v is not None}
    if not body:
        raise UsageError(
            "no field to change: give --display-name, --username, --remote, --active or --admin"
        )
    s = session(args)
    s.patch(f"/api/v1/users/{_user_id(s, args.target_user)}", body)
    changed = [name for flag, _, name in _EDITS if getattr(args, flag) is not None]
    print("Changes made to the following fields: " + ", ".join(changed))


def list_(args: argparse.Namespace) -> None:
    users = cast("d.v1GetUsersResponse", session(args).get("/api/v1/users"))["users"]
    if args.json:
        render.print_json(users)
        return
    render.table(
        ["Username", "Admin", "Active"],
        [[u["username"], u["admin"], u["active"]] for u in users or []],
    )


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "user", aliases, "manage users and log in")
    p = verb(sub, "login", do_login, "log in as a user")
    p.add_argument("username", nargs="?")
    verb(sub, "logout", do_logout, "log out")
    verb(sub, "whoami", whoami, "show the logged-in user")
    p = verb(sub, "create", create, "create a user (admins only)")
    p.add_argument("username")
    p.add_argument("--admin", action="store_true")
    p.add_argument("--password", help="the new user's password (prompted if omitted)")
    p = verb(sub, "change-password", change_password, "change a user's password")
    p.add_argument("target_user", nargs="?")
    p.add_argument("--password", help="the new password (prompted if omitted)")
    p = verb(sub, "list ls", list_, "list users")
    add_json(p)
    p = verb(
        sub,
        "link-with-agent-user",
        link_agent_user,
        "run a user's task containers as this uid/gid (admins only)",
    )
    p.add_argument("det_username")
    p.add_argument("--agent-uid", type=int)
    p.add_argument("--agent-gid", type=int)
    p.add_argument("--agent-user")
    p.add_argument("--agent-group")
    p.add_argument("--unlink", action="store_true", help="run as the image's user again")
    p = verb(sub, "rename", rename, "rename a user (admins only)")
    p.add_argument("target_user")
    p.add_argument("new_username")
    p = verb(sub, "activate", _set_active(True), "activate a user (admins only)")
    p.add_argument("username", help="the user to activate")
    p = verb(sub, "deactivate", _set_active(False), "deactivate a user (admins only)")
    p.add_argument("username", help="the user to deactivate")
    p = verb(sub, "edit", edit, "change a user's name, display name, or flags")
    p.add_argument("target_user", help="the user to edit")
    p.add_argument("--display-name", help="the new display name")
    p.add_argument("--username", help="the new username")
    for flag, dest, what in (
        ("--remote", "remote", "a remote user (signs in through the identity provider only)"),
        ("--active", "activate", "an active user (may log in)"),
        ("--admin", "admin", "an admin"),
    ):
        p.add_argument(
            flag, dest=dest, type=true_or_false, metavar="(true|false)", help=f"make it {what}"
        )
