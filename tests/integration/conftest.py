"""Live masters for integration tests: real ``det-master`` processes on a real PostgreSQL
(forked from a pre-imported interpreter: tests/master_fork.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from tests import master_fork, stall_clock
from tests.master_fork import MasterProcess
from tests.ports import free_port

ADMIN_PASSWORD = "Test-admin-pw1"


class MasterClient:
    """What a test asks of a master over its API: a login, a session, JSON gets and posts.
    ``new_session`` is where the requests go: the network here, the app itself in
    :class:`tests.integration.inproc.InProcessMaster`."""

    url: str
    _token: str | None

    def new_session(self) -> requests.Session:
        return requests.Session()

    def login(self, username: str = "admin", password: str = ADMIN_PASSWORD) -> str:
        r = self.new_session().post(
            f"{self.url}/api/v1/auth/login",
            json={"username": username, "password": password},
            timeout=30,  # as the other requests: a login's password hash is slow under load
        )
        r.raise_for_status()
        return str(r.json()["token"])

    @property
    def token(self) -> str:
        if self._token is None:
            self._token = self.login()
        return self._token

    def session(self, token: str | None = None) -> requests.Session:
        s = self.new_session()
        s.headers["Authorization"] = f"Bearer {token or self.token}"
        return s

    def get(self, path: str, **kw: Any) -> Any:
        watch = stall_clock.Stopwatch()
        try:
            r = self.session().get(self.url + path, timeout=30, **kw)
        except requests.Timeout:
            # A read's timeout that a pause of the machine ran out (tests/stall_clock.py) is
            # asked once more; any other is the test's failure.
            if not watch.stalled():
                raise
            r = self.session().get(self.url + path, timeout=30, **kw)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        r = self.session().post(
            self.url + path, json=body if body is not None else {}, timeout=30, **kw
        )
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


@dataclass
class Master(MasterClient):
    """A ``det-master`` process."""

    url: str
    data_dir: Path
    config_file: Path
    log_file: Path
    proc: MasterProcess
    _token: str | None = field(default=None, repr=False)

    @property
    def agent_token(self) -> str:
        return (self.data_dir / "agent_token").read_text().strip()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            stall_clock.wait_process(self.proc, 30)

    def logs(self) -> str:
        return self.log_file.read_text(errors="replace")


def master_config(
    tmp: Path, db_url: str, port: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The master.yaml of the tests' masters (in ``tmp``, on ``db_url``), ``extra`` on top."""
    config: dict[str, Any] = {
        "port": port,
        "bind_address": "127.0.0.1",
        "data_dir": str(tmp / "data"),
        "db": {"url": db_url},
        "security": {"initial_user_password": ADMIN_PASSWORD},
        "checkpoint_storage": {"type": "shared_fs", "host_path": str(tmp / "checkpoints")},
        "agent_timeout_seconds": 10,
    }
    config.update(extra or {})
    return config


def start_master(
    tmp: Path,
    db_url: str,
    *,
    port: int | None = None,
    extra: dict[str, Any] | None = None,
    name: str = "master",
) -> Master:
    port = port or free_port()
    data_dir = tmp / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    config = master_config(tmp, db_url, port, extra)
    config_file = tmp / f"{name}.yaml"
    config_file.write_text(yaml.safe_dump(config))
    log_file = tmp / f"{name}.log"
    proc = master_fork.start(
        ["--config-file", str(config_file)],
        {**os.environ, "PYTHONUNBUFFERED": "1"},
        str(log_file),
    )
    m = Master(f"http://127.0.0.1:{port}", data_dir, config_file, log_file, proc)
    deadline = stall_clock.now() + 60
    while stall_clock.now() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"master exited with {proc.returncode}:\n{m.logs()}")
        try:
            if requests.get(m.url + "/info", timeout=1).status_code == 200:
                return m
        except requests.RequestException:  # not listening yet, or too busy to answer in 1 s
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"master did not come up:\n{m.logs()}")


def default_database(request: pytest.FixtureRequest) -> str:
    """The database a test's master uses by default: the test's ``pg_url`` (empty: the master
    migrates it) when the test reads or writes the database itself, as it always did; otherwise
    a copy of the migrated template (``migrated_db``), which saves each master its migrations."""
    if "pg_url" in request.fixturenames:
        return str(request.getfixturevalue("pg_url"))
    return str(request.getfixturevalue("migrated_db"))


