"""Each part of det imports only what the install that runs it declares.

A cloud master VM installs ``det-platform[master,aws]`` or ``det-platform[master,gcp]``, an agent VM ``det-platform[agent]``,
a task container the base install (plus what det's task images add). A master or agent module
must import, at its top or inside a function, only distributions of its part's extras, the base
or what those require: every code path of a deployed master must be able to run. A task
container's and the CLI's imports inside a function (a storage backend's SDK) may come from any
extra; ``try: ... except ImportError`` marks an optional one anywhere. A shell's launch in the
master imported ``cryptography``, which only ``det-platform[deploy]`` brought: a deployed master could
not start a shell. This test fails on that.
"""

from __future__ import annotations

import ast
import importlib.metadata
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]

# folder -> (the extras of the install that runs it besides the base, whether its imports
# inside functions must come from those too).
PARTS: dict[str, tuple[tuple[str, ...], bool]] = {
    "master": (("master",), True),
    "agent": (("agent",), True),
    "cli": ((), False),
    "harness": ((), False),
}
# A master module named for one cloud runs only on that cloud's master, which has its extra.
CLOUDS = ("aws", "gcp")
# Installed by det's task images (infra/task-image), not by any extra.
TASK_IMAGES = {
    "asyncssh": "the SSH server of shell tasks (det.exec.shell_server)",
    "tensorboard": "TensorBoard tasks (det.exec.tensorboard runs the image's TensorBoard)",
}


def _declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {canonicalize_name(Requirement(r).name) for r in project["dependencies"]}
    raw: dict[str, list[str]] = project["optional-dependencies"]

    def expand(extra: str) -> set[str]:
        out: set[str] = set()
        for line in raw[extra]:
            req = Requirement(line)
            if canonicalize_name(req.name) == canonicalize_name(project["name"]):
                for inner in req.extras:
                    out |= expand(inner)
            else:
                out.add(canonicalize_name(req.name))
        return out

    return base, {extra: expand(extra) for extra in raw}


def _closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, as installed here (``typing_extensions``
    comes with pydantic, ``werkzeug`` with flask)."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in out:
            continue
        out.add(name)
        try:
            requires = importlib.metadata.requires(name) or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonicalize_name(req.name))
    return out


def _imports(path: Path) -> list[tuple[str, str, str]]:
    """What ``path`` imports: (top-level name, how: ``at module level``, ``lazily`` (inside a
    function) or ``optionally`` (under ``try: ... except ImportError``), the enclosing
    functions' names)."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[str, str, str]] = []

    def names(node: ast.AST) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name.split(".")[0] for a in node.names]
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            return [node.module.split(".")[0]]
        return []

    def visit(node: ast.AST, how: str, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                out.extend((n, how, scope) for n in names(child))
            elif isinstance(child, ast.Try) and any(
                isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "Exception")
                for h in child.handlers
            ):
                visit(child, "optionally", scope)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = "optionally" if how == "optionally" else "lazily"
                visit(child, inner, f"{scope}.{child.name}")
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue  # for the type checker only
            else:
                visit(child, how, scope)

    visit(tree, "at module level", "")
    return out


def test_every_import_comes_from_a_declared_distribution() -> None:
    base, extras = _declared()
    anywhere = _closure(base.union(*extras.values()))
    dists = importlib.metadata.packages_distributions()
    local = {"det", "tests", "conftest"} | {p.stem for p in REPO.glob("*/*.py")}
    problems: list[str] = []
    for folder, (part_extras, strict) in PARTS.items():
        allowed = _closure(base.union(*(extras[e] for e in part_extras)))
        wanted = f"det-platform[{','.join(part_extras)}]" if part_extras else "the base install"
        for path in sorted((REPO / folder).rglob("*.py")):
            for name, how, scope in _imports(path):
                if name in sys.stdlib_module_names or name in local or name == "__future__":
                    continue
                if name in TASK_IMAGES and folder == "harness":
                    continue
                # Code named for one cloud (a module or a function) runs on that cloud's
                # master only, which has that cloud's extra.
                cloud = next((c for c in CLOUDS if c in path.stem or c in scope), None)
                if how == "optionally" or (how == "lazily" and not strict):
                    ok, where = anywhere, "any extra"
                elif folder == "master" and cloud:
                    ok = _closure(base | extras["master"] | extras[cloud])
                    where = f"det-platform[master,{cloud}]"
                else:
                    ok, where = allowed, wanted
                if canonicalize_name(name) in ok:
                    continue  # declared by its own name (e.g. pgserver, not installed on 3.13)
                owners = {canonicalize_name(d) for d in dists.get(name, [])}
                if not owners & ok:
                    problems.append(
                        f"{path.relative_to(REPO)} imports {name} {how}"
                        f" ({', '.join(sorted(owners)) or 'no installed distribution'}),"
                        f" which {where} does not declare"
                    )
    assert not problems, "\n".join(sorted(set(problems)))
