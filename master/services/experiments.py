"""Experiments: creation (config + context), reads, and the user actions on them.

User actions only change intent (state, ``stop_reason``, ``preempt_requested``); the control
loop carries them out. Every action is one short transaction.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import tarfile
import uuid
from dataclasses import dataclass
from typing import Any

import yaml
from psycopg.rows import class_row

from det.common.jsontypes import JSONObject, JSONValue
from det.master import authz, db, expconf, limits, searcher, states
from det.master.db import Conn
from det.master.errors import Conflict, InvalidArgument, NotFound, PayloadTooLarge
from det.master.expconf import stored
from det.master.expconf.stored import SMALLER_IS_BETTER_SQL
from det.master.handles import MasterState
from det.master.rows.experiments import Experiment, GotExperiment, WireExperiment
from det.master.services import (
    checkpoints,
    containers,
    jobs,
    listing,
    pool_bindings,
    projects,
    scheduling,
    templates,
)

logger = logging.getLogger(__name__)

MAX_CONTEXT_BYTES = 95 * 1024 * 1024


@dataclass(frozen=True)
class ContextFile:
    path: str
    content: bytes
    mode: int = 0o644
    is_dir: bool = False


def parse_files(model_definition: Any) -> list[ContextFile]:
    """Determined's ``modelDefinition``: ``[{path, type, content (base64), mode, mtime…}]``."""
    if model_definition is None:
        return []
    if not isinstance(model_definition, list):
        raise InvalidArgument("modelDefinition: must be a list of files")
    files = []
    total = 0
    for i, f in enumerate(model_definition):
        if not isinstance(f, dict) or not isinstance(f.get("path"), str):
            raise InvalidArgument(f"modelDefinition[{i}].path: required string")
        path = f["path"]
        if path.startswith("/") or ".." in path.split("/"):
            raise InvalidArgument(
                f"modelDefinition[{i}].path: must be relative inside the context: {path!r}"
            )
        try:
            content = base64.b64decode(f.get("content") or "", validate=True)
        except ValueError:
            raise InvalidArgument(f"modelDefinition[{i}].content: not valid base64") from None
        total += len(content)
        # tar's type flag: "5" is a directory, as the official client sends it.
        is_dir = f.get("type") in (53, "5", 5)
        files.append(
            ContextFile(path, content, int(f.get("mode") or (0o755 if is_dir else 0o644)), is_dir)
        )
    if total > MAX_CONTEXT_BYTES:
        biggest = sorted(files, key=lambda c: -len(c.content))[:3]
        names = ", ".join(f"{c.path} ({len(c.content) / 1e6:.1f} MB)" for c in biggest)
        raise PayloadTooLarge(
            f"context is {total / 1e6:.1f} MB, over the 95 MB limit; largest files: {names}"
            " (leave files out with .detignore)"
        )
    return files


