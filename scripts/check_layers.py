"""Two rules of docs/internals.md ("Layers") that an import contract cannot see, checked by
``make check`` (and by tests/unit/test_layers.py, which also shows them failing):

- a ``state`` column is written only by ``master/states.py`` (the state machines): no SQL
  ``UPDATE ... SET ... state = ...`` (nor an upsert's ``DO UPDATE SET state``) anywhere else;
- ``master/api/`` runs no SQL: no ``execute(`` there (routes call services);
- the terminal states are not typed out as an SQL list (``('COMPLETED','CANCELED','ERROR')``)
  outside the state module: SQL takes ``states.TERMINAL_SQL`` / ``states.ENDED_SQL``;
- ``master/``, ``agent/``, ``cli/``, ``harness/`` and ``deploy/`` import at module level: an
  ``import`` inside a function is allowed only with a comment saying why (an optional
  dependency, say ``det-platform[aws]``), on its line or on the comment lines just above it
  (a run of imports shares one comment). A function-level import hides a cycle that belongs
  broken by moving code (docs/internals.md, "Layers");
- no function in ``deploy/`` is over 80 lines (a Pulumi component builds its parts in functions
  of their own).

Usage: ``python scripts/check_layers.py [ROOT]`` (ROOT: the repository, default this one's).
Prints one line per violation (file:line: what) and exits 1 if there is any.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

STATE_MODULE = Path("master/states.py")
PACKAGES = ("master", "agent", "harness", "cli", "deploy")
API = Path("master/api")
# Where an import inside a function needs a comment (deploy/ too: its SDKs sit at the top of
# the cloud's own modules, which only `det deploy <cloud>` loads).
MODULE_LEVEL_IMPORTS = ("master", "agent", "cli", "harness", "deploy")

# Where no function (its ``def`` line to its last) may be longer than MAX_FUNCTION_LINES.
SHORT_FUNCTIONS = ("deploy",)
MAX_FUNCTION_LINES = 80

# The SET list of an UPDATE (up to WHERE, FROM, RETURNING or the end) that names ``state``.
_SET = re.compile(
    r"\bUPDATE\s+(?:\w+\s+)?(?:\w+\s+)?SET\s+(.*?)(?:\bWHERE\b|\bFROM\b|\bRETURNING\b|$)",
    re.I | re.S,
)
_STATE = re.compile(r"(?<![\w.])(?:\w+\.)?state\s*=", re.I)
_SQL_LIST = re.compile(r"\(\s*'[A-Z_]+'(?:\s*,\s*'[A-Z_]+')*\s*\)")
TERMINAL = {"COMPLETED", "CANCELED", "ERROR"}


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Every string literal, with ``"a" + "b"`` chains folded (SQL is built that way)."""

    def fold(node: ast.AST) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = fold(node.left), fold(node.right)
            if left is not None or right is not None:
                return (left or " ") + (right or " ")
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else " X " for v in node.values)
        return None

    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.BinOp, ast.JoinedStr)):
            text = fold(node)
            if text:
                yield node.lineno, text


def state_writes(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for line, text in _strings(tree):
        for m in _SET.finditer(text):
            if _STATE.search(m.group(1)):
                found.append((line, " ".join(m.group(0).split())[:100]))
    return sorted(set(found))


def terminal_lists(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for line, text in _strings(tree):
        for m in _SQL_LIST.finditer(text):
            if set(re.findall(r"'([A-Z_]+)'", m.group(0))) >= TERMINAL:
                found.append((line, m.group(0)))
    return sorted(set(found))


def sql_in_api(path: Path) -> list[tuple[int, str]]:
    return [
        (i, line.strip()[:100])
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if "execute(" in line
    ]


def function_imports(path: Path) -> list[tuple[int, str, bool]]:
    """Every ``import`` inside a function: (line, statement, whether a comment says why)."""
    text = path.read_text()
    lines = text.splitlines()
    found = []

    def commented(node: ast.stmt, body: list[ast.stmt]) -> bool:
        # The comment is on the import's line, or above the run of imports it opens.
        if "#" in lines[node.lineno - 1]:
            return True
        first = node
        for prev in reversed(body[: body.index(node)]):
            if not isinstance(prev, (ast.Import, ast.ImportFrom)):
                break
            if "#" in lines[prev.lineno - 1]:
                return True
            first = prev
        above = first.lineno - 2
        return above >= 0 and lines[above].strip().startswith("#")

    def visit(node: ast.AST, in_function: bool) -> None:
        for field in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, field, None)
            if not isinstance(block, list):
                continue
            for child in block:
                if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                    statement = " ".join(lines[child.lineno - 1].split())
                    found.append((child.lineno, statement, commented(child, block)))
                visit(
                    child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
                )

    visit(ast.parse(text, str(path)), False)
    return found


def long_functions(path: Path) -> list[tuple[int, str, int]]:
    """Every function longer than MAX_FUNCTION_LINES: (line, name, lines)."""
    return [
        (node.lineno, node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def violations(root: Path) -> list[str]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root)
            if rel == STATE_MODULE:
                continue
            for line, what in state_writes(path):
                out.append(f"{rel}:{line}: a state column written outside {STATE_MODULE}: {what}")
            for line, what in terminal_lists(path):
                out.append(
                    f"{rel}:{line}: the terminal states typed out (states.TERMINAL_SQL): {what}"
                )
    for path in sorted((root / API).rglob("*.py")):
        for line, what in sql_in_api(path):
            out.append(f"{path.relative_to(root)}:{line}: SQL in the API layer: {what}")
    for path in (p for pkg in MODULE_LEVEL_IMPORTS for p in sorted((root / pkg).rglob("*.py"))):
        for line, what, why in function_imports(path):
            if not why:
                out.append(
                    f"{path.relative_to(root)}:{line}: an import inside a function without a"
                    f" comment saying why (move it to the top, or say which optional dependency"
                    f" needs it): {what}"
                )
    for path in (p for pkg in SHORT_FUNCTIONS for p in sorted((root / pkg).rglob("*.py"))):
        for line, name, length in long_functions(path):
            out.append(
                f"{path.relative_to(root)}:{line}: {name} is {length} lines (at most"
                f" {MAX_FUNCTION_LINES}: build its parts in functions of their own)"
            )
    return out


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1]
    found = violations(root)
    for v in found:
        print(v)
    print(f"check_layers: {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
