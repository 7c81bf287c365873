"""The GCP cluster graph, as the Pulumi engine would receive it (mocks, no credentials)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import yaml
from conftest import GCP

from det.deploy.common import dryrun
from det.deploy.gcp import iam, program, storage
from det.deploy.gcp.config import CLUSTER_LABEL

WORLD = ("0.0.0.0/0", "::/0")
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
        assert ports <= {GCP.port, 22}, rule.name
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


def test_master_provisions_through_a_narrow_custom_role(gcp_graph, one):
    role = one(gcp_graph, "gcp:projects/iAMCustomRole:IAMCustomRole")
    assert set(role["permissions"]) == set(iam.PROVISIONER_PERMISSIONS)
    project_bindings = [
        b
        for b in _bindings(gcp_graph)
        if "project" in b and "bucket" not in b and "secretId" not in b
    ]
    assert [b["role"] for b in project_bindings] == [f"projects/proj/roles/{role['roleId']}"]
    assert project_bindings[0]["member"] == "serviceAccount:det-c1-m@proj.iam.gserviceaccount.com"


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
    script = vm["metadataStartupScript"]
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
    assert gcp_graph.outputs["master_url"] == "http://203.0.113.20:8080"


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
