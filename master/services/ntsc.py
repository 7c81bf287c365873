"""Interactive tasks: commands, notebooks, shells and TensorBoards (Determined's "NTSC" tasks).

Each task is a job of its own in its resource pool's queue (``jobs.kind`` names its type), and
each run of it is an allocation like a trial's: the same scheduler places it (priority, fair
share, gang of its ``resources.slots``), preempts it for higher-priority work, and the agent runs
it in a container from the same spec. What happens when an allocation ends:

==========================================  ==========================================
how the allocation ended                    what happens to the task
==========================================  ==========================================
killed (``det cmd kill``, idle timeout)     TERMINATED, "killed" (or the idle reason)
preempted (scheduler, spot) or agent lost   re-queued: a new allocation, run again (a
                                            preempted container is stopped: tasks have
                                            no checkpoint to save)
otherwise                                   TERMINATED with the container's exit code
==========================================  ==========================================
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import class_row

from det.common.container_spec import ContainerSpec
from det.common.jsontypes import JSONObject
from det.master import authz, db, expconf, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.expconf.task import KIND_NAMES, TaskConfig, TaskKind, parse_task_config
from det.master.handles import MasterState
from det.master.rows.tasks import Task, TaskData
from det.master.services import (
    allocation_rows,
    containers,
    pool_bindings,
    scheduling,
    task_services,
    tensorboards,
)
from det.master.services.allocation_rows import Allocation
from det.master.services.experiments import ContextFile, pack_context

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TaskRow:
    """The columns of an ``ntsc_tasks`` row that queue and end its runs."""

    id: str
    kind: TaskKind
    job_id: str
    run_id: int
    state: str
    exit_status: str | None
    config: JSONObject


_ROW = "SELECT id, kind, job_id, run_id, state, exit_status, config FROM ntsc_tasks"


def config_of(config: JSONObject) -> TaskConfig:
    """A stored task config (written by :func:`resolve_config`) read back typed."""
    return TaskConfig.model_validate(config)


def resolve_config(
    st: MasterState, kind: TaskKind, raw: Any, default_pool: str | None = None
) -> JSONObject:
    """The task's config with the cluster's defaults under it, or InvalidArgument.
    ``default_pool``: where it goes when it names no pool (its workspace's default aux pool),
    else the cluster's default aux pool."""
    res = raw.get("resources") if isinstance(raw, dict) else None
    named = res.get("resource_pool") if isinstance(res, dict) else None
    pool = (
        named
        if isinstance(named, str) and named
        else default_pool or st.config.resource_manager.default_aux_resource_pool
    )
    try:
        config = config_of(
            parse_task_config(kind, raw, st.config.task_container_defaults_for(pool))
        )
    except expconf.ConfigError as e:
        raise InvalidArgument(f"invalid {KIND_NAMES[kind].lower()} config: {e}") from None
    if st.config.pool(pool) is None:
        raise InvalidArgument(f"resources.resource_pool: no pool named '{pool}'")
    config.resources.resource_pool = pool
    return config.model_dump(mode="json")


def launch(
    conn: Conn,
    st: MasterState,
    *,
    kind: TaskKind,
    owner_id: int,
    config: JSONObject,
    files: list[ContextFile],
    workspace_id: int | None = None,
    data: TaskData | None = None,
) -> Task:
    """Queues a new task of ``kind`` (``config`` from :func:`resolve_config`); returns it."""
    res = config_of(config).resources
    scheduling.refuse_if_never_fits(
        conn, st, res.resource_pool, int(res.slots or 0), field="resources.slots"
    )
    if workspace_id is not None and not db.exists(
        conn, "SELECT id FROM workspaces WHERE id = %s", (workspace_id,)
    ):
        raise InvalidArgument(f"workspaceId: no workspace {workspace_id}")
    # Launching needs Editor in the workspace: its pool bindings follow from this.
    authz.require(conn, owner_id, authz.is_admin(conn, owner_id), "task.create", workspace_id or 1)
    pool_bindings.check(conn, st, res.resource_pool, workspace_id or 1, "resources.resource_pool")
    task_id = str(uuid.uuid4())
    if not config.get("description"):
        config["description"] = f"{KIND_NAMES[kind]} ({task_id[:8]})"
    priority = res.priority or st.config.resource_manager.scheduler.default_priority
    # jobs.queue_key is a double precision: the next one after the largest.
    queue_key = db.scalar(conn, float, "SELECT coalesce(max(queue_key), 0) + 1 AS k FROM jobs")
    assert queue_key is not None
    job_id = str(uuid.uuid4())
    conn.execute(
        "INSERT INTO jobs (id, kind, experiment_id, owner_id, resource_pool, priority, weight,"
        " queue_key) VALUES (%s, %s, NULL, %s, %s, %s, %s, %s)",
        (job_id, kind, owner_id, res.resource_pool, priority, res.weight, queue_key),
    )
    conn.execute(
        "INSERT INTO ntsc_tasks (id, kind, owner_id, workspace_id, job_id, description, config,"
        " context, data) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            task_id,
            kind,
            owner_id,
            workspace_id or 1,
            job_id,
            config["description"],
            json.dumps(config),
            pack_context(files) if files else None,
            json.dumps(data or {}),
        ),
    )
    row = _row(conn, task_id)
    assert row is not None
    queue_run(conn, st, row)
    states.record_event(conn, "task", task_id, "launched", f"{kind.lower()} launched")
    conn.execute("NOTIFY det_wakeup")
    logger.info("%s %s launched", kind.lower(), task_id)
    return get(conn, task_id)


