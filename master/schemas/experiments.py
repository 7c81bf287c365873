"""Experiments on the wire: ``v1Experiment`` from an ``experiments`` row."""

from __future__ import annotations

from typing import Any

from det.master.expconf import redact
from det.master.schemas import d
from det.master.wire import ts


def searcher_metric(config: dict[str, Any]) -> str:
    return str((config.get("searcher") or {}).get("metric") or "")


def experiment(row: dict[str, Any], best: dict[str, Any] | None = None) -> d.v1Experiment:
    """``row`` is a row of ``services.experiments.get``/``list_`` (with its project's columns);
    ``best`` the best trial's row, when the caller asked for it."""
    config = redact(row["config"])
    out: d.v1Experiment = {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "labels": row["labels"],
        "notes": row["notes"],
        "state": "STATE_" + row["state"],  # type: ignore[typeddict-item]
        "archived": row["archived"],
        "config": config,
        "originalConfig": row["original_config"],
        "startTime": ts(row["created_at"]) or "",
        "endTime": ts(row["ended_at"]),
        "numTrials": row["num_trials"],
        "trialIds": [],
        "username": row["username"],
        "userId": row["owner_id"],
        "displayName": row["username"],
        "jobId": row["job_id"],
        "resourcePool": row["resource_pool"],
        "searcherType": (config.get("searcher") or {}).get("name", ""),
        "searcherMetric": searcher_metric(config),
        "progress": row["progress"],
        "projectId": row["project_id"],
        "projectName": row["project_name"] or "",
        "projectOwnerId": row["project_owner_id"],
        "workspaceId": row["workspace_id"] or 0,
        "workspaceName": row["workspace_name"] or "",
        "parentArchived": row["parent_archived"],
        "unmanaged": False,
        "hyperparameters": config.get("hyperparameters") or {},
    }
    if best:
        out["bestTrialId"] = best.get("id")
        out["bestTrialSearcherMetric"] = best.get("searcher_metric")
    return out
