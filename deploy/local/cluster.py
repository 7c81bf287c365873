"""``det deploy local``: a whole cluster on this machine (one master, N agents, Docker tasks).

The master and the agents run as background processes of the current user, each in its own
session with its log in the state directory (see :mod:`det.deploy.local.paths`); the master
keeps its data in an embedded PostgreSQL there. ``up`` is idempotent, ``down`` keeps the data
unless asked to delete it.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import signal
import socket
import string
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import requests
import yaml

from det.common.jsontypes import JSONObject
from det.deploy.common.errors import DeployError
from det.deploy.local import engine, procs
from det.deploy.local.paths import LocalPaths, agent_id, write_private

logger = logging.getLogger(__name__)

MASTER_MARKER = "det.master"
AGENT_MARKER = "det.agent"
MASTER_START_TIMEOUT = 300.0  # a first start runs initdb and the migrations
AGENT_REGISTER_TIMEOUT = 120.0
REQUEST_TIMEOUT = 10.0  # one request to the master; a slow answer while polling is asked again

Progress = Callable[[str], None]


@dataclass(frozen=True)
class LocalCluster:
    """What ``up`` left running."""

    master_url: str
    state_dir: Path
    master_pid: int
    agent_ids: tuple[str, ...]
    already_running: bool
    password_file: Path
    # Set only when ``up`` generated the admin password just now (show it once).
    generated_password: str | None = None


def _log_progress(message: str) -> None:
    logger.info("%s", message)


def generate_password() -> str:
    """16 characters with upper, lower case and digits (strong enough for any password rule)."""
    alphabet = string.ascii_letters + string.digits
    while True:
        pw = "".join(secrets.choice(alphabet) for _ in range(16))
        if (
            any(c.isupper() for c in pw)
            and any(c.islower() for c in pw)
            and any(c.isdigit() for c in pw)
        ):
            return pw


def _clusters_home() -> Path:
    """Where this user's local clusters keep their state by default (``det`` under
    ``$XDG_DATA_HOME`` or ``~/.local/share``), whatever ``--state-dir`` this one has."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base).expanduser().resolve() / "det"


class MountRoot(TypedDict):
    """A ``task_container_policy.bind_mounts`` entry: a host path tasks may mount."""

    host_path: str
    read_only: bool


class BindMount(TypedDict):
    host_path: str
    container_path: str


class TaskContainerDefaults(TypedDict):
    image: dict[str, str]
    """``cpu`` and ``cuda`` task images."""
    bind_mounts: list[BindMount]


class TaskContainerPolicy(TypedDict):
    bind_mounts: list[MountRoot]
    protected_host_paths: list[str]


class SharedFsStorage(TypedDict):
    type: str
    host_path: str


class Security(TypedDict):
    initial_user_password: str


class LogSettings(TypedDict):
    level: str
    color: bool


class LocalMasterConfig(TypedDict):
    """A local cluster's master.yaml (Determined's keys, see docs/config.md)."""

    port: int
    bind_address: str
    master_url: str
    task_port: int
    cluster_name: str
    data_dir: str
    security: Security
    task_container_defaults: TaskContainerDefaults
    checkpoint_storage: SharedFsStorage
    task_container_policy: TaskContainerPolicy
    log: LogSettings


def mount_root(text: str) -> MountRoot:
    """``--allow-mount PATH[:ro|:rw]`` as a ``task_container_policy.bind_mounts`` entry
    (read-only unless ``:rw``); DeployError naming the flag for anything else."""
    path, _, mode = text.rpartition(":") if text.endswith((":ro", ":rw")) else (text, "", "")
    if not path.startswith("/"):
        raise DeployError(f"--allow-mount {text}: must be an absolute host path, PATH[:ro|:rw]")
    return {"host_path": os.path.normpath(path), "read_only": mode != "rw"}


