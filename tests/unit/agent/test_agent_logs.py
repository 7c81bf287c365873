from __future__ import annotations

import io
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from det.agent.logs import Cursor, CursorStore, LogShipper, Timestamp, read_frames, task_log
from det.agent.master_client import MasterClient
from tests.fakes.master import FakeMaster

META = {"task_id": "7.1", "allocation_id": "7.1.1", "agent_id": "a1", "container_id": "c1"}


def test_rank_prefix_becomes_rank_id_and_is_cut() -> None:
    entry = task_log("[rank=3] loss=0.5\n", "2026-01-01T00:00:00.5Z", "stdout", **META)
    assert entry["rankId"] == 3
    assert entry["log"] == "loss=0.5\n"
    assert entry == {
        "taskId": "7.1",
        "allocationId": "7.1.1",
        "agentId": "a1",
        "containerId": "c1",
        "rankId": 3,
        "log": "loss=0.5\n",
        "timestamp": "2026-01-01T00:00:00.5Z",
        "level": "LOG_LEVEL_INFO",
        "stdtype": "stdout",
        "source": "container",
    }


@pytest.mark.parametrize(
    ("line", "rank", "level"),
    [
        ("plain line", None, "LOG_LEVEL_INFO"),
        ("WARNING: disk low", None, "LOG_LEVEL_WARNING"),
        ("[rank=0] ERROR: boom", 0, "LOG_LEVEL_ERROR"),
        ("text [rank=2] in the middle", None, "LOG_LEVEL_INFO"),
    ],
)
def test_rank_and_level_parsing(line: str, rank: int | None, level: str) -> None:
    entry = task_log(line, "2026-01-01T00:00:00Z", "stderr", **META)
    assert (entry["rankId"], entry["level"], entry["stdtype"]) == (rank, level, "stderr")
    assert entry["log"].endswith("\n")


def test_timestamp_keeps_nanoseconds_and_orders() -> None:
    a = Timestamp.parse("2026-11-22T03:44:39.370146335Z")
    b = Timestamp.parse("2026-11-22T03:44:39.37014634Z")  # trailing zero trimmed by Docker
    assert a.nanos == 370146335 and b.nanos == 370146340
    assert a < b
    assert a.docker_since() == f"{a.seconds}.370146335"
    assert Timestamp.parse("1970-01-01T00:00:10Z") == Timestamp(10, 0)


def test_cursor_counts_lines_sharing_a_timestamp() -> None:
    t1, t2 = Timestamp(1, 5), Timestamp(1, 6)
    c = Cursor(t1, 1).advance(t1).advance(t1)
    assert c == Cursor(t1, 3)
    assert c.advance(t2) == Cursor(t2, 1)


def test_cursor_store_roundtrip_and_corruption(tmp_path: Path) -> None:
    store = CursorStore(tmp_path / "cursors")
    assert store.load("c1") is None
    store.save("c1", Cursor(Timestamp(5, 7), 2))
    assert CursorStore(tmp_path / "cursors").load("c1") == Cursor(Timestamp(5, 7), 2)
    (tmp_path / "cursors" / "c2.json").write_text("{not json")
    assert store.load("c2") is None
    store.delete("c1")
    assert store.load("c1") is None


def _frame(kind: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", kind, len(data)) + data


class _Dribble(io.RawIOBase):
    """Returns at most 3 bytes per read, like a slow socket."""

    def __init__(self, data: bytes) -> None:
        self._buf = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._buf.read(min(n, 3) if n > 0 else 3)


def test_read_frames_demultiplexes_stdout_and_stderr() -> None:
    raw = _frame(1, b"out line\n") + _frame(2, b"err line\n") + _frame(1, b"x" * 40)
    frames = list(read_frames(_Dribble(raw)))
    assert frames == [("stdout", b"out line\n"), ("stderr", b"err line\n"), ("stdout", b"x" * 40)]


def test_read_frames_stops_on_truncated_stream() -> None:
    raw = _frame(1, b"whole\n") + _frame(2, b"cut off")[:-2]
    assert list(read_frames(io.BytesIO(raw))) == [("stdout", b"whole\n")]


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token="t").start()
    yield m
    m.stop()


