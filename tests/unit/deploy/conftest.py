"""Cluster graphs rendered once per session under Pulumi's mocks (in-process, offline)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from det.deploy.aws import program as aws_program
from det.deploy.aws.config import AwsConfig
from det.deploy.common import dryrun
from det.deploy.gcp import program as gcp_program
from det.deploy.gcp.config import GcpConfig
from tests.fakes.moto_server import REGION, MotoServer

AWS = AwsConfig(
    cluster_id="c1", keypair="kp", inbound_cidr="198.51.100.0/24", enable_ssh=True, spot=True
)
GCP = GcpConfig(
    cluster_id="c1",
    project_id="proj",
    inbound_cidr="198.51.100.0/24",
    enable_ssh=True,
    filestore=True,
)


@pytest.fixture(scope="session")
def aws_graph() -> dryrun.Rendered:
    return dryrun.render(lambda: aws_program.build(AWS), aws_program.MOCK_CALLS)


@pytest.fixture(scope="session")
def gcp_graph() -> dryrun.Rendered:
    return dryrun.render(lambda: gcp_program.build(GCP), gcp_program.MOCK_CALLS)


def _one(graph: dryrun.Rendered, type_: str) -> dict[str, Any]:
    found = graph.of_type(type_)
    assert len(found) == 1, f"expected one {type_}, got {[r.name for r in found]}"
    return found[0].inputs


@pytest.fixture
def one() -> Any:
    """``one(graph, type)``: the inputs of the only resource of that type."""
    return _one


@pytest.fixture
def moto(moto_server: MotoServer) -> MotoServer:
    """The test process's moto server (tests.integration.conftest_aws: one per process, its
    start and first EC2 call cost about 1.3 CPU-s); each test that uses it resets it first
    (``aws_moto``, ``session``)."""
    return moto_server


@pytest.fixture
def aws_moto(aws_endpoint: str, moto_server: MotoServer) -> MotoServer:
    """The process's moto, reset, with its endpoint and fake credentials in the env
    (``aws_endpoint``)."""
    return moto_server


@pytest.fixture
def session(aws_moto: MotoServer) -> boto3.Session:
    """A boto3 session on a reset ``moto``."""
    return boto3.Session(region_name=REGION)
