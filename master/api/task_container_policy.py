"""The cluster's task container policy at run time (issue 41): every signed-in user reads it;
admins change it (stored in the database, audited, applied to the next container spec) and read
its history. det.master.services.task_container_policy holds the rules."""

from __future__ import annotations

from flask import Blueprint

from det.master.api._common import current_user, db, reads, require_admin, state
from det.master.api._contract import contract
from det.master.schemas import task_container_policy as schema
from det.master.services import task_container_policy as svc

bp = Blueprint("task_container_policy", __name__)

PATH = "/api/v1/master/task-container-policy"


@bp.get(PATH)
@contract(response=schema.TaskContainerPolicy)
def get() -> schema.TaskContainerPolicy:
    with reads() as conn:
        return schema.current(svc.current(conn, state().config.task_container_policy))


@bp.put(PATH)
@contract(body=schema.PutTaskContainerPolicy, response=schema.TaskContainerPolicy)
def put(body: schema.PutTaskContainerPolicy) -> schema.TaskContainerPolicy:
    """Admins: the new policy (a bad one is refused by the contract, naming the key, before
    anything is stored)."""
    require_admin()
    user = current_user()
    with db() as conn:
        stored = svc.put(
            conn, body["policy"], user.id, user.username, state().config.task_container_policy
        )
    svc.forget(state())  # this process at once; the others within svc.CACHE_SECONDS
    return schema.current(stored)


@bp.get(PATH + "/history")
@contract(response=list[schema.TaskContainerPolicyChange])
def history() -> list[schema.TaskContainerPolicyChange]:
    require_admin()
    with reads() as conn:
        return [schema.change(c) for c in svc.history(conn)]
