"""The master's log buffer: one for all its processes, bounded, in logging order."""

from __future__ import annotations

import itertools
import logging
import os

from det.master import logbuffer


def _logger() -> logging.Logger:
    log = logging.getLogger("det.test.logbuffer")
    log.setLevel(logging.INFO)
    log.propagate = False
    if not log.handlers:
        handler = logbuffer.BufferHandler()
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        log.addHandler(handler)
    return log


def test_lines_logged_by_a_forked_process_are_seen_by_its_parent() -> None:
    log = _logger()
    log.info("parent before fork")
    start = logbuffer.recent()[-1]["id"]
    pid = os.fork()
    if pid == 0:  # a user API process, as server.serve forks them
        try:
            log.warning("child %d says hello", os.getpid())
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    log.error("parent after the child")
    lines = logbuffer.recent(after=start)
    assert [(e["level"], e["message"]) for e in lines] == [
        ("LOG_LEVEL_WARNING", f"det.test.logbuffer: child {pid} says hello"),
        ("LOG_LEVEL_ERROR", "det.test.logbuffer: parent after the child"),
    ]
    assert lines[0]["id"] == start + 1 and lines[1]["id"] == start + 2
    assert logbuffer.recent(after=lines[1]["id"]) == []


def test_the_ring_keeps_the_newest_lines_and_cuts_long_ones() -> None:
    log = _logger()
    for i in range(logbuffer.SLOTS + 10):
        log.info("line %d", i)
    log.info("é" * 5000)
    lines = logbuffer.recent()
    assert len(lines) == logbuffer.SLOTS
    assert lines[-2]["message"].endswith(f"line {logbuffer.SLOTS + 9}")
    assert all(b["id"] - a["id"] == 1 for a, b in itertools.pairwise(lines))
    long = lines[-1]["message"]
    assert long.startswith("det.test.logbuffer: éé") and long.endswith("é…")
    assert 500 < len(long.encode()) < logbuffer.SLOT_BYTES
