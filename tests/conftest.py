"""Fixtures shared by every test layer.

``pg_server`` is a real PostgreSQL: ``DET_TEST_PG_URL`` if set (CI may point it at the machine's
own server), otherwise a private server from the ``pgserver`` wheel, one per test session.
``pg_url`` gives each test a fresh, empty database on it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import configuration as hypothesis_configuration

# tests.thread_check: no thread outlives the test or the fixture that started it;
# tests.tmp_check: no test leaves an entry in its process's temporary directory (TMPDIR).
pytest_plugins = [
    "tests.integration.conftest_aws",
    "tests.thread_check",
    "tests.host_paths",
    "tests.tmp_check",
]

# Hypothesis keeps its example database and caches under .cache/, not in the checkout's root
# (.hypothesis/): the tests write nothing in the working tree but .cache/ and pytest's files.
hypothesis_configuration.set_hypothesis_home_dir(
    Path(__file__).resolve().parents[1] / ".cache" / "hypothesis"
)

# The venvs tests make (a fresh clone's, each extra's, the README's) are not byte-compiled when
# pip installs them: pip's compileall of every installed file took 27 of the 29 CPU-seconds of
# installing det-platform[deploy]'s wheels into a new venv here, and a test imports a small part
# of them (Python compiles what it imports, and caches it where it may write).
os.environ.setdefault("PIP_COMPILE", "false")  # pip --no-compile (PIP_NO_COMPILE=1 would not be)


@pytest.fixture(scope="session", autouse=True)
def shared_harness_bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The agents a test process starts build the harness bundle (det.agent.harness_bundle) in
    one directory (``DET_HARNESS_DIR``), as the agents of one machine may: each agent of its own
    state directory built it again at its first container (``pip download`` and compiling, 1.1
    CPU-s and 1.2 s before that container could start, about 80 times a run). The bundle's
    building is tested where it is called (tests/unit/agent/test_harness_bundle.py,
    test_harness_bundle.py); a test that clears ``DET_*`` from its processes' environment (the
    README's job, ``det deploy local``) gets an agent's default, its state directory."""
    if "DET_HARNESS_DIR" in os.environ:
        yield
        return
    os.environ["DET_HARNESS_DIR"] = str(tmp_path_factory.mktemp("harness-bundle"))
    try:
        yield
    finally:
        os.environ.pop("DET_HARNESS_DIR", None)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    url = os.environ.get("DET_TEST_PG_URL")
    if url:
        yield url
        return
    import pgserver

    from det.master.db.embedded import ensure_server_user

    with tempfile.TemporaryDirectory(prefix="det-test-pg-", dir=_pg_parent()) as pgdata:
        ensure_server_user()  # each xdist worker starts a server: not all of them may useradd
        server = pgserver.get_server(pgdata, cleanup_mode="stop")
        try:
            _no_fsync(server.get_uri())
            yield server.get_uri()
        finally:
            server.cleanup()


#: Where the session's PostgreSQL keeps its files when the machine has a tmpfs there with room.
PG_TMPFS = "/dev/shm"
PG_TMPFS_MIN_BYTES = 2 * 2**30


def _pg_parent() -> str | None:
    """The directory the session's PostgreSQL data directory is made in: ``/dev/shm`` when it is
    a writable tmpfs with 2 GiB free (``DET_TEST_PG_TMPFS=0``: the temporary directory). On this
    kind of machine making and removing files on the root ext4 costs tens of times the CPU it
    costs on tmpfs, and each test's database is a copy of the template's files, removed after it:
    a whole run's PostgreSQL took 161 CPU-s on disk (CREATE DATABASE 61 of them, nearly all
    system time) and 21 on tmpfs (rehearsals 23 and 24). Nothing but PostgreSQL goes there: a
    test's own files stay in its temporary directories (under /dev they would be a protected
    host path to the task container policy)."""
    if os.environ.get("DET_TEST_PG_TMPFS", "1") == "0":
        return None
    try:
        with open("/proc/mounts") as f:
            tmpfs = any(
                line.split()[1:3] == [PG_TMPFS, "tmpfs"] for line in f if len(line.split()) > 2
            )
        st = os.statvfs(PG_TMPFS)
    except OSError:
        return None
    if not tmpfs or not os.access(PG_TMPFS, os.W_OK):
        return None
    return PG_TMPFS if st.f_bavail * st.f_frsize >= PG_TMPFS_MIN_BYTES else None


def _no_fsync(url: str) -> None:
    """The tests' own server does not flush to disk: what they check survives a killed master
    or PostgreSQL process either way (the OS keeps the written pages), and only an OS crash would
    lose them. A commit waits for no disk then (0.1-0.2 ms against 1.4-2 ms on this kind of
    machine), nor does each database a test copies from the template."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET fsync = off")
        conn.execute("ALTER SYSTEM SET full_page_writes = off")
        conn.execute("SELECT pg_reload_conf()")


def database_url(server: str, name: str) -> str:
    """The URL of database ``name`` on the server of URL ``server``."""
    head, sep, query = server.partition("?")
    base, _, _ = head.rpartition("/")
    return f"{base}/{name}{sep}{query}"


@contextlib.contextmanager
def new_database(server: str, prefix: str, template: str | None = None) -> Iterator[str]:
    """A database of its own for as long as the block runs (a copy of ``template`` if given:
    PostgreSQL copies a database's files, much faster than replaying its migrations)."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"{copy}')
    try:
        yield database_url(server, name)
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server: str) -> Iterator[str]:
    """A fresh, empty database."""
    with new_database(pg_server, "det_test") as url:
        yield url


