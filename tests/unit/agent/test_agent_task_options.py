"""What the agent hands Docker for a task: GPUs of its slots, capabilities, devices, and the one
line a failed pull leaves (without the registry password)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from det.agent import images
from det.agent.containers import DockerRuntime, Record
from det.agent.devices import Slot, discover_slots
from det.common.states import AllocationState
from det.master.services import containers, trial_runs
from tests.fakes.docker_images import engine
from tests.fakes.nvml import FakeGpu, make_pynvml

GPUS = [
    FakeGpu("GPU-aaaa", "NVIDIA A100-SXM4-40GB", 40 * 1024**3),
    FakeGpu("GPU-bbbb", "NVIDIA A100-SXM4-40GB", 40 * 1024**3),
    FakeGpu("GPU-cccc", "NVIDIA A100-SXM4-40GB", 40 * 1024**3),
    FakeGpu("GPU-dddd", "NVIDIA A100-SXM4-40GB", 40 * 1024**3),
]


def create_args(spec: dict[str, Any], slots: list[Slot]) -> dict[str, Any]:
    runtime = DockerRuntime(engine(), None, None, "agent-1", slots)  # type: ignore[arg-type]
    rec = Record(
        allocation_id="7.1.1", task_id="7.1", container_id="cid", state=AllocationState.ASSIGNED
    )
    return runtime._create_args(rec, {"image": "img", **spec}, "/run/determined/workdir")


@pytest.fixture
def gpu_slots(monkeypatch: pytest.MonkeyPatch) -> list[Slot]:
    monkeypatch.setitem(sys.modules, "pynvml", make_pynvml(GPUS))
    return discover_slots("auto")


def test_a_cuda_task_gets_the_gpus_of_its_slots_by_uuid(gpu_slots: list[Slot]) -> None:
    args = create_args({"deviceType": "cuda", "slotIds": ["1", "3"]}, gpu_slots)
    (request,) = args["device_requests"]
    assert request["Driver"] == "nvidia"
    assert request["DeviceIDs"] == ["GPU-bbbb", "GPU-dddd"]
    assert request["Capabilities"] == [["gpu", "compute", "utility"]]
    env = args["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-bbbb,GPU-dddd"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    # Determined leaves CUDA_VISIBLE_DEVICES alone: inside, the two GPUs are devices 0 and 1.
    assert "CUDA_VISIBLE_DEVICES" not in env
    assert env["DET_SLOT_IDS"] == "[1, 3]"


def test_the_agent_decides_which_gpus_a_task_sees(gpu_slots: list[Slot]) -> None:
    spec = {
        "deviceType": "cuda",
        "slotIds": ["0"],
        "env": {"NVIDIA_VISIBLE_DEVICES": "all", "CUDA_VISIBLE_DEVICES": "0"},
    }
    env = create_args(spec, gpu_slots)["environment"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-aaaa"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"  # the user's own setting is kept


def test_a_cpu_task_on_a_gpu_machine_sees_no_gpu(gpu_slots: list[Slot]) -> None:
    args = create_args({"deviceType": "cpu", "slotIds": []}, gpu_slots)
    assert "device_requests" not in args
    assert args["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_capabilities_and_host_devices_reach_docker() -> None:
    spec = {
        "capAdd": ["SYS_PTRACE", "NET_ADMIN"],
        "capDrop": ["CHOWN"],
        "devices": [
            {"hostPath": "/dev/fuse", "containerPath": "/dev/fuse", "mode": "mrw"},
            {"hostPath": "/dev/null", "containerPath": "/dev/mynull", "mode": "rw"},
        ],
    }
    args = create_args(spec, [])
    assert args["cap_add"] == ["SYS_PTRACE", "NET_ADMIN"]
    assert args["cap_drop"] == ["CHOWN"]
    assert args["devices"] == ["/dev/fuse:/dev/fuse:mrw", "/dev/null:/dev/mynull:rw"]


def test_no_options_means_none_passed() -> None:
    args = create_args({}, [])
    assert not {"cap_add", "cap_drop", "devices"} & set(args)


class FakeApi:
    """Stands in for docker-py's low-level ``APIClient.pull`` (its stream of decoded events)."""

    def __init__(self, events: list[dict[str, Any]] | None = None, exc: Exception | None = None):
        self.events, self.exc = events or [], exc
        self.calls: list[tuple[str, Any, Any]] = []

    def pull(
        self, repo: str, tag: Any, stream: bool, decode: bool, auth_config: Any
    ) -> Iterator[Any]:
        self.calls.append((repo, tag, auth_config))
        if self.exc is not None:
            raise self.exc
        return iter(self.events)


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api = api


