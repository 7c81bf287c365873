"""Checkpoints in Google Cloud Storage. google-cloud-storage is imported lazily (extra ``gcp``).

Layout as for S3: ``<prefix>/<storage_id>/<relative path>``, directories as empty ``…/`` blobs.
When ``STORAGE_EMULATOR_HOST`` is set (an emulator), the client uses anonymous credentials; the
library itself sends its requests to that host.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from .base import ObjectStorageManager, config_str

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from det.common.jsontypes import JSONObject

logger = logging.getLogger(__name__)


class GCSStorageManager(ObjectStorageManager):
    scheme = "gs"

    def __init__(self, bucket: str, *, prefix: str | None = None, max_workers: int = 8) -> None:
        # google-cloud-storage is the optional extra det[gcp], needed only once GCS is used
        from google.cloud import storage as gcs

        if os.environ.get("STORAGE_EMULATOR_HOST"):
            # google-auth comes with det[gcp] too (an emulator needs no real credentials)
            from google.auth.credentials import AnonymousCredentials

            client = gcs.Client(
                project=os.environ.get("GOOGLE_CLOUD_PROJECT", "det-emulator"),
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            )
        else:
            client = gcs.Client()
        super().__init__(bucket, prefix, max_workers)
        self._bucket: Any = client.bucket(bucket)

    @classmethod
    def from_config(cls, config: JSONObject) -> GCSStorageManager:
        return cls(str(config["bucket"]), prefix=config_str(config, "prefix"))

    def _list_keys(self, key_prefix: str) -> Iterator[tuple[str, int]]:
        for blob in self._bucket.list_blobs(prefix=key_prefix):
            yield blob.name, int(blob.size or 0)

    def _put_dir(self, key: str) -> None:
        self._bucket.blob(key).upload_from_string(b"")

    def _put_file(self, f: BinaryIO, key: str) -> None:
        blob = self._bucket.blob(key)
        # Resumable upload in 32 MiB chunks for large files.
        blob.chunk_size = 32 * 1024 * 1024
        blob.upload_from_file(f, size=os.fstat(f.fileno()).st_size)

    def _get_file(self, key: str, path: str) -> None:
        self._bucket.blob(key).download_to_filename(path)

    def _delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            self._bucket.blob(key).delete()
