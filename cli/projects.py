"""``det project`` (alias ``p``): projects inside workspaces, and their experiments."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any, cast

from det.cli import render
from det.cli._util import Handler, add_json, noun, session, verb, workspace_by_name
from det.cli.errors import CliError
from det.cli.session import Session
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d

HEADERS = ["ID", "Key", "Name", "Description", "# Experiments", "# Active Experiments"]


def by_names(s: Session, workspace: str, project: str) -> d.v1Project:
    w = workspace_by_name(s, workspace)
    found = cast(
        "d.v1GetWorkspaceProjectsResponse",
        s.get(f"/api/v1/workspaces/{w['id']}/projects", params={"name": project}),
    )["projects"]
    if not found:
        raise CliError(f"project '{project}' not found in workspace '{workspace}'")
    return found[0]


def _rows(projects: list[d.v1Project]) -> list[list[Any]]:
    return [
        [
            p["id"],
            p["key"],
            p["name"],
            p.get("description") or "",
            p["numExperiments"],
            p["numActiveExperiments"],
        ]
        for p in projects
    ]


def _show(args: argparse.Namespace, p: d.v1Project) -> None:
    if args.json:
        render.print_json(p)
    else:
        render.table(HEADERS, _rows([p]))


def list_(args: argparse.Namespace) -> None:
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    found = cast(
        "d.v1GetWorkspaceProjectsResponse", s.get(f"/api/v1/workspaces/{w['id']}/projects")
    )["projects"]
    if args.json:
        render.print_json(found)
    else:
        render.table(HEADERS, _rows(found))


def list_experiments(args: argparse.Namespace) -> None:
    s = session(args)
    p = by_names(s, args.workspace_name, args.project_name)
    exps = cast(
        "d.v1GetExperimentsResponse", s.get("/api/v1/experiments", params={"projectId": p["id"]})
    )["experiments"]
    if args.json:
        render.print_json(exps)
        return
    render.table(
        ["ID", "Owner", "Name", "State", "Progress", "Started", "Ended", "Resource Pool"],
        [
            [
                e["id"],
                e["username"],
                e["name"],
                render.state(e["state"]),
                f"{float(e.get('progress') or 0) * 100:.1f}%",
                render.when(e.get("startTime")),
                render.when(e.get("endTime")),
                e.get("resourcePool") or "",
            ]
            for e in exps
        ],
    )


def create(args: argparse.Namespace) -> None:
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    body: JSONObject = {"name": args.name, "workspaceId": w["id"]}
    if args.description is not None:
        body["description"] = args.description
    if args.key:
        body["key"] = args.key
    _show(
        args,
        cast("d.v1PostProjectResponse", s.post(f"/api/v1/workspaces/{w['id']}/projects", body))[
            "project"
        ],
    )


def describe(args: argparse.Namespace) -> None:
    s = session(args)
    p = by_names(s, args.workspace_name, args.project_name)
    _show(args, cast("d.v1GetProjectResponse", s.get(f"/api/v1/projects/{p['id']}"))["project"])


def edit(args: argparse.Namespace) -> None:
    s = session(args)
    p = by_names(s, args.workspace_name, args.project_name)
    body = {
        k: v
        for k, v in (("name", args.new_name), ("description", args.description), ("key", args.key))
        if v is not None
    }
    _show(
        args,
        cast("d.v1PatchProjectResponse", s.patch(f"/api/v1/projects/{p['id']}", body))["project"],
    )


def _action(verb_name: str, done: str) -> Handler:
    def run(args: argparse.Namespace) -> None:
        s = session(args)
        p = by_names(s, args.workspace_name, args.project_name)
        s.post(f"/api/v1/projects/{p['id']}/{verb_name}")
        print(f"Successfully {done} project {args.project_name}.")

    return run


def move(args: argparse.Namespace) -> None:
    s = session(args)
    p = by_names(s, args.workspace_name, args.project_name)
    dest = workspace_by_name(s, args.destination_workspace)
    s.post(
        f"/api/v1/projects/{p['id']}/move",
        {"projectId": p["id"], "destinationWorkspaceId": dest["id"]},
    )
    print(f'Moved project {args.project_name} to workspace "{args.destination_workspace}"')


def delete(args: argparse.Namespace) -> None:
    s = session(args)
    p = by_names(s, args.workspace_name, args.project_name)
    if not args.yes:
        answer = input(
            f'Deleting project "{args.project_name}" deletes its experiments. Continue? [y/N] '
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("Aborting project deletion.")
            return
    s.delete(f"/api/v1/projects/{p['id']}")
    print(f"Successfully deleted project {args.project_name}.")


def _names(p: argparse.ArgumentParser) -> None:
    p.add_argument("workspace_name")
    p.add_argument("project_name")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "project", aliases, "manage projects")
    p = verb(sub, "list ls", list_, "list a workspace's projects")
    p.add_argument("workspace_name")
    add_json(p)
    p = verb(sub, "list-experiments", list_experiments, "list a project's experiments")
    _names(p)
    p.add_argument("--all", "-a", action="store_true", help="accepted for Determined's CLI")
    add_json(p)
    p = verb(sub, "create", create, "create a project in a workspace")
    p.add_argument("workspace_name")
    p.add_argument("name")
    p.add_argument("--description")
    p.add_argument("--key", help="up to 5 letters or digits (default: from the name)")
    add_json(p)
    p = verb(sub, "describe", describe, "describe a project")
    _names(p)
    add_json(p)
    p = verb(sub, "edit", edit, "rename a project or change its description or key")
    _names(p)
    p.add_argument("--new-name", "--new_name", dest="new_name")
    p.add_argument("--description")
    p.add_argument("--key")
    add_json(p)
    p = verb(sub, "archive", _action("archive", "archived"), "archive a project")
    _names(p)
    p = verb(sub, "unarchive", _action("unarchive", "un-archived"), "unarchive a project")
    _names(p)
    p = verb(sub, "move", move, "move a project to another workspace")
    _names(p)
    p.add_argument("destination_workspace")
    p = verb(sub, "delete", delete, "delete a project and its experiments")
    _names(p)
    p.add_argument("--yes", "-y", action="store_true", help="do not ask")
