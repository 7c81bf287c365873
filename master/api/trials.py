"""``/api/v1/trials``: read, kill, metrics (report and read), progress, early exit, logs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import cast

from flask import Blueprint, Response, request, stream_with_context

from det.master.api import _access, _logs
from det.master.api import checkpoints as checkpoints_api
from det.master.api._answers import answer, encoded
from det.master.api._common import (
    TASK,
    USER,
    allow,
    body_and_finiteness,
    check_task_scope,
    chief_only,
    current_user,
    db,
    pagination,
    reads,
    statement,
)
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound
from det.master.expconf import stored
from det.master.fastjson import fragment
from det.master.schemas import d
from det.master.schemas import trials as wire
from det.master.schemas.requests import (
    CompareTrialsQuery,
    MetricsQuery,
    TrialIdsQuery,
    TrialWorkloadsQuery,
)
from det.master.seriescache import SAMPLED, WHOLE
from det.master.services import checkpoints as ckpt_svc
from det.master.services import searching, task_logs
from det.master.services import trials as svc
from det.master.services import unmanaged as unmanaged_svc
from det.master.wire import Empty

bp = Blueprint("trials", __name__)


@bp.get("/api/v1/trials/<int:trial_id>")
@allow(USER, TASK)
@contract("GetTrial")
def get(trial_id: int) -> Response:
    check_task_scope(trial_id=trial_id)
    with db() as conn:
        row = svc.get(conn, trial_id)
        _access.read_trial(conn, trial_id)
    out: d.v1GetTrialResponse = {"trial": wire.trial(row)}
    return answer(out)  # orjson: the validations come as JSON text (fragments)


@bp.get("/api/v1/trials/by-external-id/<path:external_id>/<external_trial_id>")
@contract("GetTrialByExternalID")
def get_by_external_id(external_id: str, external_trial_id: str) -> Response:
    """Determined's GetTrialByExternalID: an unmanaged trial by its experiment's and its own
    external ids (the caller's own experiment of that id first: see the service)."""
    with db() as conn:
        trial_id = unmanaged_svc.trial_by_external_ids(
            conn, current_user().id, external_id, external_trial_id
        )
        row = svc.get(conn, trial_id)
    out: d.v1GetTrialByExternalIDResponse = {"trial": wire.trial(row)}
    return answer(out)


@bp.patch("/api/v1/trials/<int:trial_id>")
@allow(USER, TASK)
@contract("PatchTrial")
def patch(trial_id: int, body: d.v1PatchTrialRequest) -> Response:
    """An unmanaged trial's script reports its state (or a heartbeat) here. A managed trial's
    state is the master's: what the official harness sends for one is ignored."""
    with db() as conn:
        _access.trial(conn, trial_id)
        if unmanaged_svc.is_unmanaged_trial(conn, trial_id):
            unmanaged_svc.report_state(conn, trial_id, body.get("state"))
        row = svc.get(conn, trial_id)
    out: d.v1PatchTrialResponse = {"trial": wire.trial(row)}
    return answer(out)


@bp.post("/api/v1/trials")
@contract("CreateTrial")
def create(body: d.v1CreateTrialRequest) -> Response:
    """Determined's CreateTrial: a trial of an unmanaged experiment, made by its script."""
    out: d.v1CreateTrialResponse = {"trial": _create_unmanaged(body, None)}
    return answer(out)


@bp.put("/api/v1/trials")
@contract("PutTrial")
def put(body: d.v1PutTrialRequest) -> Response:
    """Determined's PutTrial: the unmanaged experiment's trial of that external id, created if
    new (a rerun of a core_v2 script finds its trial again)."""
    inner = body.get("createTrialRequest")
    if inner is None:
        raise InvalidArgument("createTrialRequest: required object")
    ext = body.get("externalTrialId")
    if not ext:
        raise InvalidArgument("externalTrialId: required non-empty string")
    out: d.v1PutTrialResponse = {"trial": _create_unmanaged(inner, ext)}
    return answer(out)


def _create_unmanaged(body: d.v1CreateTrialRequest, external_id: str | None) -> d.trialv1Trial:
    if not body.get("unmanaged"):
        raise InvalidArgument("unmanaged: must be true (det creates only unmanaged trials)")
    exp_id = body.get("experimentId")
    if exp_id is None:
        raise InvalidArgument("experimentId: required integer")
    with db() as conn:
        _access.experiment(conn, exp_id)
        trial_id = unmanaged_svc.create_trial(conn, exp_id, body.get("hparams"), external_id)
        row = svc.get(conn, trial_id)
    return wire.trial(row)


@bp.post("/api/v1/trials/<int:trial_id>/start")
@contract("StartTrial")
def start(trial_id: int, body: d.v1StartTrialRequest) -> d.v1StartTrialResponse:
    """Determined's StartTrial: a new run of an unmanaged trial (its run id increments); from
    the second run on, the latest checkpoint and its steps, where the script resumes."""
    with db() as conn:
        _access.trial(conn, trial_id)
        run_id, steps, latest = unmanaged_svc.start_trial(conn, trial_id, bool(body.get("resume")))
    out: d.v1StartTrialResponse = {"trialRunId": run_id, "stepsCompleted": steps}
    if latest is not None:
        out["latestCheckpoint"] = latest
    return out


@bp.post("/api/v1/runs/start")
@allow(USER, TASK)
@contract("RunPrepareForReporting")
def run_prepare(body: d.v1RunPrepareForReportingRequest) -> d.v1RunPrepareForReportingResponse:
    """Determined's ``RunPrepareForReporting``, called by the official harness's ``core.init``
    (a run is a trial). det keeps no per-storage ids, so the answer has no ``storageId``."""
    run_id = body.get("runId")
    if run_id is None:
        raise InvalidArgument("runId: required integer")
    with db() as conn:
        _access.trial(conn, run_id)  # Determined checks the right to edit the run's experiment
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/kill")
@contract("KillTrial")
def kill(trial_id: int) -> Empty:
    with db() as conn:
        _access.trial(conn, trial_id, "experiment.update")
        svc.kill(conn, trial_id)
    return {}


def _finite() -> bool:
    """Whether every number of the request's body is finite (allows the fast encoder)."""
    return body_and_finiteness()[1]


@bp.post("/api/v1/trials/<int:trial_id>/metrics")
@allow(USER, TASK)
@contract("ReportTrialMetrics")
def report_metrics(trial_id: int, body: d.v1ReportTrialMetricsRequest) -> Empty:
    m = body.get("metrics")
    if m is None:
        raise InvalidArgument("metrics: required object")
    return _report(trial_id, body.get("group") or "training", m)


@bp.post("/api/v1/trials/<int:trial_id>/metrics/batch")
@allow(USER, TASK)
@contract(body=wire.ReportMetricsBatchRequest, response=wire.ReportMetricsBatchResponse)
def report_metrics_batch(
    trial_id: int, body: wire.ReportMetricsBatchRequest
) -> wire.ReportMetricsBatchResponse:
    """det's batched form: ``{"reports": [{group, trialRunId, stepsCompleted, metrics}]}``."""
    reports = body.get("reports")
    if reports is None:
        raise InvalidArgument("reports: required list of objects")
    for i, r in enumerate(reports):
        if (r.get("metrics") or {}).get("avgMetrics") is None:
            raise InvalidArgument(f"reports[{i}].metrics.avgMetrics: required object")
    chief_only()
    conn = statement()  # a batch of training reports: two statements, no transaction
    _access.trial(conn, trial_id)
    n = svc.report_metrics(conn, trial_id, list(reports), finite=_finite())  # type: ignore[arg-type]
    return {"rows": n}


# Determined's legacy per-group endpoints: the body is the report itself (``v1TrialMetrics``).
@bp.post("/api/v1/trials/<int:trial_id>/training_metrics")
@allow(USER, TASK)
@contract("ReportTrialTrainingMetrics")
def report_training(trial_id: int, body: d.v1TrialMetrics) -> Empty:
    return _legacy(trial_id, "training", body)


@bp.post("/api/v1/trials/<int:trial_id>/validation_metrics")
@allow(USER, TASK)
@contract("ReportTrialValidationMetrics")
def report_validation(trial_id: int, body: d.v1TrialMetrics) -> Empty:
    return _legacy(trial_id, "validation", body)


def _legacy(trial_id: int, group: str, m: d.v1TrialMetrics) -> Empty:
    if m.get("metrics") is None:
        raise InvalidArgument("metrics: required object")
    return _report(trial_id, group, m)


def _report(trial_id: int, group: str, m: d.v1TrialMetrics) -> Empty:
    report: wire.MetricsReportEntry = {"group": group, "stepsCompleted": m.get("stepsCompleted")}
    if "trialRunId" in m:
        report["trialRunId"] = m["trialRunId"]
    if "metrics" in m:
        report["metrics"] = m["metrics"]
    chief_only()
    conn = statement()
    _access.trial(conn, trial_id)
    svc.report_metrics(conn, trial_id, [report], finite=_finite())
    return {}


def _series(trial_ids: list[int], group: str | None) -> Response:
    """One ``{"result": {"metrics": [...]}}`` line per trial with reports (Determined's metric
    streams)."""

    with db() as conn:  # each trial readable by the caller, before the stream starts
        for tid in trial_ids:
            _access.read_trial(conn, tid)

    def gen() -> Iterator[str]:
        with db() as conn:
            for tid in trial_ids:
                rows = svc.metrics_rows(conn, tid, group)
                if rows:
                    line: d.v1GetMetricsResponse = {"metrics": [wire.wire_report(r) for r in rows]}
                    yield json.dumps({"result": line})
                    yield "\n"

    return Response(stream_with_context(gen()), mimetype="application/x-ndjson")


@bp.get("/api/v1/trials/metrics/training_metrics")
@contract("GetTrainingMetrics", params=TrialIdsQuery)
def training_metrics(params: TrialIdsQuery) -> Response:
    return _series(params.trialIds, "training")


@bp.get("/api/v1/trials/metrics/validation_metrics")
@contract("GetValidationMetrics", params=TrialIdsQuery)
def validation_metrics(params: TrialIdsQuery) -> Response:
    return _series(params.trialIds, "validation")


@bp.get("/api/v1/trials/metrics/trial_metrics")
@contract("GetMetrics", params=MetricsQuery)
def trial_metrics(params: MetricsQuery) -> Response:
    return _series(params.trialIds, params.group)


# CompareTrials' legacy metricType, as a group, and back (other groups have no type).
_GROUP_OF_TYPE = {
    "METRIC_TYPE_TRAINING": "training",
    "METRIC_TYPE_VALIDATION": "validation",
    "METRIC_TYPE_PROFILING": "profiling",
}
_TYPE_OF_GROUP: dict[str, d.v1MetricType] = {
    "training": "METRIC_TYPE_TRAINING",
    "validation": "METRIC_TYPE_VALIDATION",
    "profiling": "METRIC_TYPE_PROFILING",
}


def _float_arg(name: str) -> float | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except ValueError:
        raise InvalidArgument(f"{name}: not a number: {raw!r}") from None


def _series_filter(q: CompareTrialsQuery) -> svc.SeriesFilter:
    """``timeSeriesFilter.*``; the double range is read from the query string as the official
    client sends it (``timeSeriesFilter.doubleRange.gt``)."""
    dr = "timeSeriesFilter.doubleRange."
    return svc.SeriesFilter(
        name=q.name,
        int_gt=q.int_gt,
        int_gte=q.int_gte,
        int_lt=q.int_lt,
        int_lte=q.int_lte,
        int_in=q.int_in,
        int_not_in=q.int_not_in,
        float_gt=_float_arg(dr + "gt"),
        float_gte=_float_arg(dr + "gte"),
        float_lt=_float_arg(dr + "lt"),
        float_lte=_float_arg(dr + "lte"),
        time_gt=q.time_gt,
        time_gte=q.time_gte,
        time_lt=q.time_lt,
        time_lte=q.time_lte,
    )


def _metrics_by_group(params: CompareTrialsQuery) -> dict[str, list[str]]:
    """Which metrics of which groups: ``metricNames`` of ``group``/``metricType`` (of training
    and validation when neither is given, as Determined keeps it for old clients), or
    ``metricIds`` (``group.name``)."""
    names, ids = params.metricNames, params.metricIds
    if names and ids:
        raise InvalidArgument("metricNames, metricIds: give one of them, not both")
    group, mtype = params.group, params.metricType
    if group and mtype != "METRIC_TYPE_UNSPECIFIED":
        raise InvalidArgument("group, metricType: give one of them, not both")
    if mtype != "METRIC_TYPE_UNSPECIFIED":
        group = _GROUP_OF_TYPE[mtype]
    out: dict[str, list[str]] = {}
    if names:
        for g in [group] if group else ["training", "validation"]:
            out[g] = names
    for mid in ids:
        g, sep, name = mid.partition(".")
        if not sep or not g or not name:
            raise InvalidArgument(f"metricIds: {mid!r} is not group.metric_name")
        out.setdefault(g, []).append(name)
    return out


@bp.get("/api/v1/trials/time-series")
@contract("CompareTrials", params=CompareTrialsQuery)
def compare(params: CompareTrialsQuery) -> Response:
    """Determined's CompareTrials: per trial, its metrics sampled to at most ``maxDatapoints``
    points per group (first and last kept, evenly spaced between; sampled by PostgreSQL, see
    ``services.trials.sampled_series``), the trials in the order asked."""
    trial_ids = params.trialIds
    if not trial_ids:
        raise InvalidArgument("trialIds: required (the trials to compare)")
    groups = _metrics_by_group(params)
    max_points = params.maxDatapoints
    if max_points < 0:
        raise InvalidArgument(f"maxDatapoints: {max_points} is negative")
    start, end = params.startBatches, params.endBatches
    series_filter = _series_filter(params)
    unique = sorted(set(trial_ids))
    with reads() as conn:
        rows = svc.basic(conn, unique)
        missing = [t for t in unique if t not in rows]
        if missing:
            raise NotFound(f"trial {missing[0]} not found")
        for tid in unique:
            _access.read_trial(conn, tid)
        # Each trial's points come from this process's cache while its row is unchanged (see
        # det.master.seriescache): its version was read above, before any sampling.
        series: dict[str, dict[int, str]] = {}
        for g, names in sorted(groups.items()):
            request_key = (g, tuple(names), max_points, start, end, repr(series_filter))
            got: dict[int, str] = {}
            stale = []
            for t in unique:
                hit, points = SAMPLED.get((request_key, t), rows[t].row_version)
                if not hit:
                    stale.append(t)
                elif points is not None:
                    got[t] = points
            if stale:
                fresh = svc.sampled_series(
                    conn,
                    stale,
                    g,
                    names,
                    max_points=max_points,
                    start_batches=start,
                    end_batches=end,
                    series_filter=series_filter,
                )
                for t in stale:
                    SAMPLED.put((request_key, t), rows[t].row_version, fresh.get(t))
                got.update(fresh)
            series[g] = got
    out: d.v1CompareTrialsResponse = {
        "trials": [
            {
                "trial": wire.trial(rows[t]),
                "metrics": [
                    {
                        "type": _TYPE_OF_GROUP.get(g, "METRIC_TYPE_UNSPECIFIED"),
                        "group": g,
                        "data": cast("list[d.v1DataPoint]", fragment(by_trial[t])),
                    }
                    for g, by_trial in series.items()
                    if t in by_trial
                ],
            }
            for t in trial_ids
        ]
    }
    return answer(out)


@bp.get("/api/v1/trials/<int:trial_id>/metrics")
@contract(params=wire.TrialMetricsParams, response=wire.TrialMetricsResponse)
def metrics_of_trial(trial_id: int, params: wire.TrialMetricsParams) -> Response:
    """All reported rows of one trial as JSON (det's non-streaming convenience), built by
    PostgreSQL and passed through; kept by this process while the trial's row is unchanged
    (det.master.seriescache), its version read before the rows."""
    group = params.get("group")
    with reads() as conn:
        _access.read_trial(conn, trial_id)
        version = svc.row_version(conn, trial_id)
        hit, body = WHOLE.get((trial_id, group), version)
        if not hit or body is None:
            text = svc.metrics_json(conn, trial_id, group)
            body = encoded({"metrics": fragment(text, "[]")})
            WHOLE.put((trial_id, group), version, body)
    return Response(body, mimetype="application/json")


@bp.post("/api/v1/trials/<int:trial_id>/progress")
@allow(USER, TASK)
@contract("ReportTrialProgress")
def progress(trial_id: int, body: d.v1ReportTrialProgressRequest) -> Empty:
    value = body.get("progress")
    if value is None or not 0 <= value <= 1:
        raise InvalidArgument("progress: a number between 0 and 1")
    chief_only()
    with db() as conn:
        _access.trial(conn, trial_id)
        # A managed experiment's progress is its searcher's, from every trial's reports; an
        # unmanaged one's is its script's.
        searching.trial_progress(conn, trial_id, float(value))
        unmanaged_svc.report_progress(conn, trial_id, float(value))
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/early_exit")
@allow(USER, TASK)
@contract("ReportTrialSearcherEarlyExit", body=wire.TrialEarlyExit)
def early_exit(trial_id: int, body: wire.TrialEarlyExit) -> Empty:
    reason = body.get("reason")
    if reason is None:
        raise InvalidArgument("reason: required")
    short = reason.removeprefix("EXITED_REASON_")
    with db() as conn:
        _access.trial(conn, trial_id)
        svc.report_early_exit(conn, trial_id, "INVALID_HP" if short == "INIT_INVALID_HP" else short)
    return {}


@bp.post("/api/v1/trials/<int:trial_id>/runner/metadata")
@allow(USER, TASK)
@contract("PostTrialRunnerMetadata")
def runner_metadata(trial_id: int, body: d.v1TrialRunnerMetadata) -> Empty:
    with db() as conn:
        _access.trial(conn, trial_id)
    return {}


@bp.get("/api/v1/trials/<int:trial_id>/checkpoints")
@allow(USER, TASK)
@contract("GetTrialCheckpoints")
def checkpoints(
    trial_id: int, params: d.GetTrialCheckpointsParams
) -> d.v1GetTrialCheckpointsResponse:
    check_task_scope(trial_id=trial_id)
    with db() as conn:
        trial = svc.get(conn, trial_id)
        _access.read_trial(conn, trial_id)
        rows = ckpt_svc.list_for(conn, trial_id=trial_id)
    cfg = stored.experiment_config(trial.experiment_id, trial.config)
    return checkpoints_api.listing(rows, cfg.searcher.smaller_is_better, params)


@bp.get("/api/v1/trials/<int:trial_id>/logs")
@contract("TrialLogs")
def logs(trial_id: int, params: d.TrialLogsParams) -> Response:
    with db() as conn:
        task_id = task_logs.task_of_trial(conn, trial_id)
        if task_id is not None:
            _access.read_trial(conn, trial_id)
    if task_id is None:
        raise NotFound(f"trial {trial_id} not found")
    return _logs.stream(task_id, params, trial_id=trial_id)


# GetTrialWorkloads' filter: which kinds of workload it keeps.
_WORKLOAD_FILTERS = {
    "FILTER_OPTION_UNSPECIFIED": ("training", "validation", "checkpoint"),
    "FILTER_OPTION_CHECKPOINT": ("checkpoint",),
    "FILTER_OPTION_VALIDATION": ("validation",),
    "FILTER_OPTION_CHECKPOINT_OR_VALIDATION": ("checkpoint", "validation"),
}


def _deleted_checkpoint(w: d.v1WorkloadContainer) -> bool:
    c = w.get("checkpoint")
    return c is not None and c.get("state") == "STATE_DELETED"


@bp.get("/api/v1/trials/<int:trial_id>/workloads")
@contract("GetTrialWorkloads", params=TrialWorkloadsQuery)
def workloads(trial_id: int, params: TrialWorkloadsQuery) -> d.v1GetTrialWorkloadsResponse:
    """Training, validation and checkpoint workloads of a trial, in training order."""
    offset, limit = params.offset, params.limit
    with db() as conn:
        svc.get(conn, trial_id)
        _access.read_trial(conn, trial_id)
        reports = svc.metrics_rows(conn, trial_id, None)
        ckpts = ckpt_svc.list_for(conn, trial_id=trial_id)
    rows = wire.workloads(reports, ckpts, batch_metrics=params.includeBatchMetrics)
    kinds = _WORKLOAD_FILTERS[params.filter]
    rows = [w for w in rows if any(w.get(k) for k in kinds)]
    if params.removeDeletedCheckpoints:
        rows = [w for w in rows if not _deleted_checkpoint(w)]
    if params.orderBy == "ORDER_BY_DESC":  # by batches, the only order det keeps
        rows.reverse()
    page = rows[offset : (offset + limit) if limit > 0 else None]
    return {"workloads": page, "pagination": pagination(offset, limit, len(rows))}