def pack_context(files: list[ContextFile]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in files:
            info = tarfile.TarInfo(f.path)
            info.mode = f.mode & 0o7777
            if f.is_dir:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(f.content)
                tar.addfile(info, io.BytesIO(f.content))
    return buf.getvalue()


def parse_config(
    st: MasterState,
    config_text: str,
    template: JSONObject | None = None,
    *,
    unmanaged: bool = False,
    default_pool: str | None = None,
) -> expconf.ExperimentConfig:
    """The resolved experiment config (a configuration template, then the cluster defaults,
    merged under it, and the pool named), typed, or InvalidArgument; ``.to_dict()`` is what is
    stored. ``default_pool``: where it goes when it names no pool (its workspace's default
    compute pool), else the cluster's default compute pool."""
    default_pool = default_pool or st.config.resource_manager.default_compute_resource_pool
    try:
        raw = expconf.load_yaml(config_text)
        raw.pop("template", None)  # the template's name: applied by the caller
        if template is not None:
            raw = expconf.merge_template(raw, template)
        res = raw.get("resources")
        named = res.get("resource_pool") if isinstance(res, dict) else None
        pool_name = named if isinstance(named, str) and named else default_pool
        cfg = expconf.parse_experiment_config(
            raw,
            cluster_defaults={
                "task_container_defaults": st.config.task_container_defaults_for(pool_name),
                "checkpoint_storage": st.config.checkpoint_storage,
            },
            unmanaged=unmanaged,
        )
    except expconf.ConfigError as e:
        raise InvalidArgument(f"invalid experiment config: {e}") from None
    resolved = cfg.to_dict()

    try:
        # The searcher pass builds the same searcher later; refuse here what it would refuse.
        searcher.new_searcher(resolved["searcher"], resolved.get("hyperparameters") or {}, 0)
    except ValueError as e:
        raise InvalidArgument(f"invalid experiment config: {e}") from None
    pool = cfg.resources.resource_pool or default_pool
    pool_cfg = st.config.pool(pool)
    if pool_cfg is None:
        names = ", ".join(p.pool_name for p in st.config.resource_pools)
        raise InvalidArgument(f"resources.resource_pool: no pool named '{pool}' (pools: {names})")
    cfg.resources.resource_pool = pool
    return cfg


def create(
    conn: Conn,
    st: MasterState,
    *,
    owner_id: int,
    config_text: str,
    files: list[ContextFile],
    activate: bool,
    validate_only: bool,
    project_id: int | None = None,
    template: str | None = None,
    parent_id: int | None = None,
    admin: bool = False,
    unmanaged: bool = False,
    external_id: str | None = None,
) -> Experiment | None:
    """A new experiment (None for ``validate_only``); a non-admin's config is held to the
    pool's task container policy (``containers.check_policy``). An ``unmanaged`` one (a core_v2
    script run outside the cluster) is created PAUSED and is never searched nor scheduled: its job row exists for the joins that read one
    but is never queued (no allocation is ever made for it); ``external_id`` names it for
    PutExperiment."""
    template_name = template or _template_named_in(config_text)
    template_config = None
    if template_name:
        template_config = templates.check_apply(conn, template_name, owner_id, admin, "template")[
            "config"
        ]
    cfg = parse_config(st, config_text, template_config, unmanaged=unmanaged)
    config = cfg.to_dict()
    project = projects.usable(conn, _project_for(conn, cfg, project_id))
    workspace_id = int(project["workspace_id"])
    # Creating work needs Editor there: the workspace's pool bindings follow from this.
    authz.require(
        conn, owner_id, admin, "experiment.create", workspace_id,
        what=f"project '{project['name']}'",
    )  # fmt: skip
    ws_pool = pool_bindings.default_pool(conn, workspace_id, aux=False)
    if ws_pool and not _names_pool(config_text, template_config):
        cfg = parse_config(
            st, config_text, template_config, unmanaged=unmanaged, default_pool=ws_pool
        )
        config = cfg.to_dict()
    if not unmanaged:
        pool_bindings.check(
            conn, st, cfg.resources.resource_pool, workspace_id, "resources.resource_pool"
        )
    # Unmanaged too: deleting one runs a GC task with its checkpoint storage mounted.
    containers.check_policy(st, config, admin=admin)
    checkpoints.check_storage_endpoint(st.config, config, admin=admin)

    limits.text("name", config.get("name"), limits.NAME)
    limits.text("description", config.get("description"), limits.DESCRIPTION)
    limits.labels("labels", config.get("labels"))
    limits.hyperparameters(config.get("hyperparameters"))
    res = cfg.resources
    if not unmanaged:
        scheduling.refuse_if_never_fits(conn, st, res.resource_pool, res.slots_per_trial)
    if validate_only:
        return None
    priority = res.priority or st.config.resource_manager.scheduler.default_priority
    context_blob = pack_context(files)
    if parent_id is not None and not files:
        # A fork from the WebUI sends a config alone: it trains the parent's code.
        context_blob = context(conn, parent_id)
    experiment_id = db.one_int(
        conn,
        "INSERT INTO experiments (name, description, labels, config, original_config, state,"
        " owner_id, context, project_id, parent_id, unmanaged, external_experiment_id)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
        (
            config.get("name") or "Experiment",
            config.get("description") or "",
            json.dumps(cfg.labels),
            json.dumps(config),
            expconf.redact_text(config_text),
            states.ACTIVE if activate and not unmanaged else states.PAUSED,
            owner_id,
            context_blob,
            project["id"],
            parent_id,
            unmanaged,
            external_id,
        ),
    )
    job_id = str(uuid.uuid4())
    # jobs.queue_key is a double precision: the next one after the largest.
    queue_key = db.scalar(conn, float, "SELECT coalesce(max(queue_key), 0) + 1 AS k FROM jobs")
    assert queue_key is not None
    conn.execute(
        "INSERT INTO jobs (id, experiment_id, owner_id, resource_pool, priority, weight, queue_key)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (
            job_id,
            experiment_id,
            owner_id,
            res.resource_pool,
            priority,
            res.weight or 1,  # a weight of 0 is queued as 1, as it always was
            queue_key,
        ),
    )
    states.record_event(
        conn,
        "experiment",
        experiment_id,
        "created",
        f"created ({'active' if activate else 'paused'})",
    )
    for note in expconf.docker_notes(config):
        states.record_event(conn, "experiment", experiment_id, "warning", note)
    wake(conn)
    logger.info("experiment %d created by user %d", experiment_id, owner_id)
    return get(conn, experiment_id)


