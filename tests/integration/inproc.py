"""The master's app in the test's own process, for API tests that need no second process.

``api_master`` builds a master the way ``det-master`` does up to its HTTP server (the same
``server.prepare``: config, migrations, cluster identity, admin user; the same ``create_app``:
routes, authentication, admission, error handlers, the wire log) on a real PostgreSQL database,
and answers requests through Flask's test client. No process starts, no port is bound and no
control loop runs: a test runs the loop's passes in its own thread when it needs them
(``det.master.loop.run_passes_until``). ``loop_master`` adds what a test with agents needs: the
master's control loop in a thread of this process (as ``det-master`` runs it: the leader lock,
a pass per tick or wake-up) and every ``requests`` session of the process routed to the app
(``routed``), so a SimAgent (tests/fakes/sim_agent.py), which calls the master's URL, registers,
heartbeats and runs trials. A test that needs a port or a socket, streamed answers, signals or
a restart, several processes or a second master, a real agent or a browser, or a client in
another process (the official CLI, ``python -m det.cli``) uses ``live_master``.

:class:`InProcessMaster` has the API half of :class:`tests.integration.conftest.Master`
(``url``, ``login``, ``token``, ``session``, ``get``, ``post``): a session's requests go to the
app through :class:`AppAdapter`, so a test moves over by taking ``api_master`` instead of
``live_master`` and asserts the same things on the same answers.
"""

from __future__ import annotations

import contextlib
import io
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from tests.integration.conftest import MasterClient, master_config

# Never resolved: the adapter answers every request to it.
BASE_URL = "http://det-master.in-process"


class AppAdapter(BaseAdapter):
    """A requests transport that hands each request to a WSGI app through Flask's test
    client. An answer is read whole, or, asked with ``stream=True``, as its caller reads it
    (``iter_lines``, ``iter_content``; ``close`` ends it, as a client closing its connection
    ends a follow): the app's body runs in the reading thread, so a read waits for the app
    with no timeout. Each thread has a client of its own (a SimAgent's heartbeat and its
    tasks call while the test does)."""

    def __init__(self, app: Any, remote_addr: str = "127.0.0.1") -> None:
        super().__init__()
        self._app = app
        self._clients = threading.local()
        self._remote_addr = remote_addr

    @property
    def _client(self) -> Any:
        client = getattr(self._clients, "client", None)
        if client is None:
            client = self._clients.client = self._app.test_client()
        return client

    def send(  # type: ignore[override]
        self, request: requests.PreparedRequest, stream: bool = False, **_: Any
    ) -> requests.Response:
        parts = urlsplit(request.url or "")
        body = request.body.encode() if isinstance(request.body, str) else request.body
        answer = self._client.open(
            parts.path,
            base_url=f"{parts.scheme}://{parts.netloc}",
            method=request.method or "GET",
            query_string=parts.query,
            headers=list(request.headers.items()),
            data=body,
            environ_base={"REMOTE_ADDR": self._remote_addr},
            buffered=False,
        )
        r = requests.Response()
        r.status_code = answer.status_code
        r.reason = answer.status.partition(" ")[2]
        r.headers = CaseInsensitiveDict(answer.headers.items())
        if stream:
            r.raw = _Body(answer)
        else:
            r._content = answer.get_data()
            answer.close()  # the WSGI iterable's close(), as a server calls it (a sent file's)
        r.encoding = requests.utils.get_encoding_from_headers(r.headers)
        r.url = request.url or ""
        r.request = request
        return r

    def close(self) -> None:
        pass


class _Body(io.RawIOBase):
    """A streamed answer's body as ``requests`` reads a socket's: ``read(n)`` takes the app's
    next chunks, ``close()`` closes its WSGI iterable (a follow's generator ends there)."""

    def __init__(self, answer: Any) -> None:
        super().__init__()
        self._answer = answer
        self.headers = answer.headers  # as urllib3's (``getlist``): clients read both
        self._chunks = iter(answer.response)
        self._left = b""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        while not self._left:
            chunk = next(self._chunks, None)
            if chunk is None:
                return b""
            self._left = chunk.encode() if isinstance(chunk, str) else bytes(chunk)
        n = len(self._left) if size is None or size < 0 else size
        out, self._left = self._left[:n], self._left[n:]
        return out

    def read1(self, size: int = -1, **_: Any) -> bytes:  # urllib3's takes decode_content
        return self.read(size)

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._answer.close()
        super().close()


@dataclass
class InProcessMaster(MasterClient):
    url: str
    app: Any
    state: Any
    data_dir: Path
    db_url: str
    _token: str | None = field(default=None, repr=False)

    @property
    def agent_token(self) -> str:
        return str(self.state.agent_token)

    def new_session(self, remote_addr: str = "127.0.0.1") -> requests.Session:
        """A session whose requests reach the app from the client address ``remote_addr``
        (the TCP peer a live master would see: login limits and trusted proxies count it)."""
        s = requests.Session()
        s.mount(self.url, AppAdapter(self.app, remote_addr))
        return s


