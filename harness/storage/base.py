"""The checkpoint storage interface every backend implements.

A checkpoint is a directory tree stored under its ``storage_id`` (the checkpoint uuid).
Resource maps (``dict[relative path, size]``) follow Determined's convention: directories are
listed with a trailing ``/`` and size 0, so an empty directory survives a round trip.
"""

from __future__ import annotations

import abc
import concurrent.futures
import contextlib
import copy
import logging
import os
import pathlib
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from det.common.errors import CheckpointNotFoundError as CheckpointNotFoundError

from . import globs as _globs
from .tree import Tree

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from det.common.jsontypes import JSONObject

logger = logging.getLogger(__name__)

Selector = Callable[[str], bool]


def config_str(config: JSONObject, key: str) -> str | None:
    """``checkpoint_storage.<key>``: a string, or None when absent or null; ValueError naming
    the key when it is something else."""
    value = config.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"checkpoint_storage.{key}: expected a string, not {type(value).__name__}")


def list_directory(root: str | os.PathLike[str]) -> dict[str, int]:
    """Relative path → size for every file and directory (``dir/`` → 0) of the checkpoint
    content under ``root``: links count only when they lead to a file inside (see
    :mod:`det.storage.tree`); what is skipped is named in a warning."""
    with Tree(root, checkpoint=False) as tree:
        return dict(tree.resources)


class StorageNotWritableError(PermissionError):
    """This task's user cannot write a directory of checkpoint storage (the message says which,
    who owns it and how to fix it)."""


def validate_storage_id(storage_id: str) -> None:
    if not storage_id or "/" in storage_id or "\x00" in storage_id or storage_id in (".", ".."):
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

    @abc.abstractmethod
    def remove_files(self, storage_id: str, patterns: list[str]) -> dict[str, int]:
        """``det checkpoint rm``: remove what the glob ``patterns`` name from the checkpoint
        (:mod:`det.storage.globs`; none: remove nothing) and return what is left, read back
        from storage. When no file is left the checkpoint goes entirely (``{}``)."""

    def direct_path(self, storage_id: str) -> pathlib.Path | None:
        """The checkpoint's final directory when storage is a local filesystem, else None."""
        return None

    def check_writable(self) -> None:
        """Raises StorageNotWritableError (one line: the path, this process's uid and gid, the
        directory's owner and mode, the fix) when this task could not write here. A trial
        checks at its start, so a storage it cannot write fails it then, not at its first
        checkpoint. Object stores: nothing to check before a write (credentials are theirs)."""
        return None

    @abc.abstractmethod
    def under(self, subpath: str) -> StorageManager:
        """The same storage rooted at ``subpath`` (relative, ``/``-separated) below this one's
        root: TensorBoard files go to ``<cluster id>/tensorboard/experiment/<id>/trial``."""

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


def copy_file(tree: Tree, rel: str, dst: str) -> None:
    """Copy content file ``rel`` of ``tree`` (a link's target's bytes) to the path ``dst``,
    with its mode bits and times."""
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    with tree.open(rel) as src, open(dst, "wb") as out:
        shutil.copyfileobj(src, out, 1024 * 1024)
        st = os.fstat(src.fileno())
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def safe_relative(rel: str) -> bool:
    """Whether a stored object's relative key names a place inside a download's directory."""
    parts = rel.rstrip("/").split("/")
    return (
        bool(rel.rstrip("/"))
        and not rel.startswith("/")
        and "\x00" not in rel
        and not any(p in ("", ".", "..") for p in parts)
    )


def validate_subpath(subpath: str) -> str:
    """A relative path below a storage root: no empty, ``.`` or ``..`` part."""
    parts = subpath.split("/")
    if not subpath or subpath.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid storage sub-path {subpath!r}")
    return subpath


def normalize_prefix(prefix: str | None) -> str:
    p = (prefix or "").strip("/")
    if ".." in p.split("/"):
        raise ValueError("checkpoint_storage.prefix must not contain '..'")
    return p


def _run_parallel(fn: Any, entries: list[tuple[str, bool]], workers: int) -> None:
    """Run ``fn(rel, is_dir)`` for every entry on a thread pool; re-raise the first error."""
    if not entries:
        return
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        futures = [pool.submit(fn, rel, is_dir) for rel, is_dir in entries]
        for f in futures:
            f.result()


