"""Packing a model-definition directory for ``det experiment create``.

``.detignore`` (gitignore syntax) leaves files out; ``__pycache__`` and ``*.pyc`` are always left
out. The packed context may not exceed 95 MB; the error names the largest files.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

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


def pack(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Determined's ``modelDefinition`` file list for the context directory."""
    entries = collect(root)
    sizes = [(rel, p.stat().st_size) for rel, p in entries if p.is_file()]
    total = sum(s for _, s in sizes)
    if total > MAX_BYTES:
        biggest = sorted(sizes, key=lambda x: -x[1])[:5]
        names = ", ".join(f"{rel} ({size / 1e6:.1f} MB)" for rel, size in biggest)
        raise UsageError(
            f"the context directory is {total / 1e6:.1f} MB, over the 95 MB limit; largest files: {names}."
            " Leave files out with a .detignore file"
        )
    files = []
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