def master_config(
    paths: LocalPaths, port: int, password: str, mount_roots: Sequence[str] = ()
) -> LocalMasterConfig:
    """The master.yaml of a local cluster (Determined's keys, see docs/config.md)."""
    return {
        "port": port,
        # Task containers use the host network, so loopback reaches the master from them too.
        "bind_address": "127.0.0.1",
        "master_url": f"http://127.0.0.1:{port}",
        # Interactive tasks' pages on an origin of their own: the next port (docs/security.md).
        "task_port": port + 1,
        "cluster_name": "local",
        "data_dir": str(paths.data_dir),
        "security": {"initial_user_password": password},
        "task_container_defaults": {
            "image": {"cpu": engine.TASK_IMAGE, "cuda": engine.TASK_IMAGE},
            # Checkpoints must land on the host: mount the shared_fs directory at its own path,
            # so task containers and the host (det checkpoint download) see the same files.
            "bind_mounts": [
                {"host_path": str(paths.checkpoints), "container_path": str(paths.checkpoints)}
            ],
        },
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(paths.checkpoints)},
        # A non-admin's task mounts the checkpoint directory as given (never what lies under
        # it: tasks write there), and whatever lies under the roots --allow-mount names; never
        # this state directory (the admin password, the agent token, the database, the agents'
        # state). Capabilities stay Determined's (any but the protected ones); no host devices.
        "task_container_policy": {
            "bind_mounts": [mount_root(r) for r in mount_roots],
            # ...nor the state of this user's other local clusters (their default home).
            "protected_host_paths": list(dict.fromkeys([str(paths.root), str(_clusters_home())])),
        },
        "log": {"level": "info", "color": False},
    }


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _read_json(path: Path) -> JSONObject:
    """A state file (``cluster.json``); {} when it is missing or not a JSON object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _master_answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/info", timeout=2).ok
    except requests.RequestException:
        return False


def _wait_for_master(url: str, pid: int, log: Path, progress: Progress) -> None:
    deadline = time.monotonic() + MASTER_START_TIMEOUT
    next_note = time.monotonic() + 10
    while time.monotonic() < deadline:
        if _master_answers(url):
            return
        if not procs.alive(pid, None):  # just started: may not have exec'd yet
            last = procs.tail(log, 1).strip()
            raise DeployError(
                f"the master exited during start-up ({last or 'no output'}); log: {log}"
            )
        if time.monotonic() > next_note:
            progress(f"still waiting for the master at {url} (log: {log})...")
            next_note = time.monotonic() + 15
        time.sleep(0.5)
    raise DeployError(
        f"the master did not answer at {url} within {MASTER_START_TIMEOUT:.0f} s; log: {log}"
    )


def admin_token(url: str, password: str) -> str:
    r = requests.post(
        f"{url}/api/v1/auth/login",
        json={"username": "admin", "password": password},
        timeout=REQUEST_TIMEOUT,
    )
    if r.status_code in (400, 401, 403):
        raise DeployError(
            "the master refused the stored admin password; if you changed it, log in with"
            " 'det user login admin' (the cluster itself is up)"
        )
    r.raise_for_status()
    return str(r.json()["token"])


def registered_agents(url: str, token: str) -> dict[str, JSONObject]:
    """The master's agents (``GET /api/v1/agents``) by id, each as the API sends it."""
    r = requests.get(
        f"{url}/api/v1/agents",
        headers={"Authorization": f"Bearer {token}"},
        timeout=REQUEST_TIMEOUT,
    )
    r.raise_for_status()
    agents = r.json().get("agents") or []
    return {str(a.get("id")): a for a in agents if isinstance(a, dict)}


def _start_agent(paths: LocalPaths, url: str, aid: str, slots: int) -> int:
    argv = [
        sys.executable, "-m", "det.agent",
        "--master-url", url,
        "--agent-id", aid,
        "--agent-token-file", str(paths.agent_token),
        "--slot-type", "cpu",
        "--artificial-slots", str(slots),
        "--state-dir", str(paths.agent_state(aid)),
        "--log-level", "INFO",
    ]  # fmt: skip
    paths.agent_state(aid).mkdir(parents=True, exist_ok=True)
    return int(procs.start(argv, paths.agent_log(aid), paths.agent_pid(aid), procs.clean_env()))


def _wait_for_agents(
    url: str, password: str, ids: list[str], paths: LocalPaths, progress: Progress
) -> None:
    deadline = time.monotonic() + AGENT_REGISTER_TIMEOUT
    next_note = time.monotonic() + 10
    token: str | None = None
    unanswered = ""
    while True:
        # A master that answers slowly (a loaded machine, an image build beside it) is asked
        # again until the deadline; only its refusals and the agents' exits end the wait early.
        try:
            token = token or admin_token(url, password)
            registered = registered_agents(url, token)
            unanswered = ""
        except (requests.Timeout, requests.ConnectionError) as e:
            registered, unanswered = {}, f" (the last request to the master: {type(e).__name__})"
        missing = [a for a in ids if a not in registered]
        if not missing:
            return
        for aid in missing:
            if not procs.alive(procs.read_pid(paths.agent_pid(aid)), None):
                last = procs.tail(paths.agent_log(aid), 1).strip()
                raise DeployError(
                    f"agent {aid} exited ({last or 'no output'}); log: {paths.agent_log(aid)}"
                )
        if time.monotonic() > deadline:
            raise DeployError(
                f"agents {', '.join(missing)} did not register within "
                f"{AGENT_REGISTER_TIMEOUT:.0f} s{unanswered}; logs in {paths.agents_dir}"
            )
        if time.monotonic() > next_note:
            progress(f"waiting for agents to register: {', '.join(missing)}...")
            next_note = time.monotonic() + 15
        time.sleep(0.5)


