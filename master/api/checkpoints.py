"""``/api/v1/checkpoints``: tasks report their checkpoints (and deletions); users read them."""

from __future__ import annotations

from flask import Blueprint, send_file
from flask.typing import ResponseReturnValue

from det.master import limits
from det.master.api import _access
from det.master.api._common import (
    TASK,
    USER,
    allow,
    chief_only,
    db,
    pagination,
    principal,
    release_connection,
    state,
)
from det.master.api._contract import contract, query_dict
from det.master.errors import Conflict, InvalidArgument, NotFound, PermissionDenied
from det.master.rows.checkpoints import Checkpoint
from det.master.schemas import checkpoints as wire
from det.master.schemas import d, validate
from det.master.services import checkpoint_gc
from det.master.services import checkpoints as ckpt_svc
from det.master.wire import Empty, Paging
from det.storage import globs as det_globs

bp = Blueprint("checkpoints", __name__)

ListParams = d.GetExperimentCheckpointsParams | d.GetTrialCheckpointsParams


def listing(
    rows: list[Checkpoint], smaller_is_better: bool, params: ListParams | None = None
) -> d.v1GetExperimentCheckpointsResponse:
    """A ``GetExperimentCheckpoints``/``GetTrialCheckpoints`` answer for ``rows``, honouring the
    request's ``states``, ``sortByAttr``, ``sortByMetric``, ``orderBy``, ``offset`` and
    ``limit`` as Determined does (a negative offset counts from the end). ``params``: the
    route's validated query (None: the request's, checked as ``GetExperimentCheckpoints``')."""
    if params is None:
        kind = d.GetExperimentCheckpointsParams
        params = validate(kind, query_dict(kind), "query")
    items = wire.filter_states([wire.checkpoint(r) for r in rows], params.get("states"))
    items = wire.sort(
        items,
        attr=params.get("sortByAttr"),
        metric=params.get("sortByMetric") or None,
        order=params.get("orderBy"),
        smaller_is_better=smaller_is_better,
    )
    total = len(items)
    offset, limit = Paging.of(params)
    if offset < 0:
        offset = max(0, total + offset)
    page = items[offset : (offset + limit) if limit > 0 else None]
    return {"checkpoints": page, "pagination": pagination(offset, limit, total)}


@bp.post("/api/v1/checkpoints")
@allow(TASK, USER)
@contract("ReportCheckpoint", body=wire.ReportCheckpointRequest)
def report(body: wire.ReportCheckpointRequest) -> Empty:
    """A checkpoint is created once, for its own trial: a task reports only into its own task;
    a user only into a trial they may change; an existing uuid of another trial is refused."""
    ckpt: wire.ReportedCheckpoint = body.get("checkpoint") or body
    uid = ckpt.get("uuid")
    if uid is None:
        raise InvalidArgument("uuid: required string")
    p = principal()
    chief_only()
    with db() as conn:
        if p.task is not None:
            if ckpt.get("taskId") not in (None, p.task.task_id):
                raise PermissionDenied("an allocation token is valid only for its own task")
            task_id = p.task.task_id
        else:
            given = ckpt.get("taskId")
            if given is None:
                raise InvalidArgument("taskId: required string")
            task_id = given
        trial_id = ckpt_svc.trial_of_task(conn, task_id)
        if trial_id is None and p.task is None:
            raise NotFound(f"taskId: no trial has task id {task_id!r}")
        if trial_id is not None:
            _access.trial(conn, trial_id)
        existing = _access.checkpoint(conn, uid, for_write=True)
        if existing is not None and existing.task_id != task_id:
            raise Conflict(f"checkpoint {uid} already exists for another task")
        ckpt_svc.report(conn, ckpt, task_id=task_id)
    return {}


@bp.get("/api/v1/checkpoints/<uid>")
@allow(TASK, USER)
@contract("GetCheckpoint")
def get(uid: str) -> d.v1GetCheckpointResponse:
    with db() as conn:
        if _access.checkpoint(conn, uid, for_write=False) is None:
            raise NotFound(f"checkpoint {uid} not found")
        return {"checkpoint": wire.checkpoint(ckpt_svc.get(conn, uid))}


