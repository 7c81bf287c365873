"""The master's recent log lines in memory, for ``det master logs`` (lost on restart, by design).

One buffer for all the master's processes: the front processes and the user API processes
are forked from the one that imported this module, and the ring lives in an anonymous shared
mapping with a process-shared lock, so whichever process answers ``det master logs`` sees the
lines every process logged, in the order they were logged. A line longer than a slot is cut
(its message ends with ``…``).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import mmap
import multiprocessing
import struct

from typing_extensions import TypedDict

SLOTS = 5000
SLOT_BYTES = 2048
# A slot: the entry's id, the payload's length, then the payload (the entry as JSON).
_SLOT_HEAD = struct.Struct("<QI")
_PAYLOAD = SLOT_BYTES - _SLOT_HEAD.size
_COUNTER = struct.Struct("<Q")  # the next id, at the start of the mapping
_BASE = _COUNTER.size
# A process that cannot take the lock this fast drops its line rather than stall its caller.
_LOCK_TIMEOUT = 1.0

# MAP_SHARED (mmap's default with no file): forked processes write to the same pages.
_RING = mmap.mmap(-1, _BASE + SLOTS * SLOT_BYTES)
_LOCK = multiprocessing.get_context("fork").Lock()
_COUNTER.pack_into(_RING, 0, 1)  # ids start at 1 and only grow: a follower asks for later ones


class _Stored(TypedDict):
    timestamp: str
    message: str
    level: str


class Entry(_Stored):
    """A buffered line, as Determined's ``v1LogEntry`` carries it."""

    id: int


def _encode(entry: _Stored) -> bytes:
    data = json.dumps(entry, ensure_ascii=False).encode()
    if len(data) <= _PAYLOAD:
        return data
    # Cut the message (whole characters) until the entry fits.
    message = entry["message"]
    over = len(data) - _PAYLOAD + len("…".encode()) + 8
    cut = message.encode()[: max(0, len(message.encode()) - over)].decode(errors="ignore")
    return _encode({**entry, "message": cut + "…"})


def append(timestamp: str, level: str, message: str) -> None:
    payload = _encode({"timestamp": timestamp, "message": message, "level": level})
    if not _LOCK.acquire(timeout=_LOCK_TIMEOUT):
        return
    try:
        (next_id,) = _COUNTER.unpack_from(_RING, 0)
        at = _BASE + (next_id % SLOTS) * SLOT_BYTES
        _SLOT_HEAD.pack_into(_RING, at, next_id, len(payload))
        _RING[at + _SLOT_HEAD.size : at + _SLOT_HEAD.size + len(payload)] = payload
        _COUNTER.pack_into(_RING, 0, next_id + 1)
    finally:
        _LOCK.release()


def recent(after: int = 0) -> list[Entry]:
    """The buffered entries (oldest first) whose id is greater than ``after``."""
    if not _LOCK.acquire(timeout=_LOCK_TIMEOUT):
        return []
    try:
        (next_id,) = _COUNTER.unpack_from(_RING, 0)
        raw = []
        for entry_id in range(max(after + 1, next_id - SLOTS, 1), next_id):
            at = _BASE + (entry_id % SLOTS) * SLOT_BYTES
            stored, length = _SLOT_HEAD.unpack_from(_RING, at)
            if stored == entry_id:
                raw.append((entry_id, _RING[at + _SLOT_HEAD.size : at + _SLOT_HEAD.size + length]))
    finally:
        _LOCK.release()
    out: list[Entry] = []
    for entry_id, payload in raw:
        entry: _Stored = json.loads(payload)
        out.append(
            {
                "id": entry_id,
                "timestamp": entry["timestamp"],
                "message": entry["message"],
                "level": entry["level"],
            }
        )
    return out


class BufferHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            timestamp = (
                dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat().replace("+00:00", "Z")
            )
            append(timestamp, "LOG_LEVEL_" + record.levelname, self.format(record))
        except Exception:  # a log line must never fail its caller
            self.handleError(record)
