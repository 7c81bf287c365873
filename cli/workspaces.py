"""``det workspace`` (alias ``w``): workspaces, as Determined's CLI shows them."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

import yaml

from det.cli import projects, render
from det.cli._util import Handler, add_json, noun, session, verb, workspace_by_name
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d

HEADERS = ["ID", "Name", "# Projects", "Default Compute Pool", "Default Aux Pool", "Archived"]


def _rows(workspaces: list[d.v1Workspace]) -> list[list[Any]]:
    return [
        [
            w["id"],
            w["name"],
            w["numProjects"],
            w.get("defaultComputePool") or "",
            w.get("defaultAuxPool") or "",
            w["archived"],
        ]
        for w in workspaces
    ]


def _show(args: argparse.Namespace, w: d.v1Workspace) -> None:
    if args.json:
        render.print_json(w)
    else:
        render.table(HEADERS, _rows([w]))


def list_(args: argparse.Namespace) -> None:
    found = cast("d.v1GetWorkspacesResponse", session(args).get("/api/v1/workspaces"))["workspaces"]
    if args.json:
        render.print_json(found)
    else:
        render.table(HEADERS, _rows(found))


def list_projects(args: argparse.Namespace) -> None:
    projects.list_(args)


def create(args: argparse.Namespace) -> None:
    body: JSONObject = {"name": args.name}
    if args.default_compute_pool:
        body["defaultComputePool"] = args.default_compute_pool
    if args.default_aux_pool:
        body["defaultAuxPool"] = args.default_aux_pool
    _show(args, session(args).post("/api/v1/workspaces", body)["workspace"])


def describe(args: argparse.Namespace) -> None:
    """The workspace, and the pools it may use (bound to it, or to no workspace)."""
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    pools = s.get(f"/api/v1/workspaces/{w['id']}/available-resource-pools")["resourcePools"]
    if args.json:
        render.print_json(w)  # Determined's v1Workspace, as its CLI prints it
        return
    render.table(HEADERS, _rows([w]))
    print(f"Resource pools it may use: {', '.join(pools or []) or 'none'}")


def list_pools(args: argparse.Namespace) -> None:
    """Determined's ``det workspace list-pools NAME``: the pools the workspace may use (bound
    to it, or to no workspace), in one row as its CLI prints them."""
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    pools = s.get(f"/api/v1/workspaces/{w['id']}/available-resource-pools")["resourcePools"]
    if args.json:
        render.print_json(pools or [])
        return
    render.table(
        ["Workspace", "Available Resource Pools"], [[args.workspace_name, ", ".join(pools or [])]]
    )


def list_members(args: argparse.Namespace) -> None:
    """Determined's ``det workspace list-members NAME [--json|--yaml|--csv]``: the users and
    groups holding a role on the workspace (an open workspace has none)."""
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    body = cast(
        "d.v1GetGroupsAndUsersAssignedToWorkspaceResponse",
        s.get(f"/api/v1/roles/workspace/{w['id']}"),
    )
    if args.json:
        render.print_json(body)
        return
    if args.yaml:
        print(yaml.safe_dump(body, default_flow_style=False), end="")
        return
    groups = {g.get("groupId"): g.get("name") for g in body.get("groups") or []}
    users = {u.get("id"): u.get("username") for u in body.get("usersAssignedDirectly") or []}
    rows: list[list[Any]] = []
    for a in body.get("assignments") or []:
        role = (a.get("role") or {}).get("name")
        if not role:
            continue
        rows += [[groups.get(g["groupId"]), "G", role] for g in a.get("groupRoleAssignments") or []]
        rows += [[users.get(u["userId"]), "U", role] for u in a.get("userRoleAssignments") or []]
    render.rows(["User/Group Name", "User/Group", "Role Name"], rows, args.csv)


def edit(args: argparse.Namespace) -> None:
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    body: JSONObject = {}
    if args.name:
        body["name"] = args.name
    if args.default_compute_pool:
        body["defaultComputePool"] = args.default_compute_pool
    if args.default_aux_pool:
        body["defaultAuxPool"] = args.default_aux_pool
    _show(args, s.patch(f"/api/v1/workspaces/{w['id']}", body)["workspace"])


def _action(verb_name: str, done: str) -> Handler:
    def run(args: argparse.Namespace) -> None:
        s = session(args)
        w = workspace_by_name(s, args.workspace_name)
        s.post(f"/api/v1/workspaces/{w['id']}/{verb_name}")
        print(f"Successfully {done} workspace {args.workspace_name}.")

    return run


def delete(args: argparse.Namespace) -> None:
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    if not args.yes:
        answer = input(
            f'Deleting workspace "{args.workspace_name}" deletes its projects, experiments and'
            " templates. Continue? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborting workspace deletion.")
            return
    s.delete(f"/api/v1/workspaces/{w['id']}")
    print(f"Successfully deleted workspace {args.workspace_name}.")


def _pool_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--default-compute-pool", help="the workspace's default compute pool")
    p.add_argument("--default-aux-pool", help="the workspace's default auxiliary pool")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "workspace", aliases, "manage workspaces")
    add_json(verb(sub, "list ls", list_, "list workspaces"))
    p = verb(sub, "list-projects", list_projects, "list a workspace's projects")
    p.add_argument("workspace_name")
    add_json(p)
    p = verb(sub, "list-pools", list_pools, "list the resource pools a workspace may use")
    p.add_argument("workspace_name")
    add_json(p)
    p = verb(sub, "list-members", list_members, "list the users and groups with a role on it")
    p.add_argument("workspace_name")
    output = p.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print JSON")
    output.add_argument("--yaml", action="store_true", help="print YAML")
    output.add_argument("--csv", action="store_true", help="print as CSV")
    p = verb(sub, "create", create, "create a workspace")
    p.add_argument("name")
    _pool_flags(p)
    add_json(p)
    p = verb(sub, "describe", describe, "describe a workspace")
    p.add_argument("workspace_name")
    add_json(p)
    p = verb(sub, "edit", edit, "rename a workspace or change its default pools")
    p.add_argument("workspace_name")
    p.add_argument("--name", help="the new name")
    _pool_flags(p)
    add_json(p)
    p = verb(sub, "archive", _action("archive", "archived"), "archive a workspace")
    p.add_argument("workspace_name")
    p = verb(sub, "unarchive", _action("unarchive", "un-archived"), "unarchive a workspace")
    p.add_argument("workspace_name")
    p = verb(sub, "delete", delete, "delete a workspace, its projects and their experiments")
    p.add_argument("workspace_name")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")


def quoted(name: str) -> str:
    return quote(name, safe="")
