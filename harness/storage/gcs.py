"""Checkpoints in Google Cloud Storage. google-cloud-storage is imported lazily (extra ``gcp``).

Layout as for S3: ``<prefix>/<storage_id>/<relative path>``, directories as empty ``…/`` blobs.
When ``STORAGE_EMULATOR_HOST`` is set (an emulator), the client uses anonymous credentials; the
library itself sends its requests to that host.
"""

from __future__ import annotations

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
from .s3 import _run_parallel, normalize_prefix

logger = logging.getLogger(__name__)


class GCSStorageManager(StorageManager):
    def __init__(self, bucket: str, *, prefix: str | None = None, max_workers: int = 8) -> None:
        from google.cloud import storage as gcs

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            from google.auth.credentials import AnonymousCredentials

            client = gcs.Client(
                project=os.environ.get("GOOGLE_CLOUD_PROJECT", "det-emulator"),
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            )
        else:
            client = gcs.Client()
        self._bucket: Any = client.bucket(bucket)
        self.bucket_name = bucket
        self.prefix = normalize_prefix(prefix)
        self._max_workers = max_workers

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GCSStorageManager:
        return cls(str(config["bucket"]), prefix=config.get("prefix"))

    def _key_prefix(self, storage_id: str) -> str:
        validate_storage_id(storage_id)
        return f"{self.prefix}/{storage_id}/" if self.prefix else f"{storage_id}/"

    def _list(self, storage_id: str) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        out = {b.name[len(kp) :]: int(b.size or 0) for b in self._bucket.list_blobs(prefix=kp)}
        out.pop("", None)
        return out

    def upload(
        self, src_dir: str | os.PathLike[str], storage_id: str, paths: set[str] | None = None
    ) -> None:
        src = os.fspath(src_dir)
        kp = self._key_prefix(storage_id)
        entries = select_paths(list_directory(src), paths)
        logger.info("uploading %d entries to gs://%s/%s", len(entries), self.bucket_name, kp)

        def one(rel: str, is_dir: bool) -> None:
            blob = self._bucket.blob(kp + rel)
            if is_dir:
                blob.upload_from_string(b"")
            else:
                # Resumable upload in 32 MiB chunks for large files.
                blob.chunk_size = 32 * 1024 * 1024
                blob.upload_from_filename(os.path.join(src, rel))

        _run_parallel(one, entries, self._max_workers)

    def download(
        self, storage_id: str, dst_dir: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        if not listing:
            raise CheckpointNotFoundError(f"checkpoint gs://{self.bucket_name}/{kp} not found")
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
                self._bucket.blob(kp + rel).download_to_filename(os.fspath(dst / rel))

        _run_parallel(one, entries, self._max_workers)

    def delete(self, storage_id: str) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        for rel in listing:
            self._bucket.blob(kp + rel).delete()
        return listing

    def list_files(self, storage_id: str) -> dict[str, int]:
        return self._list(storage_id)
