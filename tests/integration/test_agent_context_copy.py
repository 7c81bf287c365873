"""A wrapped task's context copied in after its container started (issue 29), on real Docker.

A task whose command is ``python3 -m det.exec.run`` starts at once; the agent copies the context
in meanwhile and the wrapper waits for the ready marker. The fake master holds the context's
download (``context_gate``) so that the copy is still to come while the container runs: what
the tests check does not depend on how fast the machine is. Fixtures: test_agent_docker.py.
"""

from __future__ import annotations

import hashlib
import random
import signal
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fakes.master import FakeMaster, make_tgz
from tests.integration.test_agent_docker import (
    IMAGE,
    AgentProcess,
    agent,
    docker_client,
    master,
    own_containers,
    spec,
    wait_state,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker]
__all__ = ["agent", "docker_client", "master"]  # fixtures

WRAPPER = ["python3", "-m", "det.exec.run", "--"]
CONTEXT = "/api/v1/tasks/9.1/context"
# Every file of the context, counted and hashed at the entrypoint's first line.
CHECK = (
    'echo "files=$(find . -type f | wc -l) big=$(sha256sum big.txt | cut -c1-64)'
    ' owner=$(stat -c %u:%g . train.py | tr "\\n" " ")"'
)


@pytest.fixture
def gate(master: FakeMaster) -> Iterator[FakeMaster]:
    """The master holds context downloads until the test lets them go (always, at the end)."""
    master.context_gate.clear()
    yield master
    master.context_gate.set()


def big_context(files: int = 300) -> tuple[bytes, str, int]:
    rng = random.Random(29)
    big = "".join(rng.choice("0123456789abcdef") for _ in range(3_000_000))
    content = {f"pkg/m{i:03d}.py": f"x = {i}\n" * 200 for i in range(files)}
    content.update({"train.py": "print('train')\n", "big.txt": big})
    return make_tgz(content), hashlib.sha256(big.encode()).hexdigest(), len(content)


def wrapped(entry: str, **extra: Any) -> dict[str, Any]:
    return {
        **spec("unused", task="9.1", contextPath=CONTEXT, **extra),
        "command": [*WRAPPER, entry],
    }


def held_running(master: FakeMaster, a: AgentProcess, docker_client: Any, alloc: str) -> Any:
    """The container runs while its context's download is held: the copy is still to come."""
    wait_state(master, a.agent_id, alloc, "RUNNING")
    master.wait_for(lambda: master.context_requests >= 1, desc="context asked for")
    (c,) = own_containers(docker_client, a.agent_id)
    c.reload()
    assert c.status == "running"
    assert c.labels["ai.det.context-ready"].startswith("/run/det/context-")
    return c


