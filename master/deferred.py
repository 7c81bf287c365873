"""Long-polls that wait without a thread.

A waiting long-poll (a trial's preemption poll, an agent's wait for work) parked a thread of its
own (det.master.dispatch.parked): at 1,000 agents x 2,000 trials a front ran 1,200-1,700 threads
asleep, each with its Flask context, its frames and its events in the collector's old generation
(``bench/scale.py --heap``), and started and stopped a thread for every wait.

Here a waiting request holds no thread. Its handler, with nothing to answer yet, calls
:meth:`Deferral.park`: the task writes nothing, the connection keeps the request (waitress's
``requests`` list holds it again, so nothing the client sends after it is read ahead of its
answer), and the request is served again from the start when its :class:`Resume` token is set
(the notification it waits for, det.master.preemptwait) or its deadline comes (one timer thread
a process). The handler, run again, finds its first deadline on the request (:meth:`Deferral.deadline`)
and whether a wake brought it back (:attr:`Deferral.woken`), and answers or parks again.

The way through waitress (``HTTPChannel.service`` pops the request it served and, when more are
queued, queues the connection again): :meth:`Deferral.park` appends the request a second time and
raises :class:`Deferred`, a ``BaseException`` Flask lets through (the request's ``finally``
blocks run: the pooled connection goes back); :class:`DeferringTask` catches it and writes
nothing; waitress pops the first copy and queues the connection for the second, and
:class:`DeferringChannel` swallows that call (the connection is *parked*) until the token or the
deadline queues it again. Only a request with no body, alone in its connection's queue, parks;
any other waits in its thread as before.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from det.master.httptask import KeepAliveTask
from det.master.slimsync import Wakeup

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

logger = logging.getLogger(__name__)

#: The environ key of the running request's :class:`Deferral`.
ENVIRON_KEY = "det.deferral"

# A connection's state while a request of it is parked (its ``_det_parked``): WAITING from
# park() until waitress queues it again, PARKED after, WOKEN when the token came first.
_WAITING, _PARKED, _WOKEN = "waiting", "parked", "woken"
# Every parking's state changes, in every connection of the process (rare events: a park, a
# wake, a deadline).
_lock = threading.Lock()
_parked = 0


def parked() -> int:
    """Requests of this process parked now (not yet resumed)."""
    return _parked


class Deferred(BaseException):
    """Raised by :meth:`Deferral.park` through the app to :class:`DeferringTask`."""


class Resume(Wakeup):
    """A :class:`~det.master.slimsync.Wakeup` a parked request's waiters hold: until the
    request parks it is a Wakeup (a wake sets it, the handler sees it before parking); once
    parked, setting it (or the deadline) serves the request again, once."""

    __slots__ = ("channel", "done", "on_resume")

    def __init__(self) -> None:
        super().__init__()
        self.channel: Any = None
        self.done = False
        self.on_resume: Any = None

    def set(self) -> None:
        self._resume(woken=True)

    def _resume(self, *, woken: bool) -> None:
        global _parked
        with _lock:
            channel = self.channel
            if channel is None:
                Wakeup.set(self)  # not parked (yet): the handler looks before it parks
                return
            if self.done:
                return
            self.done = True
            _parked -= 1
            requests = channel.requests
            if woken and requests:  # (none left if the connection was closed meanwhile)
                requests[0].__dict__["_det_woken"] = True
            queue = channel.__dict__.get("_det_parked") == _PARKED
            channel.__dict__["_det_parked"] = None if queue else _WOKEN
        if self.on_resume is not None:
            self.on_resume()
        if queue:
            channel.server.add_task(channel)


class _Timer:
    """One thread a process resuming parked requests at their deadlines."""

    def __init__(self) -> None:
        self._cv = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Resume]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, deadline: float, token: Resume) -> None:
        with self._cv:
            heapq.heappush(self._heap, (deadline, next(self._seq), token))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="det-deferred-timer", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is token:
                self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _, _, token = heapq.heappop(self._heap)
            try:
                token._resume(woken=False)
            except Exception:  # this thread resumes every parked request: it must go on
                logger.exception("resuming a parked request at its deadline")


_timer = _Timer()


class Deferral:
    """What a handler may do with the request it serves (``environ[ENVIRON_KEY]``)."""

    __slots__ = ("task",)

    def __init__(self, task: Any) -> None:
        self.task = task

    def deadline(self, timeout: float) -> float:
        """The request's deadline (``time.monotonic()``): ``timeout`` from its first run."""
        found = self.task.request.__dict__.get("_det_deadline")
        if found is None:
            found = self.task.request.__dict__["_det_deadline"] = time.monotonic() + timeout
        return float(found)

    @property
    def woken(self) -> bool:
        """Whether a wake (not the deadline) served this request again."""
        return bool(self.task.request.__dict__.get("_det_woken"))

    def park(self, token: Resume, deadline: float, on_resume: Any) -> None:
        """Parks the request until ``token`` is set or ``deadline`` (raises :class:`Deferred`),
        then calls ``on_resume()`` (the handler's clean-up: its ``finally`` ran when it parked)
        and serves it again; returns (nothing changed) when it cannot: the token was set already
        (look again), the request has a body, or another request of its connection is queued
        behind it."""
        global _parked
        task = self.task
        channel, request = task.channel, task.request
        if request.content_length or request.chunked:
            return
        with _lock:
            if token.is_set():
                return
            with channel.requests_lock:
                if len(channel.requests) != 1 or not channel.connected:
                    return
                channel.requests.append(request)
            request.__dict__["_det_woken"] = False
            channel.__dict__["_det_parked"] = _WAITING
            token.on_resume = on_resume
            token.channel = channel
            _parked += 1
        _timer.add(deadline, token)
        raise Deferred


class DeferringTask(KeepAliveTask):
    """A task whose request may park: it offers a :class:`Deferral` in the environ and, when
    the handler parks (the app raised :class:`Deferred` before answering), writes nothing."""

    def get_environment(self) -> WSGIEnvironment:
        environ: WSGIEnvironment = super().get_environment()
        environ[ENVIRON_KEY] = Deferral(self)
        return environ

    def service(self) -> None:
        # Parked: nothing written; the connection serves it again when resumed.
        with contextlib.suppress(Deferred):
            super().service()


class DeferringChannel:
    """Put before a waitress ``HTTPChannel`` in a channel's bases (with :class:`DeferringTask`
    as its task): waitress's call to serve a parked request's second copy is swallowed until
    the request is resumed."""

    task_class = DeferringTask

    def service(self) -> None:
        with _lock:
            state = self.__dict__.get("_det_parked")
            if state == _WAITING:
                self.__dict__["_det_parked"] = _PARKED
                return
            if state == _WOKEN:
                self.__dict__["_det_parked"] = None
        super().service()  # type: ignore[misc]


def current(environ: WSGIEnvironment) -> Deferral | None:
    """The request's :class:`Deferral` (None outside a deferring waitress task)."""
    found = environ.get(ENVIRON_KEY)
    return found if isinstance(found, Deferral) else None
