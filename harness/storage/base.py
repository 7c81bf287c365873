"""The checkpoint storage interface every backend implements.

A checkpoint is a directory tree stored under its ``storage_id`` (the checkpoint uuid).
Resource maps (``dict[relative path, size]``) follow Determined's convention: directories are
listed with a trailing ``/`` and size 0, so an empty directory survives a round trip.
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable, Iterator

logger = logging.getLogger(__name__)

Selector = Callable[[str], bool]


class CheckpointNotFoundError(Exception):
    """No checkpoint with this storage id exists in storage."""


def list_directory(root: str | os.PathLike[str]) -> dict[str, int]:
    """Relative path → size for every file and directory (``dir/`` → 0) under ``root``."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise NotADirectoryError(root)
    out: dict[str, int] = {}
    for cur, dirs, files in os.walk(root):
        for d in dirs:
            out[os.path.relpath(os.path.join(cur, d), root) + "/"] = 0
        for f in files:
            p = os.path.join(cur, f)
            out[os.path.relpath(p, root)] = os.path.getsize(p)
    return out


def validate_storage_id(storage_id: str) -> None:
    if not storage_id or "/" in storage_id or storage_id in (".", ".."):
        raise ValueError(f"invalid storage id {storage_id!r}")


class StorageManager(abc.ABC):
    """Upload/download checkpoint directories. Implementations must be safe to call from
    several threads on different storage ids."""

    @abc.abstractmethod
    def upload(
        self, src_dir: str | os.PathLike[str], storage_id: str, paths: set[str] | None = None
    ) -> None:
        """Copy ``src_dir`` (or only ``paths``, relative, dirs with a trailing ``/``) to storage."""

    @abc.abstractmethod
    def download(
        self, storage_id: str, dst_dir: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        """Copy a checkpoint into ``dst_dir``; raise CheckpointNotFoundError if absent."""

    @abc.abstractmethod
    def delete(self, storage_id: str) -> dict[str, int]:
        """Remove a checkpoint; returns the resources that were deleted. Idempotent."""

    @abc.abstractmethod
    def list_files(self, storage_id: str) -> dict[str, int]:
        """The checkpoint's resources as stored (empty when absent)."""

    def direct_path(self, storage_id: str) -> pathlib.Path | None:
        """The checkpoint's final directory when storage is a local filesystem, else None."""
        return None

    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[pathlib.Path]:
        """A directory to write a checkpoint into; uploaded when the block exits cleanly."""
        validate_storage_id(storage_id)
        with tempfile.TemporaryDirectory(prefix="det-ckpt-") as tmp:
            path = pathlib.Path(tmp, storage_id)
            path.mkdir()
            yield path
            self.upload(path, storage_id)

    @contextlib.contextmanager
    def restore_path(
        self, storage_id: str, selector: Selector | None = None
    ) -> Iterator[pathlib.Path]:
        """A local directory holding the checkpoint for the duration of the block."""
        validate_storage_id(storage_id)
        with tempfile.TemporaryDirectory(prefix="det-restore-") as tmp:
            path = pathlib.Path(tmp, storage_id)
            self.download(storage_id, path, selector)
            yield path


def select_paths(resources: dict[str, int], paths: set[str] | None) -> list[tuple[str, bool]]:
    """(relative path, is_dir) to upload, sorted so parents come first."""
    names = sorted(resources if paths is None else (set(resources) & set(paths)))
    return [(n, n.endswith("/")) for n in names]


def copy_file(src: str, dst: str) -> None:
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    shutil.copy2(src, dst)
