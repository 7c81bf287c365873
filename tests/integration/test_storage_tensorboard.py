"""A trial's TensorBoard files through object storage: the harness's manager uploads them to
``<prefix>/<cluster id>/tensorboard/experiment/<exp>/trial/<trial>/`` in S3 (moto, a real HTTP
endpoint) and GCS (the emulator), and the TensorBoard task's fetcher copies them back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from det import storage
from det.core._tensorboard import TensorboardManager, sync_path, training_scalars
from det.exec.tensorboard import Fetcher
from tests.integration.test_storage_gcs import emulator_url, gcs_config
from tests.integration.test_storage_s3 import moto_url, s3_config

pytestmark = pytest.mark.integration
__all__ = ["emulator_url", "gcs_config", "moto_url", "s3_config"]


def round_trip(config: dict[str, Any], tmp_path: Path) -> list[str]:
    """Writes, uploads, grows and uploads again, fetching after each; the object keys."""
    tb = TensorboardManager(tmp_path / "local", storage.from_config(config), sync_path("cl", 3, 11))
    tb.writer.add_scalars(10, training_scalars({"loss": 0.5}))
    tb.sync(force=True)
    logdir = tmp_path / "logdir"
    fetcher = Fetcher("cl", [{"storage": config, "experimentId": 3, "trialId": 11}], logdir)
    assert fetcher.fetch() == 1
    (local,) = (tmp_path / "local").iterdir()
    fetched = logdir / "experiment" / "3" / "trial" / "11" / local.name
    assert fetched.read_bytes() == local.read_bytes()
    tb.writer.add_scalars(20, training_scalars({"loss": 0.25}))
    tb.close()
    assert fetcher.fetch() == 1 and fetched.read_bytes() == local.read_bytes()
    assert fetcher.fetch() == 0
    root = storage.from_config(config).under("cl/tensorboard/experiment/3/trial")
    return sorted(root.list_files("11"))


def test_s3(s3_config: dict[str, Any], tmp_path: Path) -> None:
    import boto3

    names = round_trip(s3_config, tmp_path)
    assert len(names) == 1 and names[0].startswith("events.out.tfevents.")
    client = boto3.client(
        "s3", endpoint_url=s3_config["endpoint_url"], aws_access_key_id="k",
        aws_secret_access_key="s",
    )  # fmt: skip
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="ckpts")["Contents"]]
    assert keys == [f"team/a/cl/tensorboard/experiment/3/trial/11/{names[0]}"]


def test_gcs(gcs_config: dict[str, Any], tmp_path: Path) -> None:
    names = round_trip(gcs_config, tmp_path)
    assert len(names) == 1 and names[0].startswith("events.out.tfevents.")
