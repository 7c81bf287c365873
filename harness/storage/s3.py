"""Checkpoints in S3 (or any S3 API: ``endpoint_url``). boto3 is imported lazily (extra ``aws``).

Layout: ``<prefix>/<storage_id>/<relative path>``; directories are empty objects whose key ends
in ``/`` (Determined's layout, so checkpoints written by either harness read back in both).
Large files go up in parallel multipart chunks (TransferConfig); many files go up in parallel.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, BinaryIO

from .base import ObjectStorageManager, config_str

if TYPE_CHECKING:
    # boto3's clients are made at run time from service models: the class they all share.
    from botocore.client import BaseClient

    # The task side's Python has no typing_extensions: the JSON types are for mypy only.
    from det.common.jsontypes import JSONObject

logger = logging.getLogger(__name__)

_MB = 1024 * 1024


class S3StorageManager(ObjectStorageManager):
    scheme = "s3"

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
        # boto3 is the optional extra det[aws], needed only once S3 is used
        import boto3
        import boto3.s3.transfer

        super().__init__(bucket, prefix, max_workers)
        self.bucket = bucket
        self._client: BaseClient = boto3.client(
            "s3",
            endpoint_url=endpoint_url,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name=region,
        )
        self._transfer = boto3.s3.transfer.TransferConfig(
            multipart_threshold=16 * _MB, multipart_chunksize=16 * _MB, max_concurrency=8
        )

    @property
    def client(self) -> BaseClient:
        """The boto3 S3 client (the master wraps its connections in its egress policy)."""
        return self._client

    @classmethod
    def from_config(cls, config: JSONObject) -> S3StorageManager:
        return cls(
            str(config["bucket"]),
            prefix=config_str(config, "prefix"),
            endpoint_url=config_str(config, "endpoint_url"),
            access_key=config_str(config, "access_key"),
            secret_key=config_str(config, "secret_key"),
        )

    def _list_keys(self, key_prefix: str) -> Iterator[tuple[str, int]]:
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=key_prefix):
            for obj in page.get("Contents", []):
                yield obj["Key"], int(obj["Size"])

    def _put_dir(self, key: str) -> None:
        self._client.put_object(Bucket=self.bucket, Key=key, Body=b"")

    def _put_file(self, f: BinaryIO, key: str) -> None:
        self._client.upload_fileobj(f, self.bucket, key, Config=self._transfer)

    def _get_file(self, key: str, path: str) -> None:
        self._client.download_file(self.bucket, key, path, Config=self._transfer)

    def _delete_keys(self, keys: list[str]) -> None:
        # DeleteObjects takes at most 1000 keys a request.
        for i in range(0, len(keys), 1000):
            self._client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True},
            )
