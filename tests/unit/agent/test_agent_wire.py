"""The agent's side of the wire: container environment and heartbeat answers."""

from __future__ import annotations

import json
from typing import Any

from det.agent.containers import DockerRuntime, Record, container_env
from det.agent.daemon import parse_desired
from det.agent.devices import Slot
from det.agent.reconcile import Desired
from det.common.states import AllocationState
from tests.fakes.docker_images import engine


def test_container_env_adds_the_agents_view_over_the_spec() -> None:
    spec = {
        "taskId": "7.1",
        "slotIds": ["0", 1],
        "env": {"DET_MASTER": "http://m:8080", "DET_AGENT_ID": "master-guess", "N": 3},
    }
    env = container_env(spec, "agent-1", "cid-1", "7.1.1")
    assert env["DET_AGENT_ID"] == "agent-1"  # the agent's own view wins
    assert json.loads(env["DET_SLOT_IDS"]) == [0, 1]  # ints, as Determined's harness expects
    assert env["DET_CONTAINER_ID"] == "cid-1"
    assert env["DET_ALLOCATION_ID"] == "7.1.1"
    assert env["DET_TASK_ID"] == "7.1"
    assert env["DET_RESOURCES_TYPE"] == "docker-container"
    assert env["DET_MASTER"] == "http://m:8080"
    assert env["N"] == "3"


def test_container_env_keeps_master_values_it_only_defaults() -> None:
    spec = {"env": {"DET_ALLOCATION_ID": "from-master", "DET_RESOURCES_TYPE": "docker-container"}}
    env = container_env(spec, "a", "c", "other")
    assert env["DET_ALLOCATION_ID"] == "from-master"
    assert env["DET_SLOT_IDS"] == "[]"
    assert "DET_TASK_ID" not in env


def test_parse_desired_keeps_specs_of_runs_and_skips_malformed_items() -> None:
    answer = {
        "containers": [
            {"allocationId": "1", "action": "RUN", "spec": {"image": "x"}},
            {"allocationId": "2", "action": "KILL"},
            {"allocationId": "3", "action": "PAUSE"},
            {"action": "RUN"},
        ]
    }
    desired, specs = parse_desired(answer)
    assert desired == [Desired("1", "RUN"), Desired("2", "KILL")]
    assert specs == {"1": {"image": "x"}}
    assert parse_desired({}) == ([], {})


def _create_args(spec: dict[str, object], slots: list[Slot]) -> dict[str, Any]:
    runtime = DockerRuntime(engine(), None, None, "agent-1", slots, network_mode="bridge")  # type: ignore[arg-type]
    runtime.cluster_id = "cluster-1"  # learnt from the master's first heartbeat answer
    rec = Record(
        allocation_id="7.1.1", task_id="7.1", container_id="cid", state=AllocationState.ASSIGNED
    )
    return runtime._create_args(rec, {"image": "img", **spec}, "/run/determined/workdir")


GPUS = [Slot("0", "cuda", "GPU-aaa", "A100", 40960), Slot("1", "cuda", "GPU-bbb", "A100", 40960)]


def test_cuda_tasks_get_only_their_assigned_gpus_by_uuid() -> None:
    args = _create_args({"deviceType": "cuda", "slotIds": ["1"]}, GPUS)
    (request,) = args["device_requests"]
    assert request["DeviceIDs"] == ["GPU-bbb"]
    # as Determined's agent asks: the nvidia driver, with compute and utility capabilities
    assert request["Driver"] == "nvidia"
    assert request["Capabilities"] == [["gpu", "compute", "utility"]]


def test_cpu_tasks_get_no_gpus_and_the_agents_default_network() -> None:
    args = _create_args({"deviceType": "cpu", "slotIds": ["0"]}, GPUS)
    assert "device_requests" not in args
    assert args["network_mode"] == "bridge"
    assert args["labels"] == {
        "ai.det.agent-id": "agent-1",
        "ai.det.allocation-id": "7.1.1",
        "ai.det.task-id": "7.1",
        "ai.det.container-id": "cid",
        "ai.det.kill-grace-seconds": "30.0",
        "ai.det.cluster-id": "cluster-1",
    }


def test_bind_mounts_shm_and_network_from_the_spec() -> None:
    spec = {
        "networkMode": "host",
        "shmSize": 4294967296,
        "bindMounts": [
            {
                "hostPath": "/data",
                "containerPath": "/data",
                "readOnly": True,
                "propagation": "rprivate",
            },
            {"hostPath": "/scratch", "containerPath": "/tmp/s"},
        ],
    }
    args = _create_args(spec, [])
    assert args["network_mode"] == "host"
    assert args["shm_size"] == 4294967296
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in args["mounts"]] == [
        ("/data", "/data", True),
        ("/scratch", "/tmp/s", False),
    ]
    assert args["mounts"][0]["BindOptions"] == {"Propagation": "rprivate"}
    assert args["working_dir"] == "/run/determined/workdir"


def test_shm_size_may_be_a_size_string() -> None:
    assert _create_args({"shmSize": "4G"}, [])["shm_size"] == "4G"
    assert "shm_size" not in _create_args({"shmSize": None}, [])
