"""``down --delete-bucket`` on GCP against gcp-storage-emulator (in memory)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from det.deploy.gcp import teardown
from tests.integration.storage_support import gcs_emulator

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gcs_emulator(tmp_path_factory.mktemp("gcs")) as url:
        yield url


@pytest.fixture
def client(emulator: str, monkeypatch: pytest.MonkeyPatch):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator)
    return storage.Client(project="p", credentials=AnonymousCredentials())


def test_delete_bucket_removes_objects_and_the_bucket(client):
    bucket = client.create_bucket("det-c1-checkpoints")
    for name in ("ckpt/1/state", "ckpt/1/metadata.json", "ckpt/2/state"):
        bucket.blob(name).upload_from_string(b"x")
    assert teardown.delete_bucket(client, "det-c1-checkpoints") == 3
    assert "det-c1-checkpoints" not in [b.name for b in client.list_buckets()]
    assert teardown.delete_bucket(client, "det-c1-checkpoints") == 0


def test_delete_bucket_leaves_other_buckets_alone(client):
    client.create_bucket("keep-me").blob("a").upload_from_string(b"1")
    client.create_bucket("det-c2-checkpoints")
    teardown.delete_bucket(client, "det-c2-checkpoints")
    assert [b.name for b in client.get_bucket("keep-me").list_blobs()] == ["a"]
