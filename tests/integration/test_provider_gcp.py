"""GcpProvider with the real ``google-cloud-compute`` client against the fake Compute REST API."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from det.master.provisioner import bootstrap
from det.master.provisioner.config import parse_provider_config
from det.master.provisioner.gcp import GcpProvider
from det.master.provisioner.gcp_config import GcpProviderConfig
from det.master.provisioner.provider import InstanceState, LaunchError, LaunchOption, Market
from tests.fakes.gce import FakeGce
from tests.fakes.gce_metadata import FakeGceMetadata
from tests.host_paths import bootstrap_env

pytestmark = pytest.mark.integration

SCRIPT = "#!/bin/bash\necho bootstrap\n"
ZONE_A, ZONE_B = "us-west1-a", "us-west1-b"

MakeProvider = Callable[..., GcpProvider]


@pytest.fixture
def fake() -> Iterator[FakeGce]:
    with FakeGce() as server:
        yield server


@pytest.fixture
def make_provider(fake: FakeGce) -> MakeProvider:
    from google.auth.credentials import AnonymousCredentials

    seeds = itertools.count()

    def make(
        *,
        pool: str = "default",
        cluster_id: str = "cluster-1",
        sleeps: list[float] | None = None,
        **overrides: Any,
    ) -> GcpProvider:
        data = {
            "type": "gcp",
            "project": "proj",
            "zone": ZONE_A,
            "boot_disk_source_image": "projects/proj/global/images/det-agent",
            "instance_type": {"machine_type": "n1-standard-4", "gpu_type": "", "gpu_num": 0},
            "cpu_slots_allowed": True,
            "fallback": [{"zone": ZONE_B}],
            **overrides,
        }
        config = parse_provider_config(data)
        assert isinstance(config, GcpProviderConfig)
        return GcpProvider(
            config,
            cluster_id=cluster_id,
            pool=pool,
            startup_script=SCRIPT,
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
            rng=random.Random(next(seeds)),
            sleep=(sleeps if sleeps is not None else []).append,
        )

    return make


def cpu(zone: str = ZONE_A, market: Market = Market.ON_DEMAND) -> LaunchOption:
    return LaunchOption(instance_type="n1-standard-4", zone=zone, market=market, slots=1)


def test_launch_creates_a_labelled_instance_with_the_bootstrap(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    launched = provider.launch(cpu(), 1)

    assert len(launched) == 1 and launched[0].state is InstanceState.STARTING
    (created,) = fake.instances()
    assert created["name"] == launched[0].id
    assert created["labels"] == {
        "managed-by": "det",
        "det-cluster-id": "cluster-1",
        "det-pool": "default",
    }
    assert {"key": "startup-script", "value": SCRIPT} in created["metadata"]["items"]
    (body,) = fake.bodies("insert")
    assert body["disks"][0]["initializeParams"]["diskSizeGb"] == "200"
    # The operation was awaited through our own endpoint, never compute.googleapis.com.
    assert [r.kind for r in fake.requests] == ["insert", "wait"]


def test_gpu_spot_request_body(fake: FakeGce, make_provider: MakeProvider) -> None:
    provider = make_provider(spot=True)
    option = LaunchOption(
        instance_type="n1-standard-8",
        zone=ZONE_B,
        market=Market.SPOT,
        slots=2,
        accelerator_type="nvidia-tesla-t4",
        accelerator_count=2,
    )
    (inst,) = provider.launch(option, 1)

    (body,) = fake.bodies("insert")
    assert body["guestAccelerators"] == [
        {
            "acceleratorType": f"zones/{ZONE_B}/acceleratorTypes/nvidia-tesla-t4",
            "acceleratorCount": 2,
        }
    ]
    assert body["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert body["scheduling"]["provisioningModel"] == "SPOT"
    assert body["scheduling"]["instanceTerminationAction"] == "DELETE"
    listed = {i.id: i for i in provider.list_instances()}
    assert listed[inst.id].market is Market.SPOT and listed[inst.id].zone == ZONE_B


def test_bulk_launch_takes_what_fits(fake: FakeGce, make_provider: MakeProvider) -> None:
    provider = make_provider()
    fake.set_capacity(ZONE_A, 2)
    launched = provider.launch(cpu(), 3)

    assert len(launched) == 2
    assert {i.id for i in launched} == {i["name"] for i in fake.instances()}
    (bulk,) = fake.bodies("bulkInsert")
    assert bulk["count"] == "3" and bulk["minCount"] == "1"
    assert bulk["instanceProperties"]["machineType"] == "n1-standard-4"
    assert bulk["instanceProperties"]["labels"]["det-pool"] == "default"


def test_list_sees_only_this_cluster_and_pool_in_every_zone(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    mine = {provider.launch(cpu(ZONE_A), 1)[0].id, provider.launch(cpu(ZONE_B), 1)[0].id}
    fake.add_instance(
        ZONE_A, "other-cluster", {"det-cluster-id": "cluster-2", "det-pool": "default"}
    )
    fake.add_instance(ZONE_A, "other-pool", {"det-cluster-id": "cluster-1", "det-pool": "gpu"})
    fake.add_instance(ZONE_B, "unlabelled", {})
    # A zone the config no longer names: still this pool's, so still listed (and deletable).
    fake.add_instance(
        "us-east1-c", "orphan", {"det-cluster-id": "cluster-1", "det-pool": "default"}
    )

    listed = provider.list_instances()

    assert {i.id for i in listed} == {*mine, "orphan"}
    assert all(i.state is InstanceState.RUNNING and i.address for i in listed)
    filters = {r.query.get("filter") for r in fake.requests if r.kind == "aggregatedList"}
    assert filters == {"(labels.det-cluster-id = cluster-1) AND (labels.det-pool = default)"}


def test_list_labelled_finds_every_pool_of_a_deployment(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    aux = make_provider(pool="aux", label_key="det-cluster", label_value="prod")
    gpu = make_provider(pool="gpu", label_key="det-cluster", label_value="prod")
    ids = {aux.launch(cpu(), 1)[0].id, gpu.launch(cpu(ZONE_B), 1)[0].id}
    fake.add_instance(ZONE_A, "other-deployment", {"det-cluster": "staging"})

    found = aux.list_labelled("det-cluster", "prod")

    assert {i.id for i in found} == ids
    aux.terminate([i.id for i in found])
    assert [i["name"] for i in fake.instances()] == ["other-deployment"]


def test_list_follows_pages(fake: FakeGce, make_provider: MakeProvider) -> None:
    fake.page_size = 2
    provider = make_provider(fallback=[])
    launched = provider.launch(cpu(), 5)

    assert {i.id for i in provider.list_instances()} == {i.id for i in launched}
    assert sum(r.kind == "aggregatedList" for r in fake.requests) == 3  # 5 instances, pages of 2


def test_new_instances_are_starting_until_running() -> None:
    from google.auth.credentials import AnonymousCredentials

    with FakeGce(start="manual") as fake:
        config = parse_provider_config(
            {"type": "gcp", "project": "p", "zone": ZONE_A, "boot_disk_source_image": "img"}
        )
        assert isinstance(config, GcpProviderConfig)
        provider = GcpProvider(
            config,
            cluster_id="c",
            pool="default",
            startup_script=SCRIPT,
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
        )
        (inst,) = provider.launch(cpu(), 1)
        assert [i.state for i in provider.list_instances()] == [InstanceState.STARTING]
        assert fake.running_instances() == []
        fake.set_status(inst.id, "RUNNING")
        assert [i.state for i in provider.list_instances()] == [InstanceState.RUNNING]
        assert [i["name"] for i in fake.running_instances()] == [inst.id]


def test_project_and_zone_default_to_the_masters_own(
    fake: FakeGce, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials

    config = parse_provider_config({"type": "gcp", "boot_disk_source_image": "img"})
    assert isinstance(config, GcpProviderConfig)
    with FakeGceMetadata(project="master-proj", zone="europe-west4-a") as metadata:
        monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)
        provider = GcpProvider(
            config,
            cluster_id="c",
            pool="default",
            startup_script=SCRIPT,
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
        )
    assert (provider.project, provider.zone) == ("master-proj", "europe-west4-a")
    provider.launch(LaunchOption(instance_type="e2-standard-4"), 1)
    assert (
        fake.requests[0].path == "/compute/v1/projects/master-proj/zones/europe-west4-a/instances"
    )


def test_launch_waits_until_the_operation_is_done() -> None:
    from google.auth.credentials import AnonymousCredentials

    with FakeGce(operation_polls=3) as fake:
        config = parse_provider_config(
            {"type": "gcp", "project": "p", "zone": ZONE_A, "boot_disk_source_image": "img"}
        )
        assert isinstance(config, GcpProviderConfig)
        provider = GcpProvider(
            config,
            cluster_id="c",
            pool="default",
            startup_script=SCRIPT,
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
        )
        fake.fail_zone(ZONE_A)
        with pytest.raises(LaunchError):  # the error is only seen once the operation is DONE
            provider.launch(cpu(), 1)
        assert [r.kind for r in fake.requests] == ["insert", "wait", "wait", "wait", "wait"]


def test_launch_stops_waiting_after_operation_timeout_period() -> None:
    from google.auth.credentials import AnonymousCredentials

    with FakeGce(operation_polls=10**9) as fake:
        config = parse_provider_config(
            {
                "type": "gcp",
                "project": "p",
                "zone": ZONE_A,
                "boot_disk_source_image": "img",
                "operation_timeout_period": "50ms",
            }
        )
        assert isinstance(config, GcpProviderConfig)
        provider = GcpProvider(
            config,
            cluster_id="c",
            pool="default",
            startup_script=SCRIPT,
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
        )
        (inst,) = provider.launch(cpu(), 1)
        # Accepted but unfinished: reported as starting; list_instances shows what came of it.
        assert inst.state is InstanceState.STARTING
        assert [i.id for i in provider.list_instances()] == [inst.id]


def test_for_pool_renders_the_bootstrap_with_the_masters_internal_ip(
    fake: FakeGce, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials

    config = parse_provider_config(
        {
            "type": "gcp",
            "project": "p",
            "zone": ZONE_A,
            "boot_disk_source_image": "img",
            "master_url": "http://internal-ip:8080",
            "startup_script": "echo pool-hook",
        }
    )
    assert isinstance(config, GcpProviderConfig)
    with FakeGceMetadata(ip="10.128.0.9") as metadata:
        monkeypatch.setenv("GCE_METADATA_HOST", metadata.host)
        provider = GcpProvider.for_pool(
            config,
            cluster_id="c",
            pool="gpu",
            master_url="http://ignored:8080",
            agent_token="tok",
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
        )
    script = provider.startup_script
    assert "export DET_MASTER_URL=http://10.128.0.9:8080" in script
    assert "export DET_CLOUD=gcp" in script and "export DET_RESOURCE_POOL=gpu" in script
    assert "DET_STARTUP_SCRIPT_B64=" in script
    provider.launch(cpu(), 1)
    (vm,) = fake.instances()
    assert {"key": "startup-script", "value": script} in vm["metadata"]["items"]


def test_terminate_is_idempotent(fake: FakeGce, make_provider: MakeProvider) -> None:
    provider = make_provider()
    ids = [i.id for i in provider.launch(cpu(), 2)]

    provider.terminate(ids)
    provider.terminate(ids)
    provider.terminate(["never-existed"])

    assert fake.instances() == []
    assert provider.list_instances() == []


def test_terminate_finds_instances_another_process_launched(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    (inst,) = make_provider().launch(cpu(ZONE_B), 1)
    make_provider().terminate([inst.id])  # a fresh provider: no zone cache, probes its zones
    assert fake.instances() == []

    fake.add_instance(
        "us-east1-c", "orphan", {"det-cluster-id": "cluster-1", "det-pool": "default"}
    )
    provider = make_provider()
    provider.terminate([i.id for i in provider.list_instances()])  # the list taught it the zone
    assert fake.instances() == []


@pytest.mark.parametrize(
    "code",
    ["ZONE_RESOURCE_POOL_EXHAUSTED", "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS", "QUOTA_EXCEEDED"],
)
def test_capacity_errors_in_the_operation_are_capacity_launch_errors(
    fake: FakeGce, make_provider: MakeProvider, code: str
) -> None:
    provider = make_provider()
    fake.fail_zone(ZONE_A, code)

    with pytest.raises(LaunchError) as info:
        provider.launch(cpu(ZONE_A), 1)
    assert info.value.code == code and info.value.capacity
    with pytest.raises(LaunchError):
        provider.launch(cpu(ZONE_A), 3)
    assert fake.instances() == []
    # The next option of the fallback list (another zone) succeeds.
    assert len(provider.launch(cpu(ZONE_B), 1)) == 1


def test_machine_type_missing_in_zone_is_a_capacity_error(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    fake.fail_http(
        "insert",
        404,
        "notFound",
        f"The resource 'projects/proj/zones/{ZONE_A}/machineTypes/a2-highgpu-1g' was not found",
    )
    with pytest.raises(LaunchError) as info:
        provider.launch(cpu(), 1)
    assert info.value.capacity and info.value.code == "RESOURCE_NOT_FOUND"


def test_transient_errors_are_retried_with_backoff(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    sleeps: list[float] = []
    provider = make_provider(sleeps=sleeps)
    fake.fail_http("insert", 503, "backendError", times=2)
    fake.fail_http("aggregatedList", 403, "rateLimitExceeded", times=1)

    assert len(provider.launch(cpu(), 1)) == 1
    assert len(provider.list_instances()) == 1
    assert len(sleeps) == 3
    assert sum(r.kind == "insert" for r in fake.requests) == 3


def test_insert_whose_answer_was_lost_is_not_launched_twice(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    provider = make_provider()
    fake.fail_http("insert", 503, "backendError", after=True)

    (inst,) = provider.launch(cpu(), 1)

    assert [i["name"] for i in fake.instances()] == [inst.id]
    assert sum(r.kind == "insert" for r in fake.requests) == 2


def test_unknown_base_config_field_is_a_launch_error_without_a_request(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    provider = make_provider(base_config={"minCpuPlatfrom": "Intel Skylake"})
    with pytest.raises(LaunchError) as info:
        provider.launch(cpu(), 1)
    assert info.value.code == "INVALID_REQUEST" and "minCpuPlatfrom" in info.value.message
    assert fake.requests == []


def test_other_errors_surface_at_once(fake: FakeGce, make_provider: MakeProvider) -> None:
    sleeps: list[float] = []
    provider = make_provider(sleeps=sleeps)
    fake.fail_http("insert", 400, "invalid", "Invalid value for field 'resource.sourceImage'")

    with pytest.raises(LaunchError) as info:
        provider.launch(cpu(), 1)
    assert (info.value.code, info.value.capacity) == ("invalid", False)
    assert sleeps == []
    assert sum(r.kind == "insert" for r in fake.requests) == 1


def test_retries_give_up_after_max_attempts(fake: FakeGce, make_provider: MakeProvider) -> None:
    provider = make_provider()
    fake.fail_http("insert", 503, "backendError", times=10)
    with pytest.raises(LaunchError) as info:
        provider.launch(cpu(), 1)
    assert info.value.code == "backendError" and not info.value.capacity
    assert sum(r.kind == "insert" for r in fake.requests) == 5


def test_preempted_vms_leave_the_list_or_show_stopped(
    fake: FakeGce, make_provider: MakeProvider
) -> None:
    spot = make_provider(spot=True, pool="spot")
    preemptible = make_provider(preemptible=True, pool="legacy")
    (s,) = spot.launch(cpu(market=Market.SPOT), 1)
    (p,) = preemptible.launch(cpu(market=Market.SPOT), 1)

    fake.preempt(s.id)
    fake.preempt(p.id)

    assert spot.list_instances() == []  # Spot with termination action DELETE is gone
    assert [i.state for i in preemptible.list_instances()] == [InstanceState.STOPPED]


@pytest.mark.skipif(shutil.which("curl") is None, reason="bootstrap.sh needs curl")
def test_startup_script_of_a_launched_vm_starts_an_agent_named_after_it(
    fake: FakeGce, tmp_path: Path
) -> None:
    """What GCE would run: the instance's own startup-script, answering from GCE metadata."""
    from google.auth.credentials import AnonymousCredentials

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "det-agent").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/agent-argv\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    config_path = tmp_path / "agent.yaml"
    with FakeGceMetadata() as metadata:
        metadata_url = metadata.url
        script = bootstrap.render_user_data(
            "http://10.0.0.2:8080",
            "agent-token",
            "gpu",
            "cluster-1",
            "gcp",
            {
                "DET_GCE_METADATA_URL": metadata_url,
                "DET_AGENT_CONFIG": str(config_path),
                "DET_SYSTEMD": "no",
            },
        )
        config = parse_provider_config(
            {"type": "gcp", "project": "p", "zone": ZONE_A, "boot_disk_source_image": "img"}
        )
        assert isinstance(config, GcpProviderConfig)
        provider = GcpProvider(
            config,
            cluster_id="cluster-1",
            pool="gpu",
            startup_script=script,
            credentials=AnonymousCredentials(),
            api_endpoint=fake.url,
        )
        (inst,) = provider.launch(cpu(), 1)
        (vm,) = fake.running_instances()
        items = {i["key"]: i["value"] for i in vm["metadata"]["items"]}
        metadata.set("instance/name", vm["name"])
        # The guest agent's script runner writes the script to a file and executes it.
        startup = tmp_path / "startup-script"
        startup.write_text(items["startup-script"])
        startup.chmod(0o700)
        result = subprocess.run(
            [str(startup)],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                **bootstrap_env(tmp_path / "root"),
                "PATH": f"{bin_dir}:{os.environ['PATH']}",
            },
            timeout=60,
        )
    assert result.returncode == 0, result.stderr
    written = yaml.safe_load(config_path.read_text())
    assert written["agent_id"] == inst.id
    assert written["resource_pool"] == "gpu"
    assert written["preemption_notice"] == "gcp"
    assert written["preemption_metadata_url"] == metadata_url
    assert (tmp_path / "agent-argv").read_text().split() == ["--config-file", str(config_path)]
