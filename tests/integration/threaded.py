"""The master's app in the test's process, served on a real localhost port by the master's own
HTTP front, for tests whose client is in another process or needs a socket (a browser).

``threaded_master`` builds the app as ``api_master`` does (tests/integration/inproc.py: the same
``server.prepare`` and ``create_app`` on the test's PostgreSQL database) and serves it with the
waitress server ``det-master``'s front process runs (``det.master.server.front_server``: det's
channels, its event loop, its settings) on a free port of 127.0.0.1 in a daemon thread of this
process, and the task origin's port (``task_port``) with the proxy's listener in another, as
``det-master`` serves them; no user API processes (``user_api_processes: 0``: no hand-off).
With ``loop=True`` the master's control loop runs in a third thread (``inproc.control_loop``),
so simulated agents register, heartbeat and run trials. At the end the front closes every
connection and its listener; its thread, its request threads, the task listener, the proxy's
relay threads and the loop are joined (tests/thread_check.py fails a test that leaves a thread
running).

The log lines of det's loggers at INFO (the master's among them) are kept for ``det master logs``
while it serves, as ``det-master`` keeps its process's.

Not here: what a separate process shows (signals, restarts, several processes or masters, the
log file of a process), the settings watcher that applies a run-time log level to the process
(it would change the test process's logging), and the listener for other masters' token
revocations. Those tests keep ``live_master``.

:class:`ThreadedMaster` has the API of :class:`tests.integration.conftest.Master` that tests use
over the network (``url``, ``login``, ``token``, ``session``, ``get``, ``post``,
``agent_token``): its sessions are plain ``requests`` sessions to its port.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.conftest import MasterClient
from tests.integration.inproc import control_loop, in_process_master

logger = logging.getLogger("det.master.threaded")

#: Seconds a stopping front may take to close its connections and join its threads.
STOP_SECONDS = 30


@dataclass
class ThreadedMaster(MasterClient):
    url: str
    app: Any
    state: Any
    data_dir: Path
    db_url: str
    _token: str | None = field(default=None, repr=False)

    @property
    def agent_token(self) -> str:
        return str(self.state.agent_token)


def _listener() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


def _stacks(prefix: str) -> str:
    """Where the threads named ``prefix…`` are (for a stop that did not finish)."""
    frames = sys._current_frames()
    return "\n".join(
        f"{t.name}:\n{''.join(traceback.format_stack(frames[t.ident]))}"
        for t in threading.enumerate()
        if t.name.startswith(prefix) and t.ident in frames
    )


@contextlib.contextmanager
def _log_buffer() -> Iterator[None]:
    """The log lines of det's loggers, at INFO, kept for ``det master logs`` while the block
    runs, as ``det-master`` keeps its process's (det.master.logbuffer)."""
    from det.master.logbuffer import BufferHandler

    handler = BufferHandler()
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))  # as det-master's
    logger = logging.getLogger("det")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _serve_task_origin(state: Any) -> tuple[socket.socket, threading.Thread] | None:
    """The task origin's port (``task_port``, a free one by default), served as ``det-master``
    serves it: its listener and the proxy's accept loop in a thread."""
    from det.master import proxy, server
    from det.master.tls import server_context

    listener = server._task_listener(state)  # binds, and sets state.task_port
    if listener is None:
        return None
    tls = state.config.security.tls
    context = server_context(tls) if tls.enabled else None
    thread = threading.Thread(
        target=proxy.serve_task_listener,
        args=(listener, context),
        name="det-task-listener",
        daemon=True,
    )
    thread.start()
    return listener, thread


def _stop_task_origin(listener: socket.socket, thread: threading.Thread) -> None:
    # shutdown() wakes the thread's accept() (a close() alone does not on Linux)
    with contextlib.suppress(OSError):
        listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(STOP_SECONDS)
    assert not thread.is_alive(), f"the task listener did not stop in {STOP_SECONDS} s"


@contextlib.contextmanager
def threaded_master(
    tmp: Path, db_url: str, extra: dict[str, Any] | None = None, *, loop: bool = False
) -> Iterator[ThreadedMaster]:
    """A master on a free localhost port, served by a thread of this process (the
    ``threaded_master`` fixture); ``extra``: master.yaml keys over the tests' defaults;
    ``loop``: run the control loop too."""
    from waitress import wasyncore

    from det.master import server  # the master's imports: paid by the tests that serve it

    sock = _listener()
    port = int(sock.getsockname()[1])
    try:
        with (
            _log_buffer(),
            in_process_master(tmp, db_url, {**(extra or {}), "port": port}) as inproc,
        ):
            before = set(threading.enumerate())
            front = server.front_server(inproc.state, inproc.app, sock, None)
            thread = threading.Thread(target=front.run, name="det-http-front", daemon=True)
            thread.start()
            tasks = _serve_task_origin(inproc.state)
            master = ThreadedMaster(
                f"http://127.0.0.1:{port}",
                inproc.app,
                inproc.state,
                inproc.data_dir,
                db_url,
            )
            try:
                with control_loop(inproc) if loop else contextlib.nullcontext():
                    yield master
            finally:
                # In the loop's thread: close the listener, every connection and the trigger;
                # the loop ends with its map empty.
                front.trigger.pull_trigger(lambda: wasyncore.close_all(front._map, True))
                thread.join(STOP_SECONDS)
                # A follow of the master's log (GET /api/v1/master/logs?follow) writes, and so
                # learns that its client is gone, only when a line comes: this one.
                logger.info("master %s: its HTTP front stopped", inproc.state.master_id)
                workers = front.task_dispatcher
                workers.shutdown(timeout=STOP_SECONDS)
                if tasks is not None:
                    _stop_task_origin(*tasks)
                relays = [
                    t
                    for t in set(threading.enumerate()) - before
                    if t.name.startswith(("det-proxy", "det-task-accept"))
                ]
                for t in relays:
                    t.join(STOP_SECONDS)
                assert not thread.is_alive(), f"the HTTP front did not stop in {STOP_SECONDS} s"
                assert not workers.threads, f"request threads still running: {_stacks('waitress-')}"
                left = [t.name for t in relays if t.is_alive()]
                assert not left, f"task proxy threads still running: {left}"
    finally:
        sock.close()
