"""Which containers get their context after the start (det.common.context_ready): the decision
only; the ordering itself on real Docker in tests/integration/test_agent_context_copy.py."""

from __future__ import annotations

from typing import Any

from det.agent.containers import DockerRuntime, Record
from det.common.states import AllocationState
from tests.fakes import docker_images

WRAPPER = ["python3", "-m", "det.exec.run", "--", "python3 train.py"]


def runtime(harness: bool = True, after_start: bool = True) -> DockerRuntime:
    engine = docker_images.engine({"own-entrypoint": {"Entrypoint": ["/init.sh"]}})
    return DockerRuntime(
        engine, None, None, "agent-1", [],  # type: ignore[arg-type]
        harness=object() if harness else None,  # type: ignore[arg-type]
        context_after_start=after_start,
    )  # fmt: skip


def ready(rt: DockerRuntime, command: Any, image: str = "plain") -> str | None:
    rec = Record("a-1", "t-1", "c0ffee-1", AllocationState.STARTING)
    return rt._ready(rec, {"command": command, "image": image})


def test_the_wrapper_in_an_image_without_entrypoint_starts_before_its_copy() -> None:
    assert ready(runtime(), WRAPPER) == "/run/det/context-c0ffee-1.ready"
    assert ready(runtime(), ["/usr/bin/python3.11", "-m", "det.exec.run", "--", "x"]) is not None


def test_everything_else_gets_its_context_first() -> None:
    for command in (
        ["sh", "-c", "python3 -m det.exec.run -- x"],
        ["python3", "-m", "det.exec.tensorboard"],
        ["python3", "-m", "det.exec.gc_checkpoints"],
        ["jupyter", "lab"],
        "python3 -m det.exec.run -- x",
        None,
    ):
        assert ready(runtime(), command) is None, command
    assert ready(runtime(), WRAPPER, image="own-entrypoint") is None
    assert ready(runtime(harness=False), WRAPPER) is None
    assert ready(runtime(after_start=False), WRAPPER) is None