def _row(conn: Conn, task_id: str, *, lock: bool = False) -> TaskRow | None:
    """``lock``: ``FOR NO KEY UPDATE`` (an ending run)."""
    cur = conn.cursor(row_factory=class_row(TaskRow))
    return cur.execute(
        _ROW + " WHERE id = %s" + (" FOR NO KEY UPDATE" if lock else ""), (task_id,)
    ).fetchone()


def queue_run(conn: Conn, st: MasterState, task: TaskRow) -> str:
    """Queues the next run of ``task``; returns the allocation id."""
    run_id = task.run_id + 1
    allocation_id = f"{task.id}.{run_id}"
    pool = db.scalar(conn, str, "SELECT resource_pool FROM jobs WHERE id = %s", (task.job_id,))
    assert pool is not None
    allocation_rows.queue(
        conn,
        st,
        kind=task.kind,
        allocation_id=allocation_id,
        task_id=task.id,
        job_id=task.job_id,
        resource_pool=pool,
        slots=int(config_of(task.config).resources.slots or 0),
    )
    conn.execute("UPDATE ntsc_tasks SET run_id = %s WHERE id = %s", (run_id, task.id))
    return allocation_id


def _tasks(conn: Conn) -> psycopg.Cursor[Task]:
    return conn.cursor(row_factory=class_row(Task))


def get(conn: Conn, task_id: str, kind: str | None = None) -> Task:
    """A task with its wire view's columns (see :func:`_SELECT`); NotFound names the kind."""
    row = (
        _tasks(conn)
        .execute(
            _SELECT + " WHERE n.id = %s" + (" AND n.kind = %s" if kind else ""),
            (task_id, kind) if kind else (task_id,),
        )
        .fetchone()
    )
    if row is None:
        raise NotFound(f"{KIND_NAMES.get(kind or '', 'task').lower()} {task_id} not found")
    return row


def list_tasks(
    conn: Conn,
    kind: str,
    *,
    user_ids: list[int] | None = None,
    usernames: list[str] | None = None,
    workspace_id: int | None = None,
) -> list[Task]:
    clauses: list[str] = ["n.kind = %s"]
    values: list[Any] = [kind]
    if user_ids:
        clauses.append("n.owner_id = ANY(%s)")
        values.append(user_ids)
    if usernames:
        clauses.append("u.username = ANY(%s)")
        values.append(usernames)
    if workspace_id is not None:
        clauses.append("n.workspace_id = %s")
        values.append(workspace_id)
    return (
        _tasks(conn)
        .execute(
            _SELECT + " WHERE " + " AND ".join(clauses) + " ORDER BY n.created_at, n.id", values
        )
        .fetchall()
    )


