"""AwsSpotNotice against a fake IMDSv2 server (real HTTP, token handshake)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest

from det.agent.notice_aws import AwsSpotNotice, MetadataError
from det.agent.preemption import load_notice_source
from tests.fakes.imds import FakeImds


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    with FakeImds(instance_id="i-0abc123") as fake:
        yield fake


def test_no_notice_until_triggered(imds: FakeImds) -> None:
    notice = AwsSpotNotice(imds.url)
    assert notice.check() is None
    when = imds.trigger_spot_interruption(dt.datetime(2026, 3, 1, 10, 2, tzinfo=dt.UTC))
    assert notice.check() == {"source": "aws-spot", "deadline": "2026-03-01T10:02:00Z"}
    assert when.year == 2026


def test_token_handshake_happens_once_and_is_reused(imds: FakeImds) -> None:
    notice = AwsSpotNotice(imds.url)
    for _ in range(3):
        notice.check()
    assert imds.token_requests == 1
    assert imds.requests.count("/latest/meta-data/spot/instance-action") == 3


def test_fetches_a_new_token_after_401(imds: FakeImds) -> None:
    notice = AwsSpotNotice(imds.url)
    assert notice.instance_id() == "i-0abc123"
    imds.revoke_tokens()
    assert notice.instance_id() == "i-0abc123"
    assert imds.token_requests == 2


def test_expired_token_is_renewed(imds: FakeImds) -> None:
    now = [0.0]
    notice = AwsSpotNotice(imds.url, token_ttl=600, clock=lambda: now[0])
    notice.check()
    now[0] = 500.0  # within the TTL less the minute of margin
    notice.check()
    assert imds.token_requests == 1
    now[0] = 541.0
    notice.check()
    assert imds.token_requests == 2


def test_unreachable_metadata_means_no_notice() -> None:
    notice = AwsSpotNotice("http://127.0.0.1:9", timeout=0.5)
    assert notice.check() is None
    with pytest.raises(MetadataError):
        notice.instance_id()


def test_unreadable_action_body_still_counts_as_a_notice(imds: FakeImds) -> None:
    imds.metadata["spot/instance-action"] = "not json"
    result = AwsSpotNotice(imds.url).check()
    assert result is not None and result["source"] == "aws-spot"
    deadline = dt.datetime.fromisoformat(result["deadline"].replace("Z", "+00:00"))
    assert dt.timedelta(0) < deadline - dt.datetime.now(dt.UTC) <= dt.timedelta(minutes=2)


def test_the_agent_loads_it_by_name(imds: FakeImds) -> None:
    source = load_notice_source("aws", imds.url)
    assert isinstance(source, AwsSpotNotice)
    imds.trigger_spot_interruption()
    assert source.check() is not None
