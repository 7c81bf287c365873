"""The task context: the master's gzip tar re-rooted under the container's workdir.

Docker's `put_archive` needs an existing target directory, and a container that has not
started yet has no workdir, so the archive is rebuilt with the workdir's path in every member
name (plus the directories leading to it) and put at `/`.
"""

from __future__ import annotations

import io
import logging
import posixpath
import tarfile

from det.agent.errors import BadContext as BadContext

logger = logging.getLogger(__name__)


def _safe(name: str) -> str | None:
    """The member name relative to the workdir, or None for names escaping it."""
    norm = posixpath.normpath(name)
    if norm == "." or norm.startswith("/") or norm == ".." or norm.startswith("../"):
        return None
    return norm


def context_tar(
    tgz: bytes, workdir: str, owner: tuple[int, int] | None = None, ready: str | None = None
) -> bytes:
    """An uncompressed tar holding `workdir` (and its parents) and the context inside it.
    ``owner`` (uid, gid): the task's agent user, who then owns the workdir and the context's
    files, and the workdir's parents below the top one (``/run/determined``: the harness
    writes its info files there); None: as the archive says. ``ready``: the absolute path of
    an empty file (root's, read-only) added as the *last* member, for a copy into a started
    container (det.common.context_ready): Docker unpacks in order, so it exists only once
    everything before it does."""
    root = posixpath.normpath("/" + workdir).lstrip("/")
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
        parts = root.split("/") if root else []
        for i in range(1, len(parts) + 1):
            info = tarfile.TarInfo("/".join(parts[:i]))
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            if owner is not None and (i == len(parts) or i >= 2):
                _own(info, owner)
            dst.addfile(info)
        if tgz:
            _copy_members(tgz, root, dst, owner)
        if ready is not None:
            marker = tarfile.TarInfo(posixpath.normpath("/" + ready).lstrip("/"))
            marker.mode = 0o444
            dst.addfile(marker)
    return out.getvalue()


def _own(info: tarfile.TarInfo, owner: tuple[int, int]) -> None:
    info.uid, info.gid = owner
    info.uname = info.gname = ""  # numbers only: names would be looked up in the image


def _copy_members(
    tgz: bytes, root: str, dst: tarfile.TarFile, owner: tuple[int, int] | None = None
) -> None:
    try:
        with tarfile.open(fileobj=io.BytesIO(tgz), mode="r:*") as src:
            for member in src:
                rel = _safe(member.name)
                if rel is None:
                    logger.warning("context member %r escapes the workdir: skipped", member.name)
                    continue
                if member.islnk():
                    target = _safe(member.linkname)
                    if target is None:
                        continue
                    member.linkname = posixpath.join(root, target)
                member.name = posixpath.join(root, rel)
                if owner is not None:
                    _own(member, owner)
                data = src.extractfile(member) if member.isreg() else None
                dst.addfile(member, data)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise BadContext(f"context is not a readable tar archive: {e}") from e
