"""Checkpoints on a filesystem path: ``shared_fs`` (a host path mounted into every container)
and ``directory`` (a path inside the container).

``shared_fs`` semantics follow Determined: checkpoints live in ``host_path/storage_path`` on the
host; in a task container that host path is mounted at ``container_path`` (the cluster mounts it
at ``/determined_shared_fs``). ``storage_path`` must stay inside ``host_path``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import shutil
from collections.abc import Iterator
from typing import Any

from . import globs
from .base import (
    CheckpointNotFoundError,
    Selector,
    StorageManager,
    copy_file,
    select_paths,
    validate_storage_id,
    validate_subpath,
)
from .tree import Tree

logger = logging.getLogger(__name__)

SHARED_FS_CONTAINER_PATH = "/determined_shared_fs"


def shared_fs_base_path(config: dict[str, Any], container_path: str | None) -> str:
    """Where checkpoints live, as seen from here (pure)."""
    host_path = str(config["host_path"])
    if not os.path.isabs(host_path):
        raise ValueError("checkpoint_storage.host_path must be an absolute path")
    storage_path = config.get("storage_path")
    root = container_path if container_path is not None else host_path
    if storage_path is None:
        return root
    full = os.path.normpath(os.path.join(host_path, str(storage_path)))
    if full != host_path and not full.startswith(host_path.rstrip("/") + "/"):
        raise ValueError("checkpoint_storage.storage_path must be inside host_path")
    rel = os.path.relpath(full, host_path)
    return os.path.normpath(os.path.join(root, rel))


class DirectoryStorageManager(StorageManager):
    """Checkpoints in ``base_path/<storage_id>``. Writes go straight to their final place."""

    def __init__(self, base_path: str | os.PathLike[str]) -> None:
        self.base_path = pathlib.Path(base_path)

    def _dir(self, storage_id: str) -> pathlib.Path:
        validate_storage_id(storage_id)
        return self.base_path / storage_id

    def direct_path(self, storage_id: str) -> pathlib.Path | None:
        return self._dir(storage_id)

    def under(self, subpath: str) -> DirectoryStorageManager:
        return type(self)(self.base_path / validate_subpath(subpath))

    def upload(
        self, src_dir: str | os.PathLike[str], storage_id: str, paths: set[str] | None = None
    ) -> None:
        dst = self._dir(storage_id)
        src = os.fspath(src_dir)
        if os.path.realpath(src) == os.path.realpath(dst):
            return
        with Tree(src, checkpoint=False) as tree:
            dst.mkdir(parents=True, exist_ok=True)
            for rel, is_dir in select_paths(tree.resources, paths):
                if is_dir:
                    (dst / rel).mkdir(parents=True, exist_ok=True)
                else:
                    copy_file(tree, rel, os.fspath(dst / rel))

    def download(
        self, storage_id: str, dst_dir: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        """Copies the checkpoint's content (:mod:`det.storage.tree`): a link is never followed
        out of its directory, nor is the directory itself a link (the master reads here)."""
        src = self._dir(storage_id)
        if not src.is_dir() and not src.is_symlink():
            raise CheckpointNotFoundError(f"checkpoint {storage_id} not found in {self.base_path}")
        with Tree(src, checkpoint=True) as tree:
            dst = pathlib.Path(dst_dir)
            dst.mkdir(parents=True, exist_ok=True)
            for rel, is_dir in select_paths(tree.resources, None):
                if selector is not None and not selector(rel):
                    continue
                if is_dir:
                    (dst / rel).mkdir(parents=True, exist_ok=True)
                else:
                    copy_file(tree, rel, os.fspath(dst / rel))

    def delete(self, storage_id: str) -> dict[str, int]:
        path = self._dir(storage_id)
        if path.is_symlink():
            # Not a checkpoint's directory: remove the link, never what it points at.
            logger.warning(
                "checkpoint %s: %s is a link; removed, its target left", storage_id, path
            )
            path.unlink()
            return {}
        if not path.exists():
            return {}
        with Tree(path, checkpoint=True) as tree:
            resources = dict(tree.resources)
        shutil.rmtree(path)  # removes links themselves, never descends into their targets
        return resources

    def list_files(self, storage_id: str) -> dict[str, int]:
        path = self._dir(storage_id)
        if path.is_symlink() or not path.is_dir():
            return {}
        with Tree(path, checkpoint=True) as tree:
            return dict(tree.resources)

    def remove_files(self, storage_id: str, patterns: list[str]) -> dict[str, int]:
        """Entries are chosen from the checkpoint's listing (its content and what the listing
        skips: a link out of the directory is removed itself, never what it points at) and
        removed through descriptors (:meth:`Tree.remove`); the directory itself must not be a
        link (UnsafeCheckpointError)."""
        path = self._dir(storage_id)
        if not path.is_dir() and not path.is_symlink():
            return {}
        with Tree(path, checkpoint=True) as tree:
            for rel in globs.topmost(patterns, [*tree.resources, *tree.skipped]):
                tree.remove(rel)
        with Tree(path, checkpoint=True) as tree:
            left = dict(tree.resources)
        if not any(not rel.endswith("/") for rel in left):
            self.delete(storage_id)
            return {}
        return left

    @contextlib.contextmanager
    def store_path(self, storage_id: str) -> Iterator[pathlib.Path]:
        path = self._dir(storage_id)
        path.mkdir(parents=True, exist_ok=True)
        yield path

    @contextlib.contextmanager
    def restore_path(
        self, storage_id: str, selector: Selector | None = None
    ) -> Iterator[pathlib.Path]:
        # Direct access, no copy, when the directory holds only files and directories (a
        # selector cannot hide files then; it is only an optimisation). A checkpoint with links
        # or special files (another user's, say) is read through a copy of its content instead,
        # so the reading trial's code never follows a link its writer made (det.storage.tree).
        path = self._dir(storage_id)
        if not path.is_dir() and not path.is_symlink():
            raise CheckpointNotFoundError(f"checkpoint {storage_id} not found in {self.base_path}")
        with Tree(path, checkpoint=True) as tree:
            plain = not tree.skipped and all(r == s for r, s in tree.sources.items())
        if plain:
            yield path
            return
        logger.info("checkpoint %s holds links or special files: restoring a copy", storage_id)
        with super().restore_path(storage_id, selector) as copy:
            yield copy


class SharedFSStorageManager(DirectoryStorageManager):
    @classmethod
    def from_config(
        cls, config: dict[str, Any], container_path: str | None
    ) -> SharedFSStorageManager:
        return cls(shared_fs_base_path(config, container_path))
