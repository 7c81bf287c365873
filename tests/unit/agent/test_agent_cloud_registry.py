"""Pulls from the cloud's own registry with the machine's role: ECR against moto in server mode,
Artifact Registry / gcr.io against the fake GCE metadata server. The Docker side is a fake of
docker-py's ``APIClient.pull`` that records the credentials the agent hands it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from det.agent import images
from tests.fakes.gce_metadata import FakeGceMetadata
from tests.fakes.moto_server import REGION, MotoServer

ECR_IMAGE = f"123456789012.dkr.ecr.{REGION}.amazonaws.com/team/task:1"


class RecordingApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any, Any]] = []

    def pull(
        self, repo: str, tag: Any, stream: bool, decode: bool, auth_config: Any
    ) -> Iterator[Any]:
        self.calls.append((repo, tag, auth_config))
        return iter([{"status": "Downloaded newer image"}])


class FakeDocker:
    def __init__(self) -> None:
        self.api = RecordingApi()


@pytest.fixture
def moto(aws_endpoint: str, moto_server: MotoServer) -> MotoServer:
    """The test process's moto (conftest_aws), wiped, with its endpoint in the env."""
    return moto_server


@pytest.mark.parametrize(
    ("image", "host"),
    [
        ("determinedai/pytorch-ngc:0.38.1", None),
        ("ubuntu", None),
        ("localhost/img", "localhost"),
        ("127.0.0.1:5000/team/img:v2", "127.0.0.1:5000"),
        (ECR_IMAGE, f"123456789012.dkr.ecr.{REGION}.amazonaws.com"),
        ("us-west1-docker.pkg.dev/proj/repo/img:1", "us-west1-docker.pkg.dev"),
    ],
)
def test_registry_host_follows_dockers_rule(image: str, host: str | None) -> None:
    assert images.registry_host(image) == host


@pytest.mark.integration
def test_ecr_image_is_pulled_with_a_token_from_the_instance_role(moto: MotoServer) -> None:
    expected = boto3.client("ecr", region_name=REGION).get_authorization_token()
    user, _, password = (
        base64.b64decode(expected["authorizationData"][0]["authorizationToken"])
        .decode()
        .partition(":")
    )
    docker = FakeDocker()
    images.pull(docker, ECR_IMAGE, None)
    ((repo, tag, auth),) = docker.api.calls
    assert (repo, tag) == (f"123456789012.dkr.ecr.{REGION}.amazonaws.com/team/task", "1")
    assert auth == {
        "username": user,
        "password": password,
        "serveraddress": f"https://123456789012.dkr.ecr.{REGION}.amazonaws.com",
    }
    assert user == "AWS" and password


@pytest.mark.integration
def test_given_registry_auth_wins_over_the_role(moto: MotoServer) -> None:
    docker = FakeDocker()
    images.pull(docker, ECR_IMAGE, {"username": "u", "password": "p"})
    assert docker.api.calls[0][2] == {"username": "u", "password": "p"}


@pytest.mark.parametrize(
    "image", ["europe-docker.pkg.dev/proj/repo/task:2", "gcr.io/proj/task:2", "eu.gcr.io/p/t"]
)
def test_google_registries_get_the_service_accounts_token(
    image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeGceMetadata() as meta:
        meta.values["instance/service-accounts/default/token"] = json.dumps(
            {"access_token": "ya29.fake-token", "expires_in": 3600, "token_type": "Bearer"}
        )
        monkeypatch.setenv("GCE_METADATA_HOST", meta.host)
        docker = FakeDocker()
        images.pull(docker, image, None)
    assert docker.api.calls[0][2] == {
        "username": "oauth2accesstoken",
        "password": "ya29.fake-token",
        "serveraddress": image.split("/", 1)[0],
    }


def test_no_token_means_a_pull_without_credentials_and_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeGceMetadata() as meta:  # serves no token: 404
        monkeypatch.setenv("GCE_METADATA_HOST", meta.host)
        docker = FakeDocker()
        images.pull(docker, "gcr.io/proj/task:2", None)
    assert docker.api.calls[0][2] is None
    assert "no credentials from the machine's role for gcr.io" in caplog.text


def test_other_registries_and_docker_hub_are_pulled_without_credentials(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Unroutable metadata and AWS endpoints: were they asked, the warning path would show it.
    monkeypatch.setenv("GCE_METADATA_HOST", "127.0.0.1:9")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    docker = FakeDocker()
    images.pull(docker, "determinedai/pytorch-ngc:0.38.1", None)
    images.pull(docker, "registry.example.com:5000/t:1", None)
    assert [c[2] for c in docker.api.calls] == [None, None]
    assert images.cloud_auth("quay.io/org/img") is None
    assert "no credentials" not in caplog.text
