"""``/api/v1/experiments``: create, read, and the user actions."""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

from flask import Blueprint, Response

from det.master import authz, limits, listcache
from det.master.api import _access
from det.master.api._answers import answer, conditional, render
from det.master.api._common import (
    TASK,
    USER,
    allow,
    check_task_scope,
    current_user,
    db,
    pagination,
    reads,
    state,
)
from det.master.api._contract import contract
from det.master.api.checkpoints import listing
from det.master.errors import InvalidArgument, NotFound
from det.master.expconf import redact, stored
from det.master.listcache import Page
from det.master.rows.users import User
from det.master.schemas import d
from det.master.schemas import experiments as wire
from det.master.schemas import trials as trial_wire
from det.master.services import checkpoint_gc
from det.master.services import checkpoints as ckpt_svc
from det.master.services import experiments as svc
from det.master.services import trials as trial_svc
from det.master.services import unmanaged as unmanaged_svc
from det.master.wire import Empty, Paging

bp = Blueprint("experiments", __name__)


# What Determined answers to ``validateOnly``: an experiment message with every field at its zero
# value (its bindings require the object; the official `det e create --test` parses it).
_NOTHING_CREATED: d.v1Experiment = {
    "archived": False,
    "config": {},
    "id": 0,
    "jobId": "",
    "name": "",
    "numTrials": 0,
    "originalConfig": "",
    "projectId": 0,
    "projectOwnerId": 0,
    "searcherType": "",
    "startTime": "1970-01-01T00:00:00Z",
    "state": "STATE_UNSPECIFIED",
    "username": "",
}


@bp.post("/api/v1/experiments")
@contract("CreateExperiment")
def create(body: d.v1CreateExperimentRequest) -> d.v1CreateExperimentResponse:
    config_text = body.get("config")
    if not config_text or not config_text.strip():
        raise InvalidArgument("config: required (the experiment config as YAML text)")
    unmanaged = bool(body.get("unmanaged"))
    if unmanaged and body.get("parentId"):
        raise InvalidArgument("parentId: an unmanaged experiment cannot be a fork")
    files = svc.parse_files(body.get("modelDefinition"))
    validate_only = bool(body.get("validateOnly"))
    project_id = body.get("projectId")
    template = body.get("template")
    parent_id = body.get("parentId") or None
    with db() as conn:
        if parent_id is not None:
            try:  # anyone who may read the parent may fork it (its code goes to the fork)
                svc.get(conn, parent_id)
            except NotFound:
                raise InvalidArgument(f"parentId: no experiment {parent_id}") from None
            _access.read_experiment(conn, parent_id)
        row = svc.create(
            conn,
            state(),
            owner_id=current_user().id,
            config_text=config_text,
            files=files,
            activate=bool(body.get("activate")),
            validate_only=validate_only,
            project_id=project_id or None,
            template=template or None,
            parent_id=parent_id,
            admin=current_user().admin,
            unmanaged=unmanaged,
        )
    if row is None:  # validateOnly: the config is valid and nothing was created
        return {"experiment": _NOTHING_CREATED, "config": {}, "warnings": []}
    out: d.v1CreateExperimentResponse = {
        "experiment": wire.experiment(row),
        "config": redact(row["config"]),
        "warnings": [],
    }
    return out


@bp.put("/api/v1/experiments/by-external-id/<path:external_id>")
@contract("PutExperiment")
def put(external_id: str, body: d.v1CreateExperimentRequest) -> d.v1PutExperimentResponse:
    """Determined's PutExperiment (core_v2's rerun): the caller's unmanaged experiment of that
    external id, created or given the new config."""
    config_text = body.get("config")
    if not config_text or not config_text.strip():
        raise InvalidArgument("config: required (the experiment config as YAML text)")
    if not body.get("unmanaged"):
        raise InvalidArgument("unmanaged: must be true (only unmanaged experiments are put)")
    if body.get("parentId"):
        raise InvalidArgument("parentId: an unmanaged experiment cannot be a fork")
    with db() as conn:
        row = unmanaged_svc.put_experiment(
            conn,
            state(),
            owner_id=current_user().id,
            admin=current_user().admin,
            config_text=config_text,
            external_id=external_id,
        )
    return {"experiment": wire.experiment(row), "config": redact(row["config"])}


# Sort keys whose order follows rows the list's version does not track (the ingest writes them).
_UNCACHED_SORTS = frozenset(
    {"SORT_BY_SEARCHER_METRIC_VAL", "SORT_BY_CHECKPOINT_SIZE", "SORT_BY_CHECKPOINT_COUNT"}
)


