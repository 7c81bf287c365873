"""The log follower of a container that has already stopped: a read that cannot be opened or
breaks is tried again from the last line read, and the follower ends once a read got to the end
of the log and a last read after it (Docker can end a quick container's stream before its
logger wrote the last lines) found nothing more. The Docker engine is a stand-in here (its HTTP API's log stream, multiplexed
frames with timestamps); tests/integration/test_agent_docker.py follows real containers."""

from __future__ import annotations

import io
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import urllib3

from det.agent import follower as follower_module
from det.agent.follower import LogFollower
from det.agent.logs import CursorStore, LogShipper, Timestamp
from det.agent.master_client import MasterClient
from tests.fakes.master import FakeMaster

META = {"task_id": "7.1", "allocation_id": "7.1.1", "agent_id": "a1", "container_id": "c1"}
LINES = [(f"2026-11-25T10:00:0{i // 2}.00000000{i % 2}Z", f"line {i}\n") for i in range(6)]


def _frame(text: str, stream: int = 1) -> bytes:
    data = text.encode()
    return struct.pack(">BxxxL", stream, len(data)) + data


class _Breaking(io.RawIOBase):
    """A stream that serves ``data`` and then fails like a dropped connection."""

    def __init__(self, data: bytes, error: Exception | None = None) -> None:
        self._buf = io.BytesIO(data)
        self._error = error or OSError("connection reset")

    def read(self, n: int = -1) -> bytes:
        chunk = self._buf.read(n)
        if not chunk:
            raise self._error
        return chunk


class _Quiet(io.RawIOBase):
    """A follow stream that serves ``data`` and then stays open with nothing more, as Docker's
    did for a container that had exited: a read with a timeout times out (as a socket with one
    does), a read without one waits until ``release`` is set."""

    def __init__(self, data: bytes, read_timeout: float | None, release: threading.Event) -> None:
        self._buf = io.BytesIO(data)
        self._timeout = read_timeout
        self._release = release

    def read(self, n: int = -1) -> bytes:
        chunk = self._buf.read(n)
        if chunk:
            return chunk
        if self._timeout is None:
            self._release.wait()
            return b""
        self._release.wait(self._timeout)
        raise urllib3.exceptions.ReadTimeoutError(None, "/logs", "Read timed out.")  # type: ignore[arg-type]


class _Response:
    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def raise_for_status(self) -> None:
        pass

    def close(self) -> None:
        pass


class _Engine:
    """The parts of docker-py's client the follower uses, for one exited container whose log
    holds LINES. ``script`` says what each open of the log stream does: ``fail`` (cannot
    open), ``break:N`` (N lines, then the connection drops), ``end:N`` (N lines, then the
    stream ends), ``quiet:N`` (N lines, then nothing, the stream left open: ``_Quiet``) or
    ``all``."""

    def __init__(self, script: list[str], log: list[tuple[str, str, int]] | None = None) -> None:
        self.script = script
        #: (stamp, text, stream) in the order the log file holds them
        self.log = log if log is not None else [(ts, text, 1) for ts, text in LINES]
        self.sinces: list[str | None] = []
        self.follows: list[int] = []
        self.release = threading.Event()
        self.api = self
        self.base_url = "http+docker://engine"
        self.api_version = "1.45"
        self.containers = self

    def get(
        self, url: str, *, params: dict[str, Any] | None = None, timeout: Any = None, **_: Any
    ) -> Any:
        if params is None:  # containers.get(id): the container has exited
            return type("C", (), {"status": "exited"})()
        since = params.get("since")
        self.sinces.append(since)
        self.follows.append(params["follow"])
        step = self.script.pop(0) if self.script else "all"
        if step == "fail":
            raise requests.ConnectionError("engine busy")
        lines = [
            (ts, text, stream)
            for ts, text, stream in self.log
            if since is None or Timestamp.parse(ts).docker_since() >= since
        ]
        if step.startswith("break:"):
            n = int(step.partition(":")[2])
            return _Response(_Breaking(b"".join(_frame(f"{t} {x}", k) for t, x, k in lines[:n])))
        if step.startswith("drop:"):  # as urllib3 reports a connection dropped mid-response
            n = int(step.partition(":")[2])
            error = urllib3.exceptions.ProtocolError("Connection broken: reset by peer")
            data = b"".join(_frame(f"{t} {x}", k) for t, x, k in lines[:n])
            return _Response(_Breaking(data, error))
        if step.startswith("quiet:"):
            n = int(step.partition(":")[2])
            read_timeout = timeout[1] if isinstance(timeout, tuple) else timeout
            data = b"".join(_frame(f"{t} {x}", k) for t, x, k in lines[:n])
            return _Response(_Quiet(data, read_timeout, self.release))
        if step.startswith("end:"):  # the stream ends before the logger wrote the rest
            n = int(step.partition(":")[2])
            return _Response(io.BytesIO(b"".join(_frame(f"{t} {x}", k) for t, x, k in lines[:n])))
        return _Response(io.BytesIO(b"".join(_frame(f"{t} {x}", k) for t, x, k in lines)))