def _template_named_in(config_text: str) -> str | None:
    """``template:`` in the config names a configuration template too."""
    try:
        raw = expconf.load_yaml(config_text)
    except expconf.ConfigError:
        return None  # parse_config reports it
    name = raw.get("template")
    if name is None:
        return None
    if not isinstance(name, str) or not name:
        raise InvalidArgument("invalid experiment config: template: must be a template's name")
    return name


def _names_pool(config_text: str, template: JSONObject | None) -> bool:
    """Whether the config (or its template) names a resource pool itself."""
    try:
        raw = expconf.load_yaml(config_text)
    except expconf.ConfigError:
        return False
    if template is not None:
        raw = expconf.merge_template(raw, template)
    res = raw.get("resources")
    return isinstance(res, dict) and bool(res.get("resource_pool"))


def _project_for(conn: Conn, cfg: expconf.ExperimentConfig, project_id: int | None) -> int:
    """Where a new experiment goes: the request's ``projectId``, else the config's
    ``workspace`` and ``project`` names, else the default project."""
    ws, proj = cfg.workspace, cfg.project
    if not ws and not proj:
        return project_id or projects.DEFAULT_ID
    if not ws or not proj:
        missing = "workspace" if not ws else "project"
        raise InvalidArgument(
            f"invalid experiment config: {missing}: required when"
            f" {'project' if missing == 'workspace' else 'workspace'} is set"
        )
    named = projects.by_names(conn, ws, proj)
    if project_id and project_id != named["id"]:
        raise InvalidArgument(
            f"projectId: {project_id} is not the config's project '{proj}' in workspace '{ws}'"
            f" (project {named['id']})"
        )
    return int(named["id"])


def move(conn: Conn, st: MasterState, experiment_id: int, project_id: int) -> None:
    _lock(conn, experiment_id)
    target = projects.usable(conn, project_id)
    pool = db.scalar(
        conn, str, "SELECT resource_pool FROM jobs WHERE experiment_id = %s", (experiment_id,)
    )
    if pool is not None:
        pool_bindings.check(conn, st, pool, int(target["workspace_id"]), "destinationProjectId")
    conn.execute(
        "UPDATE experiments SET project_id = %s WHERE id = %s", (project_id, experiment_id)
    )
    states.record_event(
        conn, "experiment", experiment_id, "moved", f"moved to project {project_id}"
    )


def set_label(conn: Conn, experiment_id: int, label: str, present: bool) -> list[str]:
    """Adds (or removes) one label; returns the experiment's labels after the change."""
    exp = _lock(conn, experiment_id)
    current = list(exp.labels or [])
    if present and label not in current:
        current.append(label)
    elif not present:
        current = [x for x in current if x != label]
    labels = limits.labels("labels", current)
    conn.execute(
        "UPDATE experiments SET labels = %s WHERE id = %s", (json.dumps(labels), experiment_id)
    )
    return labels


def wake(conn: Conn) -> None:
    """Asks the control loop (in whichever process leads) for a pass now, at commit."""
    conn.execute("NOTIFY det_wakeup")


