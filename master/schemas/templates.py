"""Configuration templates on the wire: ``v1Template`` from a ``templates`` row."""

from __future__ import annotations

from typing import Any

from det.master.schemas import d


def template(r: dict[str, Any]) -> d.v1Template:
    return {"name": r["name"], "config": r["config"], "workspaceId": r["workspace_id"]}
