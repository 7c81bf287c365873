"""A task that holds slots gets one slot's share of the machine's CPUs as OMP_NUM_THREADS,
unless its environment or its image sets the variable (det.agent.containers)."""

from __future__ import annotations

from typing import Any

from det.agent.containers import THREADS_ENV, DockerRuntime, Record, threads_per_slot
from det.agent.devices import cpu_slots
from det.common.states import AllocationState
from tests.fakes.docker_images import engine

IMAGES = {"own-threads": {"Env": ["PATH=/usr/bin", "OMP_NUM_THREADS=6"]}}


def env_of(spec: dict[str, Any], *, agent_slots: int, cpus: int) -> dict[str, str]:
    runtime = DockerRuntime(engine(IMAGES), None, None, "agent-1", cpu_slots(agent_slots))  # type: ignore[arg-type]
    runtime._cpus = cpus  # the machine's usable CPUs (its affinity on a real agent)
    rec = Record("7.1.1", "7.1", "cid", AllocationState.ASSIGNED)
    args = runtime._create_args(rec, {"image": "plain", **spec}, "/run/determined/workdir")
    return dict(args["environment"])


def test_each_slot_gets_its_share_of_the_cpus() -> None:
    assert env_of({"slotIds": ["0"]}, agent_slots=2, cpus=8)[THREADS_ENV] == "4"
    # Per process: a two-slot task's launcher starts a process per slot, each with one share.
    assert env_of({"slotIds": ["0", "1"]}, agent_slots=2, cpus=8)[THREADS_ENV] == "4"
    assert env_of({"slotIds": ["0"]}, agent_slots=1, cpus=2)[THREADS_ENV] == "2"


def test_more_slots_than_cpus_still_gives_one_thread() -> None:
    assert threads_per_slot(2, 8) == 1 and threads_per_slot(3, 2) == 1
    assert env_of({"slotIds": ["3"]}, agent_slots=8, cpus=2)[THREADS_ENV] == "1"


def test_the_tasks_environment_or_its_image_wins() -> None:
    mine = env_of({"slotIds": ["0"], "env": {THREADS_ENV: "3"}}, agent_slots=2, cpus=8)
    assert mine[THREADS_ENV] == "3"
    # The image's ENV applies when the container's environment does not name the variable.
    assert THREADS_ENV not in env_of(
        {"slotIds": ["0"], "image": "own-threads"}, agent_slots=2, cpus=8
    )


def test_a_task_without_slots_is_left_alone() -> None:
    assert THREADS_ENV not in env_of({"slotIds": []}, agent_slots=2, cpus=8)
