"""Which paths of a checkpoint a ``det checkpoint rm --glob`` pattern names.

A pattern is matched against checkpoint-relative paths (``/``-separated, no leading ``/``), one
component at a time: ``*``, ``?`` and ``[...]`` match within a component (as :mod:`fnmatch`),
and a component that is exactly ``**`` matches any number of components, none included. A
pattern that matches a directory names everything below it (``logs`` and ``logs/**`` both
remove the ``logs`` directory). Patterns are checked by :func:`validate` first: relative, no
``..`` or empty component, no NUL.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

MAX_GLOBS = 100
MAX_GLOB_LENGTH = 512


def validate(pattern: object) -> str:
    """``pattern`` if it is a usable glob, else ValueError naming the rule it breaks."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("a glob must be a non-empty string")
    if len(pattern) > MAX_GLOB_LENGTH:
        raise ValueError(f"a glob is at most {MAX_GLOB_LENGTH} characters")
    if "\x00" in pattern:
        raise ValueError("a glob must not contain NUL")
    if pattern.startswith("/"):
        raise ValueError(f"{pattern!r}: a glob is relative to the checkpoint (no leading '/')")
    parts = pattern.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{pattern!r}: a glob has no empty, '.' or '..' component")
    return pattern


def _match(pat: list[str], parts: list[str]) -> bool:
    if not pat:
        return not parts
    head = pat[0]
    if head == "**":
        return any(_match(pat[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], head) and _match(pat[1:], parts[1:])


def matches(pattern: str, rel: str) -> bool:
    """Whether ``pattern`` names the path ``rel`` itself (a directory with or without ``/``)."""
    return _match(pattern.rstrip("/").split("/"), rel.rstrip("/").split("/"))


def selected(patterns: Iterable[str], rel: str) -> bool:
    """Whether ``rel`` goes: a pattern names it or one of the directories above it."""
    parts = rel.rstrip("/").split("/")
    pats = [p.rstrip("/").split("/") for p in patterns]
    return any(_match(p, parts[:i]) for i in range(1, len(parts) + 1) for p in pats)


def topmost(patterns: Iterable[str], names: Iterable[str]) -> list[str]:
    """The entries of ``names`` (paths, directories ending in ``/``) a pattern names and no
    directory above them already does: removing these removes every selected path."""
    pats = list(patterns)
    out = []
    for rel in sorted(names):
        parts = rel.rstrip("/").split("/")
        if not any(_match(p.rstrip("/").split("/"), parts) for p in pats):
            continue
        above = ["/".join(parts[:i]) for i in range(1, len(parts))]
        if not any(selected(pats, a) for a in above):
            out.append(rel)
    return out
