"""S3 checkpoint storage against moto in server mode (a real HTTP endpoint)."""

from __future__ import annotations

from pathlib import Path

import pytest
import requests

from det import storage
from det.storage import CheckpointNotFoundError
from tests.fakes.moto_server import MotoServer
from tests.integration.storage_support import BIG, SECRET, digests, linked_source, make_checkpoint

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def moto_url(moto_server: MotoServer) -> str:
    return moto_server.endpoint  # the test process's (conftest_aws); reset by each test


@pytest.fixture
def s3_config(moto_url: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    import boto3

    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    requests.post(f"{moto_url}/moto-api/reset", timeout=10)
    boto3.client(
        "s3", endpoint_url=moto_url, aws_access_key_id="k", aws_secret_access_key="s"
    ).create_bucket(Bucket="ckpts")
    return {
        "type": "s3",
        "bucket": "ckpts",
        "prefix": "team/a",
        "endpoint_url": moto_url,
        "access_key": "k",
        "secret_key": "s",
    }


def test_checkpoint_round_trips_byte_for_byte(s3_config: dict[str, str], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    expected = make_checkpoint(src)
    mgr = storage.from_config(s3_config)
    mgr.upload(src, "uuid-1")
    listing = mgr.list_files("uuid-1")
    assert listing["big.bin"] == BIG
    assert listing["empty/"] == 0 and "a/b/c/" in listing
    dst = tmp_path / "dst"
    storage.download_checkpoint(s3_config, "uuid-1", str(dst))
    assert digests(dst) == expected
    assert (dst / "empty").is_dir()


def test_objects_live_under_prefix_and_storage_id(
    s3_config: dict[str, str], tmp_path: Path
) -> None:
    import boto3

    src = tmp_path / "src"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_text("x")
    storage.from_config(s3_config).upload(src, "uuid-2")
    client = boto3.client(
        "s3",
        endpoint_url=s3_config["endpoint_url"],
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket="ckpts")["Contents"])
    assert keys == ["team/a/uuid-2/d/", "team/a/uuid-2/d/f"]


def test_store_path_uploads_on_exit_and_delete_removes(s3_config: dict[str, str]) -> None:
    mgr = storage.from_config(s3_config)
    with mgr.store_path("uuid-3") as p:
        (p / "model.pt").write_bytes(b"m" * 10)
    assert mgr.list_files("uuid-3") == {"model.pt": 10}
    with mgr.restore_path("uuid-3") as p:
        assert (p / "model.pt").read_bytes() == b"m" * 10
    assert mgr.delete("uuid-3") == {"model.pt": 10}
    assert mgr.list_files("uuid-3") == {}
    assert mgr.delete("uuid-3") == {}
    with pytest.raises(CheckpointNotFoundError):
        mgr.download("uuid-3", "/nonexistent-never-created")


def test_download_with_selector(s3_config: dict[str, str], tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "keep.txt").write_text("k")
    (src / "skip.txt").write_text("s")
    mgr = storage.from_config(s3_config)
    mgr.upload(src, "uuid-4")
    dst = tmp_path / "dst"
    mgr.download("uuid-4", dst, selector=lambda p: p.startswith("keep"))
    assert sorted(p.name for p in dst.iterdir()) == ["keep.txt"]


def test_upload_never_stores_a_file_outside_the_checkpoint(
    s3_config: dict[str, str], tmp_path: Path
) -> None:
    """Issue 23, item 1: links that leave the directory are skipped; one to a file inside is
    stored as a copy."""
    import boto3

    storage.from_config(s3_config).upload(linked_source(tmp_path), "uuid-5")
    client = boto3.client(
        "s3",
        endpoint_url=s3_config["endpoint_url"],
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="ckpts")["Contents"]]
    stored = {k: client.get_object(Bucket="ckpts", Key=k)["Body"].read() for k in keys}
    assert stored == {"team/a/uuid-5/model.pt": b"weights", "team/a/uuid-5/latest.pt": b"weights"}


def test_download_writes_nothing_outside_its_directory(
    s3_config: dict[str, str], tmp_path: Path
) -> None:
    """A key with ``..`` (put there by whoever holds the bucket's credentials, e.g. a task)
    would land outside the download's directory: on the master, anywhere it may write."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_config["endpoint_url"],
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    for key in ("team/a/uuid-6/model.pt", "team/a/uuid-6/../../../../escaped"):
        client.put_object(Bucket="ckpts", Key=key, Body=b"x")
    listed = [o["Key"] for o in client.list_objects_v2(Bucket="ckpts")["Contents"]]
    assert "team/a/uuid-6/../../../../escaped" in listed  # the store keeps such keys
    dst = tmp_path / "a" / "b" / "c" / "dst"
    storage.download_checkpoint(s3_config, "uuid-6", str(dst))
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["a/b/c/dst/model.pt"]


def test_core_api_upload_never_stores_a_file_outside_the_checkpoint(
    s3_config: dict[str, str], tmp_path: Path
) -> None:
    """The same through the harness's Core API (``core.checkpoint.upload``, off-cluster), as
    training code calls it."""
    import boto3

    import det

    with det.core.init(checkpoint_storage=s3_config) as core:
        storage_id = core.checkpoint.upload(linked_source(tmp_path), {"steps_completed": 1})
    client = boto3.client(
        "s3",
        endpoint_url=s3_config["endpoint_url"],
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )
    prefix = f"team/a/{storage_id}/"
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="ckpts", Prefix=prefix)["Contents"]]
    stored = {
        k[len(prefix) :]: client.get_object(Bucket="ckpts", Key=k)["Body"].read() for k in keys
    }
    assert set(stored) == {"model.pt", "latest.pt", "metadata.json"}
    assert stored["latest.pt"] == b"weights"
    assert all(SECRET not in v for v in stored.values())