@pytest.fixture
def master_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    started: list[Master] = []
    default_db = default_database(request)

    def make(**kw: Any) -> Master:
        name = kw.pop("name", f"master{len(started)}")
        m = start_master(tmp_path, kw.pop("db_url", default_db), name=name, **kw)
        started.append(m)
        return m

    yield make
    for m in started:
        m.kill(signal.SIGTERM if m.proc.poll() is None else signal.SIGKILL)
    for m in started:
        assert_event_loop_sound(m.logs())


def assert_event_loop_sound(log: str) -> None:
    """No connection's readiness changed without the event loop being told
    (det.master.evloop): such a change waits for the loop's next full pass."""
    faults = [line for line in log.splitlines() if "readiness changed unmarked" in line]
    assert not faults, "\n".join(faults[:5])


@pytest.fixture
def live_master(master_factory: Any) -> Master:
    m: Master = master_factory()
    return m


@pytest.fixture
def api_master(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """The master's app in this process, answering through Flask's test client, on the test's
    database (its ``pg_url`` when it has one, as ``live_master``): for API tests that need no
    agents, control loop, streams or second process (tests/integration/inproc.py)."""
    from tests.integration.inproc import in_process_master

    with in_process_master(tmp_path, default_database(request)) as m:
        yield m


@pytest.fixture
def loop_master_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(extra=None)``: ``loop_master`` with master.yaml keys of the test's own
    (``extra``), once per test (requests are routed by the master's host name, which every
    in-process master shares)."""
    import contextlib

    # inproc imports this module
    from tests.integration.inproc import control_loop, in_process_master, routed

    db_url = default_database(request)
    made: list[Any] = []
    with contextlib.ExitStack() as stack:

        def make(extra: dict[str, Any] | None = None) -> Any:
            assert not made, "one loop_master per test"
            made.append(stack.enter_context(in_process_master(tmp_path, db_url, extra)))
            stack.enter_context(routed(made[0]))
            stack.enter_context(control_loop(made[0]))
            return made[0]

        yield make


@pytest.fixture
def loop_master(loop_master_factory: Any) -> Any:
    """``api_master`` with its control loop running in a thread of this process and every
    ``requests`` session routed to its app: for tests with SimAgents (which call the master's
    URL) and state that moves on the loop's ticks, that need no port, stream or second process
    (tests/integration/inproc.py)."""
    return loop_master_factory()


@pytest.fixture
def threaded_master_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(extra=None)``: the master's app in this process served on a free localhost port
    by the master's own HTTP front in a thread, its control loop in another
    (tests/integration/threaded.py), on the test's database, with master.yaml keys of the
    test's own (``extra``); each stopped and joined at the test's end. For a browser or a client
    in another process, where no signal, restart or second process is checked."""
    import contextlib

    # threaded imports this module
    from tests.integration.threaded import threaded_master as serve

    db_url = default_database(request)
    with contextlib.ExitStack() as stack:

        def make(extra: dict[str, Any] | None = None) -> Any:
            return stack.enter_context(serve(tmp_path, db_url, extra, loop=True))

        yield make


@pytest.fixture
def threaded_master(threaded_master_factory: Any) -> Any:
    """``threaded_master_factory()``: a master served by a thread of this process."""
    return threaded_master_factory()


@pytest.fixture
def api_master_factory(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Any]:
    """``make(extra=None, name=...)``: in-process masters (as ``api_master``) with master.yaml
    keys of the test's own (``extra``), on the test's database; each its own data directory."""
    import contextlib

    # inproc imports this module
    from tests.integration.inproc import in_process_master

    db_url = default_database(request)
    made: list[Any] = []
    with contextlib.ExitStack() as stack:

        def make(extra: dict[str, Any] | None = None, name: str = "") -> Any:
            tmp = tmp_path / (name or f"inproc{len(made)}")
            tmp.mkdir(parents=True, exist_ok=True)
            made.append(stack.enter_context(in_process_master(tmp, db_url, extra)))
            return made[-1]

        yield make


def wait_for(
    predicate: Any, timeout: float = 60.0, interval: float = 0.2, what: str = "condition"
) -> Any:
    """Polls ``predicate`` until it returns something truthy; raises TimeoutError naming ``what``
    (``timeout`` on tests/stall_clock.py's clock)."""
    deadline = stall_clock.now() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if stall_clock.now() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)