@bp.get("/api/v1/experiments")
@contract("GetExperiments")
def list_(params: d.GetExperimentsParams) -> Response:
    """A page of experiments (conditional: see :func:`det.master.api._answers.answer`). A page
    already rendered by this process is answered again while the list's version is unchanged
    (:mod:`det.master.listcache`): one short statement, no rows, no encoding."""
    user = current_user()
    with reads() as conn:
        page = list_page(conn, user, params)
    return conditional(page)


def list_page(conn: Any, user: User, params: d.GetExperimentsParams) -> Page:
    """The page of the list ``user`` reads for ``params``: the one kept while the list's
    version is unchanged (:func:`kept_page`), else rendered now and kept. The view's whole work
    but the answer's head, shared by :func:`list_` and the pre-dispatch layer
    (:mod:`det.master.api._predispatch`), which answers without Flask."""
    kept = kept_page(conn, user, params)
    if kept.page is not None:
        return kept.page
    page = _list_page(conn, params, kept.scope)
    if kept.key is not None:
        listcache.EXPERIMENTS.put(kept.key, kept.version, page)
    return page


class Kept(NamedTuple):
    """What :func:`kept_page` found."""

    #: (the user, the workspaces they may read); None: they read every workspace
    scope: tuple[int, list[int]] | None
    #: the page's key in the cache (None: this query's pages are not kept)
    key: Any
    #: the list's version, read now ("" when not kept)
    version: str
    #: the page kept under both (None: none)
    page: Page | None


def kept_page(conn: Any, user: User, params: d.GetExperimentsParams) -> Kept:
    """Who may read what, the list's cache key and version for ``user`` and ``params``, and
    the page kept under both."""
    # Private workspaces (det.master.authz): the caller's own and readable ones only, and a
    # cached page is keyed by who may read what.
    if params.get("sortBy") in _UNCACHED_SORTS:
        readable = authz.readable_workspaces(conn, user.id, user.admin)
        return Kept(None if readable is None else (user.id, readable), None, "", None)
    # The version (or, on a master alone on its database, its list epoch), read before the
    # page's rows are, and whether any workspace is private: one round trip at the most.
    now = listcache.validity(conn, "experiments")
    readable = authz.readable_workspaces(conn, user.id, user.admin, private=now.private)
    scope = None if readable is None else (user.id, readable)
    key: Any = listcache.key_of(params)
    if scope is not None:
        key = (key, scope[0], tuple(scope[1]))
    held = now.version or ""
    return Kept(scope, key, held, listcache.EXPERIMENTS.get(key, held))


def _list_page(
    conn: Any, params: d.GetExperimentsParams, readable: tuple[int, list[int]] | None = None
) -> Page:
    st_filter = [s.removeprefix("STATE_") for s in params.get("states") or []]
    offset, limit = Paging.of(params)
    rows, total = svc.list_(
        conn,
        archived=params.get("archived"),
        states_in=st_filter or None,
        users_in=params.get("users") or None,
        name=params.get("name"),
        order_desc=params.get("orderBy") == "ORDER_BY_DESC",
        offset=offset,
        limit=limit,
        project_id=params.get("projectId"),
        sort_by=params.get("sortBy") or "SORT_BY_ID",
        description=params.get("description"),
        labels=params.get("labels") or None,
        user_ids=params.get("userIds") or None,
        ids=svc.IdFilter(
            gt=params.get("experimentIdFilter.gt"),
            gte=params.get("experimentIdFilter.gte"),
            lt=params.get("experimentIdFilter.lt"),
            lte=params.get("experimentIdFilter.lte"),
            incl=params.get("experimentIdFilter.incl"),
            not_in=params.get("experimentIdFilter.notIn"),
        ),
        readable=readable,
    )
    out: d.v1GetExperimentsResponse = {
        "experiments": [wire.listed(r) for r in rows],
        "pagination": pagination(offset, limit, total),
    }
    return render(out)


@bp.get("/api/v1/experiments/<int:experiment_id>")
@allow(USER, TASK)
@contract("GetExperiment")
def get(experiment_id: int) -> Response:
    """One experiment (conditional: see :func:`det.master.api._answers.answer`)."""
    check_task_scope(experiment_id=experiment_id)
    with reads() as conn:
        row = svc.get_for_wire(conn, experiment_id)
        _access.read_experiment(conn, experiment_id)
        best = trial_svc.best_trial_of(conn, experiment_id)
        summary = trial_svc.job_summary(conn, state(), row["job_id"])
    config = wire.wire_config(row)
    out: d.v1GetExperimentResponse = {
        "experiment": wire.got(row, best, config),
        "config": config,
        "jobSummary": summary,
    }
    return answer(out, etag=True)


