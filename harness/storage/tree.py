"""Reading a checkpoint directory without following a link out of it.

A task writes its checkpoint directory, links included, and others read it later: the master
(its download of a ``shared_fs`` checkpoint), the harness (an upload to a bucket), a GC task, the
CLI. What counts as the checkpoint's content is decided here, once:

- a regular file or a directory is content;
- a symbolic link whose chain ends at a regular file inside the checkpoint directory is content:
  the target's bytes under the link's name (a copy: buckets hold no links, and a copy keeps
  every download free of links);
- everything else is skipped and named in a warning: a link that leaves the directory
  (absolute outside it, ``..`` past its top, a chain that leaves on any hop), a dangling link, a
  link to a directory, FIFOs, sockets and devices.

The listing resolves links by name, but every byte is read through directory descriptors opened
component by component with ``O_NOFOLLOW``: a link swapped in after the listing (a race) makes
the read fail instead of following it. With ``checkpoint=True`` the root itself must not be a
link either (a task controls ``<storage>/<uuid>``; the storage's own path is configuration).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
from typing import BinaryIO

logger = logging.getLogger(__name__)

_MAX_HOPS = 40
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
# O_NONBLOCK: opening a FIFO swapped in after the listing must not wait for a writer.
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
# What opening a path with O_NOFOLLOW gives when a link is on it.
_LINK_ERRNOS = (errno.ELOOP, errno.ENOTDIR)


class UnsafeCheckpointError(ValueError):
    """A checkpoint path that would lead out of the checkpoint's directory."""


