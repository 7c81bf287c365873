"""A first cluster that fits a new account (issue 25 item 3): small defaults, the quotas they
need shown by the dry-run, and the GCP preflight's check of the vCPU quotas (the first trial
used to wait on CPUS, which nothing checked)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from det.deploy import clouds
from det.deploy.aws import preflight as aws_preflight
from det.deploy.aws.config import AwsConfig
from det.deploy.common import quotas
from det.deploy.common.errors import PreflightError
from det.deploy.gcp import preflight as gcp_preflight
from det.deploy.gcp.config import GcpConfig

COMPUTE = "https://compute.googleapis.com/compute/v1/projects/p"


@pytest.mark.parametrize(
    ("name", "vcpus"),
    [("g4dn.xlarge", 4), ("m6i.large", 2), ("p3.8xlarge", 32), ("g4dn.metal", None)],
)
def test_ec2_vcpus_by_name(name: str, vcpus: int | None) -> None:
    assert quotas.ec2_vcpus(name) == vcpus


@pytest.mark.parametrize(
    ("name", "vcpus"),
    [("n1-standard-4", 4), ("n2-highmem-16", 16), ("e2-highcpu-2", 2), ("a2-highgpu-1g", None)],
)
def test_gce_vcpus_by_name(name: str, vcpus: int | None) -> None:
    assert quotas.gce_vcpus(name) == vcpus


def test_defaults_are_one_t4_per_agent_and_two_agents_a_pool() -> None:
    gcp = GcpConfig(cluster_id="c1", project_id="p")
    assert (gcp.compute_agent_instance_type, gcp.gpu_type, gcp.gpu_num) == (
        "n1-standard-4",
        "nvidia-tesla-t4",
        1,
    )
    aws = AwsConfig(cluster_id="c1")
    assert aws.compute_agent_instance_type == "g4dn.xlarge"
    assert gcp.max_dynamic_agents == aws.max_dynamic_agents == 2


def test_the_default_gcp_cluster_fits_a_new_projects_regional_cpus() -> None:
    needs = {
        n.quota: n for n in gcp_preflight.quota_needs(GcpConfig(cluster_id="c1", project_id="p"))
    }
    # 24 vCPUs is a new project's CPUS in many regions; the old default needed 182.
    assert needs["CPUS"].amount == 18 <= 24 and needs["CPUS"].scope == "us-west1"
    assert needs["CPUS_ALL_REGIONS"].amount == 18
    assert needs["GPUS_ALL_REGIONS"].amount == needs["NVIDIA_T4_GPUS"].amount == 2
    assert needs["IN_USE_ADDRESSES"].amount == 5


def test_a_serverless_master_needs_no_vm_quota() -> None:
    """Cloud Run and Fargate count against no Compute Engine or EC2 quota: the default cluster
    (serverless) needs the agents' vCPUs and addresses only."""
    gcp = GcpConfig(cluster_id="c1", project_id="p", master="serverless")
    needs = {n.quota: n for n in gcp_preflight.quota_needs(gcp)}
    assert needs["CPUS"].amount == needs["CPUS_ALL_REGIONS"].amount == 16
    assert "master" not in needs["CPUS"].why
    assert needs["IN_USE_ADDRESSES"].amount == 4
    assert [m for m, _, _ in gcp_preflight.machines(gcp)] == ["aux", "compute"]
    aws = AwsConfig(cluster_id="c1", master="serverless")
    needs = {n.quota: n for n in aws_preflight.quota_needs(aws)}
    assert needs["L-1216C47A"].amount == 8 and "master" not in needs["L-1216C47A"].why
    assert needs["L-DB2E81BA"].amount == 8


def test_aws_needs_by_quota_code_and_market() -> None:
    needs = {n.quota: n for n in aws_preflight.quota_needs(AwsConfig(cluster_id="c1"))}
    assert needs["L-DB2E81BA"].amount == 8  # 2 x g4dn.xlarge (G and VT, on-demand)
    assert needs["L-1216C47A"].amount == 10  # the master's 2 + 2 x m5.xlarge
    spot = {n.quota: n for n in aws_preflight.quota_needs(AwsConfig(cluster_id="c1", spot=True))}
    assert spot["L-3819A6DF"].amount == 8 and "spot" in spot["L-3819A6DF"].why
    assert spot["L-1216C47A"].amount == 2 and "on-demand" in spot["L-1216C47A"].why


def _answers(cpus: tuple[float, float], all_regions: tuple[float, float]) -> Any:
    def quota(metric: str, limit: float, usage: float) -> dict[str, Any]:
        return {"metric": metric, "limit": limit, "usage": usage}

    def get_json(url: str) -> tuple[int, dict[str, Any]]:
        if "/machineTypes/" in url:
            return 200, {"guestCpus": int(url.rsplit("-", 1)[-1])}
        if url == f"{COMPUTE}/regions/us-west1":
            return 200, {"quotas": [quota("CPUS", *cpus)]}
        if url == COMPUTE:
            return 200, {"quotas": [quota("CPUS_ALL_REGIONS", *all_regions)]}
        return 404, {}

    return get_json


def test_cpu_quota_too_small_is_refused_naming_quota_region_and_page() -> None:
    cfg = GcpConfig(cluster_id="c1", project_id="p")
    with pytest.raises(PreflightError) as e:
        gcp_preflight.check_cpu_quota(_answers((24, 10), (32, 10)), "p", "us-west1-b", cfg)
    message = str(e.value)
    assert "need 18 vCPUs but quota CPUS in us-west1 has 14 available (limit 24)" in message
    assert "iam-admin/quotas?project=p" in message and "\n" not in message
    assert gcp_preflight.check_cpu_quota(_answers((24, 0), (32, 0)), "p", "us-west1-b", cfg) is None
    with pytest.raises(PreflightError, match="CPUS_ALL_REGIONS of project p has 12"):
        gcp_preflight.check_cpu_quota(_answers((24, 0), (12, 0)), "p", "us-west1-b", cfg)


def test_cpu_quota_unreadable_is_a_warning() -> None:
    cfg = GcpConfig(cluster_id="c1", project_id="p")
    warning = gcp_preflight.check_cpu_quota(lambda url: (403, {}), "p", "us-west1-b", cfg)
    assert warning and "not checked" in warning


def test_dry_run_prints_the_quotas_the_defaults_need(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    out, err = io.StringIO(), io.StringIO()
    code = clouds.run(
        ["gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--dry-run"], out, err
    )
    assert code == 0, err.getvalue()
    # A new cluster's master is serverless: no master VM among the needs.
    assert (
        "CPUS (us-west1): 16" in out.getvalue()
        and "GPUS_ALL_REGIONS (project): 2" in out.getvalue()
    )
    out = io.StringIO()
    argv = ["aws", "up", "--cluster-id", "c1", "--keypair", "k", "--dry-run", "--json"]
    assert clouds.run(argv, out, err) == 0, err.getvalue()
    needs = {n["quota"]: n["amount"] for n in json.loads(out.getvalue())["quotaNeeds"]}
    assert needs == {"L-1216C47A": 8, "L-DB2E81BA": 8}
    argv = [*argv, "--master", "vm"]
    out = io.StringIO()
    assert clouds.run(argv, out, err) == 0, err.getvalue()
    needs = {n["quota"]: n["amount"] for n in json.loads(out.getvalue())["quotaNeeds"]}
    assert needs == {"L-1216C47A": 10, "L-DB2E81BA": 8}