def _owner_or_admin(conn: Any, experiment_id: int, permission: str = "experiment.update") -> None:
    """Its owner, or a role allowing ``permission`` in its workspace (det.master.authz)."""
    svc.get(conn, experiment_id)  # 404 for a missing or deleted experiment
    _access.experiment(conn, experiment_id, permission)


def _action(
    experiment_id: int, fn: Any, *args: Any, permission: str = "experiment.update"
) -> Empty:
    with db() as conn:
        _owner_or_admin(conn, experiment_id, permission)
        fn(conn, experiment_id, *args)
    return {}


@bp.post("/api/v1/experiments/<int:experiment_id>/activate")
@contract("ActivateExperiment")
def activate(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.activate)


@bp.post("/api/v1/experiments/<int:experiment_id>/pause")
@contract("PauseExperiment")
def pause(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.pause)


@bp.post("/api/v1/experiments/<int:experiment_id>/cancel")
@contract("CancelExperiment")
def cancel(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.cancel)


@bp.post("/api/v1/experiments/<int:experiment_id>/kill")
@contract("KillExperiment")
def kill(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.kill)


@bp.post("/api/v1/experiments/<int:experiment_id>/archive")
@contract("ArchiveExperiment")
def archive(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.set_archived, True)


@bp.post("/api/v1/experiments/<int:experiment_id>/unarchive")
@contract("UnarchiveExperiment")
def unarchive(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.set_archived, False)


@bp.delete("/api/v1/experiments/<int:experiment_id>")
@contract("DeleteExperiment")
def delete(experiment_id: int) -> Empty:
    return _action(experiment_id, svc.delete, permission="experiment.delete")


@bp.delete("/api/v1/experiments/<int:experiment_id>/tensorboard-files")
@contract("DeleteTensorboardFiles")
def delete_tensorboard_files(experiment_id: int) -> Empty:
    with db() as conn:
        _owner_or_admin(conn, experiment_id, "experiment.delete")
        checkpoint_gc.delete_tensorboards(conn, state(), experiment_id)
    return {}


@bp.patch("/api/v1/experiments/<int:experiment_id>")
@contract("PatchExperiment")
def patch(experiment_id: int, body: d.v1PatchExperiment) -> d.v1PatchExperimentResponse:
    eid = body.get("id")
    if eid and eid != experiment_id:
        raise InvalidArgument(f"id: {eid} differs from the path's {experiment_id}")
    with db() as conn:
        _owner_or_admin(conn, experiment_id)
        storage = body.get("checkpointStorage")
        if storage is not None:
            checkpoint_gc.set_policy(conn, experiment_id, dict(storage))
        svc.patch(conn, experiment_id, body)
        row = svc.get(conn, experiment_id)
    return {"experiment": wire.experiment(row)}


def _context(experiment_id: int) -> bytes:
    with db() as conn:
        svc.get(conn, experiment_id)  # 404 for a missing or deleted experiment
        _access.read_experiment(conn, experiment_id)
        return svc.context(conn, experiment_id)


@bp.get("/api/v1/experiments/<int:experiment_id>/model_def")
@contract("GetModelDef")
def model_def(experiment_id: int) -> d.v1GetModelDefResponse:
    return {"b64Tgz": base64.b64encode(_context(experiment_id)).decode()}


@bp.get("/api/v1/experiments/<int:experiment_id>/file_tree")
@contract("GetModelDefTree")
def file_tree(experiment_id: int) -> d.v1GetModelDefTreeResponse:
    return {"files": wire.file_tree(_context(experiment_id))}


@bp.post("/api/v1/experiments/<int:experiment_id>/file")
@contract("GetModelDefFile")
def model_def_file(
    experiment_id: int, body: d.v1GetModelDefFileRequest
) -> d.v1GetModelDefFileResponse:
    path = body.get("path")
    if not path:
        raise InvalidArgument("path: required (a file of the experiment's context)")
    content = wire.context_file(_context(experiment_id), path)
    if content is None:
        raise NotFound(f"experiment {experiment_id} has no file {path!r} in its context")
    return {"file": base64.b64encode(content).decode()}


@bp.get("/api/v1/experiments/<int:experiment_id>/searcher/best_searcher_validation_metric")
@allow(USER, TASK)
@contract("GetBestSearcherValidationMetric")
def best_searcher_validation_metric(
    experiment_id: int,
) -> d.v1GetBestSearcherValidationMetricResponse:
    check_task_scope(experiment_id=experiment_id)
    with db() as conn:
        row = svc.get(conn, experiment_id)
        _access.read_experiment(conn, experiment_id)
        best = trial_svc.best_trial(conn, experiment_id, row["config"])
    if best is None:
        # Determined answers 404 here, and its client reads that as "no validations yet".
        raise NotFound(f"experiment {experiment_id} has no validation of its searcher metric yet")
    return {"metric": best["searcher_metric"]}