class ObjectStorageManager(StorageManager):
    """A bucket of objects: keys ``<prefix>/<storage_id>/<relative path>``, directories as empty
    objects whose key ends in ``/`` (Determined's layout). Files move in parallel on up to
    ``max_workers`` threads; subclasses supply the single-object operations, which must be
    thread-safe."""

    scheme: str
    """URL scheme for messages: ``s3`` or ``gs``."""

    def __init__(self, bucket: str, prefix: str | None, max_workers: int) -> None:
        self.bucket_name = bucket
        self.prefix = normalize_prefix(prefix)
        self._max_workers = max_workers

    @abc.abstractmethod
    def _list_keys(self, key_prefix: str) -> Iterator[tuple[str, int]]:
        """(key, size) of every object whose key starts with ``key_prefix``."""

    @abc.abstractmethod
    def _put_dir(self, key: str) -> None:
        """Store an empty object at ``key``."""

    @abc.abstractmethod
    def _put_file(self, f: BinaryIO, key: str) -> None:
        """Upload the open local file ``f`` (from its start) to ``key``."""

    @abc.abstractmethod
    def _get_file(self, key: str, path: str) -> None:
        """Download ``key`` into the local file ``path`` (its directory exists)."""

    @abc.abstractmethod
    def _delete_keys(self, keys: list[str]) -> None:
        """Delete these objects."""

    def under(self, subpath: str) -> ObjectStorageManager:
        sub = copy.copy(self)
        sub.prefix = "/".join(p for p in (self.prefix, validate_subpath(subpath)) if p)
        return sub

    def _key_prefix(self, storage_id: str) -> str:
        validate_storage_id(storage_id)
        return f"{self.prefix}/{storage_id}/" if self.prefix else f"{storage_id}/"

    def _list(self, storage_id: str) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        out = {key[len(kp) :]: size for key, size in self._list_keys(kp)}
        out.pop("", None)
        return out

    def upload(
        self, src_dir: str | os.PathLike[str], storage_id: str, paths: set[str] | None = None
    ) -> None:
        kp = self._key_prefix(storage_id)
        with Tree(src_dir, checkpoint=False) as tree:
            entries = select_paths(tree.resources, paths)
            logger.info(
                "uploading %d entries to %s://%s/%s",
                len(entries),
                self.scheme,
                self.bucket_name,
                kp,
            )

            def one(rel: str, is_dir: bool) -> None:
                if is_dir:
                    self._put_dir(kp + rel)
                else:
                    with tree.open(rel) as f:
                        self._put_file(f, kp + rel)

            _run_parallel(one, entries, self._max_workers)

    def download(
        self, storage_id: str, dst_dir: str | os.PathLike[str], selector: Selector | None = None
    ) -> None:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        if not listing:
            raise CheckpointNotFoundError(
                f"checkpoint {self.scheme}://{self.bucket_name}/{kp} not found"
            )
        dst = pathlib.Path(dst_dir)
        dst.mkdir(parents=True, exist_ok=True)
        entries = []
        for rel in sorted(listing):
            if not safe_relative(rel):
                # Keys are written by whoever holds the bucket's credentials (a task): one
                # with "..", an absolute or an empty part would land outside ``dst``.
                logger.warning(
                    "checkpoint %s%s: skipped: not a path inside the checkpoint", kp, rel
                )
            elif selector is None or selector(rel):
                entries.append((rel, rel.endswith("/")))
        for rel, is_dir in entries:
            target = dst / rel
            (target if is_dir else target.parent).mkdir(parents=True, exist_ok=True)

        def one(rel: str, is_dir: bool) -> None:
            if not is_dir:
                self._get_file(kp + rel, os.fspath(dst / rel))

        _run_parallel(one, entries, self._max_workers)

    def delete(self, storage_id: str) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        self._delete_keys([kp + rel for rel in listing])
        return listing

    def list_files(self, storage_id: str) -> dict[str, int]:
        return self._list(storage_id)

    def remove_files(self, storage_id: str, patterns: list[str]) -> dict[str, int]:
        kp = self._key_prefix(storage_id)
        listing = self._list(storage_id)
        doomed = [rel for rel in listing if _globs.selected(patterns, rel)]
        left = {rel: size for rel, size in listing.items() if rel not in set(doomed)}
        if not any(not rel.endswith("/") for rel in left):
            doomed, left = list(listing), {}
        if doomed:
            self._delete_keys([kp + rel for rel in doomed])
        return left
