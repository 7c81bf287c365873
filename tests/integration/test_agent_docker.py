"""det-agent against a real Docker engine and a fake master (tests/fakes/master.py).

The agent runs as a real `det-agent` process; containers use the `det-base:bookworm` image
(`infra/build-images.sh base`). Each test uses its own agent id, so its containers are found and
cleaned up by the `ai.det.agent-id` label.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import stall_clock
from tests.docker_support import docker_client as engine_with_image
from tests.fakes.master import FakeMaster, make_tgz

pytestmark = [pytest.mark.integration, pytest.mark.docker]

IMAGE = "det-base:bookworm"
TOKEN = "agent-secret"


@pytest.fixture(scope="module")
def docker_client() -> Any:
    return engine_with_image(IMAGE)


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token=TOKEN, heartbeat_seconds=0.2).start()
    yield m
    m.down = False
    m.stop()


class AgentProcess:
    def __init__(self, master: FakeMaster, agent_id: str, tmp: Path, env: dict[str, str]) -> None:
        self.agent_id = agent_id
        self.cmd = [
            sys.executable,
            "-m",
            "det.agent",
            "--master-url",
            master.url,
            "--agent-id",
            agent_id,
            "--agent-token",
            TOKEN,
            "--state-dir",
            str(tmp / "state"),
            "--slot-type",
            "cpu",
            "--heartbeat-seconds",
            "0.2",
            "--log-level",
            "DEBUG",
        ]
        self.env = {**os.environ, **env}
        self.log = tmp / f"agent-{agent_id}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AgentProcess:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.cmd, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        return self

    def tail(self, lines: int = 80) -> str:
        """The end of the agent's log, for a failure's message."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        stall_clock.wait_process(self.proc, 20)

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def agent(
    master: FakeMaster, tmp_path: Path, docker_client: Any
) -> Iterator[Callable[..., AgentProcess]]:
    agent_id = f"test-agent-{uuid.uuid4().hex[:8]}"
    started: list[AgentProcess] = []

    def make(**env: str) -> AgentProcess:
        a = AgentProcess(master, agent_id, tmp_path, env).start()
        started.append(a)
        return a

    yield make
    for a in started:
        if a.proc is not None and a.proc.poll() is None:
            a.kill(signal.SIGTERM)
    for c in docker_client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"ai.det.agent-id={agent_id}"}
    ):
        c.remove(force=True)


def spec(
    command: str, *, task: str = "1.1", env: dict[str, str] | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "taskId": task,
        "taskType": "TRIAL",
        "image": IMAGE,
        "forcePull": False,
        "command": ["bash", "-c", command],
        "env": env or {},
        "slotIds": ["0"],
        "deviceType": "cpu",
        "shmSize": 64 * 1024 * 1024,
        "networkMode": "host",
        "bindMounts": [],
        "workdir": "/run/determined/workdir",
        "killGraceSeconds": 10,
        **extra,
    }


def state_of(master: FakeMaster, agent_id: str, alloc: str) -> Callable[[], dict[str, Any] | None]:
    def check() -> dict[str, Any] | None:
        return master.report(agent_id, alloc)

    return check