def _reread(i: int) -> str:
    """Where a re-read after line ``i`` starts: REREAD_OVERLAP_NS before its stamp."""
    ts = Timestamp.parse(LINES[i][0])
    return ts.before(follower_module.REREAD_OVERLAP_NS).docker_since()


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token="t").start()
    yield m
    m.stop()


def _follow(master: FakeMaster, tmp_path: Path, engine: _Engine) -> LogFollower:
    shipper = LogShipper(MasterClient(master.url, "t"), CursorStore(tmp_path), flush_seconds=0.05)
    shipper.start()
    f = LogFollower(engine, shipper, "docker-1", "c1", META)
    f.start()
    assert f.stopped.wait(30), "the follower of a stopped container never ended"
    master.wait_for(lambda: shipper.is_done("c1"), desc="every line read shipped")
    shipper.stop()
    return f


@pytest.fixture(autouse=True)
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follower_module.time, "sleep", lambda s: None)


def test_a_stopped_container_whose_first_read_fails_ships_every_line(
    master: FakeMaster, tmp_path: Path
) -> None:
    engine = _Engine(["fail", "fail"])
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == [text for _, text in LINES]
    # Two failed opens, the whole log, then the sweep after its last line.
    assert engine.sinces == [None, None, None, _reread(5)]


def test_a_broken_read_resumes_after_the_last_line_read(master: FakeMaster, tmp_path: Path) -> None:
    engine = _Engine(["break:3"])
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == [text for _, text in LINES]  # each once, in order
    assert engine.sinces == [None, _reread(2), _reread(5)]


def test_a_stream_dropped_as_urllib3_reports_it_resumes_after_the_last_line_read(
    master: FakeMaster, tmp_path: Path
) -> None:
    engine = _Engine(["drop:3"])
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == [text for _, text in LINES]  # each once, in order
    assert engine.sinces == [None, _reread(2), _reread(5)]


def test_lines_written_after_the_stream_ended_are_read_by_the_sweep(
    master: FakeMaster, tmp_path: Path
) -> None:
    engine = _Engine(["end:4"])
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == [text for _, text in LINES]
    assert engine.sinces == [None, _reread(3)]


def test_a_log_that_never_opens_is_given_up_after_a_few_tries(
    master: FakeMaster, tmp_path: Path
) -> None:
    engine = _Engine(["fail"] * 100)
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == []
    assert len(engine.sinces) == follower_module.STOPPED_RETRIES + 1


def test_a_follow_stream_left_open_after_the_exit_is_read_to_its_end_without_following(
    master: FakeMaster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Docker kept the follow stream of an exited container open after its first lines (issue
    # 44: a test waited 45 s for lines of a container that had exited at once, under load).
    monkeypatch.setattr(follower_module, "IDLE_SECONDS", 0.2, raising=False)
    engine = _Engine(["quiet:3"])
    shipper = LogShipper(MasterClient(master.url, "t"), CursorStore(tmp_path), flush_seconds=0.05)
    shipper.start()
    f = LogFollower(engine, shipper, "docker-1", "c1", META)
    f.start()
    try:
        assert f.stopped.wait(10), "the follower waited on the open stream of a stopped container"
        master.wait_for(lambda: shipper.is_done("c1"), desc="every line read shipped")
    finally:
        engine.release.set()
        f.join(10)
        shipper.stop()
    assert master.log_lines("7.1.1") == [text for _, text in LINES]  # each once, in order
    # Followed first; once the container was seen stopped, read from the last line read to the
    # end of the log, and swept, without following.
    assert engine.sinces == [None, _reread(2), _reread(5)]
    assert engine.follows == [1, 0, 0]


# Docker's stdout and stderr copiers each stamp a line when they read it and then append it to
# the log in whichever order they take its lock: the last stderr line, stamped before the
# stdout line written ahead of it (issue 44: a container's "to stderr" line lost under load).
SKEWED = [
    ("2026-11-25T10:00:00.000000001Z", "first\n", 1),
    ("2026-11-25T10:00:00.300000000Z", "ranked line\n", 1),
    ("2026-11-25T10:00:00.200000000Z", "to stderr\n", 2),
]


def test_a_line_stamped_before_the_line_ahead_of_it_is_shipped(
    master: FakeMaster, tmp_path: Path
) -> None:
    engine = _Engine(["all"], log=SKEWED)
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == ["first\n", "ranked line\n", "to stderr\n"]
    assert [e["stdtype"] for e in master.logs] == ["stdout", "stdout", "stderr"]


def test_a_read_broken_before_a_line_stamped_earlier_gets_it_once(
    master: FakeMaster, tmp_path: Path
) -> None:
    # The stream broke after "ranked line"; the line stamped before it was appended after the
    # break: the next read starts early enough to get it, and ships nothing twice.
    engine = _Engine(["break:2"], log=SKEWED)
    _follow(master, tmp_path, engine)
    assert master.log_lines("7.1.1") == ["first\n", "ranked line\n", "to stderr\n"]
