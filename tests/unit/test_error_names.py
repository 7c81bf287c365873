"""One name per exception class across the one ``det`` namespace (issue 28, item 3).

The master, the agent, the CLI, the harness and deploy share ``det``; an error name that means
"the master failed" in one package and "talking to the master failed" in another is a trap for
whoever catches it. Every module of every root that setup.py maps is imported and each exception
class defined there is keyed by its bare name: two classes may not share one. Aliases
(``from x import E as E``) are the same class and do not count.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict

# setup.py's ROOTS: the folders mapped onto the namespace.
ROOTS = ("det", "det.master", "det.agent", "det.cli", "det.deploy")

# None: every clash so far was renamed (docs/internals.md, "Error names"). An entry here needs a
# comment saying why two classes must share the name.
ALLOWED: dict[str, set[str]] = {}


def _module_names() -> list[str]:
    names: set[str] = set()
    for root in ROOTS:
        package = importlib.import_module(root)
        names.add(root)
        # det's own __path__ is the harness folder only: the other roots are walked from theirs.
        names.update(m.name for m in pkgutil.walk_packages(package.__path__, root + "."))
    return sorted(names)


def exception_classes() -> dict[str, set[str]]:
    """Bare name -> the qualified names of the exception classes that carry it."""
    by_name: dict[str, set[str]] = defaultdict(set)
    for name in _module_names():
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, BaseException) and obj.__module__ == name:
                by_name[obj.__name__].add(f"{name}.{obj.__qualname__}")
    return by_name


def test_no_two_exception_classes_share_a_name() -> None:
    by_name = exception_classes()
    clashes = {
        name: sorted(where)
        for name, where in by_name.items()
        if len(where) > 1 and where != ALLOWED.get(name)
    }
    assert clashes == {}


def test_the_walk_reaches_every_package() -> None:
    by_name = exception_classes()
    everywhere = {q for where in by_name.values() for q in where}
    for root in ("det.common.", "det.master.", "det.agent.", "det.cli.", "det.deploy."):
        assert any(q.startswith(root) for q in everywhere), root
    # The roots and translations of each package, by the names they now have.
    for qualified in (
        "det.master.errors.MasterError",
        "det.master.errors.APIError",
        "det.master.config.MasterConfigError",
        "det.master.expconf.errors.ConfigError",
        "det.common.errors.MasterCallError",
        "det.common.errors.MasterStatusError",
        "det.agent.errors.AgentMasterError",
        "det.agent.errors.AgentConfigError",
        "det.cli.errors.CliAPIError",
        "det.cli.errors.CliUnreachable",
    ):
        assert qualified in everywhere, qualified
