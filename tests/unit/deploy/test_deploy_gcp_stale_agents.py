"""``det deploy gcp up`` after a config change: the agents of the old config are deleted, through
the real Compute client against the fake GCE."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from det.deploy.gcp import teardown
from det.deploy.gcp.config import CLUSTER_LABEL, CONFIG_HASH_LABEL
from tests.fakes.gce import FakeGce


@pytest.fixture
def gce() -> Iterator[FakeGce]:
    with FakeGce() as fake:
        yield fake


@pytest.fixture
def clients(gce: FakeGce) -> tuple[Any, Any]:
    from google.api_core.client_options import ClientOptions
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import compute_v1

    options = ClientOptions(api_endpoint=gce.url)
    creds = AnonymousCredentials()  # type: ignore[no-untyped-call]
    return (
        compute_v1.InstancesClient(credentials=creds, client_options=options),
        compute_v1.ZoneOperationsClient(credentials=creds, client_options=options),
    )


def _agent(gce: FakeGce, zone: str, name: str, cluster: str, digest: str | None) -> None:
    labels = {CLUSTER_LABEL: cluster}
    if digest is not None:
        labels[CONFIG_HASH_LABEL] = digest
    gce.add_instance(zone, name, labels)


def test_agents_of_an_older_config_are_deleted_in_every_zone(gce: FakeGce, clients: Any) -> None:
    gce.add_instance("us-west1-b", "det-master-c1", {CLUSTER_LABEL: "c1", "det-role": "master"})
    _agent(gce, "us-west1-b", "old-b", "c1", "aaaa")
    _agent(gce, "us-west1-c", "old-c", "c1", "aaaa")
    _agent(gce, "us-west1-c", "unlabelled", "c1", None)  # launched before agents were labelled
    _agent(gce, "us-west1-b", "current", "c1", "bbbb")
    _agent(gce, "us-west1-b", "other-cluster", "c2", "aaaa")
    instances, operations = clients
    replaced = teardown.replace_stale_agents(
        instances, operations, "fake-project", "c1", "bbbb", "det-master-c1"
    )
    assert sorted(replaced) == ["old-b", "old-c", "unlabelled"]
    assert sorted(i["name"] for i in gce.instances()) == [
        "current",
        "det-master-c1",
        "other-cluster",
    ]
    # Nothing left to replace: a second up deletes nothing.
    again = teardown.replace_stale_agents(
        instances, operations, "fake-project", "c1", "bbbb", "det-master-c1"
    )
    assert again == []
