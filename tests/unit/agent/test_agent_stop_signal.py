"""SIGTERM stops the agent even when it lands while the main thread holds the lock of the event
the handler sets (the agent's loop clears and waits on its wake-up event every pass)."""

from __future__ import annotations

import signal
import threading

from det.agent.__main__ import stopper


def test_the_handler_returns_while_the_wake_up_event_is_locked_and_the_events_are_set_after() -> (
    None
):
    stop, woken = threading.Event(), threading.Event()
    handler = stopper(stop, woken.set)
    returned = threading.Event()

    def main_thread_inside_the_event() -> None:
        # As the main thread between two bytecodes of Event.wait or Event.clear: the event's
        # condition held while the handler runs on this same thread.
        with woken._cond:  # type: ignore[attr-defined]
            handler(signal.SIGTERM, None)
            returned.set()
            assert not woken.is_set()  # not yet: the lock is still ours

    t = threading.Thread(target=main_thread_inside_the_event, daemon=True)
    t.start()
    assert returned.wait(5), "the handler waited for a lock its own thread holds"
    t.join(5)
    assert stop.wait(5) and woken.wait(5)
