"""Checkpoints: what tasks report (files and sizes), and reads for the API and CLI."""

from __future__ import annotations

import logging
import os
import tarfile
import tempfile
import uuid as uuidlib
from typing import IO, Any

from psycopg.types.json import Jsonb

from det.master import expconf, limits, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound, Unavailable
from det.master.wire import ts

logger = logging.getLogger(__name__)


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


# Determined's checkpointv1SortBy values, as the official client sends them in ``sortByAttr``.
_SORT_ATTRS = (
    "SORT_BY_UNSPECIFIED",
    "SORT_BY_UUID",
    "SORT_BY_TRIAL_ID",
    "SORT_BY_BATCH_NUMBER",
    "SORT_BY_END_TIME",
    "SORT_BY_STATE",
    "SORT_BY_SEARCHER_METRIC",
)
_STATE_ORDER = ("UNSPECIFIED", "ACTIVE", "COMPLETED", "ERROR", "DELETED", "PARTIALLY_DELETED")


def _metric_of(c: dict[str, Any], name: str | None) -> float | None:
    training = c.get("training") or {}
    if name is None:
        value = training.get("searcherMetric")
    else:
        value = ((training.get("validationMetrics") or {}).get("avgMetrics") or {}).get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def sort_json(
    items: list[dict[str, Any]],
    *,
    attr: str | None,
    metric: str | None,
    order: str | None,
    smaller_is_better: bool,
) -> list[dict[str, Any]]:
    """Checkpoints (as :func:`checkpoint_json` renders them) in the order Determined's
    ``GetExperimentCheckpoints`` gives: by ``attr`` (a ``SORT_BY_*`` name) or by the validation
    metric ``metric``; ``order`` ``ORDER_BY_DESC`` reverses. Sorting by the searcher metric with no
    order means best first. Checkpoints without the metric come last in either order."""
    attr = attr or None
    if attr is not None and attr not in _SORT_ATTRS:
        raise InvalidArgument(
            f"sortByAttr: unknown value {attr!r} (one of {', '.join(_SORT_ATTRS)})"
        )
    if order not in (None, "", "ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC"):
        raise InvalidArgument(f"orderBy: unknown value {order!r} (ORDER_BY_ASC or ORDER_BY_DESC)")
    by_metric = metric is not None or attr == "SORT_BY_SEARCHER_METRIC"
    if attr == "SORT_BY_SEARCHER_METRIC" and order in (None, "", "ORDER_BY_UNSPECIFIED"):
        order = "ORDER_BY_ASC" if smaller_is_better else "ORDER_BY_DESC"
    desc = order == "ORDER_BY_DESC"

    def trial_key(c: dict[str, Any]) -> tuple[int, int]:
        t = c.get("training") or {}
        return (
            int(t.get("trialId") or 0),
            int((c.get("metadata") or {}).get("steps_completed", 0)),
        )

    if by_metric:
        name = metric if metric is not None else None
        have = [c for c in items if _metric_of(c, name) is not None]
        lacking = [c for c in items if _metric_of(c, name) is None]
        have.sort(key=lambda c: (_metric_of(c, name), trial_key(c)), reverse=desc)
        return have + sorted(lacking, key=trial_key)
    keys: dict[str, Any] = {
        "SORT_BY_UUID": lambda c: c["uuid"],
        "SORT_BY_BATCH_NUMBER": lambda c: (
            int((c.get("metadata") or {}).get("steps_completed", 0)),
            trial_key(c),
        ),
        "SORT_BY_END_TIME": lambda c: (c.get("reportTime") or "", trial_key(c)),
        "SORT_BY_STATE": lambda c: (
            _STATE_ORDER.index(c["state"].removeprefix("STATE_"))
            if c["state"].removeprefix("STATE_") in _STATE_ORDER
            else 0,
            trial_key(c),
        ),
    }
    return sorted(items, key=keys.get(attr or "", trial_key), reverse=desc)


def filter_states(items: list[dict[str, Any]], wanted: list[str]) -> list[dict[str, Any]]:
    """Only checkpoints in one of ``wanted`` (``STATE_*`` names); all when empty."""
    if not wanted:
        return items
    return [c for c in items if c["state"] in wanted]


def storage_config(conn: Conn, uid: str) -> dict[str, Any] | None:
    """The checkpoint storage its experiment wrote to (None: the master's default)."""
    row = conn.execute(
        "SELECT e.config->'checkpoint_storage' AS storage FROM checkpoints c"
        " JOIN trials t ON t.id = c.trial_id JOIN experiments e ON e.id = t.experiment_id"
        " WHERE c.uuid = %s",
        (uid,),
    ).fetchone()
    storage = row["storage"] if row is not None else None
    return storage if isinstance(storage, dict) else None


def archive(storage: dict[str, Any], uid: str) -> IO[bytes]:
    """Checkpoint ``uid``'s files as a gzip tar in a temporary file (rewound; deleted when
    closed), read from ``storage`` by the master itself (no DB connection held: this is network
    and disk work). NotFound when the storage has no such checkpoint."""
    from det import storage as det_storage

    out = tempfile.TemporaryFile()  # noqa: SIM115 (handed to the response, which closes it)
    with tempfile.TemporaryDirectory(prefix="det-download-") as tmp:
        try:
            det_storage.from_config(storage).download(uid, tmp)
        except det_storage.CheckpointNotFoundError:
            out.close()
            raise NotFound(f"checkpoint {uid}: no files in its storage") from None
        except Exception as e:
            out.close()
            logger.warning("checkpoint %s: download from storage failed: %s", uid, e)
            raise Unavailable(f"checkpoint {uid}: its storage could not be read: {e}") from None
        with tarfile.open(fileobj=out, mode="w:gz") as tf:
            for entry in sorted(os.listdir(tmp)):
                tf.add(os.path.join(tmp, entry), arcname=entry)
    out.seek(0)
    return out
