"""Configuration templates on the wire: ``v1Template`` from a ``templates`` row."""

from __future__ import annotations

from det.master.expconf import redact
from det.master.rows.templates import Template
from det.master.schemas import d


def template(r: Template) -> d.v1Template:
    """A template as every reader sees it, its owner included: secrets hidden (the rule of
    :func:`det.master.expconf.redact`)."""
    return {"name": r["name"], "config": redact(r["config"]), "workspaceId": r["workspace_id"]}