@bp.post("/api/v1/checkpoints/<uid>/metadata")
@allow(TASK, USER)
@contract("PostCheckpointMetadata")
def post_metadata(
    uid: str, body: d.v1PostCheckpointMetadataRequest
) -> d.v1PostCheckpointMetadataResponse:
    """Determined's PostCheckpointMetadata (the SDK's ``Checkpoint.add_metadata`` and
    ``remove_metadata`` send the whole new metadata): it replaces the checkpoint's metadata,
    except ``steps_completed``, which stays the step it was saved at (resume, GC and the CLIs
    read it). Its experiment's owner, an admin, or its own trial's task."""
    ckpt = body.get("checkpoint")
    if not isinstance(ckpt, dict):
        raise InvalidArgument("checkpoint: required object (with uuid and metadata)")
    if ckpt.get("uuid") != uid:
        raise InvalidArgument(f"checkpoint.uuid: must be the uuid in the path ({uid})")
    metadata = limits.json_object("checkpoint.metadata", ckpt.get("metadata"))
    with db() as conn:
        if _access.checkpoint(conn, uid, for_write=True) is None:
            raise NotFound(f"checkpoint {uid} not found")
        ckpt_svc.set_metadata(conn, uid, metadata)
        out: d.v1PostCheckpointMetadataResponse = {
            "checkpoint": wire.checkpoint(ckpt_svc.get(conn, uid))
        }
    return out


@bp.patch("/api/v1/checkpoints")
@allow(TASK, USER)
@contract("PatchCheckpoints", body=wire.PatchCheckpointsRequest)
def patch(body: wire.PatchCheckpointsRequest) -> Empty:
    """Deletions reported by the GC task or the harness (a partial delete keeps the rest)."""
    with db() as conn:
        for i, item in enumerate(body.get("checkpoints") or []):
            uid = item.get("uuid")
            if uid is None:
                raise InvalidArgument(f"checkpoints[{i}].uuid: required string")
            res = (item.get("resources") or {}).get("resources")
            if res is None:
                continue
            left = wire.sizes(f"checkpoints[{i}].resources.resources", res)
            if _access.checkpoint(conn, uid, for_write=True) is None:
                raise NotFound(f"checkpoint {uid} not found")
            ckpt_svc.files_deleted(conn, uid, left)
    return {}


@bp.delete("/api/v1/checkpoints")
@contract("DeleteCheckpoints")
def delete(body: d.v1DeleteCheckpointsRequest) -> Empty:
    """``det checkpoint delete``: the experiment's checkpoint-GC task deletes them."""
    uuids = body.get("checkpointUuids")
    if not uuids:
        raise InvalidArgument("checkpointUuids: required non-empty list of uuids")
    if len(uuids) > limits.LABELS * 10:
        raise InvalidArgument(f"checkpointUuids: at most {limits.LABELS * 10} per request")
    with db() as conn:
        for uid in uuids:
            if _access.checkpoint(conn, uid, for_write=True) is None:
                raise NotFound(f"checkpoint {uid} not found")
        checkpoint_gc.delete(conn, state(), list(dict.fromkeys(uuids)))
    return {}


@bp.post("/api/v1/checkpoints/rm")
@contract("CheckpointsRemoveFiles")
def remove_files(body: d.v1CheckpointsRemoveFilesRequest) -> Empty:
    """``det checkpoint rm``: the experiment's checkpoint-GC task removes the files the globs
    name (none: reads the files again) and reports what is left of each checkpoint."""
    uuids = body.get("checkpointUuids")
    if not uuids:
        raise InvalidArgument("checkpointUuids: required non-empty list of uuids")
    if len(uuids) > limits.LABELS * 10:
        raise InvalidArgument(f"checkpointUuids: at most {limits.LABELS * 10} per request")
    patterns = body.get("checkpointGlobs") or []
    if len(patterns) > det_globs.MAX_GLOBS:
        raise InvalidArgument(f"checkpointGlobs: at most {det_globs.MAX_GLOBS} globs")
    for i, g in enumerate(patterns):
        try:
            det_globs.validate(g)
        except ValueError as e:
            raise InvalidArgument(f"checkpointGlobs[{i}]: {e}") from None
    with db() as conn:
        for uid in uuids:
            if _access.checkpoint(conn, uid, for_write=True) is None:
                raise NotFound(f"checkpoint {uid} not found")
        checkpoint_gc.delete(conn, state(), list(dict.fromkeys(uuids)), globs=list(patterns))
    return {}


@bp.get("/checkpoints/<uid>")
@contract()
def download(uid: str) -> ResponseReturnValue:
    """Determined's download through the master (``det checkpoint download --mode master``,
    ``Checkpoint.download(mode=MASTER)``): the checkpoint's files as a gzip tar, read from its
    experiment's storage (shared_fs, S3, GCS) by the master."""
    with db() as conn:
        if _access.checkpoint(conn, uid, for_write=False) is None:
            raise NotFound(f"checkpoint {uid} not found")
        cluster_storage = state().config.checkpoint_storage
        storage = ckpt_svc.storage_config(conn, uid) or cluster_storage
        policy = ckpt_svc.download_policy(conn, uid, state().config.egress)
    release_connection()  # no pooled connection held while reading storage
    archive = ckpt_svc.archive(storage, uid, policy, cluster_storage)
    return send_file(archive, mimetype="application/gzip", download_name=f"{uid}.tar.gz")
