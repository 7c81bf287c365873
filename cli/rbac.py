"""``det rbac``: roles, what they allow, and who holds them (docs/security.md, "Roles").

The same verbs and flags as Determined's ``det rbac``: ``list-roles``, ``describe-role ROLE``,
``assign-role ROLE (--username-to-assign U | --group-name-to-assign G) [--workspace-name W]``,
``unassign-role`` (the same flags), ``list-users-roles USERNAME``, ``list-groups-roles GROUP``
and ``my-permissions``. Without ``--workspace-name`` a role is assigned on the cluster. The master
decides who may assign (a workspace's WorkspaceAdmins and owner; on the cluster, ClusterAdmins).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import add_json, noun, session, verb, workspace_by_name
from det.cli.errors import CliError, UsageError
from det.cli.session import Session

if TYPE_CHECKING:
    from det.master.schemas import d


def _roles(s: Session) -> list[d.v1Role]:
    resp = cast("d.v1ListRolesResponse", s.post("/api/v1/roles/search", {"limit": 100}))
    return resp["roles"]


def _role(s: Session, name: str) -> d.v1Role:
    roles = _roles(s)
    for r in roles:
        if (r.get("name") or "").lower() == name.lower():
            return r
    raise CliError(
        f"no role named '{name}' (roles: {', '.join(r.get('name') or '' for r in roles)})"
    )


def user_id(s: Session, username: str) -> int:
    resp = cast("d.v1GetUserByUsernameResponse", s.get(f"/api/v1/users/{username}/by-username"))
    uid = resp["user"].get("id")
    if uid is None:
        raise CliError(f"the master sent no id for user '{username}'")
    return uid


def group_id(s: Session, name: str) -> int:
    body = {"name": name, "limit": 1}
    groups = cast("d.v1GetGroupsResponse", s.post("/api/v1/groups/search", body)).get("groups")
    if not groups:
        raise CliError(f"no user group named '{name}'")
    return int(groups[0]["group"].get("groupId") or 0)


def _workspace_names(s: Session, ids: list[int]) -> list[str]:
    return [
        cast("d.v1GetWorkspaceResponse", s.get(f"/api/v1/workspaces/{i}"))["workspace"]["name"]
        for i in ids
    ]


def _permissions(role: d.v1Role) -> list[list[Any]]:
    return [[p.get("name"), p.get("id")] for p in role.get("permissions") or []]


def list_roles(args: argparse.Namespace) -> None:
    roles = _roles(session(args))
    if args.json:
        render.print_json(roles)
        return
    rows = [
        [r.get("roleId"), r.get("name"), ", ".join(str(p[0]) for p in _permissions(r))]
        for r in roles
    ]
    render.table(["ID", "Role", "Permissions"], rows)


def describe_role(args: argparse.Namespace) -> None:
    s = session(args)
    role = _role(s, args.role_name)
    resp = cast(
        "d.v1GetRolesByIDResponse",
        s.post("/api/v1/roles/search/by-ids", {"roleIds": [role.get("roleId")]}),
    )
    found = (resp.get("roles") or [{}])[0]
    if args.json:
        render.print_json(found)
        return
    print(f"role '{role.get('name')}' with ID {role.get('roleId')}")
    render.table(["Permission", "Determined's type"], _permissions(role))
    rows = []
    for a in found.get("userRoleAssignments") or []:
        rows.append(["user", a.get("userId"), _scope(a.get("roleAssignment") or {})])
    for g in found.get("groupRoleAssignments") or []:
        rows.append(["group", g.get("groupId"), _scope(g.get("roleAssignment") or {})])
    if rows:
        print()
        render.table(["Holder", "ID", "Scope"], rows)


def _scope(ra: d.v1RoleAssignment) -> str:
    wid = ra.get("scopeWorkspaceId")
    return "cluster" if wid is None else f"workspace {wid}"


def _assignment(args: argparse.Namespace, s: Session) -> tuple[dict[str, Any], str]:
    if (args.username_to_assign is None) == (args.group_name_to_assign is None):
        raise UsageError("give exactly one of --username-to-assign and --group-name-to-assign")
    role = _role(s, args.role_name)
    ra: dict[str, Any] = {"role": {"roleId": role.get("roleId")}}
    scope = "on the cluster"
    if args.workspace_name:
        ra["scopeWorkspaceId"] = workspace_by_name(s, args.workspace_name)["id"]
        scope = f"on workspace '{args.workspace_name}'"
    else:
        ra["scopeCluster"] = True
    if args.username_to_assign:
        body = {"userRoleAssignments": [
            {"userId": user_id(s, args.username_to_assign), "roleAssignment": ra}]}  # fmt: skip
        return body, f"user '{args.username_to_assign}' {scope}"
    body = {"groupRoleAssignments": [
        {"groupId": group_id(s, args.group_name_to_assign), "roleAssignment": ra}]}  # fmt: skip
    return body, f"group '{args.group_name_to_assign}' {scope}"


def assign_role(args: argparse.Namespace) -> None:
    s = session(args)
    body, who = _assignment(args, s)
    s.post("/api/v1/roles/add-assignments", body)
    print(f"assigned role '{args.role_name}' to {who}")


def unassign_role(args: argparse.Namespace) -> None:
    s = session(args)
    body, who = _assignment(args, s)
    s.post("/api/v1/roles/remove-assignments", body)
    print(f"removed role '{args.role_name}' from {who}")


def _summary_rows(s: Session, summaries: list[d.v1RoleAssignmentSummary]) -> list[list[Any]]:
    names = {r.get("roleId"): r.get("name") for r in _roles(s)}
    rows = []
    for a in summaries:
        where = _workspace_names(s, list(a.get("scopeWorkspaceIds") or []))
        if a.get("scopeCluster"):
            where.insert(0, "(cluster)")
        rows.append([names.get(a["roleId"], a["roleId"]), ", ".join(where)])
    return rows


def list_users_roles(args: argparse.Namespace) -> None:
    s = session(args)
    resp = cast(
        "d.v1GetRolesAssignedToUserResponse",
        s.get(f"/api/v1/roles/search/by-user/{user_id(s, args.username)}"),
    )
    if args.json:
        render.print_json(resp)
        return
    rows = []
    for r in resp["roles"]:
        name = (r.get("role") or {}).get("name")
        for a in r.get("userRoleAssignments") or []:
            rows.append([name, "directly", _scope(a.get("roleAssignment") or {})])
        for g in r.get("groupRoleAssignments") or []:
            rows.append([name, f"group {g.get('groupId')}", _scope(g.get("roleAssignment") or {})])
    render.table(["Role", "Held", "Scope"], rows)


def list_groups_roles(args: argparse.Namespace) -> None:
    s = session(args)
    resp = cast(
        "d.v1GetRolesAssignedToGroupResponse",
        s.get(f"/api/v1/roles/search/by-group/{group_id(s, args.group_name)}"),
    )
    if args.json:
        render.print_json(resp)
        return
    render.table(["Role", "Scope"], _summary_rows(s, resp["assignments"]))


def my_permissions(args: argparse.Namespace) -> None:
    s = session(args)
    resp = cast("d.v1GetPermissionsSummaryResponse", s.get("/api/v1/permissions/summary"))
    if args.json:
        render.print_json(resp)
        return
    if not resp["assignments"]:
        print("no role assigned (every user is an Editor of the open workspaces)")
        return
    render.table(["Role", "Scope"], _summary_rows(s, resp["assignments"]))


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "rbac", aliases, "roles and who holds them")
    p = verb(sub, "list-roles", list_roles, "list the roles and what they allow")
    add_json(p)
    p = verb(sub, "describe-role", describe_role, "a role's permissions and holders")
    p.add_argument("role_name")
    add_json(p)
    for name, func, help_ in (
        ("assign-role", assign_role, "give a role to a user or group"),
        ("unassign-role", unassign_role, "take a role from a user or group"),
    ):
        p = verb(sub, name, func, help_)
        p.add_argument("role_name")
        p.add_argument("--username-to-assign")
        p.add_argument("--group-name-to-assign")
        p.add_argument("--workspace-name", help="default: the cluster (every workspace)")
    p = verb(sub, "list-users-roles", list_users_roles, "a user's roles (their groups' too)")
    p.add_argument("username")
    add_json(p)
    p = verb(sub, "list-groups-roles", list_groups_roles, "a user group's roles")
    p.add_argument("group_name")
    add_json(p)
    p = verb(sub, "my-permissions", my_permissions, "your roles, and where")
    add_json(p)
