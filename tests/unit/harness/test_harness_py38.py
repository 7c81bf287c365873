"""The task-side code (what the harness bundle carries) must run on Python 3.8: task images bring
their own python3. vermin checks syntax and standard-library APIs; an AST pass adds what vermin
does not see when annotations are left unevaluated (runtime ``X | Y`` and ``dict[...]``)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from det.agent.harness_bundle import TASK_PACKAGES

HARNESS = Path(__file__).resolve().parents[3] / "harness"
BUILTIN_GENERICS = {"dict", "list", "tuple", "set", "frozenset", "type"}


def bundle_sources() -> list[Path]:
    files = [HARNESS / "__init__.py"]
    for package in TASK_PACKAGES:
        files += sorted((HARNESS / package).rglob("*.py"))
    return files


def test_the_bundle_sources_are_the_task_side_packages() -> None:
    names = {p.relative_to(HARNESS).parts[0] for p in bundle_sources()}
    assert names == {"__init__.py", *TASK_PACKAGES}
    assert len(bundle_sources()) > 20


def test_vermin_finds_nothing_newer_than_python_3_8() -> None:
    pytest.importorskip("vermin")
    r = subprocess.run(
        [sys.executable, "-c", "import sys, vermin; sys.exit(vermin.main())", "-t=3.8-", "--no-tips", "--violations",
         *map(str, bundle_sources())],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr


def _annotation_nodes(tree: ast.AST) -> set[int]:
    """ids of every node inside an annotation (not evaluated under PEP 563)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        annotations: list[ast.expr | None] = []
        if isinstance(node, ast.arg):
            annotations.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            annotations.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            annotations.append(node.annotation)
        for a in annotations:
            if a is not None:
                out.update(id(n) for n in ast.walk(a))
    return out


def runtime_problems(source: str) -> list[str]:
    """Python 3.10+/3.9+ typing forms that are evaluated at run time (pure)."""
    tree = ast.parse(source)
    in_annotation = _annotation_nodes(tree)
    has_future = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    problems = []
    for node in ast.walk(tree):
        if id(node) in in_annotation:
            if not has_future:
                problems.append(
                    f"line {node.lineno}: annotations without `from __future__ import annotations`"  # type: ignore[attr-defined]
                )
                break
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = (node.left, node.right)
            if any(
                (
                    isinstance(s, ast.Name)
                    and s.id
                    in {"bytes", "bytearray", "str", "int", "float", "bool", *BUILTIN_GENERICS}
                )
                or (isinstance(s, ast.Constant) and s.value is None)
                for s in sides
            ):
                problems.append(f"line {node.lineno}: X | Y evaluated at run time (3.10+)")
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Name)
            and node.value.id in BUILTIN_GENERICS
        ):
            problems.append(
                f"line {node.lineno}: {node.value.id}[...] evaluated at run time (3.9+)"
            )
    return problems


def test_the_ast_check_catches_what_breaks_old_pythons() -> None:
    assert runtime_problems("isinstance(v, bytes | bytearray)")
    assert runtime_problems("Alias = dict[str, int]")
    assert runtime_problems("def f(x: list[int]) -> None: ...")  # no __future__ import
    assert not runtime_problems(
        "from __future__ import annotations\ndef f(x: list[int] | None) -> dict[str, int]: ..."
    )
    assert not runtime_problems("flags = 1 | 2")


@pytest.mark.parametrize("path", bundle_sources(), ids=lambda p: str(p.relative_to(HARNESS)))
def test_no_runtime_typing_newer_than_python_3_8(path: Path) -> None:
    assert runtime_problems(path.read_text()) == []