def _password(paths: LocalPaths, given: str | None, progress: Progress) -> tuple[str, bool]:
    """The admin password and whether it was generated now."""
    stored = paths.password_file.read_text().strip() if paths.password_file.is_file() else None
    database_exists = paths.data_dir.joinpath("postgres").is_dir()
    if stored and database_exists:
        if given and given != stored:
            progress(
                "note: the admin password was set when this cluster was first created;"
                " --initial-user-password only applies to a new cluster (down --delete-data first)"
            )
        return stored, False
    if given:
        write_private(paths.password_file, given + "\n")
        return given, False
    if stored:
        return stored, False
    pw = generate_password()
    write_private(paths.password_file, pw + "\n")
    return pw, True


def _join_running(
    paths: LocalPaths,
    running: int,
    ids: list[str],
    master_port: int,
    slots_per_agent: int,
    note: Progress,
) -> LocalCluster:
    """``up`` with the master already running: start the agents that are not."""
    url = str(_read_json(paths.cluster_json).get("master_url") or f"http://127.0.0.1:{master_port}")
    if f":{master_port}" not in url:
        note(f"a local cluster already runs at {url} (down first to change its port)")
    started = [a for a in ids if procs.running_pid(paths.agent_pid(a), AGENT_MARKER) is None]
    for aid in started:
        _start_agent(paths, url, aid, slots_per_agent)
    if started:
        note(f"started missing agents: {', '.join(started)}")
        if paths.password_file.is_file():  # else we cannot list agents: do not wait
            password = paths.password_file.read_text().strip()
            _wait_for_agents(url, password, ids, paths, note)
    _save_cluster(paths, url, master_port if f":{master_port}" in url else None, ids)
    return LocalCluster(url, paths.root, running, tuple(ids), not started, paths.password_file)


def up(
    agents: int = 1,
    slots_per_agent: int = 1,
    master_port: int = 8080,
    initial_user_password: str | None = None,
    state_dir: Path | None = None,
    images: bool = True,
    progress: Progress | None = None,
    mount_roots: Sequence[str] = (),
) -> LocalCluster:
    """Starts (or finds running) a local cluster; raises DeployError with one readable line.

    Checks the Docker engine before creating anything. ``images``: build the task image when it
    is missing (from a source checkout). ``progress`` receives a line per slow step.
    """
    note = progress or _log_progress
    if agents < 0 or slots_per_agent < 1:
        raise DeployError("--agents must be >= 0 and --slots-per-agent >= 1")
    for root in mount_roots:
        mount_root(root)  # a bad --allow-mount stops before anything starts
    paths = LocalPaths.at(state_dir)
    docker_client = engine.client()  # raises NoDockerEngine before anything is created
    ids = [agent_id(i) for i in range(agents)]

    running = procs.running_pid(paths.master_pid, MASTER_MARKER)
    if running is not None:
        return _join_running(paths, running, ids, master_port, slots_per_agent, note)

    if images:
        engine.ensure_image(docker_client, note)
    for busy in (master_port, master_port + 1):
        if not _port_free(busy):
            raise DeployError(
                f"port {busy} is in use: pick another with --master-port (the master takes"
                f" --master-port and the next one, for interactive tasks)"
            )
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.checkpoints.mkdir(parents=True, exist_ok=True)
    password, generated = _password(paths, initial_user_password, note)
    write_private(
        paths.master_yaml,
        yaml.safe_dump(master_config(paths, master_port, password, mount_roots)),
    )
    url = f"http://127.0.0.1:{master_port}"
    for stale in paths.agent_ids_on_disk():  # agents of an earlier run still attached to nothing
        pid = procs.running_pid(paths.agent_pid(stale), AGENT_MARKER)
        if pid is not None:
            procs.stop(pid, AGENT_MARKER)
    argv = [sys.executable, "-m", "det.master", "--config-file", str(paths.master_yaml)]
    pid = procs.start(argv, paths.master_log, paths.master_pid, procs.clean_env())
    _save_cluster(paths, url, master_port, ids)
    note(f"starting the master at {url} (first start initialises its database)...")
    _wait_for_master(url, pid, paths.master_log, note)
    for aid in ids:
        _start_agent(paths, url, aid, slots_per_agent)
    if ids:
        note(f"starting {len(ids)} agent(s) with {slots_per_agent} CPU slot(s) each...")
        _wait_for_agents(url, password, ids, paths, note)
    _save_cluster(paths, url, master_port, ids)
    return LocalCluster(
        url,
        paths.root,
        pid,
        tuple(ids),
        False,
        paths.password_file,
        password if generated else None,
    )


