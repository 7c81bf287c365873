"""The slim locks (det.master.slimsync) behave as the threading objects they replace, in fewer
objects for the collector."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable

import pytest

from det.master.slimsync import OutputLock, Wakeup


def _tracked_each(make: Callable[[], object], n: int = 500) -> float:
    gc.collect()
    before = len(gc.get_objects())
    made = [make() for _ in range(n)]
    gc.collect()
    each = (len(gc.get_objects()) - before - 1) / n  # the list itself is one
    del made
    return each


def test_they_cost_the_collector_two_objects_where_threading_costs_six_or_more() -> None:
    assert _tracked_each(OutputLock) == pytest.approx(2, abs=0.05)
    assert _tracked_each(Wakeup) == pytest.approx(2, abs=0.05)
    assert _tracked_each(threading.Condition) >= 6
    assert _tracked_each(threading.Event) >= 6


def test_the_output_lock_is_reentrant_and_a_wait_lets_go_of_every_level() -> None:
    lock = OutputLock()
    took: list[str] = []
    with lock, lock:  # waitress takes it again inside (a flush below the watermark)

        def other() -> None:
            with lock:  # only possible while the holder waits
                took.append("other")
                lock.notify()

        t = threading.Thread(target=other)
        t.start()
        assert lock.wait(5.0) is True
        took.append("holder")
        t.join(5.0)
    assert took == ["other", "holder"]
    # Released as deep as it was taken: another thread can take it now.
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(lock.acquire(False)))
    t.start()
    t.join(5.0)
    assert got == [True]


def test_an_output_lock_wait_times_out_and_leaves_no_waiter_behind() -> None:
    lock = OutputLock()
    with lock:
        began = time.monotonic()
        assert lock.wait(0.05) is False
        assert time.monotonic() - began >= 0.04
        assert lock.wait(0) is False
        lock.notify()  # nobody waits: nothing to wake, nothing kept
        assert not lock._waiters


def test_notify_wakes_as_many_waiters_as_asked() -> None:
    lock = OutputLock()
    woken: list[int] = []

    def waiter(i: int) -> None:
        with lock:
            if lock.wait(5.0):
                woken.append(i)

    threads = [threading.Thread(target=waiter, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        with lock:
            if lock._waiters is not None and len(lock._waiters) == 3:
                lock.notify()
                break
        time.sleep(0.005)
    time.sleep(0.1)
    assert len(woken) == 1
    with lock:
        lock.notify_all()
    for t in threads:
        t.join(5.0)
    assert sorted(woken) == [0, 1, 2]


def test_the_output_lock_refuses_a_wait_or_notify_unheld() -> None:
    lock = OutputLock()
    with pytest.raises(RuntimeError, match="not held"):
        lock.wait(0.01)
    with pytest.raises(RuntimeError, match="not held"):
        lock.notify()


def test_a_wakeup_is_an_event_for_one_waiter() -> None:
    w = Wakeup()
    assert not w.is_set()
    assert w.wait(0.02) is False
    w.set()
    w.set()  # twice is once
    assert w.is_set()
    assert w.wait(0) is True
    assert w.wait(0.01) is True  # still set for whoever looks next
    w.clear()
    w.clear()
    assert not w.is_set()

    def later() -> None:
        time.sleep(0.05)
        w.set()

    t = threading.Thread(target=later)
    t.start()
    assert w.wait(5.0) is True
    t.join(5.0)


def test_a_wakeup_set_from_many_threads_at_once_stays_set() -> None:
    w = Wakeup()
    threads = [threading.Thread(target=w.set) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5.0)
    assert w.is_set() and w.wait(0) is True


def test_the_master_serves_connections_with_the_slim_output_lock() -> None:
    import socket

    from waitress.adjustments import Adjustments
    from waitress.channel import HTTPChannel

    from det.master import server

    class Server:
        def __init__(self) -> None:
            self.active_channels: dict[int, object] = {}

    a, b = socket.socketpair()
    try:
        conn = server.connection_class(HTTPChannel)(
            Server(), a, ("127.0.0.1", 1), Adjustments(), {}
        )
        assert type(conn.outbuf_lock) is OutputLock
    finally:
        a.close()
        b.close()
