"""A real local cluster for end-to-end tests: one ``det-master`` (real PostgreSQL) and N
``det-agent`` processes with artificial CPU slots, running task containers on the machine's
Docker engine.

Import the fixtures into a test module (``from tests.e2e.cluster import cluster_factory``)
rather than from a conftest, so this file stays independent of the shared one.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests import docker_support, stall_clock
from tests.docker_support import docker_client
from tests.integration.conftest import ADMIN_PASSWORD, Master, assert_event_loop_sound, start_master
from tests.integration.conftest import wait_for as integration_wait_for

TASK_IMAGE = docker_support.TASK_IMAGE
LABEL_AGENT = "ai.det.agent-id"
LABEL_ALLOCATION = "ai.det.allocation-id"
REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
#: Overrides that make the core_api example's trial hold its slot until the test ends it: paced
#: at 10 ms a batch (its ``batch_seconds``), it sleeps rather than spins a core, and reports
#: every 0.1 s instead of every few milliseconds.
HOLD: dict[str, Any] = {
    "hyperparameters": {"batch_seconds": 0.01},
    "searcher": {"max_length": {"batches": 5_000_000}},
}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.3) -> Any:
    """tests/integration/conftest.py's ``wait_for`` with ``timeout`` and ``what`` required."""
    return integration_wait_for(predicate, timeout, interval, what)