def _save_cluster(paths: LocalPaths, url: str, port: int | None, ids: list[str]) -> None:
    known = _read_json(paths.cluster_json)
    data = {"master_url": url, "master_port": port or known.get("master_port"), "agent_ids": ids}
    paths.cluster_json.write_text(json.dumps(data, indent=2) + "\n")


def _stop_postgres(paths: LocalPaths) -> None:
    """The embedded PostgreSQL outlives the master on purpose; ``down`` stops it too."""
    pid = procs.read_pid(paths.postmaster_pid)
    if pid is not None and procs.alive(pid, "postgres"):
        # SIGINT is PostgreSQL's "fast" shutdown: roll back sessions, checkpoint, exit.
        procs.stop(pid, "postgres", grace=30.0, sig=signal.SIGINT)


class Stopped(TypedDict):
    """What ``down`` stopped."""

    agents: list[str]
    master: bool
    containers: int
    deleted: bool


def down(
    delete_data: bool = False, state_dir: Path | None = None, progress: Progress | None = None
) -> Stopped:
    """Stops the agents, their task containers, the master and its database.

    Keeps the state directory (experiments, checkpoints, password) unless ``delete_data``.
    Returns what was stopped: ``{"agents": [...], "master": bool, "containers": n, "deleted": bool}``.
    """
    note = progress or _log_progress
    paths = LocalPaths.at(state_dir)
    result: Stopped = {"agents": [], "master": False, "containers": 0, "deleted": False}
    if not paths.root.exists():
        return result
    url = str(_read_json(paths.cluster_json).get("master_url") or "")
    agent_ids = paths.agent_ids_on_disk()
    for aid in agent_ids:
        pid = procs.running_pid(paths.agent_pid(aid), AGENT_MARKER)
        if pid is not None:
            procs.stop(pid, AGENT_MARKER)
            result["agents"].append(aid)
        paths.agent_pid(aid).unlink(missing_ok=True)
    if url and agent_ids:
        try:
            result["containers"] = engine.remove_task_containers(engine.client(), agent_ids, url)
        except DeployError as e:
            note(f"task containers not checked: {e}")
    pid = procs.running_pid(paths.master_pid, MASTER_MARKER)
    if pid is not None:
        procs.stop(pid, MASTER_MARKER)
        result["master"] = True
    paths.master_pid.unlink(missing_ok=True)
    _stop_postgres(paths)
    if delete_data:
        shutil.rmtree(paths.root, ignore_errors=True)
        result["deleted"] = True
    return result


class MasterStatus(TypedDict):
    url: str | None
    pid: int | None
    running: bool
    answering: bool


class AgentStatus(TypedDict):
    id: str
    pid: int | None
    running: bool
    registered: bool
    slots: int


class Status(TypedDict):
    """``status`` (``--json`` prints these keys)."""

    state_dir: str
    running: bool
    master: MasterStatus
    agents: list[AgentStatus]


def _slots(agent: JSONObject | None) -> int:
    slots = (agent or {}).get("slots")
    return len(slots) if isinstance(slots, (dict, list)) else 0


def status(state_dir: Path | None = None) -> Status:
    """What runs: master pid/URL/answering, each agent's pid and whether the master lists it."""
    paths = LocalPaths.at(state_dir)
    cluster = _read_json(paths.cluster_json)
    found = cluster.get("master_url")
    url = found if isinstance(found, str) else None
    master_pid = procs.running_pid(paths.master_pid, MASTER_MARKER)
    answering = bool(url and master_pid and _master_answers(url))
    registered: dict[str, JSONObject] = {}
    if answering and paths.password_file.is_file():
        try:
            registered = registered_agents(
                str(url), admin_token(str(url), paths.password_file.read_text().strip())
            )
        except (DeployError, requests.RequestException) as e:
            logger.debug("cannot list agents: %s", e)
    agents: list[AgentStatus] = []
    for aid in sorted(set(paths.agent_ids_on_disk()) | set(registered)):
        pid = procs.running_pid(paths.agent_pid(aid), AGENT_MARKER)
        reg = registered.get(aid)
        agents.append({
            "id": aid,
            "pid": pid,
            "running": pid is not None,
            "registered": reg is not None,
            "slots": _slots(reg),
        })  # fmt: skip
    return {
        "state_dir": str(paths.root),
        "running": master_pid is not None,
        "master": {
            "url": url,
            "pid": master_pid,
            "running": master_pid is not None,
            "answering": answering,
        },
        "agents": agents,
    }