# Every column but the context archive (up to 95 MB) and the searcher's snapshot: lists and
# gets never need them, and reading them made every list as slow as the largest context.
_COLUMNS = (
    "e.id, e.name, e.description, e.labels, e.notes, e.config, e.original_config, e.state,"
    " e.archived, e.owner_id, e.project_id, e.progress, e.created_at, e.ended_at, e.deleted,"
    " e.checkpoint_gc_at, e.delete_gc_at, e.parent_id, e.unmanaged, e.external_experiment_id"
)
_JOINS = (
    ", j.id AS job_id, j.resource_pool, j.priority, j.weight, u.username,"
    " (SELECT count(*) FROM trials t WHERE t.experiment_id = e.id) AS num_trials,"
    " p.name AS project_name, coalesce(p.owner_id, 1) AS project_owner_id,"
    " p.workspace_id, w.name AS workspace_name,"
    " coalesce(p.archived OR w.archived, false) AS parent_archived"
    " FROM experiments e JOIN jobs j ON j.experiment_id = e.id JOIN users u ON u.id = e.owner_id"
    " LEFT JOIN projects p ON p.id = e.project_id LEFT JOIN workspaces w ON w.id = p.workspace_id"
)
_SELECT = "SELECT " + _COLUMNS + _JOINS


class ListedExperiment(WireExperiment):
    """A row of :func:`list_`: with the count of every experiment that matched."""

    total: int


@dataclass(frozen=True, slots=True)
class _Locked:
    """An experiment locked for a change (:func:`_lock`): what the changes read."""

    id: int
    state: str
    archived: bool
    unmanaged: bool
    labels: list[str]
    config: JSONObject


# What the wire needs of an experiment, for the reads that send it (GetExperiments,
# GetExperiment): the JSON columns as text, passed to the client as they are (neither decoded
# nor encoded in Python; see det.master.api._answers), what the answer reads inside the config,
# and whether the config holds a secret to redact (then it is decoded). The config's text, the
# secret flag and the searcher's fields are generated columns (migration 0011), computed when
# the config is written: a read converts no config from jsonb.
_WIRE_COLUMNS = (
    "e.id, e.name, e.description, e.labels::text AS labels_json, e.notes, e.config_json,"
    " e.config_secret, e.searcher_name, e.searcher_metric_name,"
    " e.state, e.archived, e.owner_id, e.project_id, e.progress, e.created_at, e.ended_at,"
    " e.parent_id, e.unmanaged, e.external_experiment_id"
)
_WIRE = _WIRE_COLUMNS + _JOINS


def get(conn: Conn, experiment_id: int) -> Experiment:
    cur = conn.cursor(row_factory=class_row(Experiment))
    row = cur.execute(_SELECT + " WHERE e.id = %s AND NOT e.deleted", (experiment_id,)).fetchone()
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return row


def context(conn: Conn, experiment_id: int) -> bytes:
    """The experiment's model definition: its context directory as a gzip tar."""
    blob = db.scalar(conn, bytes, "SELECT context FROM experiments WHERE id = %s", (experiment_id,))
    return blob or b""


@dataclass(frozen=True, slots=True)
class _Searcher:
    searcher: JSONObject


def searcher_config(conn: Conn, experiment_id: int) -> JSONObject:
    """The experiment's ``searcher`` section (NotFound as :func:`get`)."""
    row = db.fetch_row(
        conn,
        _Searcher,
        "SELECT coalesce(config->'searcher', '{}') AS searcher FROM experiments"
        " WHERE id = %s AND NOT deleted",
        (experiment_id,),
    )
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return dict(row.searcher)


def get_for_wire(conn: Conn, experiment_id: int) -> GotExperiment:
    """The experiment as GetExperiment sends it: the wire columns (see ``_WIRE_COLUMNS``), the
    original config, the hyperparameters and the ids of its trials (as JSON text)."""
    row = (
        conn.cursor(row_factory=class_row(GotExperiment))
        .execute(
            "SELECT e.original_config, (e.config->'hyperparameters')::text AS hyperparameters_json,"
            " (SELECT coalesce(json_agg(t.id ORDER BY t.id), '[]')::text FROM trials t"
            " WHERE t.experiment_id = e.id) AS trial_ids_json, "
            + _WIRE
            + " WHERE e.id = %s AND NOT e.deleted",
            (experiment_id,),
        )
        .fetchone()
    )
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return row


