"""No test writes the host's fixed paths (a pytest plugin: tests/conftest.py loads it).

A few paths are where code made for containers writes when it runs on the host by mistake:
``/run/determined`` (det.exec.run writes the official task info files there unless
``DET_INFO_DIR`` says otherwise; every official client on the machine then believes it runs on a
cluster and fails off-cluster tests at random), ``/determined_shared_fs`` (the official
package's default shared_fs mount) and the files a cloud machine's boot script
(det/master/provisioner/bootstrap.sh) writes by default: its log in ``/var/log``, its helpers in
``/usr/local/lib/det``, the agent's config in ``/etc/det``. A test that runs that script on this
machine gives it :func:`bootstrap_env`, which moves each of them under the test's own directory. After each test's teardown, one of them that did not exist
when the session started fails that teardown, naming it, and is removed so that it fails one
test, not every test after it. With parallel workers the test named may be a neighbour of the
one that wrote it: the path is what matters.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Generator
from pathlib import Path

import pytest

_BOOTSTRAP = Path(__file__).resolve().parent.parent / "master" / "provisioner" / "bootstrap.sh"
#: ``: "${DET_LIB_DIR:=/usr/local/lib/det}"``: a variable of the boot script with an absolute
#: default path
_DEFAULT_PATH = re.compile(r'^: "\$\{(DET_[A-Z0-9_]+):=(/[^}]*)\}"', re.MULTILINE)


def bootstrap_defaults() -> dict[str, Path]:
    """The boot script's variables whose defaults are absolute paths, with those paths."""
    text = _BOOTSTRAP.read_text(encoding="utf-8")
    return {name: Path(path) for name, path in _DEFAULT_PATH.findall(text)}


def bootstrap_env(root: Path) -> dict[str, str]:
    """The environment that moves every default path of the boot script under ``root`` (their
    directories made), for a test that runs the script on this machine."""
    env = {}
    for name, path in bootstrap_defaults().items():
        moved = root / path.relative_to("/")
        moved.parent.mkdir(parents=True, exist_ok=True)
        env[name] = str(moved)
    return env


WATCHED = (
    Path("/run/determined"),
    Path("/determined_shared_fs"),
    *(p for p in bootstrap_defaults().values() if p.parts[1] != "dev"),
)
_present_at_start: set[Path] = set()


def pytest_sessionstart(session: pytest.Session) -> None:
    _present_at_start.update(p for p in WATCHED if p.exists())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    yield
    appeared = [p for p in WATCHED if p not in _present_at_start and p.exists()]
    for p in appeared:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    if appeared:
        raise AssertionError(
            f"{item.nodeid} (or a test of a parallel worker) wrote the host's "
            f"{', '.join(map(str, appeared))}: a test writes only its own temporary directories"
            " (set DET_INFO_DIR for det.exec.run, bootstrap_env for the boot script); removed"
        )
