"""GCP preflight (REST answers given as data) and teardown (a small in-memory Compute)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from det.deploy.common.errors import PreflightError
from det.deploy.gcp import preflight, teardown

SERVICES = "https://serviceusage.googleapis.com/v1/projects/p/services"


def _answers(table: dict[str, tuple[int, dict[str, Any]]]):
    seen: list[str] = []

    def get_json(url: str) -> tuple[int, dict[str, Any]]:
        seen.append(url)
        for prefix, answer in table.items():
            if url.startswith(prefix):
                return answer
        return 404, {}

    return get_json, seen


def _enabled(*names: str, token: str = "") -> tuple[int, dict[str, Any]]:
    body: dict[str, Any] = {"services": [{"config": {"name": n}} for n in names]}
    if token:
        body["nextPageToken"] = token
    return 200, body


def test_all_required_apis_enabled_passes_across_pages():
    first, rest = preflight.REQUIRED_APIS[:3], preflight.REQUIRED_APIS[3:]
    get_json, seen = _answers(
        {
            f"{SERVICES}?filter=state:ENABLED&pageSize=200&pageToken=t2": _enabled(*rest),
            SERVICES: _enabled(*first, token="t2"),
        }
    )
    preflight.check_apis(get_json, "p", preflight.REQUIRED_APIS)
    assert len(seen) == 2


def test_missing_api_names_the_enable_command():
    get_json, _ = _answers({SERVICES: _enabled(*preflight.REQUIRED_APIS)})
    with pytest.raises(
        PreflightError,
        match=r"file.googleapis.com; run `gcloud services enable file.googleapis.com --project p`",
    ):
        preflight.check_apis(get_json, "p", [*preflight.REQUIRED_APIS, preflight.FILESTORE_API])


def test_unknown_project_is_a_clear_error():
    get_json, _ = _answers({SERVICES: (404, {"error": {}})})
    with pytest.raises(PreflightError, match="project 'p' does not exist"):
        preflight.check_apis(get_json, "p", preflight.REQUIRED_APIS)


def test_a_403_of_service_usage_is_not_called_a_missing_project():
    denied = {"error": {"code": 403, "message": "Permission denied on resource project p."}}
    get_json, _ = _answers({SERVICES: (403, denied)})
    with pytest.raises(PreflightError) as e:
        preflight.check_apis(get_json, "p", preflight.REQUIRED_APIS)
    assert "does not exist" not in str(e.value)
    assert "may not list the services of project 'p'" in str(e.value)
    assert "serviceusage.services.list" in str(e.value) and "Permission denied" in str(e.value)
    disabled = {
        "error": {
            "code": 403,
            "message": "Service Usage API has not been used in project 1 before or it is disabled.",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "SERVICE_DISABLED"}
            ],
        }
    }
    get_json, _ = _answers({SERVICES: (403, disabled)})
    with pytest.raises(
        PreflightError,
        match=r"Service Usage API is disabled .*gcloud services enable serviceusage.googleapis.com --project p",
    ):
        preflight.check_apis(get_json, "p", preflight.REQUIRED_APIS)


PROJECT_URL = "https://compute.googleapis.com/compute/v1/projects/p"
REGION_URL = f"{PROJECT_URL}/regions/us-west1"


def _region(
    metric: str, limit: float, usage: float, all_regions: float = 64
) -> dict[str, tuple[int, dict[str, Any]]]:
    # The region's URL first: the project's is a prefix of it.
    return {
        REGION_URL: (
            200,
            {
                "quotas": [
                    {"metric": "CPUS", "limit": 24, "usage": 0},
                    {"metric": metric, "limit": limit, "usage": usage},
                ]
            },
        ),
        PROJECT_URL: (
            200,
            {
                "quotas": [
                    {"metric": "CPUS_ALL_REGIONS", "limit": 32, "usage": 0},
                    {"metric": "GPUS_ALL_REGIONS", "limit": all_regions, "usage": 0},
                ]
            },
        ),
    }


def test_project_wide_gpu_quota_too_small_fails_even_when_the_region_has_room():
    # A new project: 16 T4s in the region, but GPUS_ALL_REGIONS is 0.
    get_json, seen = _answers(_region("NVIDIA_T4_GPUS", 16, 0, all_regions=0))
    with pytest.raises(
        PreflightError,
        match=r"need 8 GPUs but the project-wide quota GPUS_ALL_REGIONS of p has 0 available",
    ):
        preflight.check_gpu_quota(
            get_json, "p", "us-west1", "nvidia-tesla-t4", 4, 2, preemptible=False
        )
    assert PROJECT_URL in seen


def test_project_wide_gpu_quota_for_preemptible_agents_is_a_warning():
    get_json, _ = _answers(_region("PREEMPTIBLE_NVIDIA_T4_GPUS", 16, 0, all_regions=1))
    warning = preflight.check_gpu_quota(
        get_json, "p", "us-west1", "nvidia-tesla-t4", 4, 2, preemptible=True
    )
    assert warning and "GPUS_ALL_REGIONS" in warning


def test_enough_gpu_quota_everywhere_passes():
    get_json, seen = _answers(_region("NVIDIA_L4_GPUS", 8, 0, all_regions=8))
    assert (
        preflight.check_gpu_quota(get_json, "p", "us-west1", "nvidia-l4", 1, 8, preemptible=False)
        is None
    )
    assert set(seen) == {PROJECT_URL, REGION_URL}


def test_gpu_quota_too_small_fails_with_the_numbers():
    get_json, _ = _answers(_region("NVIDIA_T4_GPUS", 16, 4))
    with pytest.raises(
        PreflightError, match="need 20 GPUs but NVIDIA_T4_GPUS in us-west1 has 12 available"
    ):
        preflight.check_gpu_quota(
            get_json, "p", "us-west1", "nvidia-tesla-t4", 4, 5, preemptible=False
        )


def test_preemptible_agents_use_the_preemptible_quota():
    get_json, _ = _answers(_region("PREEMPTIBLE_NVIDIA_T4_GPUS", 20, 0))
    assert (
        preflight.check_gpu_quota(
            get_json, "p", "us-west1", "nvidia-tesla-t4", 4, 5, preemptible=True
        )
        is None
    )
    assert "NVIDIA_T4_GPUS not reported" in preflight.check_gpu_quota(
        get_json, "p", "us-west1", "nvidia-tesla-t4", 4, 5, preemptible=False
    )


def test_cpu_only_agents_need_no_gpu_quota():
    get_json, seen = _answers({})
    assert (
        preflight.check_gpu_quota(
            get_json, "p", "us-west1", "nvidia-tesla-t4", 0, 5, preemptible=False
        )
        is None
    )
    assert seen == []


@dataclasses.dataclass
class _Vm:
    name: str
    labels: dict[str, str]
    status: str = "RUNNING"


@dataclasses.dataclass
class _Op:
    name: str
    status: str = "DONE"


class _Compute:
    """The parts of InstancesClient / ZoneOperationsClient teardown uses, over a dict of zones."""

    def __init__(self, zones: dict[str, list[_Vm]]) -> None:
        self.zones = zones
        self.waited: list[str] = []

    def aggregated_list(self, request: dict[str, Any]):
        key, _, value = request["filter"].partition(" = ")
        label, value = key.removeprefix("labels."), value.strip('"')
        for zone, vms in self.zones.items():
            yield (
                f"zones/{zone}",
                type(
                    "Scoped", (), {"instances": [v for v in vms if v.labels.get(label) == value]}
                )(),
            )

    def delete_unary(self, project: str, zone: str, instance: str) -> _Op:
        self.zones[zone] = [v for v in self.zones[zone] if v.name != instance]
        return _Op(f"delete-{instance}")

    def stop_unary(self, project: str, zone: str, instance: str) -> _Op:
        next(v for v in self.zones[zone] if v.name == instance).status = "TERMINATED"
        return _Op(f"stop-{instance}")

    def wait(self, project: str, zone: str, operation: str) -> _Op:
        self.waited.append(operation)
        return _Op(operation)


def test_delete_agents_in_every_zone_but_not_the_master_or_other_clusters():
    mine = {"det-cluster": "c1"}
    compute = _Compute(
        {
            "us-west1-b": [
                _Vm("det-master-c1", {**mine, "det-role": "master"}),
                _Vm("a1", mine),
                _Vm("x1", {"det-cluster": "c2"}),
            ],
            "us-west1-c": [_Vm("a2", mine)],
        }
    )
    teardown.stop_master(compute, compute, "p", "us-west1-b", "det-master-c1")
    removed = teardown.delete_agents(compute, compute, "p", "c1", "det-master-c1")
    assert sorted(removed) == ["a1", "a2"]
    assert [v.name for v in compute.zones["us-west1-b"]] == ["det-master-c1", "x1"]
    assert compute.zones["us-west1-b"][0].status == "TERMINATED"
    assert compute.zones["us-west1-c"] == []
    assert sorted(compute.waited) == ["delete-a1", "delete-a2", "stop-det-master-c1"]


class _GoneCompute(_Compute):
    """GCE answers 404 for a VM deleted since it was listed (a spot reclaim, another down)."""

    def __init__(self, zones: dict[str, list[_Vm]], gone: str) -> None:
        super().__init__(zones)
        self.gone = gone

    def delete_unary(self, project: str, zone: str, instance: str) -> _Op:
        from google.api_core import exceptions

        if instance == self.gone:
            raise exceptions.NotFound(f"instance {instance}")
        return super().delete_unary(project, zone, instance)


def test_an_agent_gone_before_its_delete_is_skipped_and_the_others_are_deleted():
    mine = {"det-cluster": "c1"}
    compute = _GoneCompute({"us-west1-b": [_Vm("a1", mine), _Vm("a2", mine)]}, gone="a1")
    assert sorted(teardown.delete_agents(compute, compute, "p", "c1", None)) == ["a1", "a2"]
    assert [v.name for v in compute.zones["us-west1-b"]] == ["a1"]  # the fake never lost it
    assert compute.waited == ["delete-a2"]


class _Networks:
    """NetworksClient.remove_peering_unary / GlobalOperationsClient.wait over a dict of peerings;
    records the order of every call into the shared ``log``."""

    def __init__(self, peerings: dict[str, set[str]], log: list[str]) -> None:
        self.peerings = peerings
        self.log = log

    def remove_peering_unary(
        self, project: str, network: str, networks_remove_peering_request_resource: dict[str, str]
    ) -> _Op:
        from google.api_core import exceptions

        name = networks_remove_peering_request_resource["name"]
        if name not in self.peerings.get(network, set()):
            raise exceptions.BadRequest(f"There is no peering with name '{name}' on {network}.")
        self.peerings[network].discard(name)
        self.log.append(f"remove-peering {network}/{name}")
        return _Op(f"peering-{name}")

    def wait(self, project: str, operation: str) -> _Op:
        return _Op(operation)


class _LoggedCompute(_Compute):
    def __init__(self, zones: dict[str, list[_Vm]], log: list[str]) -> None:
        super().__init__(zones)
        self.log = log

    def stop_unary(self, project: str, zone: str, instance: str) -> _Op:
        self.log.append(f"stop {instance}")
        return super().stop_unary(project, zone, instance)

    def delete_unary(self, project: str, zone: str, instance: str) -> _Op:
        self.log.append(f"delete {instance}")
        return super().delete_unary(project, zone, instance)


OUTPUTS = {
    "zone": "us-west1-b",
    "master_instance_name": "det-master-c1",
    "network": "det-c1",
    "network_created": True,
    "service_peering": "servicenetworking-googleapis-com",
}


def _cluster(log: list[str]) -> tuple[_LoggedCompute, _Networks]:
    mine = {"det-cluster": "c1"}
    compute = _LoggedCompute(
        {"us-west1-b": [_Vm("det-master-c1", mine), _Vm("a1", mine)]},
        log,
    )
    networks = _Networks({"det-c1": {"servicenetworking-googleapis-com", "other"}}, log)
    return compute, networks


def test_down_stops_master_deletes_agents_then_removes_the_service_peering():
    log: list[str] = []
    compute, networks = _cluster(log)
    line = teardown.remove_cluster_machines(
        (compute, compute, networks, networks), "p", "c1", OUTPUTS
    )
    assert log == [
        "stop det-master-c1",
        "delete a1",
        "remove-peering det-c1/servicenetworking-googleapis-com",
    ]
    assert networks.peerings["det-c1"] == {"other"}
    assert line == (
        "Deleted 1 agent instances. "
        "Removed peering servicenetworking-googleapis-com from network det-c1."
    )
    # Again (a `down` that failed later and is run once more): nothing left to remove, no error.
    log.clear()
    again = teardown.remove_cluster_machines(
        (compute, compute, networks, networks), "p", "c1", OUTPUTS
    )
    assert again == "Deleted 0 agent instances." and "remove-peering" not in " ".join(log)


def test_down_leaves_the_peering_of_an_existing_network_alone():
    log: list[str] = []
    compute, networks = _cluster(log)
    outputs = {**OUTPUTS, "network_created": False}
    teardown.remove_cluster_machines((compute, compute, networks, networks), "p", "c1", outputs)
    assert networks.peerings["det-c1"] == {"servicenetworking-googleapis-com", "other"}


def test_peering_name_defaults_when_the_stack_did_not_record_it():
    log: list[str] = []
    compute, networks = _cluster(log)
    outputs = {**OUTPUTS, "service_peering": None}
    teardown.remove_cluster_machines((compute, compute, networks, networks), "p", "c1", outputs)
    assert networks.peerings["det-c1"] == {"other"}


COMPUTE = "https://compute.googleapis.com/compute/v1/projects/p"


def test_zone_that_offers_the_gpu_and_machine_types_passes():
    get_json, seen = _answers(
        {
            f"{COMPUTE}/zones/us-west1-b/acceleratorTypes/nvidia-tesla-t4": (200, {}),
            f"{COMPUTE}/zones/us-west1-b/machineTypes/": (200, {}),
        }
    )
    preflight.check_zone_offers(
        get_json, "p", "us-west1-b", ["n1-standard-2", "n1-standard-32"], "nvidia-tesla-t4"
    )
    assert f"{COMPUTE}/zones/us-west1-b/machineTypes/n1-standard-32" in seen


def test_zone_without_the_gpu_is_refused_naming_the_zones_that_have_it():
    # GCE answers 404 for an accelerator type the zone does not offer.
    items = {
        "zones/us-west1-a": {"acceleratorTypes": [{"name": "nvidia-l4"}]},
        "zones/us-west1-c": {"acceleratorTypes": [{"name": "nvidia-l4"}]},
        "zones/us-central1-a": {"acceleratorTypes": [{"name": "nvidia-l4"}]},
        "zones/us-west1-b": {"warning": {"code": "NO_RESULTS_ON_PAGE"}},
    }
    get_json, _ = _answers({f"{COMPUTE}/aggregated/acceleratorTypes": (200, {"items": items})})
    with pytest.raises(
        PreflightError,
        match=r"us-west1-b offers no nvidia-l4 GPUs; zones of us-west1 that do: "
        r"us-west1-a, us-west1-c \(pass --zone",
    ):
        preflight.check_zone_offers(get_json, "p", "us-west1-b", ["g2-standard-8"], "nvidia-l4")


def test_zone_without_a_machine_type_is_refused():
    get_json, _ = _answers({f"{COMPUTE}/zones/us-west1-b/machineTypes/n1-standard-2": (200, {})})
    with pytest.raises(PreflightError, match="offers no a3-highgpu-8g machines"):
        preflight.check_zone_offers(
            get_json, "p", "us-west1-b", ["n1-standard-2", "a3-highgpu-8g"], None
        )