# GetExperiments' sortBy: the SQL of each key (ties broken by id, in the same direction).
_BEST_METRIC = (
    "(SELECT CASE WHEN coalesce((e.config->'searcher'->>'smaller_is_better')::boolean, "
    f"{SMALLER_IS_BETTER_SQL})"
    " THEN min(t.searcher_metric) ELSE max(t.searcher_metric) END"
    " FROM trials t WHERE t.experiment_id = e.id)"
)
_COMPLETED_CHECKPOINTS = (
    " FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
    " WHERE t.experiment_id = e.id AND c.state = 'COMPLETED')"
)
SORT_KEYS = {
    "SORT_BY_UNSPECIFIED": "e.id",
    "SORT_BY_ID": "e.id",
    "SORT_BY_DESCRIPTION": "e.description",
    "SORT_BY_START_TIME": "e.created_at",
    "SORT_BY_END_TIME": "e.ended_at",
    "SORT_BY_STATE": "e.state",
    "SORT_BY_NUM_TRIALS": "(SELECT count(*) FROM trials t WHERE t.experiment_id = e.id)",
    "SORT_BY_PROGRESS": "e.progress",
    "SORT_BY_USER": "u.username",
    "SORT_BY_NAME": "e.name",
    "SORT_BY_FORKED_FROM": "NULL::int",  # det does not fork experiments: all equal
    "SORT_BY_RESOURCE_POOL": "j.resource_pool",
    "SORT_BY_PROJECT_ID": "e.project_id",
    "SORT_BY_CHECKPOINT_SIZE": "(SELECT coalesce(sum(c.size), 0)" + _COMPLETED_CHECKPOINTS,
    "SORT_BY_CHECKPOINT_COUNT": "(SELECT count(*)" + _COMPLETED_CHECKPOINTS,
    "SORT_BY_SEARCHER_METRIC_VAL": _BEST_METRIC,
}


@dataclass(frozen=True)
class IdFilter:
    """Determined's experimentIdFilter: each bound that is set must hold."""

    gt: int | None = None
    gte: int | None = None
    lt: int | None = None
    lte: int | None = None
    incl: list[int] | None = None
    not_in: list[int] | None = None


def list_(
    conn: Conn,
    *,
    archived: bool | None,
    states_in: list[str] | None,
    users_in: list[str] | None,
    name: str | None,
    order_desc: bool,
    offset: int,
    limit: int,
    project_id: int | None = None,
    sort_by: str = "SORT_BY_ID",
    description: str | None = None,
    labels: list[str] | None = None,
    user_ids: list[int] | None = None,
    ids: IdFilter | None = None,
    readable: tuple[int, list[int]] | None = None,
) -> tuple[list[ListedExperiment], int]:
    """A page of experiments and how many match; every filter given must hold. The rows have
    the wire columns (see ``_WIRE_COLUMNS``). ``readable``: (a user, the workspaces they may
    read): only their own experiments and those of these workspaces (det.master.authz).

    One statement answers both: the count is an uncorrelated subquery PostgreSQL evaluates once
    beside the page. A page past the end has no row to carry it, and is counted apart."""
    where = ["NOT e.deleted"]
    params: list[Any] = []
    if readable is not None:
        where.append(
            "(e.owner_id = %s OR e.project_id IN"
            " (SELECT id FROM projects WHERE workspace_id = ANY(%s)))"
        )
        params += [readable[0], readable[1]]
    if project_id:
        where.append("e.project_id = %s")
        params.append(project_id)
    if archived is not None:
        where.append("e.archived = %s")
        params.append(archived)
    if states_in:
        where.append("e.state = ANY(%s)")
        params.append(states_in)
    if users_in:
        where.append("u.username = ANY(%s)")
        params.append(users_in)
    # Substring matches: the user's % and _ are literal characters, not wildcards.
    for column, text in (("e.name", name), ("e.description", description)):
        if text:
            sql, pattern = listing.contains(column, text)
            where.append(sql)
            params.append(pattern)
    if labels:  # every label given (Determined: the experiment's labels contain them all)
        where.append("e.labels @> %s::jsonb")
        params.append(json.dumps(labels))
    if user_ids:
        where.append("e.owner_id = ANY(%s)")
        params.append(user_ids)
    if ids is not None:
        for op, value in (("<", ids.lt), ("<=", ids.lte), (">", ids.gt), (">=", ids.gte)):
            if value is not None:
                where.append(f"e.id {op} %s")
                params.append(value)
        if ids.incl:
            where.append("e.id = ANY(%s)")
            params.append(ids.incl)
        if ids.not_in:
            where.append("NOT (e.id = ANY(%s))")
            params.append(ids.not_in)
    clause = " WHERE " + " AND ".join(where)
    # The owner's row only when a username filter needs it.
    count = (
        "SELECT count(*) FROM experiments e"
        + (" JOIN users u ON u.id = e.owner_id" if users_in else "")
        + clause
    )
    direction = "DESC" if order_desc else "ASC"
    key = SORT_KEYS.get(sort_by, "e.id")
    order = f" ORDER BY {key} {direction} NULLS LAST, e.id {direction}"
    # The page's bounds are written into the statement (integers): PostgreSQL then keeps the
    # plan of the prepared statement; given as parameters, it planned the statement again for
    # each request (half of the list's time in the server).
    page = f" OFFSET {int(offset)}" + (f" LIMIT {int(limit)}" if limit > 0 else "")
    rows = (
        conn.cursor(row_factory=class_row(ListedExperiment))
        .execute(f"SELECT ({count}) AS total, " + _WIRE + clause + order + page, params + params)
        .fetchall()
    )
    if rows:
        return rows, rows[0]["total"]
    total = db.scalar(conn, int, count.replace("count(*)", "count(*) AS n", 1), params)
    return rows, total or 0


