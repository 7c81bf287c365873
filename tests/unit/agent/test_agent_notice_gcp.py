"""GcpPreemptionNotice against a fake GCE metadata server (real HTTP, wait_for_change)."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator

import pytest

from det.agent.notice_gcp import GcpPreemptionNotice, MetadataError
from det.agent.preemption import NoticePoller, load_notice_source
from tests.fakes.gce_metadata import FakeGceMetadata

NOW = dt.datetime(2026, 3, 1, 10, 0, 0, tzinfo=dt.UTC)


@pytest.fixture
def metadata() -> Iterator[FakeGceMetadata]:
    with FakeGceMetadata(instance_name="det-agent-abcd1234") as fake:
        yield fake


def notice_for(fake: FakeGceMetadata, sleeps: list[float] | None = None) -> GcpPreemptionNotice:
    return GcpPreemptionNotice(
        fake.url, now=lambda: NOW, sleep=(sleeps if sleeps is not None else []).append
    )


def test_no_notice_until_preempted(metadata: FakeGceMetadata) -> None:
    notice = notice_for(metadata)
    assert notice.check() is None
    metadata.trigger_preemption()
    assert notice.check() == {"source": "gcp-preemption", "deadline": "2026-03-01T10:00:30Z"}


def test_sends_the_metadata_flavor_header(metadata: FakeGceMetadata) -> None:
    notice = notice_for(metadata)
    metadata.trigger_preemption()
    assert notice.check() is not None  # the fake answers 403 without the header
    assert metadata.requests == ["/computeMetadata/v1/instance/preempted"]


def test_instance_name_is_the_agent_id(metadata: FakeGceMetadata) -> None:
    assert notice_for(metadata).instance_name() == "det-agent-abcd1234"


def test_unreachable_metadata_is_no_notice_but_instance_name_fails() -> None:
    notice = GcpPreemptionNotice("http://127.0.0.1:9", timeout=0.5)
    assert notice.check() is None
    with pytest.raises(MetadataError):
        notice.instance_name()


def test_watch_hangs_until_the_notice_is_published(metadata: FakeGceMetadata) -> None:
    notice = notice_for(metadata)
    timer = threading.Timer(0.3, metadata.trigger_preemption)
    timer.start()
    try:
        got = notice.watch(timeout_sec=30, max_seconds=20)
    finally:
        timer.cancel()
    assert got == {"source": "gcp-preemption", "deadline": "2026-03-01T10:00:30Z"}
    # One plain read for the ETag, then hanging reads that carry it.
    assert metadata.requests[0] == "/computeMetadata/v1/instance/preempted"
    waits = metadata.requests[1:]
    assert waits and all("wait_for_change=true" in r and "last_etag=" in r for r in waits)
    assert len(waits) <= 2  # it hung rather than polled


def test_watch_retries_after_503(metadata: FakeGceMetadata) -> None:
    sleeps: list[float] = []
    notice = notice_for(metadata, sleeps)
    metadata.fail_next(2)
    metadata.trigger_preemption()
    assert notice.watch(timeout_sec=5, max_seconds=20) is not None
    assert sleeps == [1.0, 1.0]


def test_watch_returns_none_when_stopped(metadata: FakeGceMetadata) -> None:
    notice = notice_for(metadata)
    stop = threading.Event()
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(notice.watch(timeout_sec=1, stop=stop)))
    thread.start()
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and result == [None]


def test_agent_poller_loads_and_keeps_the_gcp_notice(metadata: FakeGceMetadata) -> None:
    source = load_notice_source("gcp", metadata.url)
    assert isinstance(source, GcpPreemptionNotice)
    poller = NoticePoller(source, interval=60)
    poller.poll_once()
    assert poller.current() is None
    metadata.trigger_preemption()
    poller.poll_once()
    metadata.set("instance/preempted", "FALSE")
    poller.poll_once()
    current = poller.current()
    assert current is not None and current["source"] == "gcp-preemption"