def wait_state(
    master: FakeMaster, agent_id: str, alloc: str, state: str, timeout: float = 60
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        r = master.report(agent_id, alloc)
        return r if r and r["state"] == state else None

    return master.wait_for(check, timeout, f"{alloc} {state}")


def own_containers(docker_client: Any, agent_id: str) -> list[Any]:
    return list(
        docker_client.containers.list(
            all=True, ignore_removed=True, filters={"label": f"ai.det.agent-id={agent_id}"}
        )
    )


def test_runs_container_with_env_and_context_ships_logs_and_reports_exit(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    a = agent()
    master.contexts["/api/v1/tasks/1.1/context"] = make_tgz({"train.py": "print('from context')\n"})
    script = (
        'python3 train.py; echo "agent=$DET_AGENT_ID slots=$DET_SLOT_IDS foo=$FOO cid=$DET_CONTAINER_ID pwd=$PWD";'
        ' echo "[rank=1] ranked line"; echo "to stderr" >&2; exit 3'
    )
    master.run(
        a.agent_id,
        "1.1.1",
        spec(script, env={"FOO": "bar"}, contextPath="/api/v1/tasks/1.1/context"),
    )

    report = wait_state(master, a.agent_id, "1.1.1", "TERMINATED")
    assert report["exitCode"] == 3 and report["error"] is None
    try:
        lines = master.wait_for(
            lambda: len(master.log_lines("1.1.1")) >= 4 and master.log_lines("1.1.1"),
            desc="the container's 4 lines",
        )
    except AssertionError as e:  # once seen under load (issue 44): say what the agent did
        raise AssertionError(
            f"{e}; got {master.log_lines('1.1.1')}; states {master.states_seen(a.agent_id, '1.1.1')}"
            f"; the agent's log ends:\n{a.tail()}"
        ) from None
    cid = report["containerId"]
    # Docker copies stdout and stderr separately: order is kept within a stream only.
    assert [line for line in lines if line != "to stderr\n"] == [
        "from context\n",
        f"agent={a.agent_id} slots=[0] foo=bar cid={cid} pwd=/run/determined/workdir\n",
        "ranked line\n",
    ]
    assert len(lines) == 4
    by_text = {e["log"]: e for e in master.logs}
    assert by_text["ranked line\n"]["rankId"] == 1
    assert by_text["to stderr\n"]["stdtype"] == "stderr"
    assert {e["taskId"] for e in master.logs} == {"1.1"}
    assert {e["agentId"] for e in master.logs} == {a.agent_id}
    assert master.states_seen(a.agent_id, "1.1.1")[-1] == "TERMINATED"

    (container,) = own_containers(docker_client, a.agent_id)
    assert container.labels["ai.det.allocation-id"] == "1.1.1"
    assert container.labels["ai.det.task-id"] == "1.1"
    assert container.attrs["HostConfig"]["NetworkMode"] == "host"

    # Reported until the master lets go of it, then removed.
    time.sleep(1)
    assert master.report(a.agent_id, "1.1.1") is not None
    master.drop(a.agent_id, "1.1.1")
    master.wait_for(lambda: master.report(a.agent_id, "1.1.1") is None, desc="report dropped")
    master.wait_for(lambda: not own_containers(docker_client, a.agent_id), desc="container removed")


def test_start_failure_is_reported_with_an_error(
    master: FakeMaster, agent: Callable[..., AgentProcess]
) -> None:
    a = agent()
    master.run(a.agent_id, "2.1.1", spec("true", image="det-no-such-image:never", task="2.1"))
    report = wait_state(master, a.agent_id, "2.1.1", "TERMINATED")
    assert report["exitCode"] is None
    # one line naming the image and the engine's answer (Docker Hub is out of reach here)
    assert report["error"].startswith("image pull failed: det-no-such-image:never: ")
    assert "\n" not in report["error"]


def test_restarted_agent_reattaches_without_restarting_and_loses_no_logs(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    a = agent()
    script = "for i in $(seq 1 150); do echo line $i; sleep 0.04; done"
    master.run(a.agent_id, "3.1.1", spec(script, task="3.1"))
    wait_state(master, a.agent_id, "3.1.1", "RUNNING")
    master.wait_for(lambda: len(master.log_lines("3.1.1")) >= 20, desc="some lines shipped")
    (before,) = own_containers(docker_client, a.agent_id)
    a.kill(signal.SIGKILL)

    before.reload()
    assert before.status == "running"  # an agent crash does not touch its containers
    b = agent()
    report = wait_state(master, b.agent_id, "3.1.1", "TERMINATED")
    assert report["exitCode"] == 0
    (after,) = own_containers(docker_client, b.agent_id)
    assert after.id == before.id
    assert after.attrs["State"]["StartedAt"] == before.attrs["State"]["StartedAt"]
    assert after.attrs["RestartCount"] == 0
    expected = [f"line {i}\n" for i in range(1, 151)]
    lines = master.wait_for(
        lambda: set(master.log_lines("3.1.1")) >= set(expected) and master.log_lines("3.1.1")
    )
    assert sorted(set(lines), key=lambda s: int(s.split()[1])) == expected
    assert "reattached to 3.1.1" in b.output()


def test_container_the_master_stops_listing_is_killed_gracefully(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    a = agent()
    script = "trap 'echo got SIGTERM; exit 42' TERM; echo ready; while true; do sleep 0.1; done"
    master.run(a.agent_id, "4.1.1", spec(script, task="4.1"))
    wait_state(master, a.agent_id, "4.1.1", "RUNNING")
    master.wait_for(lambda: "ready\n" in master.log_lines("4.1.1"), desc="ready")
    master.drop(a.agent_id, "4.1.1")

    master.wait_for(
        lambda: "got SIGTERM\n" in master.log_lines("4.1.1"), desc="SIGTERM seen by the task"
    )
    master.wait_for(lambda: not own_containers(docker_client, a.agent_id), desc="container removed")
    exits = [
        c["exitCode"]
        for _, body in master.heartbeats[a.agent_id]
        for c in body["containers"]
        if c["allocationId"] == "4.1.1" and c["state"] == "TERMINATED"
    ]
    assert exits and set(exits) == {42}  # exited on SIGTERM, before any SIGKILL


def test_kill_action_stops_with_sigkill_after_grace(
    master: FakeMaster, agent: Callable[..., AgentProcess]
) -> None:
    a = agent()
    script = "trap 'echo ignoring TERM' TERM; while true; do sleep 0.1; done"
    master.run(a.agent_id, "5.1.1", spec(script, task="5.1", killGraceSeconds=1))
    wait_state(master, a.agent_id, "5.1.1", "RUNNING")
    master.kill(a.agent_id, "5.1.1")
    report = wait_state(master, a.agent_id, "5.1.1", "TERMINATED")
    assert report["exitCode"] == 137  # SIGKILL once the grace period ran out
    assert "ignoring TERM\n" in master.wait_for(lambda: master.log_lines("5.1.1"))


def test_master_unreachable_keeps_containers_running(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    a = agent(DET_MAX_BACKOFF_SECONDS="1")
    script = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"
    master.run(a.agent_id, "6.1.1", spec(script, task="6.1"))
    running = wait_state(master, a.agent_id, "6.1.1", "RUNNING")
    master.down = True
    master.wait_for(lambda: "heartbeat failed" in a.output(), desc="agent notices the outage")
    beats_during_outage = len(master.heartbeats[a.agent_id])
    time.sleep(3)  # several backoff rounds without a master
    (container,) = own_containers(docker_client, a.agent_id)
    assert container.status == "running"
    lines_before = len(master.log_lines("6.1.1"))

    master.down = False
    master.wait_for(
        lambda: len(master.heartbeats[a.agent_id]) > beats_during_outage + 2, desc="reconnect"
    )
    report = wait_state(master, a.agent_id, "6.1.1", "RUNNING")
    assert report["containerId"] == running["containerId"]
    # Lines printed while the master was away are shipped after it returns.
    master.wait_for(
        lambda: len(master.log_lines("6.1.1")) > lines_before + 10, desc="backlog shipped"
    )
    ticks = [int(line.split()[1]) for line in master.log_lines("6.1.1")]
    assert sorted(set(ticks)) == list(range(1, max(ticks) + 1))


def test_agent_adopts_and_kills_only_its_own_clusters_containers(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    """Another cluster's agent of the same id shares the engine: its container is never adopted
    nor killed; a container of ours from before the cluster label is adopted by its env."""
    first = agent()
    master.wait_for(lambda: master.heartbeats.get(first.agent_id), desc="first heartbeat")
    first.kill(signal.SIGKILL)
    aid = first.agent_id
    common = {"image": IMAGE, "command": ["sleep", "300"], "detach": True}
    other = docker_client.containers.run(
        labels={
            "ai.det.agent-id": aid,
            "ai.det.cluster-id": "another-cluster",
            "ai.det.allocation-id": "9.1.1",
            "ai.det.task-id": "9.1",
            "ai.det.container-id": "other",
        },
        environment={"DET_CLUSTER_ID": "another-cluster"},
        name=f"det-other-{uuid.uuid4().hex[:8]}",
        **common,
    )
    legacy = docker_client.containers.run(
        labels={
            "ai.det.agent-id": aid,
            "ai.det.allocation-id": "9.2.1",
            "ai.det.task-id": "9.2",
            "ai.det.container-id": "legacy",
            "ai.det.kill-grace-seconds": "1",
        },
        environment={"DET_CLUSTER_ID": "fake-cluster"},
        name=f"det-legacy-{uuid.uuid4().hex[:8]}",
        **common,
    )
    master.run(aid, "9.2.1", spec("sleep 300", task="9.2"))
    master.run(aid, "9.3.1", spec("sleep 300", task="9.3", killGraceSeconds=1))
    b = agent()
    assert wait_state(master, aid, "9.2.1", "RUNNING")["containerId"] == "legacy"
    wait_state(master, aid, "9.3.1", "RUNNING")
    seen = len(master.heartbeats[aid])
    master.wait_for(lambda: len(master.heartbeats[aid]) > seen + 10, desc="ten more passes")

    other.reload()
    assert other.status == "running", b.output()[-2000:]
    assert master.report(aid, "9.1.1") is None
    assert "9.1.1" not in b.output()
    started = next(
        c for c in own_containers(docker_client, aid) if c.labels["ai.det.allocation-id"] == "9.3.1"
    )
    assert started.labels["ai.det.cluster-id"] == "fake-cluster"
    # Dropped by the master: ours are stopped, the other cluster's still runs.
    master.drop(aid, "9.2.1")
    master.drop(aid, "9.3.1")

    def left() -> set[str]:  # sparse: a container removed meanwhile is no error
        found = docker_client.containers.list(
            all=True, sparse=True, filters={"label": f"ai.det.agent-id={aid}"}
        )
        return {c.id for c in found}

    master.wait_for(lambda: left() == {other.id}, timeout=60, desc="our containers removed")
    assert legacy.id not in left()
    other.reload()
    assert other.status == "running"


def test_agent_refuses_its_own_state_and_the_engine_socket_whatever_the_master_sends(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any, tmp_path: Path
) -> None:
    a = agent()
    link = tmp_path / "innocent-data"
    link.symlink_to("/var/run")  # the master sees a data path; the agent resolves it
    sources = {
        "10.1.1": "/var/run/docker.sock",
        "10.2.1": str(tmp_path / "state" / "log-cursors"),
        "10.3.1": str(link),
        "10.4.1": "/",
    }
    for alloc, source in sources.items():
        mounts = [{"hostPath": source, "containerPath": "/x", "readOnly": True, "propagation": ""}]
        master.run(a.agent_id, alloc, spec("true", task=alloc[:-2], bindMounts=mounts))
    for alloc, source in sources.items():
        report = wait_state(master, a.agent_id, alloc, "TERMINATED")
        assert report["error"].startswith(f"start failed: bindMounts[0].hostPath: {source} "), (
            report
        )
        assert "agent mounts it for no task" in report["error"]
    assert not own_containers(docker_client, a.agent_id)
