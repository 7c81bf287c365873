"""Extracting a tar a master or a peer sent, with nothing landing outside the destination.

Python's ``"data"`` extraction filter does this (absolute names, ``..``, links out of the
destination, device nodes refused; set-id and group/other write bits cleared), but it came in
3.11.4: Debian 12's Python is 3.11.2, and ``extractall(filter=...)`` is a TypeError there. On
such a Python each member is checked here instead, more strictly: regular files and
directories only (a link is refused whatever it points at).
"""

from __future__ import annotations

import tarfile
from pathlib import Path, PurePosixPath


class UnsafeArchiveError(ValueError):
    """A member of the archive would land outside the destination or is not a plain file."""


def extract_all(tf: tarfile.TarFile, dst: Path) -> None:
    """Extracts every member of ``tf`` (a random-access or a stream archive) under ``dst``."""
    if hasattr(tarfile, "data_filter"):
        tf.extractall(dst, filter="data")
        return
    extract_checked(tf, dst)


def extract_checked(tf: tarfile.TarFile, dst: Path) -> None:
    """What :func:`extract_all` does where Python has no extraction filters."""
    root = dst.resolve()
    for member in tf:
        check(member, root)
        if member.isfile():
            member.mode &= 0o755
        if hasattr(tarfile, "data_filter"):  # checked above; says so (3.12 on warns otherwise)
            tf.extract(member, root, filter="fully_trusted")
        else:
            tf.extract(member, root)


def check(member: tarfile.TarInfo, root: Path) -> None:
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise UnsafeArchiveError(f"{member.name}: outside the destination")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchiveError(f"{member.name}: not a regular file or directory")
    target = (root / name).resolve()
    if target != root and root not in target.parents:
        raise UnsafeArchiveError(f"{member.name}: outside the destination")
