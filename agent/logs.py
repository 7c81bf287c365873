"""Log shipping: container stdout/stderr -> `POST /api/v1/task/logs`, batched, nothing lost.

One `LogFollower` thread per container reads Docker's multiplexed log stream (each frame says
whether it is stdout or stderr) with timestamps, and hands lines to the one `LogShipper`
thread, which batches them for the master and retries failed posts with backoff, holding the
batch (the followers block on a bounded queue meanwhile; Docker keeps the lines on disk).

When lines are posted: within ``FLUSH_SECONDS`` of the first line held while someone reads the
allocation's logs (the master's heartbeat answer says ``logsWatched``: a log view, a follow, a
``det trial logs``), else within ``QUIET_SECONDS``, with every line held by then; at once when
a container's stream ends (its end waits for its last lines) or ``batch_size`` lines are held.
An agent whose two trials print a line a second each posted about two times a second (a lone
line went at once); unwatched, it posts once in ``QUIET_SECONDS``: the master's cost of logs
is per post (bench/scale.py: 45% of its CPU at 300 agents posting each second).

Restart safety: after each successful post the shipper records, per container, a `Cursor` (the
last shipped Docker timestamp and how many lines carried exactly that timestamp) in a small
JSON file. A follower started for an existing container (agent restart) asks Docker for logs
`since` that timestamp and skips the lines already counted, so nothing is lost. Lines posted in
the instant between a post and its cursor write are shipped again; the master skips a container
line it already holds (same container, timestamp and text), so none is stored twice.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import re
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from det.agent.errors import MasterRejected, MasterUnavailable
from det.agent.master_client import MasterClient
from det.common.backoff import backoff

logger = logging.getLogger(__name__)

_RANK = re.compile(r"^\[rank=(\d+)\] ")
_LEVEL = re.compile(r"^(?:\[rank=\d+\] )?(TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL)[: ]")
_STDTYPES = {1: "stdout", 2: "stderr"}


@dataclass(frozen=True, order=True)
class Timestamp:
    """A Docker log timestamp, exactly (nanoseconds; floats would lose them)."""

    seconds: int
    nanos: int

    @classmethod
    def parse(cls, text: str) -> Timestamp:
        # RFC 3339 with up to 9 fractional digits and trailing zeros trimmed, in UTC ("Z").
        main, _, frac = text.rstrip("Z").partition(".")
        dt = datetime.strptime(main, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
        return cls(int(dt.timestamp()), int((frac or "0")[:9].ljust(9, "0")))

    def docker_since(self) -> str:
        return f"{self.seconds}.{self.nanos:09d}"

    def before(self, nanoseconds: int) -> Timestamp:
        """This instant less ``nanoseconds``."""
        total = self.seconds * 1_000_000_000 + self.nanos - nanoseconds
        return Timestamp(*divmod(total, 1_000_000_000))


@dataclass(frozen=True)
class Cursor:
    """The last shipped timestamp and how many shipped lines carried exactly it."""

    ts: Timestamp
    count: int

    def advance(self, ts: Timestamp) -> Cursor:
        """The cursor after a line stamped ``ts``: it never moves back (a line can follow one
        stamped after it; see follower.REREAD_OVERLAP_NS)."""
        if ts < self.ts:
            return self
        return Cursor(ts, self.count + 1) if ts == self.ts else Cursor(ts, 1)


def task_log(
    line: str,
    timestamp: str,
    stdtype: str,
    *,
    task_id: str,
    allocation_id: str,
    agent_id: str,
    container_id: str,
) -> dict[str, Any]:
    """One line as Determined's TaskLog; a leading `[rank=N] ` becomes `rankId` and is cut."""
    rank: int | None = None
    m = _RANK.match(line)
    if m:
        rank = int(m.group(1))
        line = line[m.end() :]
    lm = _LEVEL.match(line)
    level = f"LOG_LEVEL_{lm.group(1)}" if lm else "LOG_LEVEL_INFO"
    return {
        "taskId": task_id,
        "allocationId": allocation_id,
        "agentId": agent_id,
        "containerId": container_id,
        "rankId": rank,
        "log": line if line.endswith("\n") else line + "\n",
        "timestamp": timestamp,
        "level": level,
        "stdtype": stdtype,
        "source": "container",
    }


