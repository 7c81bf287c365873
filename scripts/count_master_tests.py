"""Count the test files that start a master process, checked by ``make check`` (issue 42, build
5: API tests take the master's app in their own process, ``api_master``; a test starts a
``det-master`` process only when what it checks needs one).

A test file under ``tests/integration/`` or ``tests/e2e/`` counts when one of its tests starts a
master process or a cluster, directly or through the fixtures it requests: ``live_master``,
``master_factory``, ``start_master``, e2e's ``start_cluster`` and ``cluster``..., a module's own
fixture that calls one of them, or a ``python -m det.master`` of its own. Read from the source
(``ast``), the way pytest resolves it:

- a function *starts a master* when its body runs ``det.master`` (the string ``"det.master"``:
  ``tests/master_fork.py``'s fork, a test's own ``subprocess``) or calls, by name or as a
  module's attribute, a function of the tests' modules that does (``start_master``,
  ``start_cluster``...), looked up where the function is defined;
- a fixture a test requests (a parameter) is looked up in the test's module first (its own
  ``def``, an import, an alias such as ``cli_master = cli_support.in_process_cli_master``), then
  in the ``conftest.py`` files above it and their plugins; the fixtures a fixture requests are
  looked up the same way, from the test's module (so ``cli_support.det`` starts a process only
  where the module's ``cli_master`` does).

A session-scoped fixture of a ``conftest.py`` (``tests/e2e/conftest.py``'s shared clusters,
started on first use and stopped at the end of the run) starts its master once for the run, not
once per file: a file whose only master comes from one is not counted, and the conftest is
counted once, as itself, if a test asks for it (a module-scoped fixture still counts its file).

Not counted: a master run from an image in Docker (``det deploy local``, the serverless
rehearsal), which tests the image, and ``tests/unit``.

The count has a ceiling (the count reached so far: a ratchet; lower it in the commit that moves
a file to ``api_master``) and the issue's target, printed beside it. Usage:
``python scripts/count_master_tests.py [-v] [ROOT]`` (``-v`` lists the files).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CEILING = 24
TARGET = 30  # issue 42, build 5
DIRS = ("tests/integration", "tests/e2e")
RUNS_MASTER = "det.master"  # python -m det.master, as master_fork and the tests' own Popen run it

Func = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass
class Module:
    path: str  # relative, posix
    tree: ast.Module
    # name -> ("def", node) | ("assign", expr) | ("from", module, name) | ("module", module)
    bindings: dict[str, tuple[object, ...]] = field(default_factory=dict)


def _module_path(dotted: str) -> str | None:
    return dotted.replace(".", "/") + ".py" if dotted.startswith("tests.") else None


class Tests:
    """The tests' modules, loaded as they are imported."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[str, Module | None] = {}
        self._starts: dict[tuple[str, str], bool] = {}
        # conftest.py files whose session-scoped fixture a counted test asked for: each starts
        # its master processes once for the run (per pytest process), counted once, as itself.
        self.shared: set[str] = set()

    def module(self, path: str | None) -> Module | None:
        if path is None:
            return None
        if path not in self.modules:
            self.modules[path] = None
            file = self.root / path
            if not file.is_file():
                pkg = self.root / path.removesuffix(".py") / "__init__.py"
                if not pkg.is_file():
                    return None
                file = pkg
            tree = ast.parse(file.read_text(encoding="utf-8"), str(file))
            self.modules[path] = Module(path, tree, _bindings(tree))
        return self.modules[path]

    def imported_module(self, module: Module, name: str) -> Module | None:
        """The tests' module that ``name`` names in ``module`` (``import x.y as name``,
        ``from x import name``), if it names one."""
        binding = module.bindings.get(name)
        if binding is None or binding[0] not in ("module", "from"):
            return None
        dotted = str(binding[1]) if binding[0] == "module" else f"{binding[1]}.{binding[2]}"
        path = _module_path(dotted)
        return self.module(path) if path and (self.root / path).is_file() else None

    def conftests(self, path: str) -> Iterator[Module]:
        """The ``conftest.py`` files above test module ``path``, nearest first, and the modules
        their ``pytest_plugins`` name."""
        parts = Path(path).parts[:-1]
        for i in range(len(parts), 0, -1):
            conftest = self.module("/".join(parts[:i]) + "/conftest.py")
            if conftest is None:
                continue
            yield conftest
            for plugin in _plugins(conftest.tree):
                found = self.module(_module_path(plugin))
                if found is not None:
                    yield found

    def resolve(self, module: Module, name: str) -> tuple[Module, Func] | None:
        """The definition ``name`` means in ``module``: its own def, or through an import or an
        alias (``x = other.y``)."""
        seen: set[tuple[str, str]] = set()
        while (module.path, name) not in seen:
            seen.add((module.path, name))
            binding = module.bindings.get(name)
            if binding is None:
                return None
            if binding[0] == "def":
                node = binding[1]
                assert isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                return module, node
            if binding[0] == "from":
                target = self.module(_module_path(str(binding[1])))
                if target is None:
                    return None
                module, name = target, str(binding[2])
                continue
            if binding[0] == "assign":
                expr = binding[1]
                if isinstance(expr, ast.Name):
                    name = expr.id
                    continue
                if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name):
                    target = self.imported_module(module, expr.value.id)
                    if target is None:
                        return None
                    module, name = target, expr.attr
                    continue
            return None
        return None

    def starts(self, module: Module, name: str) -> bool:
        """Whether ``name`` in ``module`` is, or calls, what starts a master (its fixture
        parameters aside: those are looked up where a test requests them)."""
        found = self.resolve(module, name)
        if found is None:
            return False
        where, node = found
        key = (where.path, node.name)
        if key not in self._starts:
            self._starts[key] = False  # a recursion ends here
            self._starts[key] = self._body_starts(where, node)
        return self._starts[key]

    def _body_starts(self, module: Module, node: Func) -> bool:
        params = _params(node) if not isinstance(node, ast.ClassDef) else set()
        for sub in _walk_code(node):
            if isinstance(sub, ast.Constant) and sub.value == RUNS_MASTER:
                return True
            if isinstance(sub, ast.ImportFrom) and sub.module and not sub.level:
                target = self.module(_module_path(sub.module))  # a function-level import
                if target is not None and any(self.starts(target, a.name) for a in sub.names):
                    return True
            if (
                isinstance(sub, ast.Name)
                and sub.id not in params
                and sub.id != node.name
                and self.starts(module, sub.id)
            ):
                return True
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                target = self.imported_module(module, sub.value.id)
                if target is not None and self.starts(target, sub.attr):
                    return True
        return False

    def fixture(self, test: Module, name: str) -> tuple[Module, Func] | None:
        """The fixture a test of module ``test`` gets when it asks for ``name``."""
        if name in test.bindings:
            return self.resolve(test, name)
        for conftest in self.conftests(test.path):
            if name in conftest.bindings:
                return self.resolve(conftest, name)
        return None

    def file_starts(self, path: str) -> bool:
        test = self.module(path)
        assert test is not None
        asked: list[str] = []
        for name, binding in test.bindings.items():
            if binding[0] != "def":
                continue
            if self.starts(test, name):
                return True
            node = binding[1]
            if isinstance(node, ast.ClassDef):
                asked += [
                    p for m in node.body if isinstance(m, ast.FunctionDef) for p in _params(m)
                ]
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                asked += _params(node)
        seen: set[str] = set()
        while asked:
            name = asked.pop()
            if name in seen:
                continue
            seen.add(name)
            found = self.fixture(test, name)
            if found is None:
                continue
            where, node = found
            if self.starts(where, node.name):
                if _session_scoped(node) and where.path.endswith("/conftest.py"):
                    self.shared.add(where.path)  # the run's, not this file's
                    continue
                return True
            if not isinstance(node, ast.ClassDef):
                asked += _params(node)
        return False