def _lock(conn: Conn, experiment_id: int) -> _Locked:
    row = (
        conn.cursor(row_factory=class_row(_Locked))
        .execute(
            "SELECT id, state, archived, unmanaged, labels, config FROM experiments"
            " WHERE id = %s AND NOT deleted FOR NO KEY UPDATE",
            (experiment_id,),
        )
        .fetchone()
    )
    if row is None:
        raise NotFound(f"experiment {experiment_id} not found")
    return row


def _managed(exp: _Locked, verb: str) -> None:
    """Only the cluster's own experiments are paused, resumed, stopped or continued by it."""
    if exp.unmanaged:
        raise Conflict(
            f"experiment {exp.id} is unmanaged (run outside the cluster): its script decides"
            f" its state; det cannot {verb} it"
        )


def activate(conn: Conn, experiment_id: int) -> None:
    exp = _lock(conn, experiment_id)
    _managed(exp, "activate")
    if exp.state == states.ACTIVE:
        return
    states.transition(conn, "experiment", experiment_id, states.ACTIVE, "activated by user")
    states.experiment_trials(conn, experiment_id, states.PAUSED, states.ACTIVE)
    wake(conn)


def pause(conn: Conn, experiment_id: int) -> None:
    exp = _lock(conn, experiment_id)
    _managed(exp, "pause")
    if exp.state == states.PAUSED:
        return
    states.transition(conn, "experiment", experiment_id, states.PAUSED, "paused by user")
    # Running trials checkpoint and exit (graceful preemption); queued ones just wait.
    # Lock order everywhere: experiment, then allocations, then trials.
    _preempt_live(conn, experiment_id)
    states.experiment_trials(conn, experiment_id, states.ACTIVE, states.PAUSED)
    wake(conn)


def cancel(conn: Conn, experiment_id: int) -> None:
    exp = _lock(conn, experiment_id)
    _managed(exp, "cancel")
    if exp.state in states.TERMINAL or exp.state in (
        states.STOPPING_CANCELED,
        states.STOPPING_KILLED,
    ):
        return
    states.transition(
        conn, "experiment", experiment_id, states.STOPPING_CANCELED, "canceled by user"
    )
    # The allocations before the trials (the lock order above): an allocation ending meanwhile
    # holds its row and then takes its trial's, and a cancel holding the trials while it waited
    # for that allocation deadlocked with it (tests/integration/test_experiment_lock_order.py).
    _preempt_live(conn, experiment_id)
    conn.execute(
        "UPDATE trials SET stop_reason = 'canceled' WHERE experiment_id = %s"
        f" AND state NOT IN {states.TERMINAL_SQL}",
        (experiment_id,),
    )
    wake(conn)