@pytest.fixture(scope="session")
def pg_template(pg_server: str) -> Iterator[str]:
    """The name of a database with every migration applied and the two users a master's first
    start makes (``admin`` and ``determined``, with the tests' initial password), made once per
    session (per xdist worker) and never connected to again: :func:`migrated_db` copies it.
    The users are the master's own code's (``ensure_admin``): made here, their two scrypt
    hashes (~80 CPU-ms) are paid once instead of at every test master's first start (about 500
    a run). A test of the first start itself takes ``pg_url``, an empty database."""
    import psycopg

    from det.master import db
    from det.master.services import users
    from tests.integration.conftest import ADMIN_PASSWORD

    name = f"det_template_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(pg_server, name)
    db.upgrade(url)
    with psycopg.connect(url) as conn:
        users.ensure_admin(conn, ADMIN_PASSWORD)
    yield name
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def migrated_db(pg_server: str, pg_template: str) -> Iterator[str]:
    """A fresh database holding the schema and the users a master makes at its first start
    (every migration, ``admin`` and ``determined``; no cluster or other rows the master writes
    itself)."""
    with new_database(pg_server, "det_test", template=pg_template) as url:
        yield url


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """With ``DET_NO_SKIPS=1`` (CI sets it) a skipped test fails: on a machine that has
    everything, a skip can only mean a missing install step hiding a test."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("DET_NO_SKIPS") == "1" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped, but DET_NO_SKIPS=1 forbids skips: {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """With ``DET_TEST_CPU_LOG=DIR`` each test process appends, per test, its file and the CPU
    seconds this process spent on it (setup, call, teardown; all threads), its wall seconds and
    the wall clock at its end to ``DIR/worker-<python version>-<pid>.tsv``:
    scripts/cpu_by_process.py adds the CPU to the test files' and prints when each process ran
    out of work (the run's tail)."""
    folder = os.environ.get("DET_TEST_CPU_LOG")
    before, began = time.process_time(), time.monotonic()
    yield
    if folder:
        version = f"{sys.version_info[0]}.{sys.version_info[1]}"
        cpu, wall = time.process_time() - before, time.monotonic() - began
        with open(os.path.join(folder, f"worker-{version}-{os.getpid()}.tsv"), "a") as log:
            log.write(f"{item.nodeid.split('::')[0]}\t{cpu:.3f}\t{wall:.3f}\t{time.time():.1f}\n")


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """``--dist loadfile`` (scripts/test.sh, CI) hands out files longest first and splits the
    files tests/durations.json spreads into parts: tests/xdist_schedule.py."""
    if config.getvalue("dist") != "loadfile":
        return None
    from tests.xdist_schedule import CostScheduling

    return CostScheduling(config, log)


# --- every answer the tests' masters give, checked by the official client's bindings ----------


def pytest_configure(config: pytest.Config) -> None:
    """Masters started by the tests record their answers (det.master.api._wirelog) into one
    folder per run; set here, in the controlling process, so every worker and master inherits
    it. And the event loop's full pass (det.master.evloop) in a second rather than 10: a short
    test's masters then still look at every connection for a readiness change made without its
    mark (tests/integration/conftest.py fails a master that logs one)."""
    os.environ.setdefault("DET_API_FULL_PASS_SECONDS", "1")
    if hasattr(config, "workerinput") or os.environ.get("DET_WIRE_LOG"):
        return
    folder = tempfile.mkdtemp(prefix="det-wire-")
    os.environ["DET_WIRE_LOG"] = folder
    config.stash[_WIRE_LOG] = folder


_WIRE_LOG = pytest.StashKey[str]()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Runs tests/compat/check_wire.py over the recorded answers in the official client's venv;
    a body its bindings cannot parse fails the run."""
    import shutil
    import subprocess
    from pathlib import Path

    folder = session.config.stash.get(_WIRE_LOG, None)
    if folder is None:
        return
    try:
        if not any(Path(folder).glob("wire-*.ndjson")):
            return
        from tests.compat.official import venv_dir

        python = venv_dir() / "bin" / "python"
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        write = reporter.write_line if reporter is not None else print
        if not (venv_dir() / ".det-ok").exists():
            write("wire check: the official client's venv is missing: answers not checked")
            if os.environ.get("DET_NO_SKIPS") == "1":
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        checker = Path(__file__).parent / "compat" / "check_wire.py"
        r = subprocess.run(
            [str(python), str(checker), folder],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        for line in (r.stdout + r.stderr).splitlines():
            write(line)
        if r.returncode == 1:
            write("wire check: answers the official client cannot parse (see above): failing")
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    finally:
        shutil.rmtree(folder, ignore_errors=True)
