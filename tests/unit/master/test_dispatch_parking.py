"""A waiting request parks (det.master.dispatch.parked): the pool runs one more thread while it
waits, and back to ``api_threads`` after; past MAX_PARKED or after shutdown, nothing changes."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pytest

from det.master import dispatch


@dataclass
class _Task:
    release: threading.Event = field(default_factory=threading.Event)
    served: threading.Event = field(default_factory=threading.Event)
    park: bool = True

    def service(self) -> None:
        if self.park:
            with dispatch.parked():
                # Set once parked, not before: the test counts the parked waits next.
                self.served.set()
                self.release.wait(30)
        else:
            self.served.set()


@pytest.fixture(autouse=True)
def _own_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's pool is a module global: each test's own, restored after."""
    monkeypatch.setattr(dispatch, "_current", None)


def _running(d: dispatch.PriorityDispatcher) -> int:
    with d.lock:
        return len(d.threads) - d.stop_count


def test_parked_waits_leave_the_threads_to_the_other_requests() -> None:
    d = dispatch.dispatcher(2)
    try:
        waits = [_Task() for _ in range(4)]
        for t in waits:
            d.add_task(t)
        for t in waits:
            assert t.served.wait(10), "a waiting request was not taken: the pool ran out"
        assert d.parked == 4 and _running(d) == 6
        quick = _Task(park=False)
        d.add_task(quick)
        assert quick.served.wait(10)
        for t in waits:
            t.release.set()
        deadline = time.monotonic() + 30  # the extra threads end as their waits return
        while not (d.parked == 0 and _running(d) == 2) and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        assert d.parked == 0 and _running(d) == 2
    finally:
        for t in waits:
            t.release.set()
        d.shutdown(timeout=5)


def test_past_the_cap_a_wait_holds_a_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dispatch, "MAX_PARKED", 1)
    d = dispatch.dispatcher(1)
    try:
        assert d.park() is True
        assert d.park() is False
        assert d.parked == 1 and _running(d) == 2
        d.unpark()
        assert d.parked == 0
    finally:
        d.shutdown(timeout=5)


def test_no_thread_is_started_after_shutdown() -> None:
    d = dispatch.dispatcher(1)
    d.shutdown(timeout=5)
    assert d.park() is False
    assert _running(d) == 0


def test_outside_a_waitress_process_parking_does_nothing() -> None:
    with dispatch.parked():
        pass


def test_a_stop_wakes_as_many_idle_threads_as_it_stops() -> None:
    """Hundreds of parked waits make hundreds of threads: ending one wait must not wake every
    idle thread for one of them to exit (waitress's ``notify_all``)."""
    d = dispatch.dispatcher(40)
    woken: list[int] = []
    notify = d.queue_cv.notify

    def counting_notify(n: int = 1) -> None:
        woken.append(n)
        notify(n)

    d.queue_cv.notify = counting_notify  # type: ignore[method-assign]
    try:
        deadline = time.monotonic() + 10  # every thread idle, waiting for work
        while d.active_count and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        assert d.active_count == 0
        assert d.park() is True
        d.unpark()
        assert woken == [1]  # one stop, one idle thread woken (waitress: every idle one)
        deadline = time.monotonic() + 10
        while len(d.threads) != 40 and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        assert len(d.threads) == 40 and _running(d) == 40
    finally:
        d.shutdown(timeout=5)


def test_a_park_takes_back_a_stop_no_thread_took_yet() -> None:
    """A wait ending and another starting (trials' long-polls do so all the time) cost no
    thread's exit and start: the pending stop is cancelled instead."""
    d = dispatch.dispatcher(1)
    busy = _Task(park=False)
    release = threading.Event()
    busy.service = lambda: release.wait(30)  # type: ignore[method-assign]
    started: list[int] = []
    start = d.start_new_thread
    d.start_new_thread = lambda target, n: (started.append(n), start(target, n))  # type: ignore[method-assign]
    try:
        d.add_task(busy)
        deadline = time.monotonic() + 10
        while d.queue and time.monotonic() < deadline:
            threading.Event().wait(0.02)
        d.set_thread_count(0)  # its only thread is busy: the stop waits for it
        with d.lock:
            assert d.stop_count == 1
        d.set_thread_count(1)
        with d.lock:
            assert d.stop_count == 0 and len(d.threads) == 1
        assert started == []  # waitress started a second thread beside the stopping one
    finally:
        release.set()
        d.shutdown(timeout=5)
