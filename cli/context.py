"""Packing a model-definition directory for ``det experiment create``.

``.detignore`` (gitignore syntax) leaves files out; ``__pycache__`` and ``*.pyc`` are always left
out. The packed context may not exceed 95 MB; the error names the largest files.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import TypedDict

import pathspec

from det.cli.errors import UsageError

MAX_BYTES = 95 * 1024 * 1024
ALWAYS_IGNORED = ["__pycache__/", "*.pyc", ".detignore"]


class _Ignore:
    """``.detignore`` rules plus the entries that are always left out (a ``!`` rule in
    ``.detignore`` cannot bring those back)."""

    def __init__(self, root: Path) -> None:
        self.always = pathspec.GitIgnoreSpec.from_lines(ALWAYS_IGNORED)
        ignore = root / ".detignore"
        lines = ignore.read_text().splitlines() if ignore.is_file() else []
        self.user = pathspec.GitIgnoreSpec.from_lines(lines)

    def __call__(self, rel: str) -> bool:
        return self.always.match_file(rel) or self.user.match_file(rel)


def collect(root: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """(relative path, absolute path) of every file and directory to send, sorted."""
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"context directory {str(root)!r} does not exist or is not a directory")
    ignored = _Ignore(base)
    out: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        rel_dir = Path(dirpath).relative_to(base)
        kept = []
        for d in sorted(dirnames):
            rel = (rel_dir / d).as_posix()
            if not ignored(rel + "/"):
                kept.append(d)
                out.append((rel, Path(dirpath) / d))
        dirnames[:] = kept
        for f in sorted(filenames):
            rel = (rel_dir / f).as_posix()
            if not ignored(rel):
                out.append((rel, Path(dirpath) / f))
    return sorted(out)


class ContextFile(TypedDict):
    """One file or directory of a ``modelDefinition`` (Determined's ``v1File``)."""

    path: str
    #: A tar header's type flag: 48 (``'0'``) a file, 53 (``'5'``) a directory.
    type: int
    #: The file's bytes, base64 (empty for a directory).
    content: str
    mode: int
    #: Seconds since the epoch: an int64, a string as protobuf JSON writes it.
    mtime: str
    uid: int
    gid: int


def pack(root: str | os.PathLike[str]) -> list[ContextFile]:
    """Determined's ``modelDefinition`` file list for the context directory."""
    return pack_all(root, [])


def with_includes(entries: list[tuple[str, Path]], includes: list[str]) -> list[tuple[str, Path]]:
    """``entries`` plus each ``--include`` path under its own name (a directory with what its
    own ``.detignore`` keeps), as Determined's ``det e create -i`` adds them; a name that is
    already in the context is refused."""
    out = list(entries)
    taken = {rel for rel, _ in entries}
    for raw in includes:
        path = Path(raw)
        name = path.resolve().name
        if not path.exists():
            raise UsageError(f"--include {raw!r}: no such file or directory")
        if name in taken:
            raise UsageError(f"--include {raw!r}: the context already has {name!r}")
        added = [(name, path)]
        if path.is_dir():
            added += [(f"{name}/{rel}", p) for rel, p in collect(path)]
        out += added
        taken.update(rel for rel, _ in added)
    return sorted(out)


def pack_all(root: str | os.PathLike[str] | None, includes: list[str]) -> list[ContextFile]:
    """The ``modelDefinition`` of a context directory (or none) and ``--include`` paths."""
    entries = with_includes(collect(root) if root is not None else [], includes)
    sizes = [(rel, p.stat().st_size) for rel, p in entries if p.is_file()]
    total = sum(s for _, s in sizes)
    if total > MAX_BYTES:
        biggest = sorted(sizes, key=lambda x: -x[1])[:5]
        names = ", ".join(f"{rel} ({size / 1e6:.1f} MB)" for rel, size in biggest)
        raise UsageError(
            f"the context directory is {total / 1e6:.1f} MB, over the 95 MB limit; largest files: {names}."
            " Leave files out with a .detignore file"
        )
    files: list[ContextFile] = []
    for rel, p in entries:
        st = p.stat()
        if p.is_dir():
            files.append(
                {
                    "path": rel,
                    "type": 53,
                    "content": "",
                    "mode": st.st_mode & 0o7777,
                    "mtime": str(int(st.st_mtime)),  # int64 as protobuf JSON writes it
                    "uid": 0,
                    "gid": 0,
                }
            )
        else:
            files.append(
                {
                    "path": rel,
                    "type": 48,
                    "content": base64.b64encode(p.read_bytes()).decode(),
                    "mode": st.st_mode & 0o7777,
                    "mtime": str(int(st.st_mtime)),  # int64 as protobuf JSON writes it
                    "uid": 0,
                    "gid": 0,
                }
            )
    return files