def kill(conn: Conn, experiment_id: int) -> None:
    exp = _lock(conn, experiment_id)
    _managed(exp, "kill")
    if exp.state in states.TERMINAL or exp.state == states.STOPPING_KILLED:
        return
    states.transition(conn, "experiment", experiment_id, states.STOPPING_KILLED, "killed by user")
    conn.execute(
        "UPDATE allocations a SET kill_requested = true FROM trials t"
        " WHERE a.trial_id = t.id AND t.experiment_id = %s AND a.state <> 'TERMINATED'",
        (experiment_id,),
    )
    conn.execute(
        "UPDATE trials SET stop_reason = 'killed' WHERE experiment_id = %s"
        f" AND state NOT IN {states.TERMINAL_SQL}",
        (experiment_id,),
    )
    wake(conn)


def _preempt_live(conn: Conn, experiment_id: int) -> None:
    conn.execute(
        "UPDATE allocations a SET preempt_requested = true FROM trials t"
        " WHERE a.trial_id = t.id AND t.experiment_id = %s AND a.state <> 'TERMINATED'",
        (experiment_id,),
    )


def set_archived(conn: Conn, experiment_id: int, archived: bool) -> None:
    exp = _lock(conn, experiment_id)
    if archived and exp.state not in states.TERMINAL:
        raise Conflict(
            f"experiment {experiment_id} is {exp.state}: only a finished experiment can be archived"
        )
    conn.execute("UPDATE experiments SET archived = %s WHERE id = %s", (archived, experiment_id))


def delete(conn: Conn, experiment_id: int) -> None:
    exp = _lock(conn, experiment_id)
    if exp.state not in states.TERMINAL:
        raise Conflict(f"experiment {experiment_id} is {exp.state}: kill it before deleting it")
    states.experiment_deleted(conn, experiment_id, "deleted by user")


def patch(conn: Conn, experiment_id: int, fields: Any) -> None:
    """Determined's PatchExperiment: name, description, notes, labels, and the job's priority,
    weight and ``resources.maxSlots`` (stored as the config's ``resources.max_slots``, which the
    scheduler reads on its next pass; ``0`` removes the cap)."""
    exp = _lock(conn, experiment_id)
    if "name" in fields:
        name = limits.text("name", fields["name"], limits.NAME, required=True)
        conn.execute("UPDATE experiments SET name = %s WHERE id = %s", (name, experiment_id))
    if "description" in fields:
        description = limits.text("description", fields["description"], limits.DESCRIPTION)
        conn.execute(
            "UPDATE experiments SET description = %s WHERE id = %s", (description, experiment_id)
        )
    if "notes" in fields:
        notes = limits.text("notes", fields["notes"], limits.NOTES)
        conn.execute("UPDATE experiments SET notes = %s WHERE id = %s", (notes, experiment_id))
    if "labels" in fields:
        labels = limits.labels("labels", fields["labels"])
        conn.execute(
            "UPDATE experiments SET labels = %s WHERE id = %s", (json.dumps(labels), experiment_id)
        )
    res = fields.get("resources") or {}
    if not isinstance(res, dict):
        raise InvalidArgument("resources: must be an object")
    if res.get("maxSlots") is not None:
        set_max_slots(conn, exp, int(res["maxSlots"]))
    if res.get("priority") is not None or res.get("weight") is not None:
        job = db.scalar(conn, str, "SELECT id FROM jobs WHERE experiment_id = %s", (experiment_id,))
        assert job is not None
        jobs.update(conn, job, priority=res.get("priority"), weight=res.get("weight"))


def set_max_slots(conn: Conn, exp: _Locked, max_slots: int) -> None:
    """The experiment's cap on the slots its trials hold at once (``0``: no cap). Like the
    config's ``resources.max_slots``, it may not be below one trial's ``slots_per_trial``."""
    per_trial = stored.experiment_config(exp.id, exp.config).resources.slots_per_trial
    if max_slots < 0:
        raise InvalidArgument(f"resources.maxSlots: must be >= 0 (got {max_slots})")
    if 0 < max_slots < per_trial:
        raise InvalidArgument(
            f"resources.maxSlots: must be >= resources.slots_per_trial ({per_trial}),"
            f" or no trial could ever run (got {max_slots})"
        )
    conn.execute(
        "UPDATE experiments SET config = jsonb_set(config, '{resources}',"
        " coalesce(config->'resources', '{}'::jsonb) || jsonb_build_object('max_slots', %s::bigint))"
        " WHERE id = %s",
        (max_slots, exp.id),
    )
    states.record_event(
        conn,
        "experiment",
        exp.id,
        "max_slots",
        f"resources.max_slots set to {max_slots}" if max_slots else "resources.max_slots removed",
    )
    wake(conn)


