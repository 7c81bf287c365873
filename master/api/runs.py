"""``/api/v1/runs/{id}/metadata``: Determined's run metadata (a run is a trial)."""

from __future__ import annotations

from flask import Blueprint

from det.master.api import _access
from det.master.api._common import TASK, USER, allow, check_task_scope, db
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.services import run_metadata as svc

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
