"""Checkpoints: what tasks report (files and sizes), and reads for the API and CLI."""

from __future__ import annotations

import uuid as uuidlib
from typing import Any

from psycopg.types.json import Jsonb

from det.master import expconf, limits, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.wire import ts


def report(conn: Conn, ckpt: dict[str, Any], *, task_id: str | None) -> None:
    try:
        uid = uuidlib.UUID(str(ckpt.get("uuid")))
    except ValueError:
        raise InvalidArgument("uuid: not a UUID") from None
    metadata = limits.json_object("metadata", ckpt.get("metadata"))
    if "steps_completed" not in metadata:
        raise InvalidArgument("metadata.steps_completed: required")
    resources = ckpt.get("resources") or {}
    if not isinstance(resources, dict):
        raise InvalidArgument("resources: must map file paths to sizes")
    try:
        sizes = {str(k): int(v) for k, v in resources.items()}
    except (TypeError, ValueError):
        raise InvalidArgument("resources: sizes must be integers") from None
    task_id = task_id or ckpt.get("taskId")
    trial = conn.execute(
        "SELECT id, experiment_id FROM trials WHERE task_id = %s", (task_id,)
    ).fetchone()
    steps = int(metadata["steps_completed"])
    conn.execute(
        "INSERT INTO checkpoints (uuid, trial_id, task_id, allocation_id, resources, metadata, steps_completed, size)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (uuid) DO UPDATE SET resources = EXCLUDED.resources,"
        " metadata = EXCLUDED.metadata, size = EXCLUDED.size",
        (
            uid,
            trial["id"] if trial else None,
            task_id,
            ckpt.get("allocationId"),
            Jsonb(sizes),
            Jsonb(metadata),
            steps,
            sum(sizes.values()),
        ),
    )
    if trial is not None:
        # The newest checkpoint by training progress is where a restart resumes.
        conn.execute(
            "UPDATE trials SET latest_checkpoint = %s WHERE id = %s AND (latest_checkpoint IS NULL OR"
            " (SELECT steps_completed FROM checkpoints WHERE uuid = trials.latest_checkpoint) <= %s)",
            (uid, trial["id"], steps),
        )
        states.record_event(
            conn, "trial", trial["id"], "checkpoint", f"checkpoint {uid} at step {steps}"
        )


_SELECT = (
    "SELECT c.*, t.experiment_id, t.hparams, e.config, t.searcher_metric,"
    " (SELECT m.metrics FROM metrics m WHERE m.trial_id = c.trial_id AND m.metric_group = 'validation'"
    "  AND m.total_batches = c.steps_completed ORDER BY m.id DESC LIMIT 1) AS validation,"
    " (SELECT m.metrics FROM metrics m WHERE m.trial_id = c.trial_id AND m.metric_group = 'training'"
    "  AND m.total_batches = c.steps_completed ORDER BY m.id DESC LIMIT 1) AS training"
    " FROM checkpoints c LEFT JOIN trials t ON t.id = c.trial_id LEFT JOIN experiments e ON e.id = t.experiment_id"
)


def get(conn: Conn, uid: str) -> dict[str, Any]:
    try:
        uuidlib.UUID(uid)
    except ValueError:
        raise InvalidArgument(f"checkpoint uuid {uid!r} is not a UUID") from None
    row = conn.execute(_SELECT + " WHERE c.uuid = %s", (uid,)).fetchone()
    if row is None:
        raise NotFound(f"checkpoint {uid} not found")
    return row


def list_for(
    conn: Conn, *, experiment_id: int | None = None, trial_id: int | None = None
) -> list[dict[str, Any]]:
    if trial_id is not None:
        return conn.execute(
            _SELECT + " WHERE c.trial_id = %s ORDER BY c.steps_completed, c.report_time",
            (trial_id,),
        ).fetchall()
    return conn.execute(
        _SELECT + " WHERE t.experiment_id = %s ORDER BY c.trial_id, c.steps_completed",
        (experiment_id,),
    ).fetchall()


def checkpoint_json(r: dict[str, Any]) -> dict[str, Any]:
    config = r.get("config") or {}
    metric = (config.get("searcher") or {}).get("metric")
    validation = (r.get("validation") or {}).get("avg_metrics")
    return {
        "uuid": str(r["uuid"]),
        "taskId": r["task_id"],
        "allocationId": r["allocation_id"],
        "reportTime": ts(r["report_time"]),
        "resources": {k: str(v) for k, v in (r["resources"] or {}).items()},
        "metadata": r["metadata"],
        "state": "STATE_" + r["state"],
        "storageId": None,
        "training": {
            "trialId": r["trial_id"],
            "experimentId": r.get("experiment_id"),
            "experimentConfig": expconf.redact(config),
            "hparams": r.get("hparams"),
            "trainingMetrics": {"avgMetrics": (r.get("training") or {}).get("avg_metrics")},
            "validationMetrics": {"avgMetrics": validation},
            "searcherMetric": (validation or {}).get(metric) if metric else None,
        },
    }
