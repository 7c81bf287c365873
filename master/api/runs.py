"""Runs (a run is a trial): Determined's run metadata, and the trial source infos that link a
trial to the checkpoint or model version it used (and read their metrics back)."""

from __future__ import annotations

from flask import Blueprint

from det.master.api import _access
from det.master.api._common import TASK, USER, allow, check_task_scope, db
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound
from det.master.schemas import d
from det.master.schemas import trials as trial_wire
from det.master.services import models
from det.master.services import run_metadata as svc
from det.master.services import trial_sources as sources

bp = Blueprint("runs", __name__)


@bp.post("/api/v1/runs/<int:run_id>/metadata")
@allow(USER, TASK)
@contract("PostRunMetadata")
def post_metadata(run_id: int, body: d.v1PostRunMetadataRequest) -> d.v1PostRunMetadataResponse:
    """``core_context.train.set_metadata``: replaces the run's metadata. Its experiment's
    owner, an admin, or the run's own task."""
    if body.get("runId") not in (None, run_id):
        raise InvalidArgument(f"runId: must be the run id in the path ({run_id})")
    metadata = svc.check(body.get("metadata"))
    with db() as conn:
        _access.trial(conn, run_id)
        return {"metadata": svc.set_(conn, run_id, metadata)}


@bp.get("/api/v1/runs/<int:run_id>/metadata")
@allow(USER, TASK)
@contract("GetRunMetadata")
def get_metadata(run_id: int) -> d.v1GetRunMetadataResponse:
    check_task_scope(trial_id=run_id)
    with db() as conn:
        return {"metadata": svc.get(conn, run_id)}


@bp.post("/api/v1/trial-source-info")
@allow(USER, TASK)
@contract("ReportTrialSourceInfo")
def report_source(body: d.v1ReportTrialSourceInfoRequest) -> d.v1ReportTrialSourceInfoResponse:
    """``core_context.experimental.report_task_using_checkpoint`` (or ``_model_version``):
    the trial used that checkpoint. The caller may change the trial and read the checkpoint."""
    info = body.get("trialSourceInfo")
    if not isinstance(info, dict):
        raise InvalidArgument("trialSourceInfo: required object")
    trial_id, uid = info.get("trialId"), info.get("checkpointUuid")
    if trial_id is None:
        raise InvalidArgument("trialSourceInfo.trialId: required integer")
    if not uid:
        raise InvalidArgument("trialSourceInfo.checkpointUuid: required string")
    with db() as conn:
        _access.trial(conn, trial_id)
        if _access.checkpoint(conn, uid, for_write=False) is None:
            raise InvalidArgument(f"trialSourceInfo.checkpointUuid: no checkpoint {uid}")
        sources.record(
            conn,
            trial_id,
            uid,
            str(info.get("trialSourceInfoType") or ""),
            info.get("modelId"),
            info.get("modelVersion"),
        )
    return {"trialId": trial_id, "checkpointUuid": uid}


@bp.get("/api/v1/checkpoints/<uid>/metrics")
@contract("GetTrialMetricsByCheckpoint")
def metrics_by_checkpoint(
    uid: str, params: d.GetTrialMetricsByCheckpointParams
) -> d.v1GetTrialMetricsByCheckpointResponse:
    """The SDK's ``Checkpoint.get_metrics``: the reports of the trials that used it."""
    with db() as conn:
        if _access.checkpoint(conn, uid, for_write=False) is None:
            raise NotFound(f"checkpoint {uid} not found")
        rows = sources.metrics_of_users(
            conn,
            checkpoint_uuid=uid,
            kind=params.get("trialSourceInfoType"),
            group=params.get("metricGroup"),
        )
    return {"metrics": [trial_wire.wire_report(r) for r in rows]}


@bp.get("/api/v1/models/<name>/versions/<int:number>/metrics")
@contract("GetTrialMetricsByModelVersion")
def metrics_by_model_version(
    name: str, number: int, params: d.GetTrialMetricsByModelVersionParams
) -> d.v1GetTrialMetricsByModelVersionResponse:
    """The SDK's ``ModelVersion.get_metrics``: the reports of the trials that used it."""
    with db() as conn:
        version = models.version(conn, name, number)
        rows = sources.metrics_of_users(
            conn,
            model=(int(version["model_id"]), number),
            kind=params.get("trialSourceInfoType"),
            group=params.get("metricGroup"),
        )
    return {"metrics": [trial_wire.wire_report(r) for r in rows]}
