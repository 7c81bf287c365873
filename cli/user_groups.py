"""``det user-group``: groups of users, to give a team one role (``det rbac assign-role
--group-name-to-assign``).

The same verbs and flags as Determined's ``det user-group``: ``create NAME [--add-user U]...``,
``list [--groups-user-belongs-to USERNAME]``, ``describe NAME``, ``add-user NAME U1,U2``,
``remove-user NAME U1,U2``, ``change-name OLD NEW`` and ``delete NAME [--yes]``. Changing
groups is for ClusterAdmins (the master says so); every user lists and reads them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb
from det.cli.errors import CliError
from det.cli.rbac import group_id, user_id
from det.cli.session import Session
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d


def _user_ids(s: Session, usernames: list[str]) -> list[int]:
    return [user_id(s, name) for name in usernames]


def _names(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    if not names:
        raise CliError("name at least one user (comma-separated usernames)")
    return names


def _show(args: argparse.Namespace, group: d.v1GroupDetails) -> None:
    if args.json:
        render.print_json(group)
        return
    print(f"user group '{group.get('name')}' with ID {group.get('groupId')}")
    render.table(["User ID", "Username"],
                 [[u.get("id"), u.get("username")] for u in group.get("users") or []])  # fmt: skip


def create(args: argparse.Namespace) -> None:
    s = session(args)
    body = {"name": args.group_name, "addUsers": _user_ids(s, args.add_user or [])}
    resp = cast("d.v1CreateGroupResponse", s.post("/api/v1/groups", body))
    _show(args, resp["group"])


def list_(args: argparse.Namespace) -> None:
    s = session(args)
    body: JSONObject = {"limit": 0}
    if args.groups_user_belongs_to:
        body["userId"] = _user_ids(s, [args.groups_user_belongs_to])[0]
    resp = cast("d.v1GetGroupsResponse", s.post("/api/v1/groups/search", body))
    groups = resp.get("groups") or []
    if args.json:
        render.print_json(groups)
        return
    render.table(["Group ID", "Name", "Members"],
                 [[g["group"].get("groupId"), g["group"].get("name"), g["numMembers"]]
                  for g in groups])  # fmt: skip


def describe(args: argparse.Namespace) -> None:
    s = session(args)
    resp = cast("d.v1GetGroupResponse", s.get(f"/api/v1/groups/{group_id(s, args.group_name)}"))
    _show(args, resp["group"])


def _update(
    args: argparse.Namespace,
    *,
    add: list[str] | None = None,
    remove: list[str] | None = None,
    name: str | None = None,
) -> d.v1GroupDetails:
    """UpdateGroup: ``add`` and ``remove`` are usernames, sent as their ids."""
    s = session(args)
    gid = group_id(s, args.group_name)
    body: d.v1UpdateGroupRequest = {"groupId": gid}
    if add is not None:
        body["addUsers"] = _user_ids(s, add)
    if remove is not None:
        body["removeUsers"] = _user_ids(s, remove)
    if name is not None:
        body["name"] = name
    resp = cast("d.v1UpdateGroupResponse", s.put(f"/api/v1/groups/{gid}", body))
    return resp["group"]


def add_user(args: argparse.Namespace) -> None:
    _show(args, _update(args, add=_names(args.usernames)))


def remove_user(args: argparse.Namespace) -> None:
    _show(args, _update(args, remove=_names(args.usernames)))


def change_name(args: argparse.Namespace) -> None:
    _show(args, _update(args, name=args.new_group_name))


def delete(args: argparse.Namespace) -> None:
    s = session(args)
    gid = group_id(s, args.group_name)
    if not args.yes:
        answer = input(f"delete user group '{args.group_name}'? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            raise CliError("not deleted")
    s.delete(f"/api/v1/groups/{gid}")
    print(f"deleted user group '{args.group_name}'")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "user-group", aliases, "groups of users")
    p = verb(sub, "create", create, "create a user group")
    p.add_argument("group_name")
    p.add_argument("--add-user", action="append", help="a user to add (repeat for more)")
    add_json(p)
    p = verb(sub, "list ls", list_, "list user groups")
    p.add_argument("--groups-user-belongs-to", help="only the groups this user is in")
    add_json(p)
    p = verb(sub, "describe", describe, "a user group and its members")
    p.add_argument("group_name")
    add_json(p)
    for name, func, help_ in (
        ("add-user", add_user, "add users to a group"),
        ("remove-user", remove_user, "remove users from a group"),
    ):
        p = verb(sub, name, func, help_)
        p.add_argument("group_name")
        p.add_argument("usernames", help="comma-separated usernames")
        add_json(p)
    p = verb(sub, "change-name", change_name, "rename a user group")
    p.add_argument("group_name")
    p.add_argument("new_group_name")
    add_json(p)
    p = verb(sub, "delete", delete, "delete a user group")
    p.add_argument("group_name")
    p.add_argument("--yes", action="store_true", help="do not ask")
