"""The leader lock: which master process runs the control loops.

The leader holds the session-level advisory lock ``LEADER_LOCK_KEY`` on a connection of its own.
A standby does not poll for it: its connection waits inside PostgreSQL on ``pg_advisory_lock``,
and PostgreSQL grants the lock to it the moment the leader's session ends. A leader killed with
``kill -9`` closes its socket; its backend sees the end of file, exits and releases the lock, so
the standby leads within a round trip. A leader whose host vanishes without closing its socket
is found by TCP keepalives (the server side of its session sends them: :data:`SESSION_SETTINGS`)
within about ``idle + interval * count`` seconds.

A standby's wait ends early only when the process stops: a watcher thread cancels the waiting
statement (``PQcancel``), and :func:`wait_for_lead` returns False.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from det.master import db
from det.master.db import LEADER_LOCK_KEY, Conn

logger = logging.getLogger(__name__)

# Set on the lock connection's own session: the server probes an idle peer after 10 s, then
# every 3 s, and drops it after 3 unanswered probes (a leader whose host vanished: ~19 s). A
# statement or lock timeout set for the role or database would end a standby's wait: not here.
SESSION_SETTINGS = {
    "tcp_keepalives_idle": 10,
    "tcp_keepalives_interval": 3,
    "tcp_keepalives_count": 3,
    "statement_timeout": 0,
    "lock_timeout": 0,
}
# The client side of the same connection (libpq options), so a standby learns of a dead server.
CLIENT_KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 3,
    "keepalives_count": 3,
}


#: Appended to the master's application name on this connection: a standby's lock wait outlives
#: its dead master (PostgreSQL notices the client's end only when the wait does), and such a
#: session, which can commit nothing, does not count as another master
#: (det.master.authcache.other_masters).
APPLICATION_SUFFIX = " leader-lock"


def connect(conninfo: str) -> Conn:
    """A connection for the leader lock: autocommit, keepalives on both sides."""
    name = conninfo_to_dict(conninfo).get("application_name")
    extra = {"application_name": f"{name}{APPLICATION_SUFFIX}"} if name else {}
    conn = db.connect(make_conninfo(conninfo, **CLIENT_KEEPALIVES, **extra))
    try:
        for name, value in SESSION_SETTINGS.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, str(value)))
    except psycopg.Error:
        conn.close()
        raise
    return conn


def wait_for_lead(conn: Conn, stop: threading.Event) -> bool:
    """Block until this session holds the leader lock (True) or ``stop`` is set (False).

    One statement waits in the server (no polling); a thread cancels it when ``stop`` is set.
    Raises psycopg errors other than the cancellation (a lost connection: the caller reconnects).
    """
    if stop.is_set():
        return False
    done = threading.Event()

    def cancel_on_stop() -> None:
        while not done.is_set():
            if stop.wait(0.2):
                if not done.is_set():
                    try:
                        if hasattr(conn, "cancel_safe"):  # psycopg >= 3.2: bounded, no thread
                            conn.cancel_safe(timeout=5.0)
                        else:
                            conn.cancel()
                    except psycopg.Error as e:  # the wait ends with the process anyway
                        logger.warning("could not cancel the wait for the leader lock: %s", e)
                return

    watcher = threading.Thread(target=cancel_on_stop, name="det-leader-lock-cancel", daemon=True)
    watcher.start()
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (LEADER_LOCK_KEY,))
    except psycopg.errors.QueryCanceled:
        if stop.is_set():
            return False
        raise
    finally:
        done.set()
    # A stop that came as the lock was granted: the caller sees stop and lets go of it.
    return not stop.is_set()
