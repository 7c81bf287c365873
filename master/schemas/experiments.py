"""Experiments on the wire: ``v1Experiment`` from an ``experiments`` row, and the experiment's
context (the files it was created with) as Determined's file tree, and one file of it."""

from __future__ import annotations

import io
import tarfile
from datetime import UTC, datetime
from typing import Any

import orjson

from det.common.jsontypes import JSONObject
from det.master.expconf import redact
from det.master.fastjson import fragment
from det.master.rows.experiments import Experiment, ExperimentBase, GotExperiment, WireExperiment
from det.master.rows.trials import BestTrial
from det.master.schemas import d
from det.master.wire import ts


def _searcher_field(config: JSONObject, field: str) -> str:
    searcher = config.get("searcher")
    value = searcher.get(field) if isinstance(searcher, dict) else None
    return value if isinstance(value, str) else ""


def searcher_metric(config: JSONObject) -> str:
    return _searcher_field(config, "metric")


def experiment(row: Experiment, best: BestTrial | None = None) -> d.v1Experiment:
    """``row`` is a row of ``services.experiments.get`` (with its project's columns); ``best``
    the best trial's row, when the caller asked for it."""
    config = redact(row["config"])
    return _experiment(
        row,
        config,
        row["labels"],
        _searcher_field(row["config"], "name"),
        searcher_metric(config),
        config.get("hyperparameters") or {},
        row["original_config"],
        best,
    )


def wire_config(row: WireExperiment) -> Any:
    """The config of a row with the wire columns (``services.experiments.list_``,
    ``get_for_wire``), redacted: its JSON text as it is unless it holds a secret."""
    if row["config_secret"]:
        return redact(orjson.loads(row["config_json"]))
    return fragment(row["config_json"])


def listed(row: WireExperiment, *, config: Any = None) -> d.v1Experiment:
    """An experiment of GetExperiments (a row of ``services.experiments.list_``). As in
    Determined's list, no original config (an empty string: the field is required) and no
    hyperparameters (they are in the config); GetExperiment sends both."""
    return _experiment(
        row,
        wire_config(row) if config is None else config,
        fragment(row["labels_json"], "[]"),
        row["searcher_name"] or "",
        row["searcher_metric_name"] or "",
        None,
        "",
    )


def got(row: GotExperiment, best: BestTrial | None, config: Any) -> d.v1Experiment:
    """The experiment of GetExperiment (a row of ``services.experiments.get_for_wire``)."""
    return _experiment(
        row,
        config,
        fragment(row["labels_json"], "[]"),
        row["searcher_name"] or "",
        row["searcher_metric_name"] or "",
        fragment(row["hyperparameters_json"], "{}"),
        row["original_config"],
        best,
        fragment(row["trial_ids_json"], "[]"),
    )


def _experiment(
    row: ExperimentBase,
    config: Any,
    labels: Any,
    searcher_type: str,
    metric: str,
    hyperparameters: Any,
    original_config: str,
    best: BestTrial | None = None,
    trial_ids: Any = None,
) -> d.v1Experiment:
    out: d.v1Experiment = {
        "id": row["id"],
        "name": row["name"],
        "description": row["description"],
        "labels": labels,
        "notes": row["notes"],
        "state": "STATE_" + row["state"],  # type: ignore[typeddict-item]
        "archived": row["archived"],
        "config": config,
        "originalConfig": original_config,
        "startTime": ts(row["created_at"]) or "",
        "endTime": ts(row["ended_at"]),
        "numTrials": row["num_trials"],
        "trialIds": [] if trial_ids is None else trial_ids,
        "username": row["username"],
        "userId": row["owner_id"],
        "displayName": row["username"],
        "jobId": row["job_id"],
        "resourcePool": row["resource_pool"],
        "searcherType": searcher_type,
        "searcherMetric": metric,
        "progress": row["progress"],
        "projectId": row["project_id"],
        "projectName": row["project_name"] or "",
        "projectOwnerId": row["project_owner_id"],
        "workspaceId": row["workspace_id"] or 0,
        "workspaceName": row["workspace_name"] or "",
        "parentArchived": row["parent_archived"],
        "unmanaged": bool(row.get("unmanaged")),
    }
    if row.get("external_experiment_id") is not None:
        out["externalExperimentId"] = row["external_experiment_id"]
    if row.get("parent_id") is not None:
        out["forkedFrom"] = row["parent_id"]
    if hyperparameters is not None:
        out["hyperparameters"] = hyperparameters
    if best:
        out["bestTrialId"] = best.get("id")
        out["bestTrialSearcherMetric"] = best.get("searcher_metric")
    return out


def context_file(blob: bytes | None, path: str) -> bytes | None:
    """The content of the context's file ``path`` (``None``: no such file)."""
    if not blob:
        return None
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.strip("/") == path.strip("/"):
                return (tar.extractfile(m) or io.BytesIO()).read()
    return None


def file_tree(blob: bytes | None) -> list[d.v1FileNode]:
    """The context as Determined's ``GetModelDefTree`` answer: top-level nodes, a directory's
    entries under its ``files`` (directories first, then by name). A directory the archive has
    no entry for (``pkg/`` of ``pkg/model.py``) is still a node."""
    roots: list[d.v1FileNode] = []
    children: dict[str, list[d.v1FileNode]] = {"": roots}

    def directory(path: str) -> list[d.v1FileNode]:
        """The entries of directory ``path``, creating its node (and its parents') if new."""
        entries = children.get(path)
        if entries is None:
            entries = children[path] = []
            parent, _, name = path.rpartition("/")
            node: d.v1FileNode = {
                "path": path,
                "name": name,
                "isDir": True,
                "contentLength": 0,
                "files": entries,
            }
            directory(parent).append(node)
        return entries

    if blob:
        with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
            for m in tar.getmembers():
                path = m.name.strip("/")
                if not path or path == ".":
                    continue
                if m.isdir():
                    directory(path)
                    continue
                parent, _, name = path.rpartition("/")
                directory(parent).append(
                    {
                        "path": path,
                        "name": name,
                        "isDir": False,
                        "contentLength": m.size,
                        "modifiedTime": ts(datetime.fromtimestamp(m.mtime, UTC)) or "",
                        "files": [],
                    }
                )

    def order(nodes: list[d.v1FileNode]) -> None:
        nodes.sort(key=lambda n: (not n.get("isDir"), n.get("name") or ""))
        for n in nodes:
            order(n.get("files") or [])

    order(roots)
    return roots