AUTH = {"username": "alice", "password": "s3cr3t-pw", "serveraddress": "127.0.0.1:5000"}


def test_pull_sends_registry_auth_and_splits_the_tag() -> None:
    api = FakeApi([{"status": "Pulling"}, {"status": "Digest: sha256:0"}])
    images.pull(FakeClient(api), "127.0.0.1:5000/team/img:v2", {**AUTH, "email": None})
    assert api.calls == [("127.0.0.1:5000/team/img", "v2", AUTH)]
    images.pull(FakeClient(api), "127.0.0.1:5000/img", None)
    assert api.calls[-1] == ("127.0.0.1:5000/img", "latest", None)
    images.pull(FakeClient(api), "img@sha256:abc", None)
    assert api.calls[-1] == ("img", "sha256:abc", None)


def test_a_refusal_in_the_stream_is_one_line_without_the_password() -> None:
    answer = "Head http://127.0.0.1:5000/v2/img/manifests/v2:\n unauthorized: s3cr3t-pw rejected"
    api = FakeApi([{"status": "Pulling"}, {"error": answer, "errorDetail": {"message": answer}}])
    with pytest.raises(images.ImagePullError) as e:
        images.pull(FakeClient(api), "127.0.0.1:5000/img:v2", AUTH)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith("image pull failed: 127.0.0.1:5000/img:v2: Head ")
    assert "unauthorized: ******** rejected" in line
    assert "s3cr3t-pw" not in line


def test_an_engine_error_keeps_its_explanation() -> None:
    import docker.errors

    err = docker.errors.NotFound("404", explanation="manifest for img:nope not found")
    with pytest.raises(images.ImagePullError, match=r"^image pull failed: img:nope: manifest"):
        images.pull(FakeClient(FakeApi(exc=err)), "img:nope", None)


def test_the_master_reads_the_agents_pull_failures() -> None:
    assert images.PULL_FAILED == containers.IMAGE_PULL_FAILED
    refused = [
        "img:v2: Head http://r/v2/img/manifests/v2: unauthorized: authentication required",
        "img:nope: manifest for img:nope not found: manifest unknown",
        "r/img:v1: pull access denied for r/img, repository does not exist",
        "r/img:v1: Head https://r/v2/img/manifests/v1: no basic auth credentials",
    ]
    for answer in refused:
        assert trial_runs.image_refused(images.PULL_FAILED + answer), answer
    passing = [
        "img:v1: Get http://r/v2/: dial tcp 127.0.0.1:5000: connect: connection refused",
        "img:v1: received unexpected HTTP status: 503 Service Unavailable",
        "img:v1: toomanyrequests: rate limit",
    ]
    for answer in passing:
        assert not trial_runs.image_refused(images.PULL_FAILED + answer), answer
    assert not trial_runs.image_refused("exit code 1: not found")  # not a pull failure


def test_an_agent_user_runs_as_its_numbers_without_new_privileges() -> None:
    args = create_args({"user": "4321:4322"}, [])
    assert args["user"] == "4321:4322"
    assert args["security_opt"] == ["no-new-privileges:true"]
    assert args["environment"]["HOME"] == "/run/determined/workdir"
    unlinked = create_args({"user": None}, [])
    assert not {"user", "security_opt"} & set(unlinked)
    assert "HOME" not in unlinked["environment"]


@pytest.mark.parametrize("user", ["0:0", "1000:0", "root", "alice:1000", "1000", "1:2:3", "-1:5"])
def test_the_agent_refuses_a_user_that_is_not_two_nonzero_numbers(user: str) -> None:
    from det.agent.errors import BadSpec

    with pytest.raises(BadSpec, match="user: "):
        create_args({"user": user}, [])