# A task with its owner and its latest allocation (the live one, if any).
_SELECT = (
    "SELECT n.id, n.kind, n.owner_id, n.workspace_id, n.job_id, n.description, n.config,"
    " n.context, n.data, n.state, n.run_id, n.exit_code, n.exit_status, n.proxy_address,"
    " n.last_activity, n.created_at, n.ended_at, u.username, j.resource_pool, a.id AS allocation_id, a.state AS alloc_state,"
    " a.container_id, a.placement, a.started_at AS alloc_started_at"
    " FROM ntsc_tasks n JOIN users u ON u.id = n.owner_id JOIN jobs j ON j.id = n.job_id"
    " LEFT JOIN LATERAL (SELECT * FROM allocations x WHERE x.task_id = n.id"
    "   ORDER BY x.created_at DESC, x.id DESC LIMIT 1) a ON true"
)


def on_terminated(conn: Conn, alloc: Allocation, exit_code: int | None, reason: str) -> None:
    """An allocation of a task ended (``alloc`` is its row as it was, locked by the caller).
    Registered for the four kinds in :mod:`det.master.services.task_kinds`."""
    task = _row(conn, alloc.task_id, lock=True)
    if task is None or task.state == states.TERMINATED:
        return
    preempted = alloc.preempt_requested or reason == containers.AGENT_LOST
    if task.exit_status is not None:  # killed (tasks.kill gave the reason)
        finish(conn, task.id, exit_code, task.exit_status)
    elif preempted:
        conn.execute("UPDATE ntsc_tasks SET proxy_address = NULL WHERE id = %s", (task.id,))
        logger.info("task %s preempted (%s); re-queued", task.id, reason)
        states.record_event(conn, "task", task.id, "preempted", f"{reason}; re-queued")
    elif exit_code == 0:
        finish(conn, task.id, 0, "exited with code 0")
    else:
        status = reason if exit_code is None else f"exited with code {exit_code}"
        finish(conn, task.id, exit_code, status)
    conn.execute("NOTIFY det_wakeup")


def finish(conn: Conn, task_id: str, exit_code: int | None, status: str) -> None:
    conn.execute(
        "UPDATE ntsc_tasks SET exit_code = %s, exit_status = coalesce(exit_status, %s),"
        " proxy_address = NULL WHERE id = %s",
        (exit_code, status, task_id),
    )
    states.transition(conn, "task", task_id, states.TERMINATED, status, strict=False)


def tasks_pass(conn: Conn, st: MasterState) -> None:
    """Stops the allocations the scheduler preempts (a task has no checkpoint to save: its
    container is stopped, SIGTERM then SIGKILL) and queues a new run of every active task
    without a live allocation (a preempted one)."""
    conn.execute(
        "UPDATE allocations SET kill_requested = true WHERE kind = ANY(%s)"
        " AND preempt_requested AND NOT kill_requested AND state <> 'TERMINATED'",
        (list(KIND_NAMES),),
    )
    rows = (
        conn.cursor(row_factory=class_row(TaskRow))
        .execute(
            _ROW + " n WHERE n.state = 'ACTIVE' AND NOT EXISTS"
            " (SELECT 1 FROM allocations a WHERE a.task_id = n.id AND a.state <> 'TERMINATED')"
            " ORDER BY n.created_at FOR NO KEY UPDATE SKIP LOCKED"
        )
        .fetchall()
    )
    for task in rows:
        queue_run(conn, st, task)


@dataclass(frozen=True, slots=True)
class _Context:
    context: bytes | None


def context(conn: Conn, task_id: str) -> bytes | None:
    """The task's context directory (a gzip tar), None when it has none; NotFound if no task."""
    row = db.fetch_row(conn, _Context, "SELECT context FROM ntsc_tasks WHERE id = %s", (task_id,))
    if row is None:
        raise NotFound(f"task {task_id} not found")
    return bytes(row.context) if row.context is not None else None


