"""Checkpoint storage configs, discriminated on ``type``: shared_fs, directory, s3, gcs.

Azure is part of Determined's schema but not supported here, and HDFS was removed from Determined
itself; both are refused with a message saying what to use instead.
"""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import Field

from det.common.jsontypes import JSONValue

from .base import DEFAULT_PROPAGATION, ConfigModel

STORAGE_TYPES = ("shared_fs", "directory", "s3", "gcs")

REFUSED_STORAGE = {
    "azure": "azure checkpoint storage is not supported: use s3, gcs, shared_fs or directory",
    "hdfs": "hdfs checkpoint storage was removed from Determined: use s3, gcs, shared_fs or directory",
}

DEFAULT_SHARED_FS_CONTAINER_PATH = "/determined_shared_fs"


class _StorageBase(ConfigModel):
    """Retention shared by every storage type (Determined's defaults: 0 / 1 / 1)."""

    save_experiment_best: int = Field(default=0, ge=0)
    save_trial_best: int = Field(default=1, ge=0)
    save_trial_latest: int = Field(default=1, ge=0)


class SharedFSStorage(_StorageBase):
    """A host directory bind-mounted into every task container.

    Checkpoints go to ``host_path/storage_path`` on the host, seen at ``container_path`` inside.
    """

    type: Literal["shared_fs"]
    host_path: str
    storage_path: str | None = None
    container_path: str = DEFAULT_SHARED_FS_CONTAINER_PATH
    propagation: str = DEFAULT_PROPAGATION
    # Old names, still accepted by Determined's schema.
    checkpoint_path: str | None = None
    tensorboard_path: str | None = None


class DirectoryStorage(_StorageBase):
    """A path that already exists in the container (e.g. a mount from task_container_defaults)."""

    type: Literal["directory"]
    container_path: str


class S3Storage(_StorageBase):
    type: Literal["s3"]
    bucket: str
    prefix: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    endpoint_url: str | None = None


class GCSStorage(_StorageBase):
    type: Literal["gcs"]
    bucket: str
    prefix: str | None = None


CheckpointStorage = Annotated[
    SharedFSStorage | DirectoryStorage | S3Storage | GCSStorage, Field(discriminator="type")
]

AnyStorage = SharedFSStorage | DirectoryStorage | S3Storage | GCSStorage


def precheck(raw: JSONValue, path: str = "checkpoint_storage") -> list[tuple[str, str]]:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if isinstance(kind, str) and kind in REFUSED_STORAGE:
        return [(f"{path}.type", REFUSED_STORAGE[kind])]
    return []


def check(storage: AnyStorage, path: str = "checkpoint_storage") -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if isinstance(storage, SharedFSStorage):
        if not posixpath.isabs(storage.host_path):
            problems.append(
                (f"{path}.host_path", f"must be an absolute path (got {storage.host_path!r})")
            )
        sp = storage.storage_path
        if sp is not None and posixpath.isabs(sp):
            root = posixpath.normpath(storage.host_path)
            if posixpath.commonpath([root, posixpath.normpath(sp)]) != root:
                problems.append(
                    (
                        f"{path}.storage_path",
                        "must be a relative directory or a subdirectory of host_path "
                        f"(got {sp!r} with host_path {storage.host_path!r})",
                    )
                )
        elif sp is not None and ".." in sp.split("/"):
            problems.append((f"{path}.storage_path", f"must stay inside host_path (got {sp!r})"))
    if isinstance(storage, DirectoryStorage) and not posixpath.isabs(storage.container_path):
        problems.append(
            (f"{path}.container_path", f"must be an absolute path (got {storage.container_path!r})")
        )
    return problems