def test_shipper_retries_failed_posts_without_losing_lines(
    master: FakeMaster, tmp_path: Path
) -> None:
    master.fail_log_posts = 2
    store = CursorStore(tmp_path)
    shipper = LogShipper(MasterClient(master.url, "t"), store, batch_size=10, flush_seconds=0.05)
    shipper.start()
    stream = shipper.stream("c1")
    for i in range(25):
        ts = Timestamp(100 + i // 10, 0)
        shipper.put(stream, ts, task_log(f"line {i}", "t", "stdout", **META))
    shipper.finished(stream)
    master.wait_for(lambda: shipper.is_done("c1"), desc="all lines shipped")
    shipper.stop()
    assert master.log_lines("7.1.1") == [f"line {i}\n" for i in range(25)]
    assert master.fail_log_posts == 0
    # The cursor points at the last shipped line: 5 lines carried timestamp 102.0.
    assert store.load("c1") == Cursor(Timestamp(102, 0), 5)


def test_shipper_not_done_until_follower_finished(master: FakeMaster, tmp_path: Path) -> None:
    shipper = LogShipper(MasterClient(master.url, "t"), CursorStore(tmp_path), flush_seconds=0.05)
    assert not shipper.is_done("unknown")
    stream = shipper.stream("c1")
    assert not shipper.is_done("c1")
    with stream.lock:
        stream.reader_done = True
    assert shipper.is_done("c1")
    shipper.forget("c1")
    assert not shipper.is_done("c1")


def _line(shipper: LogShipper, stream: object, i: int, **meta: str) -> None:
    shipper.put(
        stream, Timestamp(100 + i, 0), task_log(f"line {i}", "t", "stdout", **{**META, **meta})
    )  # type: ignore[arg-type]


def test_lines_no_one_watches_are_held_and_posted_together(
    master: FakeMaster, tmp_path: Path
) -> None:
    """Lines that come one at a time (a trial's progress) are held for ``quiet_seconds`` and
    go in one post, not a post each; a container's end posts what is held at once."""
    shipper = LogShipper(
        MasterClient(master.url, "t"), CursorStore(tmp_path), flush_seconds=0.05, quiet_seconds=60
    )
    shipper.start()
    try:
        stream = shipper.stream("c1")
        for i in range(3):
            _line(shipper, stream, i)
            time.sleep(0.2)  # four flush periods apart: each went alone before
        assert master.log_posts == 0 and not shipper.is_done("c1")
        shipper.finished(stream)
        master.wait_for(lambda: shipper.is_done("c1"), desc="the held lines posted at the end")
        assert master.log_lines("7.1.1") == ["line 0\n", "line 1\n", "line 2\n"]
        assert master.log_posts == 1
    finally:
        shipper.stop()


def test_a_watched_allocations_lines_go_at_once_and_a_watch_frees_held_ones(
    master: FakeMaster, tmp_path: Path
) -> None:
    shipper = LogShipper(
        MasterClient(master.url, "t"), CursorStore(tmp_path), flush_seconds=0.05, quiet_seconds=60
    )
    shipper.start()
    try:
        held, watched = shipper.stream("c1"), shipper.stream("c2")
        _line(shipper, held, 0)
        time.sleep(0.3)
        assert master.log_posts == 0
        # Someone opens the first allocation's logs: what it holds goes now.
        shipper.watch(frozenset({"7.1.1"}))
        master.wait_for(lambda: master.log_lines("7.1.1"), desc="the held line, once watched")
        assert master.log_posts == 1
        # The second allocation, watched from its first line on.
        shipper.watch(frozenset({"7.1.1", "8.1.1"}))
        _line(shipper, watched, 1, allocation_id="8.1.1", container_id="c2")
        master.wait_for(lambda: master.log_lines("8.1.1"), desc="a watched allocation's line")
        assert master.log_lines("8.1.1") == ["line 1\n"] and master.log_posts == 2
        # No longer watched: held again.
        shipper.watch(frozenset())
        _line(shipper, watched, 2, allocation_id="8.1.1", container_id="c2")
        time.sleep(0.3)
        assert master.log_posts == 2
    finally:
        shipper.stop()