class Tree:
    """A checkpoint directory as content: ``resources`` (relative path → size, directories as
    ``dir/`` → 0), where each file's bytes come from (``sources``: itself, or the file a link
    leads to) and what was ``skipped`` (path → reason). Use as a context manager: it holds the
    root's descriptor; :meth:`open` reads a file of it."""

    def __init__(self, root: str | os.PathLike[str], *, checkpoint: bool) -> None:
        self.root = os.fspath(root)
        try:
            self._fd = os.open(self.root, _DIR_FLAGS if checkpoint else os.O_RDONLY)
        except OSError as e:
            if os.path.islink(self.root):
                raise UnsafeCheckpointError(
                    f"{self.root}: the checkpoint directory is a link; not followed"
                ) from None
            if not os.path.isdir(self.root):
                raise NotADirectoryError(self.root) from None
            raise e
        if not stat.S_ISDIR(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise NotADirectoryError(self.root)
        self._prefixes = {os.path.abspath(self.root), os.path.realpath(self.root)}
        self.resources: dict[str, int] = {}
        self.sources: dict[str, str] = {}
        self.skipped: dict[str, str] = {}
        try:
            self._scan(self._fd, "")
        except BaseException:
            os.close(self._fd)
            raise
        for rel, why in sorted(self.skipped.items()):
            logger.warning("checkpoint %s: %s skipped: %s", self.root, rel, why)

    def __enter__(self) -> Tree:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def files(self) -> list[str]:
        return sorted(r for r in self.resources if not r.endswith("/"))

    def open(self, rel: str) -> BinaryIO:
        """The bytes of content file ``rel`` (a link's target's), opened without following any
        link; UnsafeCheckpointError when a component is no longer what the listing saw."""
        parts = self.sources[rel].split("/")
        fd = self._fd
        opened: list[int] = []
        try:
            for name in parts[:-1]:
                fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                opened.append(fd)
            out = os.open(parts[-1], _FILE_FLAGS, dir_fd=fd)
        except OSError as e:
            if e.errno in _LINK_ERRNOS:
                raise UnsafeCheckpointError(
                    f"{rel}: a link appeared on its path; not followed"
                ) from None
            raise
        finally:
            for d in opened:
                os.close(d)
        if not stat.S_ISREG(os.fstat(out).st_mode):
            os.close(out)
            raise UnsafeCheckpointError(f"{rel}: no longer a regular file; not read")
        return os.fdopen(out, "rb")

    def remove(self, rel: str) -> None:
        """Remove the entry ``rel`` (a file, a link itself, a special file, or a directory and
        everything in it) through directory descriptors opened without following links: a link
        is unlinked, never followed, and one swapped in on the path after the listing makes the
        removal fail (UnsafeCheckpointError) instead of reaching outside the root."""
        parts = [p for p in rel.rstrip("/").split("/") if p]
        if not parts or any(p in (".", "..") for p in parts):
            raise UnsafeCheckpointError(f"{rel!r}: not a path inside the checkpoint")
        fd = self._fd
        opened: list[int] = []
        try:
            for name in parts[:-1]:
                fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                opened.append(fd)
            try:
                st = os.stat(parts[-1], dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                return
            if stat.S_ISDIR(st.st_mode):
                _remove_dir(parts[-1], fd)
            else:
                os.unlink(parts[-1], dir_fd=fd)
        except OSError as e:
            if e.errno in _LINK_ERRNOS:
                raise UnsafeCheckpointError(
                    f"{rel}: a link appeared on its path; not followed"
                ) from None
            raise
        finally:
            for d in opened:
                os.close(d)

    # --- listing -----------------------------------------------------------------------------

    def _scan(self, dir_fd: int, prefix: str) -> None:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = prefix + entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
                except OSError as e:
                    self.skipped[rel + "/"] = f"cannot be opened ({e.strerror})"
                    continue
                self.resources[rel + "/"] = 0
                try:
                    self._scan(sub, rel + "/")
                finally:
                    os.close(sub)
            elif stat.S_ISREG(st.st_mode):
                self.resources[rel] = st.st_size
                self.sources[rel] = rel
            elif stat.S_ISLNK(st.st_mode):
                target, why = self._resolve(rel)
                if target is None:
                    self.skipped[rel] = why
                else:
                    self.resources[rel] = os.lstat(os.path.join(self.root, target)).st_size
                    self.sources[rel] = target
            else:
                self.skipped[rel] = "not a regular file, directory or link"

    def _resolve(self, rel: str) -> tuple[str | None, str]:
        """Where the link ``rel`` leads, as a path inside the root; (None, why) when it leads
        nowhere inside or not to a regular file. Follows the chain by name, hop by hop."""
        todo = rel.split("/")
        done: list[str] = []
        hops = 0
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                if not done:
                    return None, "a link that leaves the checkpoint directory (..)"
                done.pop()
                continue
            path = os.path.join(self.root, *done, name)
            try:
                st = os.lstat(path)
            except OSError:
                return None, "a dangling link"
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > _MAX_HOPS:
                    return None, "too many levels of links"
                target = os.readlink(path)
                if os.path.isabs(target):
                    inside = self._inside(target)
                    if inside is None:
                        return None, f"a link that leaves the checkpoint directory ({target})"
                    done = []
                    todo = inside.split("/") + todo
                else:
                    todo = target.split("/") + todo
                continue
            if todo and not stat.S_ISDIR(st.st_mode):
                return None, "a dangling link"
            done.append(name)
        if not done:
            return None, "a link to the checkpoint directory itself"
        st = os.lstat(os.path.join(self.root, *done))
        if stat.S_ISDIR(st.st_mode):
            return None, "a link to a directory (only links to files are stored)"
        if not stat.S_ISREG(st.st_mode):
            return None, "a link to something that is not a regular file"
        return "/".join(done), ""

    def _inside(self, target: str) -> str | None:
        """An absolute link target as a path relative to the root, if it names one inside."""
        norm = target.rstrip("/") or "/"
        for prefix in self._prefixes:
            if norm == prefix:
                return "."
            if norm.startswith(prefix.rstrip("/") + "/"):
                return norm[len(prefix.rstrip("/")) + 1 :]
        return None


def _remove_dir(name: str, parent_fd: int) -> None:
    """Remove directory ``name`` of ``parent_fd`` and its content, descending only into real
    directories (opened with ``O_NOFOLLOW``); links inside are unlinked themselves."""
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    try:
        with os.scandir(fd) as it:
            entries = list(it)
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                _remove_dir(entry.name, fd)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)
