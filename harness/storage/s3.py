"""Checkpoints in S3 (or any S3 API: ``endpoint_url``). boto3 is imported lazily (extra ``aws``).

Layout: ``<prefix>/<storage_id>/<relative path>``; directories are empty objects whose key ends
in ``/`` (Determined's layout, so checkpoints written by either harness read back in both).
Large files go up in parallel multipart chunks (TransferConfig); many files go up in parallel.
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import pathlib
from typing import Any

from .base import (
    CheckpointNotFoundError,
    Selector,
    StorageManager,
    list_directory,
    select_paths,
    validate_storage_id,
)

logger = logging.getLogger(__name__)

_MB = 1024 * 1024


def normalize_prefix(prefix: str | None) -> str:
    p = (prefix or "").strip("/")
    if ".." in p.split("/"):
        raise ValueError("checkpoint_storage.prefix must not contain '..'")
    return p


class S3StorageManager(StorageManager):
    def __init__(
        self,
        bucket: str,
        *,
        prefix: str | None = None,
        endpoint_url: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str | None = None,
        max_workers: int = 8,
    ) -> None:
        import boto3
        import boto3.s3.transfer

        self.bucket = bucket
        self.prefix = normalize_prefix(prefix)
        self._client: Any = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
        )
        self._transfer = boto3.s3.transfer.TransferConfig(
            multipart_threshold=16 * _MB, multipart_chunksize=16 * _MB, max_concurrency=8
        )
        self._max_workers = max_workers

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> S3StorageManager:
        return cls(
            str(config["bucket"]),
            prefix=config.get("prefix"),
            endpoint_url=config.get("endpoint_url"),
            access_key=config.get("access_key"),
            secret_key=config.get("secret_key"),
        )

    def _key_prefix(self, storage_id: str) -> str:
        validate_storage_id(storage_id)
        return f"{self.prefix}/{storage_id}/" if self.prefix else f"{storage_id}/"

    def _list(self, storage_id: str) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        out: dict[str, int] = {}
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=kp):
            for obj in page.get("Contents", []):
                out[obj["Key"][len(kp) :]] = int(obj["Size"])
        out.pop("", None)
        return out

    def upload(
        self, src_dir: str | os.PathLike[str], storage_id: str, paths: set[str] | None = None
    ) -> None:
        src = os.fspath(src_dir)
        kp = self._key_prefix(storage_id)
        entries = select_paths(list_directory(src), paths)
        logger.info("uploading %d entries to s3://%s/%s", len(entries), self.bucket, kp)

        def one(rel: str, is_dir: bool) -> None:
            if is_dir:
                self._client.put_object(Bucket=self.bucket, Key=kp + rel, Body=b"")
            else:
                self._client.upload_file(
                    os.path.join(src, rel), self.bucket, kp + rel, Config=self._transfer
                )

        _run_parallel(one, entries, self._max_workers)

    def download(
        self, storage_id: str, dst_dir: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        if not listing:
            raise CheckpointNotFoundError(f"checkpoint s3://{self.bucket}/{kp} not found")
        dst = pathlib.Path(dst_dir)
        dst.mkdir(parents=True, exist_ok=True)
        entries = [
            (rel, rel.endswith("/")) for rel in sorted(listing) if selector is None or selector(rel)
        ]
        for rel, is_dir in entries:
            target = dst / rel
            (target if is_dir else target.parent).mkdir(parents=True, exist_ok=True)

        def one(rel: str, is_dir: bool) -> None:
            if not is_dir:
                self._client.download_file(
                    self.bucket, kp + rel, os.fspath(dst / rel), Config=self._transfer
                )

        _run_parallel(one, entries, self._max_workers)

    def delete(self, storage_id: str) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        keys = [kp + rel for rel in listing]
        for i in range(0, len(keys), 1000):
            self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
        return listing

    def list_files(self, storage_id: str) -> dict[str, int]:
        return self._list(storage_id)


def _run_parallel(fn: Any, entries: list[tuple[str, bool]], workers: int) -> None:
    """Run ``fn(rel, is_dir)`` for every entry on a thread pool; re-raise the first error."""
    if not entries:
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(fn, rel, is_dir) for rel, is_dir in entries]
        for f in futures:
            f.result()