def _bindings(tree: ast.Module) -> dict[str, tuple[object, ...]]:
    out: dict[str, tuple[object, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = ("def", node)
            alias = _fixture_name(node)
            if alias:
                out[alias] = ("def", node)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                # a name in a module, or a module (``from tests import master_fork``)
                out[a.asname or a.name] = ("from", node.module, a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    out[a.asname] = ("module", a.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = ("assign", node.value)
    return out


def _fixture_name(node: Func) -> str | None:
    """``@pytest.fixture(name="x")``'s ``x``."""
    for dec in node.decorator_list:
        if isinstance(dec, ast.Call):
            for kw in dec.keywords:
                if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                    return str(kw.value.value)
    return None


def _session_scoped(node: Func) -> bool:
    """``@pytest.fixture(scope="session")``."""
    return any(
        isinstance(dec, ast.Call)
        and any(
            kw.arg == "scope" and isinstance(kw.value, ast.Constant) and kw.value.value == "session"
            for kw in dec.keywords
        )
        for dec in node.decorator_list
    )


def _plugins(tree: ast.Module) -> list[str]:
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets)
            and isinstance(node.value, ast.List | ast.Tuple)
        ):
            return [str(e.value) for e in node.value.elts if isinstance(e, ast.Constant)]
    return []


def _params(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    a = node.args
    return [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs) if p.arg not in ("self", "cls")]


def _walk_code(node: Func) -> Iterator[ast.AST]:
    """Every node of ``node``'s body, its annotations and docstring aside."""
    todo: list[ast.AST] = list(node.body)
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.AnnAssign):
            todo += [x for x in (sub.target, sub.value) if x is not None]
            continue
        if isinstance(sub, ast.FunctionDef | ast.AsyncFunctionDef):
            todo += [*sub.body, *sub.args.defaults, *sub.decorator_list]
            continue
        if isinstance(sub, ast.Expr) and isinstance(sub.value, ast.Constant):
            continue  # a docstring
        yield sub
        todo += list(ast.iter_child_nodes(sub))


def files(root: Path) -> list[str]:
    """The test files that start a master process, relative to ``root``."""
    tests = Tests(root)
    found = []
    for d in DIRS:
        for path in sorted((root / d).rglob("test_*.py")):
            rel = path.relative_to(root).as_posix()
            if tests.file_starts(rel):
                found.append(rel)
    return found + sorted(tests.shared)


def main(argv: list[str]) -> int:
    args = [a for a in argv[1:] if a != "-v"]
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    found = files(root)
    if "-v" in argv:
        print("\n".join(found))
    print(
        f"test files starting a master process: {len(found)} (ceiling {CEILING}, target {TARGET})"
    )
    if len(found) > CEILING:
        print(
            "master processes: above the ceiling: a new API test takes api_master (the app in the"
            " test's process, tests/integration/inproc.py); a process only for what needs one"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
