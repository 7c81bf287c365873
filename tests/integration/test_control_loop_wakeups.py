"""A validation wakes the control loop for its searcher alone (``NOTIFY det_wakeup,
'searcher'``): the searcher pass runs at once, and the whole round (every pass reads every
live trial and allocation) only when the searcher acted, when another wake-up asks for it, or
when the tick is due, which a stream of validations does not put off."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from det.master.loop import ControlLoop
from tests.conftest import new_database
from tests.integration.inproc import ONE_TRIAL_CONFIG, in_process_master

pytestmark = pytest.mark.integration

TICK_SECONDS = 4.0


class CountingLoop(ControlLoop):
    """A control loop that counts its whole rounds and its searcher-only passes."""

    def __init__(self, *a: Any) -> None:
        super().__init__(*a)
        self.rounds = 0
        self.searcher_only = 0

    def run_once(self) -> None:
        super().run_once()
        self.rounds += 1

    def run_searcher_only(self) -> bool:
        alone = super().run_searcher_only()
        self.searcher_only += 1
        return alone


def _until(what: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def master(pg_server: str, pg_template: str, tmp_path: Path) -> Iterator[Any]:
    with (
        new_database(pg_server, "det_wakeups", template=pg_template) as db,
        in_process_master(tmp_path, db, {"tick_seconds": TICK_SECONDS}) as m,
    ):
        yield m


def test_the_searcher_pass_alone_says_whether_the_searcher_acted(master: Any) -> None:
    loop = ControlLoop(master.state, threading.Event())
    assert loop.run_searcher_only() is True  # nothing to search
    body = {"config": ONE_TRIAL_CONFIG, "activate": True}
    eid = master.post("/api/v1/experiments", body)["experiment"]["id"]
    # A new experiment's searcher creates its first trial: the whole round has work.
    assert loop.run_searcher_only() is False
    assert len(master.get(f"/api/v1/experiments/{eid}/trials")["trials"]) == 1
    assert loop.run_searcher_only() is True  # its events are taken; nothing new


def test_validations_wake_the_searcher_alone_and_the_round_still_runs_at_its_tick(
    master: Any,
) -> None:
    loop = CountingLoop(master.state, threading.Event())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    notifier = psycopg.connect(str(master.state.pool.conninfo), autocommit=True)
    try:
        assert _until(lambda: loop.rounds == 1, 30), "the first round never ran"
        for _ in range(20):
            notifier.execute("NOTIFY det_wakeup, 'searcher'")
            time.sleep(0.05)
        time.sleep(0.2)
        # Taken by searcher passes alone: no whole round (the next tick is seconds away).
        assert loop.rounds == 1, loop.rounds
        assert _until(lambda: loop.searcher_only >= 5, 10), loop.searcher_only

        # Any other wake-up runs the whole round at once, well before the tick.
        notifier.execute("NOTIFY det_wakeup")
        assert _until(lambda: loop.rounds == 2, TICK_SECONDS / 2), loop.rounds

        # A stream of validations does not put the tick off.
        def ticked() -> bool:
            notifier.execute("NOTIFY det_wakeup, 'searcher'")
            time.sleep(0.1)
            return loop.rounds >= 3

        assert _until(ticked, 3 * TICK_SECONDS), loop.rounds
    finally:
        loop.stop.set()
        notifier.execute("NOTIFY det_wakeup")
        thread.join(30)
        notifier.close()
    assert not thread.is_alive()
