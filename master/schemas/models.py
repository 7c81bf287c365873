"""The model registry on the wire: ``v1Model`` and ``v1ModelVersion`` from their rows."""

from __future__ import annotations

from det.master.rows.models import Model, Version
from det.master.schemas import d
from det.master.wire import ts


def model(r: Model) -> d.v1Model:
    """``r`` is a row of ``services.models.get``/``list_`` (with the owner's name and the
    number of versions)."""
    return {
        "id": r["id"],
        "name": r["name"],
        "description": r["description"],
        "metadata": r["metadata"] or {},
        "labels": r["labels"] or [],
        "notes": r["notes"],
        "archived": r["archived"],
        "creationTime": ts(r["created_at"]) or "",
        "lastUpdatedTime": ts(r["modified_at"]) or "",
        "numVersions": int(r["num_versions"]),
        "userId": r["owner_id"],
        "username": r["username"],
        "workspaceId": r["workspace_id"],
    }


def version(v: Version, model_row: Model, checkpoint: d.v1Checkpoint) -> d.v1ModelVersion:
    """``v`` is a ``model_versions`` row with its owner's name, ``model_row`` its model's row
    and ``checkpoint`` the registered checkpoint as Determined sends it."""
    created = ts(v["created_at"]) or ""
    return {
        "id": v["id"],
        "version": v["version"],
        "model": model(model_row),
        "checkpoint": checkpoint,
        "name": v["name"],
        "comment": v["comment"],
        "metadata": v["metadata"] or {},
        "labels": v["labels"] or [],
        "notes": v["notes"],
        "creationTime": created,
        "lastUpdatedTime": created,  # versions are not timestamped on edits
        "userId": v["owner_id"],
        "username": v["username"],
    }
