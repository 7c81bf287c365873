"""Asking for wake-ups (det.master.wakeups) once per time, whichever master process computes it.

The ``wakeups`` table holds the times already asked for. A time is asked for only when no
wake-up already falls between now and it (an earlier one runs the loop, which then asks for this
one again); the row is written before the scheduler is called and removed again when the call
fails, so a later pass retries.
"""

from __future__ import annotations

import datetime as dt
import logging

from det.master import db, wakeups
from det.master.db import Conn
from det.master.handles import MasterState

logger = logging.getLogger(__name__)

# Rows of wake-ups this far in the past are deleted.
KEEP = dt.timedelta(days=1)


def woken(conn: Conn) -> None:
    """A wake-up arrived: the leader runs a pass now (a waiting one wakes on the notify)."""
    conn.execute("NOTIFY det_wakeup")


def arrange(
    st: MasterState,
    scheduler: wakeups.Scheduler,
    when: dt.datetime,
    now: dt.datetime,
) -> dt.datetime | None:
    """Ask ``scheduler`` for a wake-up at ``when`` (rounded up to the second) unless one at or
    before it is already due; returns the time asked for, or None."""
    at = wakeups.at_second(when)
    with st.pool.connection() as conn:
        covered = conn.execute(
            "SELECT 1 FROM wakeups WHERE at > %s AND at <= %s LIMIT 1", (now, at)
        ).fetchone()
        if covered:
            return None
        row = conn.execute(
            "INSERT INTO wakeups (at) VALUES (%s) ON CONFLICT DO NOTHING RETURNING at", (at,)
        ).fetchone()
        conn.execute("DELETE FROM wakeups WHERE at < %s", (now - KEEP,))
    if row is None:
        return None
    wakeup = wakeups.Wakeup(
        cluster_id=st.cluster_id,
        at=at,
        url=st.config.url().rstrip("/") + wakeups.WAKEUP_PATH,
        token=wakeups.token(st.token_secret),
    )
    try:
        scheduler.schedule(wakeup)  # a network call: no transaction is open
    except wakeups.WakeupError as e:
        logger.warning("could not schedule the wake-up at %s: %s", wakeup.at_text(), e)
        with st.pool.connection() as conn:
            conn.execute("DELETE FROM wakeups WHERE at = %s", (at,))
        return None
    logger.info("wake-up scheduled at %s (%s)", wakeup.at_text(), wakeup.name)
    return at


def scheduled(conn: Conn, after: dt.datetime) -> list[dt.datetime]:
    """The wake-ups asked for that fall after ``after``, earliest first."""
    return db.column(
        conn, dt.datetime, "SELECT at FROM wakeups WHERE at > %s ORDER BY at", (after,)
    )
