"""No test leaves a file in the temporary directory (a pytest plugin: tests/conftest.py loads it).

Each pytest process (the controller and each xdist worker) gets a temporary directory of its own,
``det-tests-*`` in the machine's (a worker's inside its controller's): ``TMPDIR`` points at it
from ``pytest_configure`` on and ``tempfile`` is made to read it again, so the test process,
every subprocess it starts (masters, ``det``, harness processes, torch's launcher, Pulumi) and
everything they start write their temporary files there, not in the host's ``/tmp``. pytest's
own ``tmp_path`` directories stay where they always were (``PYTEST_DEBUG_TEMPROOT`` is set to
the machine's temporary directory, so a pytest run inside a test keeps its basetemp there too).

After each test's teardown, an entry of that directory that was not there before is a leftover
and fails that teardown, naming it, unless a fixture of a wider scope that is still set up owns
it (tests/leak_ledger.py: the session's PostgreSQL data directory is its fixture's). An entry
the process keeps for its whole life and removes at its exit (``IGNORED_PREFIXES``: ``multiprocessing``'s ``pymp-*``) is
not checked. A leftover is given ``GRACE_SECONDS`` to go (a process told to stop may still be
removing its files), then reported once, so that it fails one test, not every test after it;
it is left in place (code of the process may still use it) and goes with the directory, which
is removed when the process ends.

Why: code under test that leaves a temporary file behind leaves it on a user's machine too
(``det deploy`` left its wheel and Pulumi's work directory in /tmp on every ``up``), and the
suite's runs filled the host's /tmp with them.
"""

from __future__ import annotations

import multiprocessing.util
import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.leak_ledger import Ledger

#: Entries not checked: what a process keeps as long as it lives and removes at its exit
#: (multiprocessing's directory, the forkserver's socket in it: tests/master_fork.py; det's
#: bundle of the master's certificate with the public CAs, harness/common/tls.py), and the
#: directories other code keeps there for every process of the user by design (platformdirs'
#: stand-in for XDG_RUNTIME_DIR, where pgserver keeps its lock and long socket paths; torch's
#: inductor cache; uv's lock for building packages with setuptools, one per uv install, shared
#: by every uv process of the user and never removed). All of them go with the directory when the
#: pytest process ends.
IGNORED_PREFIXES = ("pymp-", "det-master-cert-", "runtime-", "torchinductor_", "uv-setuptools-")
GRACE_SECONDS = 3.0
PREFIX = "det-tests-"


class _Entries(Ledger[str]):
    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root
        self.baseline = self.current()

    def current(self) -> set[str]:
        try:
            return {n for n in os.listdir(self.root) if not n.startswith(IGNORED_PREFIXES)}
        except FileNotFoundError:
            return set()

    def grace_seconds(self) -> float:
        return GRACE_SECONDS

    def leftovers(self) -> list[str]:
        return sorted(self.current() - self.baseline - self.owned_now())

    def failure(self, left: list[str], released: dict[str, str]) -> str:
        self.baseline.update(left)  # reported once; removed with the directory at the end
        names = "; ".join(f"{n!r} (left by {released.get(n, 'the test')})" for n in left)
        return (
            f"left in the temporary directory (TMPDIR) after the teardown: {names}: remove "
            "what the code under test or the test creates, or give it a path under tmp_path "
            "(tests/tmp_check.py)"
        )

    def remove(self, name: str) -> None:
        path = self.root / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


_LEDGER = pytest.StashKey[_Entries]()
_SAVED = pytest.StashKey[dict[str, str | None]]()


def _remove_root(root: str) -> None:
    shutil.rmtree(root, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    host_tmp = tempfile.gettempdir()
    worker = getattr(config, "workerinput", {}).get("workerid")
    prefix = f"{worker}-" if worker else PREFIX
    root = tempfile.mkdtemp(prefix=prefix)  # a worker's: inside its controller's
    # Like /tmp: other users' processes of a test (the session's PostgreSQL runs as its own
    # user when the tests run as root) make their directories in it.
    os.chmod(root, 0o1777 | stat.S_IRWXU)
    config.stash[_SAVED] = {k: os.environ.get(k) for k in ("TMPDIR", "PYTEST_DEBUG_TEMPROOT")}
    os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", host_tmp)  # tmp_path stays where it was
    os.environ["TMPDIR"] = root
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    ledger = config.stash[_LEDGER] = _Entries(Path(root))
    config.pluginmanager.register(ledger, "det-tmp-check")
    # Removed at the process's exit, after multiprocessing's own temporary directory (its
    # finalizer runs at priority -100; ours after it).
    multiprocessing.util.Finalize(None, _remove_root, args=(root,), exitpriority=-200)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    # What other plugins made while they were configured (the wire log's folder) is theirs.
    ledger = session.config.stash[_LEDGER]
    ledger.baseline = ledger.current()


def pytest_unconfigure(config: pytest.Config) -> None:
    ledger = config.stash.get(_LEDGER, None)
    if ledger is None:
        return
    config.pluginmanager.unregister(ledger)
    for name in ledger.current():
        ledger.remove(name)
    for key, value in config.stash[_SAVED].items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = None