def test_entrypoint_sees_every_context_file_and_its_owner_at_its_first_line(
    gate: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    tgz, digest, count = big_context()
    gate.contexts[CONTEXT] = tgz
    a = agent()
    gate.run(a.agent_id, "9.1.1", wrapped(CHECK, user="4321:4322"))
    held_running(gate, a, docker_client, "9.1.1")
    assert gate.log_lines("9.1.1") == []  # nothing of the user's ran before its context
    gate.context_gate.set()

    report = wait_state(gate, a.agent_id, "9.1.1", "TERMINATED", timeout=120)
    assert report["exitCode"] == 0 and report["error"] is None
    lines = gate.wait_for(lambda: gate.log_lines("9.1.1"), desc="the entrypoint's line")
    assert lines == [f"files={count} big={digest} owner=4321:4322 4321:4322 \n"]


def test_a_kill_during_the_copy_ends_the_task_without_running_it(
    gate: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    gate.contexts[CONTEXT] = make_tgz({"train.py": "print('train')\n"})
    a = agent()
    gate.run(a.agent_id, "9.1.2", wrapped("echo ran", env={"DET_STARTUP_PROFILE": "1"}))
    held_running(gate, a, docker_client, "9.1.2")
    # Its handlers are in place from this line on (before, as PID 1 it would ignore SIGTERM and
    # be SIGKILLed after the grace period: still without running anything).
    gate.wait_for(
        lambda: any("waiting for the context" in line for line in gate.log_lines("9.1.2")),
        timeout=120,
        desc="the wrapper waiting",
    )
    gate.kill(a.agent_id, "9.1.2")
    # 143, not 137: the wrapper ends on SIGTERM, the grace period is not spent.
    report = wait_state(gate, a.agent_id, "9.1.2", "TERMINATED", timeout=120)
    assert report["exitCode"] == 128 + signal.SIGTERM and report["error"] is None
    gate.context_gate.set()  # the copy then finds a stopped container: no error, nothing runs
    (c,) = own_containers(docker_client, a.agent_id)
    assert c.wait(timeout=60)["StatusCode"] == 128 + signal.SIGTERM
    assert "ran\n" not in gate.log_lines("9.1.2")
    assert not any("context in place" in line for line in gate.log_lines("9.1.2"))
    assert gate.report(a.agent_id, "9.1.2")["error"] is None  # type: ignore[index]


def test_a_failed_copy_fails_the_task_with_its_error_and_runs_nothing(
    master: FakeMaster, agent: Callable[..., AgentProcess]
) -> None:
    master.contexts[CONTEXT] = b"not a tar archive at all"
    a = agent()
    master.run(a.agent_id, "9.1.3", wrapped("echo ran"))
    report = wait_state(master, a.agent_id, "9.1.3", "TERMINATED", timeout=120)
    assert report["error"].startswith(
        "start failed: context copy: context is not a readable tar archive"
    ), report
    assert report["exitCode"] == 128 + signal.SIGKILL
    assert "ran\n" not in master.log_lines("9.1.3")


def test_an_agent_restart_during_the_copy_ends_the_task_with_a_clear_error(
    gate: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    gate.contexts[CONTEXT] = make_tgz({"train.py": "print('train')\n"})
    a = agent()
    gate.run(a.agent_id, "9.1.4", wrapped("echo ran"))
    before = held_running(gate, a, docker_client, "9.1.4")
    a.kill(signal.SIGKILL)  # the copy dies with it; no later copy would resume it

    b = agent()
    report = wait_state(gate, b.agent_id, "9.1.4", "TERMINATED", timeout=120)
    assert report["error"] == "start failed: context copy cut short by an agent restart"
    (after,) = own_containers(docker_client, b.agent_id)
    assert after.id == before.id
    gate.context_gate.set()
    assert "ran\n" not in gate.log_lines("9.1.4")


def test_a_command_that_is_not_the_wrapper_gets_its_context_before_it_starts(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    master.contexts[CONTEXT] = make_tgz({"train.py": "print('train')\n"})
    a = agent()
    master.run(a.agent_id, "9.1.5", spec("python3 train.py", task="9.1", contextPath=CONTEXT))
    report = wait_state(master, a.agent_id, "9.1.5", "TERMINATED", timeout=120)
    assert report["exitCode"] == 0
    assert master.wait_for(lambda: master.log_lines("9.1.5")) == ["train\n"]
    (c,) = own_containers(docker_client, a.agent_id)
    assert "ai.det.context-ready" not in c.labels


def test_an_image_with_an_entrypoint_of_its_own_gets_its_context_before_it_starts(
    master: FakeMaster, agent: Callable[..., AgentProcess], docker_client: Any
) -> None:
    # The image's ENTRYPOINT runs before the wrapper: it must find the context in place too.
    tag = f"det-test-entrypoint:{uuid.uuid4().hex[:12]}"
    base = docker_client.containers.create(IMAGE, "true")
    try:
        base.commit(
            *tag.split(":"),
            changes=['ENTRYPOINT ["/bin/sh", "-c", "cat train.py; exec \\"$@\\"", "sh"]'],
        )
    finally:
        base.remove(force=True)
    try:
        master.contexts[CONTEXT] = make_tgz({"train.py": "print('train')\n"})
        a = agent()
        master.run(a.agent_id, "9.1.6", {**wrapped("echo wrapped"), "image": tag})
        report = wait_state(master, a.agent_id, "9.1.6", "TERMINATED", timeout=120)
        assert report["exitCode"] == 0, report
        lines = master.wait_for(
            lambda: len(master.log_lines("9.1.6")) >= 2 and master.log_lines("9.1.6")
        )
        assert lines == ["print('train')\n", "wrapped\n"]
        (c,) = own_containers(docker_client, a.agent_id)
        assert "ai.det.context-ready" not in c.labels
        c.remove(force=True)
    finally:
        docker_client.images.remove(tag, force=True)
