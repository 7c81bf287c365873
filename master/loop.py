"""The control loop: one process at a time (a PostgreSQL advisory lock) runs the passes.

A standby waits for the lock inside PostgreSQL (``det.master.leader_lock``), so it leads as soon
as the leader's session ends.

Every pass is load → decide → apply in short transactions and is idempotent, so a leader killed
at any point leaves nothing half-done that the next leader would repeat or lose. Passes run every
``tick_seconds``, or at once when an API call sends ``NOTIFY det_wakeup``.

A wake-up whose payload is :data:`SEARCHER_ONLY` (a validation the searcher must see) runs the
searcher pass alone, and the whole round only if the searcher acted (created, stopped or ended
something); the whole round still runs every ``tick_seconds``. Every validation of every trial
sends one: at 1,400 running trials (23 a second) the loop ran its whole round about 7 times a
second, each pass reading every live trial and allocation, so its work grew with trials times
validations (docs/internals.md, "Concurrency rules in the master": the control loop's rounds).
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

#: ``NOTIFY det_wakeup, 'searcher'``: the wake-up asks for the searcher pass alone.
SEARCHER_ONLY = "searcher"
# Notifications that come this soon after the first are taken by the same round.
_GATHER_SECONDS = 0.02

# How often the leader looks for unmanaged trials whose scripts fell silent.
_UNMANAGED_CHECK_SECONDS = 5.0


class ControlLoop:
    def __init__(self, state: MasterState, stop: threading.Event) -> None:
        self.state = state
        self.stop = stop
        # The provisioner's providers, cloud lists and recent events live as long as this loop.
        self.provisioner = provisioning.Provisioner()
        self.passes: list[tuple[str, Callable[[], object]]] = [
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
        self.extra_passes: list[tuple[str, Callable[[], object]]] = []
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
        tick = self.state.config.tick_seconds
        whole, due = True, 0.0
        while not self.stop.is_set():
            if whole or not self.run_searcher_only():
                self.run_once()
                due = time.monotonic() + tick
            # Sleep until the next whole round is due or a wake-up; the notifies generator also
            # proves the lock connection (and so the lock) is still alive.
            woken = [
                n.payload
                for n in notifications(lock_conn, max(0.0, due - time.monotonic()), stop_after=1)
            ]
            woken += [n.payload for n in notifications(lock_conn, _GATHER_SECONDS)]
            whole = time.monotonic() >= due or any(p != SEARCHER_ONLY for p in woken)

    def run_once(self) -> None:
        for name, fn in self.passes + self.extra_passes:
            try:
                fn()
            except Exception:
                logger.exception("%s pass failed; it will run again next tick", name)

    def run_searcher_only(self) -> bool:
        """The searcher pass alone, for a wake-up that asked for it; False when the searcher
        acted on what it read (the whole round must follow) or the pass failed."""
        try:
            return not self._searcher_pass()
        except Exception:
            logger.exception("searcher pass failed; the whole round runs now")
            return False

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

    def _searcher_pass(self) -> bool:
        """Whether any experiment's searcher acted (or failed to run)."""
        with self.state.pool.connection() as conn:
            ids = searching.pending_experiments(conn)
        acted = False
        for eid in ids:
            # One transaction per experiment: a bad one cannot hold up the rest.
            try:
                with self.state.pool.connection() as conn:
                    acted = searching.run_for_experiment(conn, eid) or acted
            except Exception:
                logger.exception("searcher pass failed for experiment %d", eid)
                acted = True
        return acted

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
