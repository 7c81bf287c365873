"""The control loop: one process at a time (a PostgreSQL advisory lock) runs the passes.

A standby waits for the lock inside PostgreSQL (``det.master.leader_lock``), so it leads as soon
as the leader's session ends.

Every pass is load → decide → apply in short transactions and is idempotent, so a leader killed
at any point leaves nothing half-done that the next leader would repeat or lose. Passes run every
``tick_seconds``, or at once when an API call sends ``NOTIFY det_wakeup``.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

import psycopg

from det.master import leader_lock, wakeups
from det.master.db import Conn
from det.master.db.connection import notifications
from det.master.handles import MasterState
from det.master.services import (
    agents,
    checkpoint_gc,
    idle,
    lifecycle,
    log_retention,
    ntsc,
    provisioning,
    scheduling,
    searching,
    unmanaged,
    webhook_delivery,
)
from det.master.services import wakeups as wakeups_svc

logger = logging.getLogger(__name__)

# How often the leader looks for unmanaged trials whose scripts fell silent.
_UNMANAGED_CHECK_SECONDS = 5.0


class ControlLoop:
    def __init__(self, state: MasterState, stop: threading.Event) -> None:
        self.state = state
        self.stop = stop
        # The provisioner's providers, cloud lists and recent events live as long as this loop.
        self.provisioner = provisioning.Provisioner()
        self.passes: list[tuple[str, Callable[[], None]]] = [
            ("agents", self._agents_pass),
            ("searcher", self._searcher_pass),
            ("trials", self._trials_pass),
            ("scheduler", self._scheduling_pass),
            ("provisioner", self._provisioner_pass),
            ("experiments", self._experiments_pass),
            ("idle notebooks", lambda: idle.idle_pass(self.state)),
            ("wake-ups", self._wakeups_pass),
            ("webhooks", lambda: webhook_delivery.kick(self.state)),
            ("log retention", lambda: log_retention.kick(self.state)),
        ]
        # Where the loop asks to be woken when no request would run it (None: never asks).
        self.scheduler = wakeups.build(state.config.wakeups)
        self.extra_passes: list[tuple[str, Callable[[], None]]] = []
        self._next_unmanaged_check = 0.0

    # -- leadership ---------------------------------------------------------------------------
    def run_forever(self) -> None:
        conninfo = str(self.state.pool.conninfo)
        while not self.stop.is_set():
            try:
                with leader_lock.connect(conninfo) as lock_conn:
                    self._lead_when_possible(lock_conn)
            except psycopg.Error as e:
                logger.warning("control loop lost its database connection: %s", e)
            self.stop.wait(1.0)

    def _lead_when_possible(self, lock_conn: Conn) -> None:
        if not leader_lock.wait_for_lead(lock_conn, self.stop):
            return
        logger.info("this master leads the control loops")
        lock_conn.execute("LISTEN det_wakeup")
        while not self.stop.is_set():
            self.run_once()
            # Sleep until the next tick or a wake-up; the notifies generator also proves the
            # lock connection (and so the lock) is still alive.
            for _ in notifications(lock_conn, self.state.config.tick_seconds, stop_after=1):
                pass
            for _ in notifications(lock_conn, 0.02):
                pass

    def run_once(self) -> None:
        for name, fn in self.passes + self.extra_passes:
            try:
                fn()
            except Exception:
                logger.exception("%s pass failed; it will run again next tick", name)

    # -- passes ---------------------------------------------------------------------------------
    def _tx(self, fn: Callable[[Conn], None]) -> None:
        with self.state.pool.connection() as conn:
            fn(conn)

    def _agents_pass(self) -> None:
        def lost(conn: Conn) -> None:
            agents.mark_lost(conn, self.state.config.agent_timeout_seconds)

        self._tx(lost)
        # Unmanaged scripts fall silent in minutes, not ticks: look every few seconds.
        now = time.monotonic()
        if now >= self._next_unmanaged_check:
            self._next_unmanaged_check = now + _UNMANAGED_CHECK_SECONDS

            def silent(conn: Conn) -> None:
                unmanaged.mark_lost(conn, self.state.config.unmanaged_timeout_seconds)

            self._tx(silent)

    def _searcher_pass(self) -> None:
        with self.state.pool.connection() as conn:
            ids = searching.pending_experiments(conn)
        for eid in ids:
            # One transaction per experiment: a bad one cannot hold up the rest.
            try:
                self._tx(lambda c, eid=eid: searching.run_for_experiment(c, eid))  # type: ignore[misc]
            except Exception:
                logger.exception("searcher pass failed for experiment %d", eid)

    def _trials_pass(self) -> None:
        self._tx(lifecycle.carry_intent)
        self._tx(lifecycle.end_unstarted)
        self._tx(lambda c: lifecycle.trials_pass(c, self.state))
        self._tx(lambda c: ntsc.tasks_pass(c, self.state))

    def _scheduling_pass(self) -> None:
        self._tx(lambda c: scheduling.schedule_all(c, self.state))

    def _provisioner_pass(self) -> None:
        # Makes cloud calls: opens its own short transactions.
        provisioning.run_pass(self.state, self.provisioner)

    def _wakeups_pass(self) -> None:
        # Last: the provisioner pass of this round computed each pool's next change.
        when = self.provisioner.next_change()
        if self.scheduler is not None and when is not None:
            wakeups_svc.arrange(self.state, self.scheduler, when, dt.datetime.now(dt.UTC))

    def _experiments_pass(self) -> None:
        self._tx(lifecycle.experiments_pass)
        self._tx(lambda c: checkpoint_gc.gc_pass(c, self.state))


def run_passes_until(state: MasterState, done: Callable[[], bool], timeout: float = 30.0) -> None:
    """Test helper: run passes in this thread until ``done()`` or the deadline."""
    loop = ControlLoop(state, threading.Event())
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not reached")
        loop.run_once()
        time.sleep(0.05)