@bp.get("/api/v1/experiments/<int:experiment_id>/trials")
@allow(USER, TASK)
@contract("GetExperimentTrials")
def trials(experiment_id: int, params: d.GetExperimentTrialsParams) -> Response:
    """The experiment's trials (conditional: see :func:`det.master.api._answers.answer`)."""
    check_task_scope(experiment_id=experiment_id)
    offset, limit = Paging.of(params)
    with reads() as conn:
        rows = trial_svc.list_for_experiment(conn, experiment_id)
        if not rows:
            svc.searcher_config(conn, experiment_id)  # NotFound for no such experiment
        _access.read_experiment(conn, experiment_id)
    items = [trial_wire.trial(r) for r in rows]
    wanted = params.get("states")
    if wanted:
        items = [t for t in items if t["state"] in wanted]
    values = {r.id: (r.best_value, r.latest_value) for r in rows}
    items = trial_svc.sort_trials(items, values, params.get("sortBy"), params.get("orderBy"))
    total = len(items)
    if offset < 0:
        offset = max(0, total + offset)
    page: list[d.trialv1Trial] = list(items[offset : (offset + limit) if limit > 0 else None])
    out: d.v1GetExperimentTrialsResponse = {
        "trials": page,
        "pagination": pagination(offset, limit, total),
    }
    return answer(out, etag=True)


@bp.get("/api/v1/experiments/<int:experiment_id>/checkpoints")
@contract("GetExperimentCheckpoints")
def checkpoints(
    experiment_id: int, params: d.GetExperimentCheckpointsParams
) -> d.v1GetExperimentCheckpointsResponse:
    with db() as conn:
        exp = svc.get(conn, experiment_id)
        _access.read_experiment(conn, experiment_id)
        rows = ckpt_svc.list_for(conn, experiment_id=experiment_id)
    cfg = stored.experiment_config(exp["id"], exp["config"])
    return listing(rows, cfg.searcher.smaller_is_better, params)


@bp.post("/api/v1/experiments/<int:experiment_id>/move")
@contract("MoveExperiment")
def move(experiment_id: int, body: d.v1MoveExperimentRequest) -> Empty:
    dest = body.get("destinationProjectId")
    if dest is None:
        raise InvalidArgument("destinationProjectId: required")
    eid = body.get("experimentId")
    if eid and eid != experiment_id:
        raise InvalidArgument(f"experimentId: {eid} differs from the path's {experiment_id}")
    with db() as conn:
        _access.experiment(conn, experiment_id, "experiment.update")
        dest_ws = authz.workspace_of(conn, "project", dest)
        if dest_ws is not None:
            _access.in_workspace(conn, "experiment.create", dest_ws, f"project {dest}")
        svc.move(conn, state(), experiment_id, dest)
    return {}


def _label(experiment_id: int, label: str, present: bool) -> list[str]:
    limits.text("label", label, limits.LABEL, required=True)
    with db() as conn:
        _access.experiment(conn, experiment_id, "experiment.update")
        return svc.set_label(conn, experiment_id, label, present)


@bp.put("/api/v1/experiments/<int:experiment_id>/labels/<path:label>")
@contract("PutExperimentLabel")
def put_label(experiment_id: int, label: str) -> d.v1PutExperimentLabelResponse:
    return {"labels": _label(experiment_id, label, True)}


@bp.delete("/api/v1/experiments/<int:experiment_id>/labels/<path:label>")
@contract("DeleteExperimentLabel")
def delete_label(experiment_id: int, label: str) -> d.v1DeleteExperimentLabelResponse:
    return {"labels": _label(experiment_id, label, False)}


@bp.post("/api/v1/experiments/continue")
@contract("ContinueExperiment")
def continue_(body: d.v1ContinueExperimentRequest) -> d.v1ContinueExperimentResponse:
    """Determined 0.38's ContinueExperiment, for single-trial experiments that ended: the same
    experiment and trial train on from the trial's latest checkpoint, under the config with
    ``overrideConfig`` merged in (see ``services.experiments.continue_``)."""
    experiment_id = body.get("id")
    if experiment_id is None:
        raise InvalidArgument("id: required (the experiment to continue)")
    with db() as conn:
        _owner_or_admin(conn, experiment_id)
        svc.continue_(
            conn, state(), experiment_id, body.get("overrideConfig"), admin=current_user().admin
        )
        row = svc.get(conn, experiment_id)
    return {"experiment": wire.experiment(row), "warnings": []}
