"""``det template`` (alias ``tpl``): configuration templates the master merges under an
experiment's config (``det experiment create --template NAME``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml

from det.cli import render
from det.cli._util import add_json, noun, session, verb, workspace_by_name
from det.cli.errors import CliAPIError, UsageError
from det.cli.workspaces import quoted
from det.common.jsontypes import JSONObject

if TYPE_CHECKING:
    from det.master.schemas import d


def _read(path: str) -> JSONObject:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise UsageError(f"cannot read template file {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: a template is a YAML mapping of config fields")
    return data


def list_(args: argparse.Namespace) -> None:
    s = session(args)
    templates = cast("d.v1GetTemplatesResponse", s.get("/api/v1/templates"))["templates"]
    if args.json:
        render.print_json(templates)
        return
    workspaces = cast("d.v1GetWorkspacesResponse", s.get("/api/v1/workspaces"))["workspaces"]
    names = {w["id"]: w["name"] for w in workspaces}
    headers = ["Name", "Workspace"] + (["Config"] if args.details else [])
    rows = [
        [t["name"], names.get(t["workspaceId"], "missing workspace")]
        + ([yaml.safe_dump(t["config"], default_flow_style=False)] if args.details else [])
        for t in templates
    ]
    render.table(headers, rows)


def describe(args: argparse.Namespace) -> None:
    t = cast(
        "d.v1GetTemplateResponse",
        session(args).get(f"/api/v1/templates/{quoted(args.template_name)}"),
    )["template"]
    if args.json:
        render.print_json(t)
    else:
        print(yaml.safe_dump(t["config"], default_flow_style=False), end="")


def set_(args: argparse.Namespace) -> None:
    """Create the template, or replace its config."""
    s = session(args)
    config = _read(args.template_file)
    path = f"/api/v1/templates/{quoted(args.template_name)}"
    try:
        s.get(path)
    except CliAPIError as e:
        if e.status != 404:
            raise
        workspace = workspace_by_name(s, args.workspace_name)["id"] if args.workspace_name else 0
        s.post(path, {"name": args.template_name, "config": config, "workspaceId": workspace})
    else:
        s.patch(path, config)
    print(f"Set template {args.template_name}")


def set_config(args: argparse.Namespace) -> None:
    """Determined's ``det template set-value config NAME FILE``: an existing template's config
    replaced by FILE's (PatchTemplateConfig; an unknown template is refused)."""
    config = _read(args.template_file)
    session(args).patch(f"/api/v1/templates/{quoted(args.template_name)}", config)
    print(f"Updated template {args.template_name}")


def remove(args: argparse.Namespace) -> None:
    session(args).delete(f"/api/v1/templates/{quoted(args.template_name)}")
    print(f"Removed template {args.template_name}")


def register(nouns: Any, aliases: dict[str, list[str]]) -> None:
    sub = noun(nouns, "template", aliases, "manage configuration templates")
    p = verb(sub, "list ls", list_, "list templates")
    p.add_argument("-d", "--details", action="store_true", help="show their configs")
    add_json(p)
    p = verb(sub, "describe", describe, "show a template's config")
    p.add_argument("template_name")
    add_json(p)
    p = verb(sub, "set create", set_, "create a template or replace its config")
    p.add_argument("template_name")
    p.add_argument("template_file", help="the template's config (.yaml)")
    p.add_argument("-w", "--workspace-name", help="a new template's workspace (default: none)")
    set_value = noun(sub, "set-value", {}, "set template attributes")
    p = verb(set_value, "config", set_config, "replace an existing template's config")
    p.add_argument("template_name")
    p.add_argument("template_file", help="the template's config (.yaml)")
    p = verb(sub, "remove rm", remove, "remove a template")
    p.add_argument("template_name")
