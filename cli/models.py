"""``det model``: the model registry."""

from __future__ import annotations

import argparse
from typing import Any

from det.cli import render
from det.cli._util import add_json, noun, session, verb


def create(args: argparse.Namespace) -> None:
    m = session(args).post(
        "/api/v1/models", {"name": args.name, "description": args.description or ""}
    )["model"]
    if args.json:
        render.print_json(m)
        return
    print(f"created model {m['name']} (id {m['id']})")


def list_(args: argparse.Namespace) -> None:
    models = session(args).get("/api/v1/models")["models"]
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
    body = session(args).get(f"/api/v1/models/{args.name}/versions")
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


def register_version(args: argparse.Namespace) -> None:
    v = session(args).post(
        f"/api/v1/models/{args.name}/versions",
        {"modelName": args.name, "checkpointUuid": args.uuid},
    )["modelVersion"]
    if args.json:
        render.print_json(v)
        return
    print(f"registered version {v['version']} of {args.name}")


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
    p = verb(
        sub,
        "register-version",
        register_version,
        "register a checkpoint as the model's next version",
    )
    p.add_argument("name")
    p.add_argument("uuid")
    add_json(p)
