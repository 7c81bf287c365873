"""Task log retention: ``det e|trial set log-retention`` (PutExperimentRetainLogs,
PutTrialRetainLogs: the experiment's or trial's owner and admins), ``det task cleanup-logs``
(CleanupLogs: admins; deletes every expired task's logs now, in batches) and the days a trial's
logs have left (GetTrialRemainingLogRetentionDays, the WebUI's trial page: anyone who may read
the trial)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from flask import Blueprint

from det.master.api import _access
from det.master.api._common import (
    TASK,
    USER,
    Conn,
    allow,
    check_task_scope,
    db,
    reads,
    release_connection,
    require_admin,
    state,
)
from det.master.api._contract import contract
from det.master.errors import InvalidArgument
from det.master.schemas import d
from det.master.services import log_retention as svc
from det.master.wire import Empty

bp = Blueprint("log_retention", __name__)


def _retain(
    field: str,
    given: object,
    num_days: object,
    path_id: int,
    check: Callable[[Conn, int], None],
    set_days: Callable[[Conn, int, int], None],
) -> None:
    """``num_days`` for what the path names: ``given`` (the body's ``field``), if given, must
    name it too; ``check`` is the caller's access to it."""
    if given not in (None, 0, path_id, str(path_id)):
        raise InvalidArgument(f"{field}: {given} differs from the path's {path_id}")
    days = svc.check_days(num_days)
    with db() as conn:
        check(conn, path_id)
        set_days(conn, path_id, days)


@bp.put("/api/v1/experiments/<int:experiment_id>/retain_logs")
@contract("PutExperimentRetainLogs")
def experiment(experiment_id: int, body: d.v1PutExperimentRetainLogsRequest) -> Empty:
    _retain(
        "experimentId",
        body.get("experimentId"),
        body.get("numDays"),
        experiment_id,
        _access.experiment,
        svc.set_for_experiment,
    )
    return {}


@bp.put("/api/v1/trials/<int:trial_id>/retain_logs")
@contract("PutTrialRetainLogs")
def trial(trial_id: int, body: d.v1PutTrialRetainLogsRequest) -> Empty:
    _retain(
        "trialId",
        body.get("trialId"),
        body.get("numDays"),
        trial_id,
        _access.trial,
        svc.set_for_trial,
    )
    return {}


@bp.get("/api/v1/trials/<int:trial_id>/remaining_log_retention_days")
@allow(USER, TASK)
@contract("GetTrialRemainingLogRetentionDays")
def remaining_days(trial_id: int) -> d.v1GetTrialRemainingLogRetentionDaysResponse:
    check_task_scope(trial_id=trial_id)
    with reads() as conn:
        days = svc.remaining_for_trial(
            conn,
            trial_id,
            state().config.retention_policy.log_retention_days,
            dt.datetime.now(dt.UTC),
        )
    # Determined leaves the field out while the trial's logs have no end yet (it has not ended).
    return {} if days is None else {"remainingDays": days}


@bp.post("/api/v1/cleanup_logs")
@contract("CleanupLogs")
def cleanup() -> d.v1CleanupLogsResponse:
    require_admin()
    release_connection()  # the cleanup takes a connection per batch
    return {"removedCount": str(svc.cleanup(state()))}
