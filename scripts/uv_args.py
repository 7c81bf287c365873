"""Prints, one per line, the `uv pip install` arguments det's installs use (:data:`COMMON`)
and those that carry this machine's pip configuration: uv reads no pip.conf nor PIP_* variable, and a machine that points pip at a
local wheel folder, a mirror or a constraints file (`pip config list`) expects the same from
the dev install (scripts/lib.sh, det_venv).

Run by the venv's own Python: `python scripts/uv_args.py`. Carried: index-url,
extra-index-url, find-links, constraint, no-index. A `file:` index or a folder that does not
exist is left out, as pip skips it with a warning (uv would fail). Anything else pip is told
(cert, timeout) has no `uv pip install` flag of the same meaning and is left to uv's defaults.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from urllib.parse import unquote, urlparse

FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
}


def _exists(location: str) -> bool:
    """False for a local path or ``file:`` URL that is not there; True for anything remote."""
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return os.path.exists(unquote(parsed.path))
    if parsed.scheme in ("http", "https"):
        return True
    return os.path.exists(location)


# pip's precedence among what `pip config list` shows (its files already merged): an
# [install] section over [global], PIP_* variables (shown as ":env:") over both.
_RANK = {"global": 0, "install": 1, ":env:": 2}


def uv_args(config_lines: list[str]) -> list[str]:
    """The uv arguments for ``pip config list`` output (``scope.key='value'`` lines, where the
    section is global, install or :env:, e.g. ``global.find-links``, ``:env:.find-links``);
    other sections (another command's) are not an install's."""
    values: dict[str, tuple[int, str]] = {}
    for line in config_lines:
        name, sep, raw = line.partition("=")
        if not sep:
            continue
        scope, _, key = name.rpartition(".")
        try:
            value = str(ast.literal_eval(raw))
        except (SyntaxError, ValueError):
            continue
        rank = _RANK.get(scope)
        if rank is None:
            continue
        if key not in values or rank >= values[key][0]:
            values[key] = (rank, value)
    out: list[str] = []
    for key, flag in FLAGS.items():
        for item in values.get(key, (0, ""))[1].split():
            if _exists(item):
                out += [flag, item]
    if values.get("no-index", (0, ""))[1].lower() in ("1", "true", "yes", "on"):
        out.append("--no-index")
    return out


def pip_config(python: str = sys.executable) -> list[str]:
    """``pip config list`` as ``python``'s pip sees it."""
    return subprocess.run(
        [python, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()


# What every det install through uv asks, whatever the machine: bytecode compiled at install
# (where PYTHONDONTWRITEBYTECODE is set, nothing else writes it), and the best version across
# all indexes, as pip takes it.
COMMON = ["--compile-bytecode", "--index-strategy", "unsafe-best-match"]


def options() -> list[str]:
    """:data:`COMMON` and this machine's pip configuration as uv arguments."""
    return [*COMMON, *uv_args(pip_config())]


def install_argv(uv: str, python: str, *requirements: str) -> list[str]:
    """The command that installs ``requirements`` into ``python``'s environment with ``uv``,
    as scripts/lib.sh's det_pip_install does (for tests that build a venv of their own)."""
    return [uv, "pip", "install", "--quiet", "--python", python, *options(), *requirements]


def main() -> int:
    for arg in options():
        print(arg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
