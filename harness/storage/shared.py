"""Checkpoints on a filesystem path: ``shared_fs`` (a host path mounted into every container)
and ``directory`` (a path inside the container).

``shared_fs`` semantics follow Determined: checkpoints live in ``host_path/storage_path`` on the
host; in a task container that host path is mounted at ``container_path`` (the cluster mounts it
at ``/determined_shared_fs``). ``storage_path`` must stay inside ``host_path``.

Shared storage is written by tasks of different users (agent users: each linked user's tasks
run as its own uid). The directories every task goes through (the storage root when the
harness creates it, and the levels of TensorBoard's ``<cluster>/tensorboard/experiment/<id>/
trial`` path) are created like ``/tmp``: mode 1777, writable by every task user, each entry
removable only by its owner; a task that finds such a level it owns with a narrower mode (made
by an older harness) widens it. What one task writes (a checkpoint's directory, a trial's
TensorBoard directory) is its own, readable by all (the umask's mode). docs/internals.md,
"Agent users on shared storage", says why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pathlib
import shutil
import stat
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from . import globs
from .base import (
    CheckpointNotFoundError,
    Selector,
    StorageManager,
    StorageNotWritableError,
    copy_file,
    select_paths,
    validate_storage_id,
    validate_subpath,
)
from .tree import Tree

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from det.common.jsontypes import JSONObject

logger = logging.getLogger(__name__)

SHARED_FS_CONTAINER_PATH = "/determined_shared_fs"


def shared_fs_base_path(config: JSONObject, container_path: str | None) -> str:
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


#: The mode of a directory every task user goes through on shared storage (as ``/tmp``'s).
SHARED_DIR_MODE = 0o1777
# A shared level is made in two steps (mkdir, chmod): a task of another user that comes
# between them is refused, and tries again this many times, this far apart (seconds).
_RACE_TRIES = 3
_RACE_PAUSE = 0.2


def _owner_and_mode(path: pathlib.Path) -> str:
    """``owned by 0:0, mode 0755`` of ``path`` or of its nearest existing parent."""
    for p in (path, *path.parents):
        try:
            st = p.stat()
        except OSError:
            continue
        where = "" if p == path else f" (its parent {p})"
        return f"owned by {st.st_uid}:{st.st_gid}, mode {stat.S_IMODE(st.st_mode):04o}{where}"
    return "missing"


def not_writable(path: pathlib.Path, what: str = "checkpoint storage") -> StorageNotWritableError:
    """The one-line error of a directory this task's user cannot write."""
    return StorageNotWritableError(
        f"{what} {path} is not writable by this task's user (uid {os.geteuid()},"
        f" gid {os.getegid()}; {_owner_and_mode(path)}): make the shared storage writable by"
        " every task user (chmod 1777 on the agents' hosts, as /tmp), or link the user to an"
        " agent user that owns it"
    )


class DirectoryStorageManager(StorageManager):
    """Checkpoints in ``base_path/<storage_id>``. Writes go straight to their final place.

    ``shared``: the directory is shared by the tasks of every user of the cluster
    (``shared_fs``): the levels from ``root`` down to ``base_path`` are made 1777 (see the
    module's docstring)."""

    def __init__(
        self,
        base_path: str | os.PathLike[str],
        *,
        root: str | os.PathLike[str] | None = None,
        shared: bool = False,
    ) -> None:
        self.base_path = pathlib.Path(base_path)
        self.root = pathlib.Path(root) if root is not None else self.base_path
        self.shared = shared

    def _dir(self, storage_id: str) -> pathlib.Path:
        validate_storage_id(storage_id)
        return self.base_path / storage_id

    def direct_path(self, storage_id: str) -> pathlib.Path | None:
        return self._dir(storage_id)

    def under(self, subpath: str) -> DirectoryStorageManager:
        return type(self)(
            self.base_path / validate_subpath(subpath), root=self.root, shared=self.shared
        )

    def _levels(self) -> list[pathlib.Path]:
        rel = self.base_path.relative_to(self.root).parts
        return [self.root.joinpath(*rel[:i]) for i in range(len(rel) + 1)]

    def _make_base(self) -> None:
        """Creates ``base_path`` (shared: every level from ``root``, mode 1777); raises
        StorageNotWritableError naming the level this task's user cannot create."""
        if not self.shared:
            self.base_path.mkdir(parents=True, exist_ok=True)
            return
        if not self.root.is_dir():  # no mount here: made by the harness (as every level below)
            try:
                self.root.parent.mkdir(parents=True, exist_ok=True)
            except PermissionError:
                raise not_writable(self.root) from None
        for level in self._levels():
            for attempt in range(_RACE_TRIES):
                try:
                    level.mkdir()
                except FileExistsError:
                    if level != self.root:  # the mount is the admin's
                        self._widen(level)
                    break
                except PermissionError:
                    # Another task may have made the parent a moment ago and not yet opened it
                    # up (mkdir, then chmod): look again shortly before giving up.
                    if attempt + 1 == _RACE_TRIES:
                        raise not_writable(level.parent) from None
                    time.sleep(_RACE_PAUSE)
                    continue
                os.chmod(level, SHARED_DIR_MODE)  # mkdir's mode is cut by the umask
                break

    @staticmethod
    def _widen(level: pathlib.Path) -> None:
        # A shared level an older harness made with the umask's mode: its owner opens it up.
        st = level.stat()
        if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != SHARED_DIR_MODE:
            os.chmod(level, SHARED_DIR_MODE)

    def _mkdir_own(self, path: pathlib.Path) -> None:
        """A checkpoint's (or a trial's TensorBoard) directory: this task's own."""
        try:
            path.mkdir(exist_ok=True)
        except PermissionError:
            raise not_writable(path.parent) from None

    def check_writable(self) -> None:
        """Creates nothing: the deepest existing directory on the way to ``base_path`` must
        let this task's user in and write (shared levels it owns are widened on the way)."""
        path = self.base_path
        while not path.is_dir() and path != path.parent:
            path = path.parent
        if self.shared and path != self.root and self.root in path.parents:
            for level in self._levels():
                if level != self.root and level.is_dir():
                    self._widen(level)
        if not os.access(path, os.W_OK | os.X_OK):
            raise not_writable(path)

    def upload(
        self, src_dir: str | os.PathLike[str], storage_id: str, paths: set[str] | None = None
    ) -> None:
        dst = self._dir(storage_id)
        src = os.fspath(src_dir)
        if os.path.realpath(src) == os.path.realpath(dst):
            return
        with Tree(src, checkpoint=False) as tree:
            self._make_base()
            self._mkdir_own(dst)
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
        self._make_base()
        self._mkdir_own(path)
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
    def from_config(cls, config: JSONObject, container_path: str | None) -> SharedFSStorageManager:
        # The mount is the admin's (never widened); what lies under it is the harness's.
        root = container_path if container_path is not None else str(config["host_path"])
        return cls(shared_fs_base_path(config, container_path), root=root, shared=True)