def container_spec(conn: Conn, st: MasterState, alloc: Allocation, agent_id: str) -> ContainerSpec:
    """The task's container, built as a trial's is (image, env, mounts, Docker options)."""
    task = get(conn, alloc.task_id)
    config = task["config"]
    typed = config_of(config)
    slot_ids = [str(s) for s in (alloc.placement or {}).get(agent_id, [])]
    image, env = containers.image_and_env(conn, config, agent_id)
    env.update(containers.task_env(st, alloc.id, alloc.task_id, task["kind"]))
    env.update(containers.owner_session_env(conn, st, alloc.id))
    offset = containers.port_offset(alloc.id, alloc.port_offset)
    env.update(
        {
            "DET_USER": task["username"],
            "DET_RESOURCES_TYPE": "docker-container",
            "DET_UNIQUE_PORT_OFFSET": str(offset),
        }
    )

    port = None
    if task["kind"] in task_services.SERVED:
        port = task_services.service_port(offset)
        env["DET_TASK_PORT"] = str(port)
        env["JUPYTER_TOKEN"] = env["DET_SERVICE_TOKEN"] = task_services.service_token(
            st, task["id"]
        )
        if task["kind"] == "SHELL":
            env["DET_SHELL_AUTHORIZED_KEY"] = str(task["data"].get("publicKey") or "")
    docker = containers.docker_options(
        st, config, alloc.resource_pool, admin=containers.owner_is_admin(conn, alloc.id)
    )
    if task["kind"] == "TENSORBOARD":
        sources, mounts = tensorboards.container_sources(task["data"])
        env["DET_TENSORBOARD_SOURCES"] = json.dumps(sources)
        env["DET_TENSORBOARD_ARGS"] = json.dumps(typed.tensorboard_args)
        docker["bindMounts"] = docker["bindMounts"] + mounts
    command = _command(task, typed, port)
    if typed.work_dir:
        command = ["sh", "-c", 'cd "$0" && exec "$@"', typed.work_dir, *command]
    spec: ContainerSpec = {
        "taskId": task["id"],
        "taskType": task["kind"],
        "image": image,
        "command": command,
        "env": env,
        "slotIds": slot_ids,
        "deviceType": "cuda" if containers.slot_type(conn, agent_id) == "cuda" else "cpu",
        **docker,
        "user": containers.run_as(conn, alloc.id, env),
        "contextPath": f"/api/v1/tasks/{task['id']}/context" if task["context"] else None,
        "workdir": containers.WORKDIR,
        "killGraceSeconds": 10,
        "proxyPort": port,
    }
    return spec


def _command(task: Task, config: TaskConfig, port: int | None) -> list[str]:
    entrypoint = config.entrypoint
    if task["kind"] == "SHELL":
        # The shell's SSH server (det.exec.shell_server, in the harness): its own entrypoint.
        return ["python3", "-m", "det.exec.shell_server"]
    if entrypoint is None and task["kind"] == "NOTEBOOK" and port is not None:
        # JupyterLab under the proxy's path; it admits only the master (JUPYTER_TOKEN, which
        # the proxy adds to every request it forwards). Its kernels talk over Unix sockets in
        # the container, not TCP ports on the loopback the agent's other tasks share (host
        # networking): a kernel's output channel admits anyone who connects.
        return [
            "jupyter",
            "lab",
            "--no-browser",
            "--allow-root",
            "--ServerApp.ip=0.0.0.0",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.base_url=/proxy/{task['id']}/",
            "--ServerApp.allow_remote_access=True",
            "--KernelManager.transport=ipc",
            f"--ServerApp.root_dir={config.work_dir or containers.WORKDIR}",
        ]
    if entrypoint is None and task["kind"] == "TENSORBOARD":
        # Fetches the trials' files and serves TensorBoard under the proxy's path.
        return ["python3", "-m", "det.exec.tensorboard"]
    if isinstance(entrypoint, list) and len(entrypoint) == 1:
        # Determined's command semantics: one argument is a shell command line
        # (`det cmd run 'pip install x && python y.py'`); several are exec'd as given.
        return ["sh", "-c", str(entrypoint[0])]
    if isinstance(entrypoint, list):
        return [str(a) for a in entrypoint]
    if isinstance(entrypoint, str):
        return ["sh", "-c", entrypoint]
    raise InvalidArgument(f"{task['kind'].lower()} {task['id']} has no entrypoint")
