"""``det model``: the model registry."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote

from det.cli import render
from det.cli._util import Handler, add_json, noun, session, verb, workspace_by_name
from det.cli.errors import UsageError
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d


def create(args: argparse.Namespace) -> None:
    m = session(args).post(
        "/api/v1/models", {"name": args.name, "description": args.description or ""}
    )["model"]
    if args.json:
        render.print_json(m)
        return
    print(f"created model {m['name']} (id {m['id']})")


def list_(args: argparse.Namespace) -> None:
    models = cast("d.v1GetModelsResponse", session(args).get("/api/v1/models"))["models"]
    if args.json:
        render.print_json(models)
        return
    render.table(
        ["ID", "Name", "Versions", "Owner", "Created"],
        [
            [m["id"], m["name"], m["numVersions"], m["username"], render.when(m["creationTime"])]
            for m in models
        ],
    )


def describe(args: argparse.Namespace) -> None:
    body = cast(
        "d.v1GetModelVersionsResponse", session(args).get(f"/api/v1/models/{args.name}/versions")
    )
    if args.json:
        render.print_json(body)
        return
    m = body["model"]
    print(f"Model {m['name']} (id {m['id']}): {m.get('description') or ''}")
    render.table(
        ["Version", "Checkpoint", "Trial ID", "Created"],
        [
            [
                v["version"],
                v["checkpoint"]["uuid"],
                v["checkpoint"]["training"].get("trialId"),
                render.when(v["creationTime"]),
            ]
            for v in body["modelVersions"]
        ],
    )


def list_versions(args: argparse.Namespace) -> None:
    """Determined's ``det model list-versions NAME``: the model, then its versions (``--json``:
    the GetModelVersions answer, as its CLI prints it)."""
    # Determined's CLI: the answer's own order as JSON, the newest version first as a table.
    params = {} if args.json else {"orderBy": "ORDER_BY_DESC"}
    body = cast(
        "d.v1GetModelVersionsResponse",
        session(args).get(_path(args.name) + "/versions", params=params),
    )
    if args.json:
        render.print_json(body)
        return
    m = body["model"]
    render.table(
        [
            "ID",
            "Name",
            "Description",
            "Workspace ID",
            "Creation Time",
            "Last Updated Time",
            "Metadata",
        ],
        [
            [
                m["id"],
                m["name"],
                m.get("description") or "",
                m.get("workspaceId"),
                m.get("creationTime"),
                m.get("lastUpdatedTime"),
                json.dumps(m.get("metadata") or {}, indent=4),
            ]
        ],
    )
    print("\n")
    rows = []
    for v in body["modelVersions"]:
        c = v["checkpoint"]
        training = c.get("training") or {}
        meta = c.get("metadata") or {}
        rows.append(
            [
                v["version"],
                training.get("trialId"),
                meta.get("steps_completed"),
                c["uuid"],
                json.dumps(training.get("validationMetrics"), indent=2) if training else "",
                json.dumps(meta, indent=2),
            ]
        )
    render.table(
        ["Version #", "Trial ID", "Batch #", "Checkpoint UUID", "Validation Metrics", "Metadata"],
        rows,
    )


def register_version(args: argparse.Namespace) -> None:
    v = session(args).post(
        f"/api/v1/models/{args.name}/versions",
        {"modelName": args.name, "checkpointUuid": args.uuid},
    )["modelVersion"]
    if args.json:
        render.print_json(v)
        return
    print(f"registered version {v['version']} of {args.name}")


def _path(name: str) -> str:
    return f"/api/v1/models/{quote(name, safe='')}"


def delete(args: argparse.Namespace) -> None:
    session(args).delete(_path(args.name))
    print(f"deleted model {args.name}")


def move(args: argparse.Namespace) -> None:
    s = session(args)
    w = workspace_by_name(s, args.workspace_name)
    s.post(_path(args.name) + "/move", {"modelName": args.name, "destinationWorkspaceId": w["id"]})
    print(f"moved model {args.name} to workspace {args.workspace_name}")


def edit(args: argparse.Namespace) -> None:
    body: JSONObject = {}
    if args.new_name is not None:
        body["name"] = args.new_name
    if args.description is not None:
        body["description"] = args.description
    if args.labels is not None:
        body["labels"] = [x for x in args.labels.split(",") if x]
    m = session(args).patch(_path(args.name), body)["model"]
    if args.json:
        render.print_json(m)
        return
    print(f"updated model {m['name']}")


def _archiver(action: str) -> Handler:
    def run(args: argparse.Namespace) -> None:
        session(args).post(_path(args.name) + f"/{action}")
        print(f"{action}d model {args.name}")

    return run


def add_metadata(args: argparse.Namespace) -> None:
    s = session(args)
    meta = dict(
        cast("d.v1GetModelResponse", s.get(_path(args.name)))["model"].get("metadata") or {}
    )
    for pair in args.pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"metadata {pair!r}: expected KEY=VALUE")
        meta[key] = value
    s.patch(_path(args.name), {"metadata": meta})
    print(f"updated the metadata of model {args.name}")


def remove_metadata(args: argparse.Namespace) -> None:
    s = session(args)
    meta = dict(
        cast("d.v1GetModelResponse", s.get(_path(args.name)))["model"].get("metadata") or {}
    )
    for key in args.keys:
        meta.pop(key, None)
    s.patch(_path(args.name), {"metadata": meta})
    print(f"updated the metadata of model {args.name}")


def delete_version(args: argparse.Namespace) -> None:
    session(args).delete(_path(args.name) + f"/versions/{args.version_number}")
    print(f"deleted version {args.version_number} of model {args.name}")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "model", aliases, "the model registry")
    p = verb(sub, "create", create, "create a model")
    p.add_argument("name")
    p.add_argument("--description")
    add_json(p)
    add_json(verb(sub, "list ls", list_, "list models"))
    p = verb(sub, "describe", describe, "describe a model and its versions")
    p.add_argument("name")
    add_json(p)
    p = verb(sub, "list-versions", list_versions, "list the versions of a model")
    p.add_argument("name", help="the model's name (or id)")
    add_json(p)
    p = verb(
        sub,
        "register-version",
        register_version,
        "register a checkpoint as the model's next version",
    )
    p.add_argument("name")
    p.add_argument("uuid")
    add_json(p)
    p = verb(sub, "delete", delete, "delete a model and its versions")
    p.add_argument("name")
    p = verb(sub, "move", move, "move a model to another workspace")
    p.add_argument("name")
    p.add_argument("-w", "--workspace-name", required=True)
    p = verb(sub, "edit", edit, "rename a model or change its description or labels")
    p.add_argument("name")
    p.add_argument("--new-name")
    p.add_argument("--description")
    p.add_argument("--labels", help="comma-separated; replaces the labels")
    add_json(p)
    for action in ("archive", "unarchive"):
        p = verb(sub, action, _archiver(action), f"{action} a model")
        p.add_argument("name")
    p = verb(sub, "add-metadata", add_metadata, "add or replace metadata entries")
    p.add_argument("name")
    p.add_argument("pairs", nargs="+", metavar="KEY=VALUE")
    p = verb(sub, "remove-metadata", remove_metadata, "remove metadata entries")
    p.add_argument("name")
    p.add_argument("keys", nargs="+", metavar="KEY")
    p = verb(sub, "delete-version", delete_version, "delete a model version")
    p.add_argument("name")
    p.add_argument("version_number", metavar="version", type=int)
