"""``/api/v1/trials``: read, kill, metrics (report and read), progress, early exit, logs."""

from __future__ import annotations

import json
from typing import Any

from flask import Blueprint, Response, request, stream_with_context

from det.master.api import _access, _logs
from det.master.api._common import (
    TASK,
    USER,
    allow,
    any_json,
    body,
    body_and_finiteness,
    check_task_scope,
    db,
    int_arg,
    int_list_arg,
    pagination,
)
from det.master.errors import InvalidArgument, NotFound
from det.master.services import trials as svc

bp = Blueprint("trials", __name__)


@bp.get("/api/v1/trials/<int:trial_id>")
@allow(USER, TASK)
def get(trial_id: int) -> Any:
    check_task_scope(trial_id=trial_id)
    with db() as conn:
        return {"trial": svc.trial_json(svc.get(conn, trial_id))}


@bp.patch("/api/v1/trials/<int:trial_id>")
@allow(USER, TASK)
def patch(trial_id: int) -> Any:
    # The official harness sends its runner state here; we keep the trial's state ours.
    with db() as conn:
        _access.trial(conn, trial_id)
        return {"trial": svc.trial_json(svc.get(conn, trial_id))}


@bp.post("/api/v1/runs/start")
@allow(USER, TASK)
def run_prepare() -> Any:
    """Determined's ``RunPrepareForReporting``, called by the official harness's ``core.init``
    (a run is a trial). det keeps no per-storage ids, so the answer has no ``storageId``."""
    data = body()
    run_id = data.get("runId")
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        raise InvalidArgument("runId: required integer")
    check_task_scope(trial_id=run_id)
    with db() as conn:
        svc.get(conn, run_id)
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/kill")
def kill(trial_id: int) -> Any:
    with db() as conn:
        _access.trial(conn, trial_id)
        svc.kill(conn, trial_id)
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/metrics")
@allow(USER, TASK)
def report_metrics(trial_id: int) -> Any:
    data, finite = body_and_finiteness()
    m = data.get("metrics")
    if not isinstance(m, dict):
        raise InvalidArgument("metrics: required object")
    report = {
        "group": data.get("group") or "training",
        "trialRunId": m.get("trialRunId"),
        "stepsCompleted": m.get("stepsCompleted"),
        "metrics": m.get("metrics"),
    }
    with db() as conn:
        _access.trial(conn, trial_id)
        svc.report_metrics(conn, trial_id, [report], finite=finite)
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/metrics/batch")
@allow(USER, TASK)
def report_metrics_batch(trial_id: int) -> Any:
    """det's batched form: ``{"reports": [{group, trialRunId, stepsCompleted, metrics}]}``."""
    data, finite = body_and_finiteness()
    reports = data.get("reports")
    if not isinstance(reports, list):  # the service checks each entry
        raise InvalidArgument("reports: required list of objects")
    with db() as conn:
        _access.trial(conn, trial_id)
        n = svc.report_metrics(conn, trial_id, reports, finite=finite)
    return {"rows": n}


# Determined's legacy per-group endpoints.
@bp.post("/api/v1/trials/<int:trial_id>/training_metrics")
@allow(USER, TASK)
def report_training(trial_id: int) -> Any:
    return _legacy(trial_id, "training")


@bp.post("/api/v1/trials/<int:trial_id>/validation_metrics")
@allow(USER, TASK)
def report_validation(trial_id: int) -> Any:
    return _legacy(trial_id, "validation")


def _legacy(trial_id: int, group: str) -> Any:
    data, finite = body_and_finiteness()
    m = data.get("trainingMetrics") or data.get("validationMetrics") or data.get("metrics")
    if not isinstance(m, dict):
        raise InvalidArgument("metrics: required object")
    with db() as conn:
        _access.trial(conn, trial_id)
        svc.report_metrics(conn, trial_id, [{"group": group, **m}], finite=finite)
    return {}


def _wire_report(row: dict[str, Any]) -> dict[str, Any]:
    """A metrics row as Determined's v1MetricsReport: a validation's values sit under
    ``validation_metrics`` (its clients read them there), every other group's under
    ``avg_metrics``."""
    if row["group"] != "validation":
        return row
    metrics = dict(row["metrics"])
    metrics["validation_metrics"] = metrics.pop("avg_metrics", {})
    return {**row, "metrics": metrics}


def _series(trial_ids: list[int], group: str | None) -> Any:
    def gen() -> Any:
        with db() as conn:
            for tid in trial_ids:
                rows = svc.metrics_series(conn, tid, group)
                if rows:
                    yield json.dumps({"result": {"metrics": [_wire_report(r) for r in rows]}})
                    yield "\n"

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")


@bp.get("/api/v1/trials/metrics/training_metrics")
def training_metrics() -> Any:
    return _series(int_list_arg("trialIds"), "training")