# requests' own, before any routed(...) replaced it
_SESSION_GET_ADAPTER = requests.Session.get_adapter


@contextlib.contextmanager
def routed(master: InProcessMaster) -> Iterator[None]:
    """Every ``requests`` session of this process (the ``det`` CLI's client, a test's plain
    ``requests.post``) sends what is addressed to ``master.url``'s host to its app, for as long as
    this context lasts (the innermost one, when nested); other URLs go to the network as
    before, and a master's own sessions (``new_session``) to that master."""
    adapter = AppAdapter(master.app)
    original = requests.Session.get_adapter  # restored on exit: an outer routed(...)'s, maybe
    host = urlsplit(master.url).hostname

    def get_adapter(self: requests.Session, url: str) -> BaseAdapter:
        mounted = _SESSION_GET_ADAPTER(self, url)  # the session's own mounts
        if isinstance(mounted, AppAdapter):  # a master's own session (new_session) keeps its app
            return mounted
        if urlsplit(url).hostname == host:  # any port: the CLI adds its default, 8080
            return adapter
        return mounted

    requests.Session.get_adapter = get_adapter  # type: ignore[method-assign]
    try:
        yield
    finally:
        requests.Session.get_adapter = original  # type: ignore[method-assign]


@contextlib.contextmanager
def in_process_master(
    tmp: Path, db_url: str, extra: dict[str, Any] | None = None
) -> Iterator[InProcessMaster]:
    """A master app in this process on database ``db_url`` (the ``api_master`` fixture);
    ``extra``: master.yaml keys over the tests' defaults, as ``start_master`` takes them."""
    from det.master import server
    from det.master.app import create_app
    from det.master.config import parse_config

    # port 8080 is never bound: the app answers through the test client
    config = parse_config(master_config(tmp, db_url, 8080, extra), dict(os.environ))
    state = server.prepare(config)
    try:
        yield InProcessMaster(BASE_URL, create_app(state), state, config.data_dir, db_url)
    finally:
        _forget_waiters(str(state.pool.conninfo))
        state.pool.close()


def _forget_waiters(conninfo: str) -> None:
    """Stop and forget this master's long-poll listeners (det.master.preemptwait keeps one per
    channel for the life of a process: a later test's master in this process would otherwise
    wait on this one's database, which is dropped, and its waits fall back to reading rows)."""
    from det.master import preemptwait  # the master's imports: paid by in-process tests only

    with preemptwait._guard:
        for channel, (_, waiters) in list(preemptwait._waiters.items()):
            if waiters._conninfo == conninfo:
                waiters.close()
                del preemptwait._waiters[channel]


#: ids of the master states whose control loop runs in a thread (``control_loop``): a helper
#: then waits for that loop (``cli_support.until``) rather than run passes beside it
LOOPING: set[int] = set()


@contextlib.contextmanager
def control_loop(master: InProcessMaster) -> Iterator[None]:
    """The master's control loop (``det.master.loop.ControlLoop.run_forever``, the leader lock
    and a pass per tick or ``det_wakeup``) in a thread of this process while the block runs,
    as ``det-master`` runs it beside its API; stopped and joined at the end."""
    from det.master.loop import ControlLoop  # the master's imports: paid where a loop runs

    stop = threading.Event()
    thread = threading.Thread(
        target=ControlLoop(master.state, stop).run_forever, name="det-control-loop", daemon=True
    )
    thread.start()
    LOOPING.add(id(master.state))
    try:
        yield
    finally:
        LOOPING.discard(id(master.state))
        stop.set()
        with master.state.pool.connection() as conn:  # ends the loop's wait for a tick
            conn.execute("NOTIFY det_wakeup")
        thread.join(30)
        assert not thread.is_alive(), "the in-process control loop did not stop within 30 s"


#: An experiment of one trial whose code never runs (the in-process master starts no task).
ONE_TRIAL_CONFIG = """
name: one-trial
entrypoint: python3 train.py
searcher: {name: single, metric: loss, smaller_is_better: true}
hyperparameters: {lr: 0.1}
"""


def active_trial(master: InProcessMaster, config: str = ONE_TRIAL_CONFIG) -> int:
    """The id of an active experiment's trial, made by the control loop's own passes run in
    the test's thread (the in-process master runs no loop thread)."""
    from det.master.loop import run_passes_until  # the master's imports: paid where used

    body = {"config": config, "activate": True}
    eid = master.post("/api/v1/experiments", body)["experiment"]["id"]
    trials: list[dict[str, Any]] = []

    def made() -> bool:
        trials[:] = master.get(f"/api/v1/experiments/{eid}/trials")["trials"]
        return bool(trials)

    run_passes_until(master.state, made, timeout=120)
    return int(trials[0]["id"])