@dataclass
class Agent:
    """A ``det-agent`` process; ``kill`` and ``start`` again keep its id and state dir."""

    agent_id: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Agent:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            stall_clock.wait_process(self.proc, 30)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    master: Master
    agents: list[Agent]
    tmp: Path
    docker: Any
    checkpoints: Path
    db_url: str = ""
    experiments: list[int] = field(default_factory=list)

    # --- experiments ------------------------------------------------------------------------

    def create(
        self,
        config: str | Path | dict[str, Any],
        context: Path,
        overrides: dict[str, Any] | None = None,
        activate: bool = True,
    ) -> int:
        """Creates an experiment from a config (file, YAML text or dict) and a context dir;
        ``overrides`` are merged into the config recursively (like ``--config a.b=c``)."""
        if isinstance(config, Path):
            conf = yaml.safe_load(config.read_text())
        elif isinstance(config, str):
            conf = yaml.safe_load(config)
        else:
            conf = copy.deepcopy(config)
        merge(conf, overrides or {})
        files = [
            {
                "path": str(p.relative_to(context)),
                "type": 48,
                "content": base64.b64encode(p.read_bytes()).decode(),
                "mode": 0o755 if os.access(p, os.X_OK) else 0o644,
            }
            for p in sorted(context.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".yaml"
        ]
        body = {"config": yaml.safe_dump(conf), "modelDefinition": files, "activate": activate}
        eid = int(self.master.post("/api/v1/experiments", body)["experiment"]["id"])
        self.experiments.append(eid)
        return eid

    def experiment(self, eid: int) -> dict[str, Any]:
        return dict(self.master.get(f"/api/v1/experiments/{eid}")["experiment"])

    def state(self, eid: int) -> str:
        return str(self.experiment(eid)["state"])

    def wait_state(self, eid: int, state: str, timeout: float) -> None:
        terminal = {"STATE_COMPLETED", "STATE_CANCELED", "STATE_ERROR", "STATE_DELETED"}

        def done() -> bool:
            s = self.state(eid)
            if s != state and s in terminal:
                raise AssertionError(f"experiment {eid} ended {s}, wanted {state}\n{self.dump()}")
            return s == state

        try:
            wait_for(done, timeout, f"experiment {eid} to reach {state}")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{self.dump()}") from None

    def trials(self, eid: int) -> list[dict[str, Any]]:
        return list(self.master.get(f"/api/v1/experiments/{eid}/trials")["trials"] or [])

    def trial(self, tid: int) -> dict[str, Any]:
        return dict(self.master.get(f"/api/v1/trials/{tid}")["trial"])

    def metrics(self, tid: int, group: str) -> list[dict[str, Any]]:
        r = self.master.get(f"/api/v1/trials/{tid}/metrics", params={"group": group})
        return list(r["metrics"] or [])

    def wait_checkpoint_gc(self, eid: int, timeout: float = 120) -> None:
        """Until the ended experiment's checkpoint GC was decided and its task (if any) ended."""
        import psycopg

        def done() -> bool:
            with psycopg.connect(self.db_url) as conn:
                row = conn.execute(
                    "SELECT e.checkpoint_gc_at IS NOT NULL, (SELECT count(*) FROM checkpoint_gc g"
                    " JOIN allocations a ON a.id = g.allocation_id WHERE g.experiment_id = e.id"
                    " AND a.state <> 'TERMINATED') FROM experiments e WHERE e.id = %s",
                    (eid,),
                ).fetchone()
            return bool(row and row[0] and row[1] == 0)

        wait_for(done, timeout, f"experiment {eid}'s checkpoint GC")

    def service_port(self, task_id: str) -> int:
        """Where the task's latest allocation serves on its agent: the port the master chose
        when it placed it (allocations.port_offset)."""
        import psycopg

        from det.master.services.task_services import service_port

        with psycopg.connect(self.db_url) as conn:
            row = conn.execute(
                "SELECT port_offset FROM allocations WHERE task_id = %s AND port_offset IS NOT"
                " NULL ORDER BY created_at DESC LIMIT 1",
                (task_id,),
            ).fetchone()
        assert row is not None, f"task {task_id} has no placed allocation"
        return service_port(int(row[0]))

    def checkpoints_of(self, tid: int) -> list[dict[str, Any]]:
        return list(self.master.get(f"/api/v1/trials/{tid}/checkpoints")["checkpoints"] or [])

    def trial_logs(self, tid: int) -> list[dict[str, Any]]:
        """The trial's task log entries (Determined's fields: ``log``, ``rankId``, ...)."""
        r = self.master.session().get(f"{self.master.url}/api/v1/trials/{tid}/logs", timeout=30)
        assert r.status_code == 200, r.text
        return [
            dict(json.loads(raw).get("result") or {}) for raw in r.text.splitlines() if raw.strip()
        ]

    def det(self, *args: str, timeout: float = 120) -> str:
        """``det ARGS`` as a user would run it (a subprocess logged in as admin); its stdout."""
        env = {
            **os.environ,
            "HOME": str(self.tmp / "home"),
            "XDG_CONFIG_HOME": str(self.tmp / "home" / ".config"),
            "DET_MASTER": self.master.url,
            "DET_USER": "admin",
            "DET_PASS": ADMIN_PASSWORD,
        }
        r = subprocess.run(
            [sys.executable, "-m", "det.cli", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
        assert r.returncode == 0, f"det {' '.join(args)} exited {r.returncode}:\n{r.stderr}"
        return r.stdout

    # --- containers ---------------------------------------------------------------------------

    def containers(self, running_only: bool = True) -> list[Any]:
        """Task containers of this cluster's agents."""
        out: list[Any] = []
        for a in self.agents:
            out += self.docker.containers.list(
                all=not running_only,
                ignore_removed=True,  # removed by its agent between the listing and the inspect
                filters={"label": f"{LABEL_AGENT}={a.agent_id}"},
            )
        return out

    def dump(self) -> str:
        """Master and agent log tails, for a failing assertion's message."""
        parts = [f"--- master ---\n{tail(self.master.logs(), 40)}"]
        for eid in self.experiments:
            try:
                for t in self.trials(eid):
                    lines = "".join(str(e.get("log") or "") for e in self.trial_logs(t["id"]))
                    parts.append(f"--- trial {t['id']} ({t['state']}) ---\n{tail(lines, 40)}")
            except Exception as e:  # the dump must not hide the original failure
                parts.append(f"--- experiment {eid}: {e} ---")
        for a in self.agents:
            parts.append(f"--- agent {a.agent_id} ---\n{tail(a.output(), 30)}")
        return "\n".join(parts)


def tail(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def merge(base: dict[str, Any], overrides: dict[str, Any]) -> None:
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            merge(base[k], v)
        else:
            base[k] = v


def master_extra(tmp: Path) -> dict[str, Any]:
    """Master settings for a fast local Docker cluster; shared_fs checkpoints in
    ``tmp/checkpoints`` (the master mounts it into task containers itself)."""
    ckpt = tmp / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    return {
        "agent_timeout_seconds": 20,
        "task_container_defaults": {
            "image": {"cpu": TASK_IMAGE, "cuda": TASK_IMAGE},
        },
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(ckpt)},
    }


def agent_argv(master: Master, agent_id: str, state_dir: Path, slots: int) -> list[str]:
    return [
        sys.executable, "-m", "det.agent",
        "--master-url", master.url,
        "--agent-id", agent_id,
        f"--agent-token={master.agent_token}",  # "=": a token may start with "-"
        "--slot-type", "cpu",
        "--artificial-slots", str(slots),
        "--heartbeat-seconds", "0.2",
        "--state-dir", str(state_dir),
        "--log-level", "INFO",
    ]  # fmt: skip


def docker_or_skip() -> Any:
    # The engine may take longer than 30 s to answer a kill: a rehearsal's container died
    # within 10 s of `docker kill`, but the engine held it, and answered neither the kill nor
    # an inspect of it, for over 30 s, waiting for an exit event its shim never sent ("shim
    # disconnected", then "ignoring event" for the task's delete). The tests' own calls wait
    # as long as their own waits do.
    return docker_client(TASK_IMAGE, timeout=120)


def start_cluster(
    tmp: Path, db_url: str, agents: int = 2, slots: int = 2, extra: dict[str, Any] | None = None
) -> Cluster:
    """Starts a master and ``agents`` agents and waits until every agent is registered."""
    client = docker_or_skip()
    conf = master_extra(tmp)
    merge(conf, extra or {})
    master = start_master(tmp, db_url, extra=conf, name="master")
    run_id = os.urandom(3).hex()
    started = []
    for i in range(agents):
        aid = f"e2e-{run_id}-{i}"
        state = tmp / f"agent-{i}"
        state.mkdir(parents=True, exist_ok=True)
        argv = agent_argv(master, aid, state, slots)
        started.append(Agent(aid, argv, tmp / f"agent-{i}.log").start())
    cluster = Cluster(master, started, tmp, client, tmp / "checkpoints", db_url)

    def registered() -> bool:
        ids = {str(a["id"]) for a in master.get("/api/v1/agents")["agents"] or []}
        return all(a.agent_id in ids for a in started)

    try:
        wait_for(registered, 120, "agents to register")
    except TimeoutError as e:
        dump = cluster.dump()
        stop_cluster(cluster)
        raise TimeoutError(f"{e}\n{dump}") from None
    except BaseException:
        # Any other failure (a request timed out on a loaded machine) stops what was started
        # too: an agent process left behind fails a later test with its ResourceWarning.
        stop_cluster(cluster)
        raise
    return cluster


def stop_cluster(cluster: Cluster) -> None:
    """Kills experiments' work, then agents and master; removes the agents' containers."""
    for a in cluster.agents:
        a.kill(signal.SIGTERM)
    cluster.master.kill(signal.SIGTERM)
    for c in cluster.containers(running_only=False):
        with contextlib.suppress(Exception):  # already gone (removed by its agent)
            c.remove(force=True)
    assert_event_loop_sound(cluster.master.logs())


@pytest.fixture
def cluster_factory(tmp_path: Path, pg_url: str) -> Iterator[Callable[..., Cluster]]:
    """``cluster_factory(agents=2, slots=2, extra={...})`` -> a running :class:`Cluster`."""
    made: list[Cluster] = []

    def make(**kw: Any) -> Cluster:
        c = start_cluster(tmp_path, pg_url, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        stop_cluster(c)


@pytest.fixture
def cluster(cluster_factory: Callable[..., Cluster]) -> Cluster:
    """Two agents with two artificial CPU slots each."""
    return cluster_factory()


@pytest.fixture
def one_slot(cluster_factory: Callable[..., Cluster]) -> Cluster:
    """One agent with one slot: what an interactive task's tests need."""
    return cluster_factory(agents=1, slots=1)


def unique(name: str) -> str:
    """A user name of the test's own: a shared cluster keeps the users earlier tests made."""
    return f"{name}-{os.urandom(3).hex()}"


def plain() -> requests.Session:
    """A client that goes straight to the master (no proxy from the environment)."""
    s = requests.Session()
    s.trust_env = False
    return s