def _merged(base: JSONValue, override: JSONValue) -> JSONValue:
    """``override`` laid over ``base``: objects merge key by key, anything else replaces."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = _merged(base.get(key), value)
        return out
    return override


def continue_(
    conn: Conn,
    st: MasterState,
    experiment_id: int,
    override_text: str | None,
    *,
    admin: bool = False,
) -> None:
    """Determined's ContinueExperiment for a single-trial (``single`` searcher) experiment that
    ended: the override (YAML, e.g. a longer ``searcher.max_length``) is merged into its config,
    and the same experiment and trial become ACTIVE again; the trial's next run resumes from its
    latest checkpoint (``DET_LATEST_CHECKPOINT``), as after a pause. The searcher, already done
    with its one trial, ends the experiment again when the trial exits."""
    exp = _lock(conn, experiment_id)
    _managed(exp, "continue")
    if exp.state not in states.TERMINAL:
        raise Conflict(
            f"experiment {experiment_id} is {exp.state}: only an experiment that ended"
            " (COMPLETED, CANCELED or ERROR) can be continued"
        )
    if exp.archived:
        raise Conflict(f"experiment {experiment_id} is archived: unarchive it to continue it")
    config = exp.config
    searcher_name = stored.experiment_config(exp.id, config).searcher.name
    if searcher_name != "single":
        raise InvalidArgument(
            f"experiment {experiment_id} uses the {searcher_name!r} searcher: det continues"
            " single-trial experiments (searcher.name: single) only"
        )
    trial = (
        conn.cursor(row_factory=class_row(_Continued))
        .execute(
            "SELECT t.id, t.latest_checkpoint, c.state AS checkpoint_state FROM trials t"
            " LEFT JOIN checkpoints c ON c.uuid = t.latest_checkpoint"
            " WHERE t.experiment_id = %s ORDER BY t.id FOR NO KEY UPDATE OF t",
            (experiment_id,),
        )
        .fetchall()
    )
    if len(trial) != 1:
        raise Conflict(
            f"experiment {experiment_id} has {len(trial)} trials: there is no one trial to continue"
        )
    t = trial[0]
    if t.latest_checkpoint and t.checkpoint_state != "COMPLETED":
        raise Conflict(
            f"trial {t.id}'s latest checkpoint {t.latest_checkpoint} is"
            f" {t.checkpoint_state or 'gone'}: there is nothing to resume from"
        )
    override: JSONObject = {}
    if override_text and override_text.strip():
        try:
            loaded = expconf.load_yaml(override_text)
        except expconf.ConfigError as e:
            raise InvalidArgument(f"overrideConfig: {e}") from None
        if not isinstance(loaded, dict):
            raise InvalidArgument("overrideConfig: must be a YAML mapping of config keys")
        override = loaded
    new_config = config
    if override:
        parsed = parse_config(st, yaml.safe_dump(_merged(config, override)))
        new_config = parsed.to_dict()
        changed = [
            what
            for what, before, after in (
                (
                    "hyperparameters",
                    config.get("hyperparameters"),
                    new_config.get("hyperparameters"),
                ),
                ("searcher.name", searcher_name, parsed.searcher.name),
            )
            if before != after
        ]
        if changed:
            raise InvalidArgument(
                f"overrideConfig: {changed[0]} cannot change when continuing (the trial is the same)"
            )
    containers.check_policy(st, new_config, admin=admin)
    checkpoints.check_storage_endpoint(st.config, new_config, admin=admin)
    states.continue_experiment(
        conn,
        experiment_id,
        t.id,
        new_config,
        "continued by user"
        + (f" (config override: {', '.join(sorted(override))})" if override else ""),
        "experiment continued"
        + (f", resuming from checkpoint {t.latest_checkpoint}" if t.latest_checkpoint else ""),
    )
    wake(conn)


@dataclass(frozen=True, slots=True)
class _Continued:
    """The trial of an experiment to continue, and the state of its latest checkpoint."""

    id: int
    latest_checkpoint: uuid.UUID | None
    checkpoint_state: str | None