@bp.get("/api/v1/trials/metrics/validation_metrics")
def validation_metrics() -> Any:
    return _series(int_list_arg("trialIds"), "validation")


@bp.get("/api/v1/trials/metrics/trial_metrics")
def trial_metrics() -> Any:
    return _series(int_list_arg("trialIds"), request.args.get("group"))


@bp.get("/api/v1/trials/<int:trial_id>/metrics")
def metrics_of_trial(trial_id: int) -> Any:
    """All reported rows of one trial as JSON (det's non-streaming convenience)."""
    with db() as conn:
        svc.get(conn, trial_id)
        return {"metrics": svc.metrics_series(conn, trial_id, request.args.get("group"))}


@bp.post("/api/v1/trials/<int:trial_id>/progress")
@allow(USER, TASK)
def progress(trial_id: int) -> Any:
    data = any_json()
    value = data.get("progress") if isinstance(data, dict) else data
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InvalidArgument("progress: a number between 0 and 1")
    with db() as conn:
        _access.trial(conn, trial_id)
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/early_exit")
@allow(USER, TASK)
def early_exit(trial_id: int) -> Any:
    reason = str(body().get("reason") or "")
    short = reason.removeprefix("EXITED_REASON_")
    if short not in (
        "INVALID_HP",
        "USER_REQUESTED_STOP",
        "ERRORED",
        "USER_CANCELED",
        "INIT_INVALID_HP",
    ):
        raise InvalidArgument(f"reason: unknown early-exit reason {reason!r}")
    with db() as conn:
        _access.trial(conn, trial_id)
        svc.report_early_exit(conn, trial_id, "INVALID_HP" if short == "INIT_INVALID_HP" else short)
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/runner/metadata")
@allow(USER, TASK)
def runner_metadata(trial_id: int) -> Any:
    with db() as conn:
        _access.trial(conn, trial_id)
    return {}


@bp.get("/api/v1/trials/<int:trial_id>/checkpoints")
@allow(USER, TASK)
def checkpoints(trial_id: int) -> Any:
    from det.master.api.checkpoints import listing
    from det.master.services import checkpoints as ckpt

    check_task_scope(trial_id=trial_id)
    with db() as conn:
        trial = svc.get(conn, trial_id)
        rows = ckpt.list_for(conn, trial_id=trial_id)
    return listing(rows, trial["config"])


@bp.get("/api/v1/trials/<int:trial_id>/logs")
def logs(trial_id: int) -> Any:
    with db() as conn:
        row = conn.execute("SELECT task_id FROM trials WHERE id = %s", (trial_id,)).fetchone()
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    return _logs.stream(row["task_id"], trial_id=trial_id)


@bp.get("/api/v1/trials/<int:trial_id>/workloads")
def workloads(trial_id: int) -> Any:
    """Training, validation and checkpoint workloads of a trial, in training order."""
    from det.master.services import checkpoints as ckpt
    from det.master.wire import ts

    offset = int_arg("offset", 0) or 0
    limit = int_arg("limit", 0) or 0
    with db() as conn:
        svc.get(conn, trial_id)
        metrics = svc.metrics_series(conn, trial_id, None)
        ckpts = ckpt.list_for(conn, trial_id=trial_id)
    items: list[tuple[int, int, dict[str, Any]]] = []
    for m in metrics:
        kind = "validation" if m["group"] == "validation" else "training"
        if m["group"] not in ("training", "validation"):
            continue
        body = {"avgMetrics": m["metrics"].get("avg_metrics") or {}}
        if request.args.get("includeBatchMetrics") == "true" and m["metrics"].get("batch_metrics"):
            body["batchMetrics"] = m["metrics"]["batch_metrics"]
        items.append(
            (
                m["totalBatches"],
                0 if kind == "training" else 1,
                {
                    kind: {
                        "totalBatches": m["totalBatches"],
                        "endTime": m["endTime"],
                        "metrics": body,
                        "numInputs": 0,
                    }
                },
            )
        )
    for c in ckpts:
        items.append(
            (
                c["steps_completed"],
                2,
                {
                    "checkpoint": {
                        "uuid": str(c["uuid"]),
                        "totalBatches": c["steps_completed"],
                        "state": "STATE_" + c["state"],
                        "endTime": ts(c["report_time"]),
                        "resources": {k: str(v) for k, v in (c["resources"] or {}).items()},
                        "metadata": c["metadata"],
                    }
                },
            )
        )
    items.sort(key=lambda x: (x[0], x[1]))
    rows = [w for _, _, w in items]
    page = rows[offset : (offset + limit) if limit > 0 else None]
    return {"workloads": page, "pagination": pagination(offset, limit, len(rows))}
