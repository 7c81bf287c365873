"""The GCP cluster graph, as the Pulumi engine would receive it (mocks, no credentials)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pulumi
import pytest
import yaml
from conftest import GCP

from det.deploy.common import dryrun, userdata
from det.deploy.gcp import iam, preflight, program, storage
from det.deploy.gcp.config import CLUSTER_LABEL, CONFIG_HASH_LABEL

WORLD = ("0.0.0.0/0", "::/0")
ACCOUNT = "gcp:serviceaccount/account:Account"
PRIMITIVE = {"roles/owner", "roles/editor", "roles/viewer"}


def _ports(allow: dict[str, Any]) -> set[int]:
    if allow["protocol"] in ("all", "icmp") or not allow.get("ports"):
        return set(range(65536))
    out: set[int] = set()
    for spec in allow["ports"]:
        lo, _, hi = spec.partition("-")
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out


def _bindings(graph: dryrun.Rendered) -> list[dict[str, Any]]:
    types = (
        "gcp:projects/iAMMember:IAMMember",
        "gcp:serviceaccount/iAMMember:IAMMember",
        "gcp:storage/bucketIAMMember:BucketIAMMember",
        "gcp:secretmanager/secretIamMember:SecretIamMember",
        "gcp:projects/iAMBinding:IAMBinding",
    )
    return [r.inputs for r in graph.resources if r.type in types]


def test_cloud_sql_has_no_public_ip_and_requires_ssl(gcp_graph, one):
    ip = one(gcp_graph, "gcp:sql/databaseInstance:DatabaseInstance")["settings"]["ipConfiguration"]
    assert ip["ipv4Enabled"] is False
    assert ip["sslMode"] in ("ENCRYPTED_ONLY", "TRUSTED_CLIENT_CERTIFICATE_REQUIRED")
    assert ip["privateNetwork"] == "det-c1-id"
    assert not ip.get("authorizedNetworks")


def test_cloud_sql_uses_private_service_access(gcp_graph, one):
    address = one(gcp_graph, "gcp:compute/globalAddress:GlobalAddress")
    assert address["purpose"] == "VPC_PEERING" and address["addressType"] == "INTERNAL"
    connection = one(gcp_graph, "gcp:servicenetworking/connection:Connection")
    assert connection["service"] == "servicenetworking.googleapis.com"
    assert connection["reservedPeeringRanges"] == ["det-c1-db-peering"]


def test_database_password_is_a_secret(gcp_graph, one):
    assert one(gcp_graph, "gcp:sql/user:User")["password"] == dryrun.SECRET
    assert (
        one(gcp_graph, "gcp:secretmanager/secretVersion:SecretVersion")["secretData"]
        == dryrun.SECRET
    )


def test_bucket_enforces_public_access_prevention_and_uniform_access(gcp_graph, one):
    bucket = one(gcp_graph, "gcp:storage/bucket:Bucket")
    assert bucket["publicAccessPrevention"] == "enforced"
    assert bucket["uniformBucketLevelAccess"] is True
    assert bucket["forceDestroy"] is False


def test_no_firewall_rule_opens_postgres_or_agent_ports_to_the_world(gcp_graph):
    rules = gcp_graph.of_type("gcp:compute/firewall:Firewall")
    assert rules
    for rule in rules:
        i = rule.inputs
        sources = set(i.get("sourceRanges", []))
        if not sources & {*WORLD, GCP.inbound_cidr}:
            continue
        ports = set().union(*(_ports(a) for a in i["allows"]))
        assert 5432 not in ports, rule.name
        assert ports <= {GCP.port, GCP.port + 1, 22}, rule.name  # API, task origin, SSH
        assert i["targetTags"], f"{rule.name} must target tagged instances only"


def test_internal_rules_only_from_the_subnet(gcp_graph):
    internal = [
        r.inputs for r in gcp_graph.of_type("gcp:compute/firewall:Firewall") if "internal" in r.name
    ]
    assert len(internal) == 2
    for i in internal:
        assert i["sourceRanges"] == [GCP.subnet_cidr]


def test_no_primitive_roles(gcp_graph):
    bindings = _bindings(gcp_graph)
    assert bindings
    assert not {b["role"] for b in bindings} & PRIMITIVE
    for role in gcp_graph.of_type("gcp:projects/iAMCustomRole:IAMCustomRole"):
        assert not any(
            p.startswith(("resourcemanager.", "iam.roles.", "iam.serviceAccountKeys."))
            for p in role.inputs["permissions"]
        )


MASTER_SA = "serviceAccount:det-c1-m@proj.iam.gserviceaccount.com"
AGENT_SA = "serviceAccount:det-c1-a@proj.iam.gserviceaccount.com"


def _project_bindings(graph: dryrun.Rendered) -> set[tuple[str, str]]:
    return {
        (b["role"], b["member"])
        for b in _bindings(graph)
        if "project" in b and "bucket" not in b and "secretId" not in b
    }


def test_master_provisions_through_a_narrow_custom_role(gcp_graph, one):
    role = one(gcp_graph, "gcp:projects/iAMCustomRole:IAMCustomRole")
    assert set(role["permissions"]) == set(iam.PROVISIONER_PERMISSIONS)
    provisioner = {
        b for b in _project_bindings(gcp_graph) if b[0].startswith("projects/proj/roles/")
    }
    assert provisioner == {(f"projects/proj/roles/{role['roleId']}", MASTER_SA)}


def test_project_roles_are_exactly_log_writing_and_registry_reading(gcp_graph):
    others = {b for b in _project_bindings(gcp_graph) if b[0].startswith("roles/")}
    assert others == {
        ("roles/logging.logWriter", MASTER_SA),
        ("roles/logging.logWriter", AGENT_SA),
        ("roles/artifactregistry.reader", AGENT_SA),
    }


def test_service_account_ids_are_unique_for_cluster_ids_sharing_23_characters():
    ids = set()
    for cluster_id in ("research-team-cluster-a-east", "research-team-cluster-a-west"):
        graph = dryrun.render(
            lambda cluster_id=cluster_id: program.build(
                dataclasses.replace(GCP, cluster_id=cluster_id, filestore=False)
            ),
            program.MOCK_CALLS,
        )
        accounts = [r.inputs["accountId"] for r in graph.of_type(ACCOUNT)]
        assert len(accounts) == 2
        for account in accounts:
            assert 6 <= len(account) <= 30 and re.fullmatch(r"[a-z][-a-z0-9]*[a-z0-9]", account)
        ids |= set(accounts)
    assert len(ids) == 4


def test_short_cluster_ids_keep_their_service_account_ids(gcp_graph):
    assert {r.inputs["accountId"] for r in gcp_graph.of_type(ACCOUNT)} == {"det-c1-m", "det-c1-a"}
    assert iam.account_id("x" * 23, "m") == f"det-{'x' * 23}-m"


def test_service_account_user_only_on_the_agent_account(gcp_graph):
    users = [b for b in _bindings(gcp_graph) if b["role"] == "roles/iam.serviceAccountUser"]
    assert len(users) == 1
    assert users[0]["serviceAccountId"] == "projects/proj/serviceAccounts/det-c1-a"
    assert "project" not in users[0]


def test_storage_grants_only_on_the_bucket(gcp_graph):
    storage_roles = [b for b in _bindings(gcp_graph) if b["role"].startswith("roles/storage.")]
    assert {b["member"].split("@")[0] for b in storage_roles} == {
        "serviceAccount:det-c1-m",
        "serviceAccount:det-c1-a",
    }
    assert all(b.get("bucket") == gcp_graph.outputs["bucket"] for b in storage_roles)


def test_master_vm_uses_its_service_account_and_static_ip(gcp_graph, one):
    vm = one(gcp_graph, "gcp:compute/instance:Instance")
    assert vm["serviceAccount"]["email"] == "det-c1-m@proj.iam.gserviceaccount.com"
    assert vm["networkInterfaces"][0]["accessConfigs"][0]["natIp"] == "203.0.113.20"
    assert vm["tags"] == ["det-c1-master"]
    assert vm["labels"][CLUSTER_LABEL] == "c1"
    outer = vm["metadataStartupScript"]
    script = outer + userdata.boot_script_of(outer)  # the boot script is packed
    assert "secretmanager.googleapis.com" in script and dryrun.SECRET not in script
    assert "det-master --config-file /etc/det/master.yaml" in script


def test_outputs_exist(gcp_graph):
    for key in (
        "master_url",
        "bucket",
        "db_endpoint",
        "master_instance_name",
        "agent_service_account",
        "filestore_address",
    ):
        assert gcp_graph.outputs[key], key
    assert gcp_graph.outputs["master_url"] == "https://203.0.113.20:8443"


def test_master_yaml_parses_and_has_the_gcp_pools(gcp_graph):
    config = yaml.safe_load(gcp_graph.outputs["master_yaml"])
    assert config["checkpoint_storage"]["type"] == "gcs"
    assert config["checkpoint_storage"]["bucket"] == gcp_graph.outputs["bucket"]
    assert config["db"]["host"] == "10.200.0.3" and config["db"]["ssl_mode"] == "require"
    pools = {p["pool_name"]: p["provider"] for p in config["resource_pools"]}
    compute = pools["compute-pool"]
    assert (
        compute["type"] == "gcp"
        and compute["project"] == "proj"
        and compute["zone"] == "us-west1-b"
    )
    assert compute["instance_type"] == {
        "machine_type": GCP.compute_agent_instance_type,
        "gpu_type": GCP.gpu_type,
        "gpu_num": GCP.gpu_num,
        "preemptible": False,
    }
    assert pools["aux-pool"]["instance_type"]["gpu_num"] == 0
    assert compute["service_account"]["email"] == gcp_graph.outputs["agent_service_account"]
    assert compute["label_key"] == CLUSTER_LABEL and compute["network_tags"] == ["det-c1-agent"]
    assert config["task_container_defaults"]["bind_mounts"][0]["host_path"] == "/mnt/det-shared"
    assert "10.201.0.2:/det" in compute["startup_script"]


def test_existing_network_creates_none_and_reads_its_range():
    cfg = dataclasses.replace(
        GCP,
        **{
            "network": "shared",
            "existing_network": True,
            "subnetwork": "sub",
            "filestore": False,
        },
    )
    graph = dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)
    assert not graph.of_type("gcp:compute/network:Network") and not graph.of_type(
        "gcp:compute/subnetwork:Subnetwork"
    )
    assert "gcp:compute/getSubnetwork:getSubnetwork" in graph.calls
    internal = [
        r.inputs for r in graph.of_type("gcp:compute/firewall:Firewall") if "internal" in r.name
    ]
    assert all(i["sourceRanges"] == ["10.20.0.0/16"] for i in internal)
    assert {r.inputs["network"] for r in graph.of_type("gcp:compute/firewall:Firewall")} == {
        "projects/proj/global/networks/shared"
    }
    assert not graph.of_type("gcp:filestore/instance:Instance")


@pulumi.runtime.test
def test_bucket_component_exposes_its_name():
    pulumi.runtime.set_mocks(dryrun.RecordingMocks({}), preview=False)
    bucket = storage.CheckpointBucket(
        "b", storage.BucketArgs(project="p", location="us-west1", labels={})
    )

    def check(name: str) -> None:
        assert name == "b"

    return bucket.name.apply(check)


def test_cloud_sql_edition_is_explicit_and_matches_the_tier(gcp_graph, one):
    settings = one(gcp_graph, "gcp:sql/databaseInstance:DatabaseInstance")["settings"]
    assert settings["tier"] == "db-custom-1-3840"
    assert settings["edition"] == "ENTERPRISE"
    plus = dataclasses.replace(GCP, db_tier="db-perf-optimized-N-2", filestore=False)
    graph = dryrun.render(lambda: program.build(plus), program.MOCK_CALLS)
    assert (
        graph.of_type("gcp:sql/databaseInstance:DatabaseInstance")[0].inputs["settings"]["edition"]
        == "ENTERPRISE_PLUS"
    )


def test_private_services_connection_is_abandoned_on_delete(gcp_graph, one):
    connection = one(gcp_graph, "gcp:servicenetworking/connection:Connection")
    assert connection["deletionPolicy"] == "ABANDON"
    assert connection["updateOnCreationFail"] is True
    # What `down` needs to remove the peering before Pulumi deletes the network.
    assert gcp_graph.outputs["network_created"] is True
    assert gcp_graph.outputs["network"] == "det-c1"


def test_database_and_its_user_go_with_the_instance_so_down_completes_in_one_run(gcp_graph, one):
    # The det user owns the master's tables: PostgreSQL refuses to drop it while they exist, and
    # Pulumi deleted the user and the database in parallel (the first `down` failed).
    assert one(gcp_graph, "gcp:sql/user:User")["deletionPolicy"] == "ABANDON"
    assert one(gcp_graph, "gcp:sql/database:Database")["deletionPolicy"] == "ABANDON"
    instance = one(gcp_graph, "gcp:sql/databaseInstance:DatabaseInstance")
    assert instance["deletionProtection"] is False


def test_master_is_reachable_from_outside_only_on_the_https_port(gcp_graph):
    rules = {r.name: r.inputs for r in gcp_graph.of_type("gcp:compute/firewall:Firewall")}
    api = rules["det-c1-master-api"]
    assert api["sourceRanges"] == [GCP.inbound_cidr]
    assert api["allows"] == [{"protocol": "tcp", "ports": ["8443", "8444"]}]  # API, task origin
    outside = [r for r in rules.values() if set(r["sourceRanges"]) & {*WORLD, GCP.inbound_cidr}]
    opened = set().union(*(_ports(a) for r in outside for a in r["allows"]))
    assert opened == {8443, 8444, 22}  # SSH only because GCP asks for it (enable_ssh=True)
    assert 8080 not in opened


def test_plain_http_port_only_without_tls_and_no_ssh_unless_asked():
    cfg = dataclasses.replace(GCP, tls=False, port=8080, enable_ssh=False, filestore=False)
    graph = dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)
    rules = {r.name: r.inputs for r in graph.of_type("gcp:compute/firewall:Firewall")}
    assert "det-c1-ssh" not in rules
    assert rules["det-c1-master-api"]["allows"] == [{"protocol": "tcp", "ports": ["8080", "8081"]}]
    assert graph.outputs["master_url"] == "http://203.0.113.20:8080"


PINNED = {
    "master_image": "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20250101",
    "aux_agent_image": "projects/ubuntu-os-cloud/global/images/ubuntu-2404-noble-amd64-v20250101",
    "agent_image": "projects/deeplearning-platform-release/global/images/common-cu129-v20250102",
}


def test_vms_boot_the_pinned_images_per_pool():
    cfg = dataclasses.replace(GCP, filestore=False, **PINNED)
    graph = dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)
    vm = graph.of_type("gcp:compute/instance:Instance")[0].inputs
    assert vm["bootDisk"]["initializeParams"]["image"] == PINNED["master_image"]
    pools = {
        p["pool_name"]: p["provider"]
        for p in yaml.safe_load(graph.outputs["master_yaml"])["resource_pools"]
    }
    assert pools["aux-pool"]["boot_disk_source_image"] == PINNED["aux_agent_image"]
    assert pools["compute-pool"]["boot_disk_source_image"] == PINNED["agent_image"]
    assert graph.outputs["images"] == {
        "master": PINNED["master_image"],
        "aux_agent": PINNED["aux_agent_image"],
        "compute_agent": PINNED["agent_image"],
    }


def test_default_images_are_ubuntu_2404_and_the_deep_learning_vm(gcp_graph):
    images = gcp_graph.outputs["images"]
    assert images["master"].endswith("ubuntu-os-cloud/global/images/family/ubuntu-2404-lts-amd64")
    assert images["aux_agent"] == images["master"]
    assert images["compute_agent"].startswith(
        "projects/deeplearning-platform-release/global/images/family/common-cu"
    )


def test_default_task_images_are_determineds_published_ones(gcp_graph):
    config = yaml.safe_load(gcp_graph.outputs["master_yaml"])
    assert config["task_container_defaults"]["image"] == {
        "cpu": "determinedai/pytorch-ngc:0.38.1",
        "cuda": "determinedai/pytorch-ngc:0.38.1",
    }


def test_boot_log_name_is_an_output(gcp_graph):
    assert gcp_graph.outputs["boot_log_name"] == "det-boot"


def test_preflight_checks_the_api_of_every_resource_the_program_creates(gcp_graph):
    types = {r.type for r in gcp_graph.resources}
    needed = preflight.apis_for(types)
    assert needed <= {*preflight.REQUIRED_APIS, preflight.FILESTORE_API}
    assert {"cloudresourcemanager.googleapis.com", "logging.googleapis.com"} <= set(
        preflight.REQUIRED_APIS
    )


def test_a_resource_of_an_unmapped_module_fails_the_api_coverage():
    with pytest.raises(KeyError, match="redis"):
        preflight.apis_for(["gcp:redis/instance:Instance"])


def test_agents_carry_a_label_of_the_master_config_that_changes_with_it(gcp_graph):
    config = yaml.safe_load(gcp_graph.outputs["master_yaml"])
    digest = gcp_graph.outputs["config_hash"]
    assert re.fullmatch(r"[0-9a-f]{16}", digest)  # a valid GCE label value
    labels = [pool["provider"]["labels"] for pool in config["resource_pools"]]
    assert [lab[CONFIG_HASH_LABEL] for lab in labels] == [digest, digest]
    render = lambda cfg: dryrun.render(lambda: program.build(cfg), program.MOCK_CALLS)  # noqa: E731
    assert render(GCP).outputs["config_hash"] == digest
    changed = render(dataclasses.replace(GCP, max_idle_agent_period="30m"))
    assert changed.outputs["config_hash"] != digest


def test_the_master_reaches_the_agents_task_service_ports(gcp_graph):
    # The task proxy connects from the master (in the subnet) to the agents' task ports.
    from det.common.ports import TASK_SERVICE_PORTS

    rules = {r.name: r.inputs for r in gcp_graph.of_type("gcp:compute/firewall:Firewall")}
    agents = next(i for n, i in rules.items() if n.endswith("internal-agents"))
    assert agents["sourceRanges"] == [GCP.subnet_cidr]
    tcp = [a for a in agents["allows"] if a["protocol"] == "tcp"]
    spans = [tuple(int(p) for p in port.split("-")) for a in tcp for port in a["ports"]]
    assert any(lo <= TASK_SERVICE_PORTS[0] and TASK_SERVICE_PORTS[-1] <= hi for lo, hi in spans)