class CursorStore:
    """Per-container cursors as JSON files in `directory` (written atomically)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def load(self, key: str) -> Cursor | None:
        try:
            raw = json.loads(self._path(key).read_text())
            return Cursor(Timestamp(int(raw["seconds"]), int(raw["nanos"])), int(raw["count"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as e:
            logger.warning("log cursor %s unreadable (%s): shipping from the start", key, e)
            return None

    def save(self, key: str, cursor: Cursor) -> None:
        tmp = self._path(key).with_suffix(".tmp")
        data = {"seconds": cursor.ts.seconds, "nanos": cursor.ts.nanos, "count": cursor.count}
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self._path(key))

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)


@dataclass
class _Stream:
    """Shipping state of one container, shared by its follower and the shipper."""

    key: str
    pending: int = 0
    reader_done: bool = False
    shipped: Cursor | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass(frozen=True)
class _Entry:
    key: str
    ts: Timestamp
    body: dict[str, Any]


#: The longest a watched allocation's line waits before it is posted.
FLUSH_SECONDS = 0.25
#: The longest any other line waits (a log pattern's webhook or policy acts that much later).
QUIET_SECONDS = 5.0


class LogShipper:
    """Batches entries from all followers to the master. Thread-safe."""

    def __init__(
        self,
        client: MasterClient,
        cursors: CursorStore,
        batch_size: int = 1000,
        flush_seconds: float = FLUSH_SECONDS,
        quiet_seconds: float = QUIET_SECONDS,
        max_queue: int = 20000,
    ) -> None:
        self._client = client
        self._cursors = cursors
        self._batch_size = batch_size
        self._flush_seconds = flush_seconds
        self._quiet_seconds = max(quiet_seconds, flush_seconds)
        #: Entries, and None: a container's stream ended (post what is held now).
        self._queue: queue.Queue[_Entry | None] = queue.Queue(maxsize=max_queue)
        self._watched: frozenset[str] = frozenset()
        self._streams: dict[str, _Stream] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-shipper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def stream(self, key: str) -> _Stream:
        with self._lock:
            s = self._streams.get(key)
            if s is None:
                s = self._streams[key] = _Stream(key, shipped=self._cursors.load(key))
            return s

    def put(self, stream: _Stream, ts: Timestamp, body: dict[str, Any]) -> None:
        with stream.lock:
            stream.pending += 1
        self._queue.put(_Entry(stream.key, ts, body))  # blocks while the master is away

    def watch(self, allocation_ids: frozenset[str]) -> None:
        """The allocations whose logs someone reads now (the last heartbeat answer's)."""
        self._watched = allocation_ids

    def finished(self, stream: _Stream) -> None:
        """``stream``'s follower read its last line: what is held is posted now, as the end of
        its container waits for it."""
        with stream.lock:
            stream.reader_done = True
        with contextlib.suppress(queue.Full):  # full: a whole batch is posted at once anyway
            self._queue.put_nowait(None)

    def is_done(self, key: str) -> bool:
        """Whether the follower of `key` finished and every line it read has been shipped."""
        with self._lock:
            s = self._streams.get(key)
        if s is None:
            return False
        with s.lock:
            return s.reader_done and s.pending == 0

    def forget(self, key: str) -> None:
        with self._lock:
            self._streams.pop(key, None)
        self._cursors.delete(key)

    def _collect(self) -> list[_Entry]:
        """The next batch: once its first line has waited ``flush_seconds`` (a watched
        allocation's line among them: a watch that begins meanwhile counts) or
        ``quiet_seconds``, a stream ended, ``batch_size`` lines are held or the shipper stops."""
        batch: list[_Entry] = []
        allocations: set[str] = set()
        first = 0.0
        while len(batch) < self._batch_size:
            now = time.monotonic()
            if batch:
                watched = not allocations.isdisjoint(self._watched)
                due = first + (self._flush_seconds if watched else self._quiet_seconds)
                if now >= due or self._stop.is_set():
                    break
                # Woken at least every flush_seconds: a watch may begin while lines are held.
                timeout = min(due - now, self._flush_seconds)
            else:
                timeout = self._flush_seconds
            try:
                entry = self._queue.get(timeout=timeout)
            except queue.Empty:
                if not batch and self._stop.is_set():
                    return batch
                continue
            if entry is None:
                if batch:
                    break
                continue
            if not batch:
                first = time.monotonic()
            batch.append(entry)
            allocations.add(str(entry.body.get("allocationId")))
        return batch

    def _run(self) -> None:
        while True:
            batch = self._collect()
            if not batch:
                if self._stop.is_set():
                    return
                continue
            self._ship(batch)

    def _ship(self, batch: list[_Entry]) -> None:
        attempt = 0
        while True:
            delay = backoff(attempt, base=0.5, cap=10.0)
            attempt += 1
            try:
                self._client.post_logs([e.body for e in batch])
                break
            except MasterRejected as e:
                if e.status in (400, 413, 422):
                    # The master calls the batch itself invalid: retrying cannot help.
                    logger.error("master rejected %d log lines, dropping them: %s", len(batch), e)
                    break
                logger.debug("posting logs failed (%s), retrying in %.1fs", e, delay)
            except MasterUnavailable as e:
                logger.debug("posting logs failed (%s), retrying in %.1fs", e, delay)
            except Exception:
                # Anything else is retried too: an exception out of here would end the one
                # shipper thread, and every container's lines after it would be held for good.
                logger.exception("posting logs failed unexpectedly, retrying in %.1fs", delay)
            time.sleep(delay)
        touched: dict[str, _Stream] = {}
        for entry in batch:
            s = self.stream(entry.key)
            with s.lock:
                s.shipped = s.shipped.advance(entry.ts) if s.shipped else Cursor(entry.ts, 1)
                s.pending -= 1
            touched[entry.key] = s
        for key, s in touched.items():
            if s.shipped is not None:
                try:
                    self._cursors.save(key, s.shipped)
                except OSError as err:
                    logger.warning("cannot save log cursor for %s: %s", key, err)


def _read_exact(raw: Any, n: int) -> bytes | None:
    """`n` bytes from `raw`, or None at end of stream (a short read is not the end)."""
    data = b""
    while len(data) < n:
        chunk = raw.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frames(raw: Any) -> Iterator[tuple[str, bytes]]:
    """Yield (stdtype, bytes) frames of Docker's multiplexed (non-TTY) stream `raw`."""
    while True:
        header = _read_exact(raw, 8)
        if header is None:
            return
        kind, length = struct.unpack(">BxxxL", header)
        data = _read_exact(raw, length) if length else b""
        if data is None:
            return
        yield _STDTYPES.get(kind, "stdout"), data
