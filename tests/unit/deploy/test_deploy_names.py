"""Every name, tag, label and token both programs render, against the providers' rules
(det.deploy.common.names): both clouds and both master modes, with the shortest and the longest
cluster id ``up`` accepts. Pulumi's mocks accept any name; the clouds do not."""

from __future__ import annotations

import dataclasses

import pytest

from det.deploy.aws import program as aws_program
from det.deploy.aws.config import CLUSTER_ID_RE as AWS_ID_RE
from det.deploy.aws.config import AwsConfig
from det.deploy.common import dryrun, names
from det.deploy.common import serverless as sl
from det.deploy.gcp import program as gcp_program
from det.deploy.gcp.config import CLUSTER_ID_RE as GCP_ID_RE
from det.deploy.gcp.config import GcpConfig

# The extremes of each CLI's --cluster-id (aws.config / gcp.config: 1-32 and 1-35 characters).
AWS_IDS = ("a", "a1b2c3d4e5f6-" + "x" * 18 + "z")
GCP_IDS = ("a", "a1b2c3d4e5f6-" + "x" * 21 + "z")
MODES = (sl.VM, sl.SERVERLESS)


def test_the_ids_are_the_extremes_the_cli_accepts():
    for ids, pattern in ((AWS_IDS, AWS_ID_RE), (GCP_IDS, GCP_ID_RE)):
        assert all(pattern.match(i) for i in ids)
        assert not pattern.match(ids[1] + "a") and not pattern.match("")


def _aws(cluster_id: str, master: str) -> AwsConfig:
    cfg = AwsConfig(cluster_id=cluster_id, keypair="kp", spot=True, enable_ssh=True)
    if master == sl.SERVERLESS:
        cfg = dataclasses.replace(cfg, master=master, tls=False, port=sl.CONTAINER_PORT)
    cfg.validate()
    return cfg


def _gcp(cluster_id: str, master: str) -> GcpConfig:
    cfg = GcpConfig(cluster_id=cluster_id, project_id="p" * 30, enable_ssh=True)
    if master == sl.SERVERLESS:
        cfg = dataclasses.replace(cfg, master=master, tls=False, port=sl.CONTAINER_PORT)
    else:
        cfg = dataclasses.replace(cfg, filestore=True)
    cfg.validate()
    return cfg


def _problems(graph: dryrun.Rendered) -> list[str]:
    return [p for r in graph.resources for p in names.problems(r.type, r.name, r.inputs)]


@pytest.mark.parametrize("master", MODES)
@pytest.mark.parametrize("cluster_id", AWS_IDS, ids=len)
def test_every_aws_name_passes_the_providers_rules(cluster_id, master):
    cfg = _aws(cluster_id, master)
    graph = dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)
    assert len(graph.resources) > 20
    assert _problems(graph) == []


@pytest.mark.parametrize("master", MODES)
@pytest.mark.parametrize("cluster_id", GCP_IDS, ids=len)
def test_every_gcp_name_passes_the_providers_rules(cluster_id, master):
    cfg = _gcp(cluster_id, master)
    graph = dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)
    assert len(graph.resources) > 20
    assert _problems(graph) == []


def test_the_migration_jobs_token_is_a_valid_execution_suffix_for_any_release():
    # A version with a local label, as a build from a checkout has: still a valid token.
    from det.deploy.common import release

    rel = release.Release(
        filename="det_platform-0.38.1.dev123+g0123456789ab-py3-none-any.whl",
        sha256="ab" * 32,
        constraints="",
        path=None,
    )
    cfg = dataclasses.replace(
        _gcp(GCP_IDS[1], sl.SERVERLESS),
        boot=dataclasses.replace(GcpConfig(cluster_id="c", project_id="p").boot, release=rel),
    )
    graph = dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)
    (job,) = graph.of_type("gcp:cloudrunv2/job:Job")
    token = job.inputs["runExecutionToken"]
    assert names.run_execution_token(job.inputs["name"], token) is None
    # Another image is another token (a new migration runs); the same one is the same token.
    other = dataclasses.replace(rel, sha256="cd" * 32)
    cfg2 = dataclasses.replace(cfg, boot=dataclasses.replace(cfg.boot, release=other))
    graph2 = dryrun.render(lambda: gcp_program.build(cfg2), gcp_program.MOCK_CALLS)
    (job2,) = graph2.of_type("gcp:cloudrunv2/job:Job")
    assert job2.inputs["runExecutionToken"] != token
    again = dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)
    assert again.of_type("gcp:cloudrunv2/job:Job")[0].inputs["runExecutionToken"] == token


def test_the_rules_refuse_what_the_providers_refuse():
    job = "det-" + "x" * 35 + "-migrate"
    assert names.run_execution_token(job, "0.1.0-0123456789ab")  # dots
    assert names.run_execution_token(job, "a" * 16)  # 47 + 16 = 63: not fewer than 63
    assert names.run_execution_token(job, "a" * 15) is None
    assert names.RUN_SERVICE.problem("det-" + "x" * 46)  # 50 characters
    assert names.RUN_SERVICE.problem("det-" + "x" * 45) is None
    assert names.ELB_NAME.problem("det-cluster-alb-")
    assert names.ELB_NAME.problem("internal-det")
    assert names.ELB_NAME.problem("d" * 33)
    assert names.EVENTS_64.problem("det/x")
    assert names.ECR_REPOSITORY.problem("det--x/det-master")
    assert names.GCE_NAME.problem("d" * 64)
    assert names.CUSTOM_ROLE.problem("det-x")  # '-' is not allowed in a role id
    assert names.SCHEDULED_ACTION.problem("det/c1 wake")
    assert names.SCHEDULED_ACTION.problem("det-c1-wake ")
    assert names.SCHEDULED_ACTION.problem("det-c1-wake") is None
    assert names.SCHEDULE.problem("det-c1-wake:1")
    assert names.problems("aws:new/thing:Thing", "n", {})  # every type needs its rule
    assert names.problems("aws:ec2/vpc:Vpc", "n", {"tags": {"aws:x": "y"}})


def test_fit_keeps_short_names_and_hashes_long_ones():
    assert names.fit("det-c1-db-peering", 63) == "det-c1-db-peering"
    long = "det-" + "x" * 70
    cut = names.fit(long, 63)
    assert len(cut) == 63 and cut == names.fit(long, 63) and cut != names.fit(long + "y", 63)
    assert names.autoname_or_fit("det-c1-db-peering", 63) is None
    assert names.autoname_or_fit("d" * 60, 63) == "d" * 60  # explicit: no suffix
