"""GCS checkpoint storage against gcp-storage-emulator (in memory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from det import storage
from tests.integration.storage_support import (
    BIG,
    digests,
    gcs_emulator,
    linked_source,
    make_checkpoint,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def emulator_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gcs_emulator(tmp_path_factory.mktemp("gcs")) as url:
        yield url


@pytest.fixture
def gcs_config(emulator_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", emulator_url)
    client = gcs.Client(project="test", credentials=AnonymousCredentials())
    bucket = client.bucket("ckpts")
    if not bucket.exists():
        client.create_bucket("ckpts")
    return {"type": "gcs", "bucket": "ckpts", "prefix": "runs/"}


def test_checkpoint_round_trips_byte_for_byte(gcs_config: dict[str, str], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    expected = make_checkpoint(src)
    mgr = storage.from_config(gcs_config)
    mgr.upload(src, "uuid-1")
    listing = mgr.list_files("uuid-1")
    assert listing["big.bin"] == BIG
    assert "empty/" in listing and "a/b/c/weights.bin" in listing
    dst = tmp_path / "dst"
    storage.download_checkpoint(gcs_config, "uuid-1", str(dst))
    assert digests(dst) == expected
    assert (dst / "empty").is_dir()


def test_delete_and_list(gcs_config: dict[str, str], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.pt").write_bytes(b"1234")
    mgr = storage.from_config(gcs_config)
    mgr.upload(src, "uuid-2")
    assert mgr.list_files("uuid-2") == {"m.pt": 4}
    assert mgr.delete("uuid-2") == {"m.pt": 4}
    assert mgr.list_files("uuid-2") == {}


def test_upload_never_stores_a_file_outside_the_checkpoint(
    gcs_config: dict[str, str], emulator_url: str, tmp_path: Path
) -> None:
    """Issue 23, item 1: links that leave the directory are skipped; one to a file inside is
    stored as a copy."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage as gcs

    storage.from_config(gcs_config).upload(linked_source(tmp_path), "uuid-3")
    bucket = gcs.Client(project="test", credentials=AnonymousCredentials()).bucket("ckpts")
    stored = {b.name: b.download_as_bytes() for b in bucket.list_blobs(prefix="runs/uuid-3/")}
    assert stored == {"runs/uuid-3/model.pt": b"weights", "runs/uuid-3/latest.pt": b"weights"}
