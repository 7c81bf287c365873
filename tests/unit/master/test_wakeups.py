"""Wake-up schedulers (det.master.wakeups) against the fake platform scheduler: det's ``http``
form and Cloud Tasks' REST form are called for real over HTTP, the fake makes the wake-up call
at its time, and asking twice for one time gives one wake-up."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import time
from typing import Any

import pytest
import requests

from det.master import wakeups
from det.master.config import WakeupsConfig
from tests.fakes.local_http import LocalHttpFake
from tests.fakes.wakeup_scheduler import FakeWakeupScheduler

CLUSTER = "0b6a3c1e-5f2d-4e7a-9c1b-2d3e4f5a6b7c"


class Target(LocalHttpFake):
    """Stands for the master's wake-up URL: records the token header of each call."""

    def __init__(self) -> None:
        self.tokens: list[str | None] = []

    def handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.server.fake.tokens.append(self.headers.get(wakeups.TOKEN_HEADER))  # type: ignore[attr-defined]
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler


def soon(seconds: float = 1.0) -> dt.datetime:
    return wakeups.at_second(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds))


def wait(pred: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_token_is_derived_from_the_cluster_secret_and_checked_in_constant_time() -> None:
    t = wakeups.token("secret-a")
    assert t == wakeups.token("secret-a") != wakeups.token("secret-b")
    assert "secret-a" not in t and len(t) == 64
    assert wakeups.check_token("secret-a", t)
    assert not wakeups.check_token("secret-a", wakeups.token("secret-b"))
    assert not wakeups.check_token("secret-a", None)
    assert not wakeups.check_token("secret-a", "")


def test_a_wakeup_is_named_by_cluster_and_second_and_never_comes_early() -> None:
    at = wakeups.at_second(dt.datetime(2026, 5, 1, 10, 0, 0, 1, tzinfo=dt.UTC))
    assert at == dt.datetime(2026, 5, 1, 10, 0, 1, tzinfo=dt.UTC)
    w = wakeups.Wakeup(CLUSTER, at, "https://m.example/api/v1/master/wakeup", "t")
    assert w.name == f"det-{CLUSTER}-{int(at.timestamp())}"
    assert len(w.name) <= 64 and w.at_text() == "2026-05-01T10:00:01Z"


def test_http_scheduler_calls_back_at_the_time_once_per_name() -> None:
    with Target() as target, FakeWakeupScheduler() as fake:
        sched = wakeups.HttpScheduler(fake.url)
        w = wakeups.Wakeup(CLUSTER, soon(), target.url + wakeups.WAKEUP_PATH, "tok")
        sched.schedule(w)
        sched.schedule(w)  # asked again (another master process): still one
        assert len(fake.asked) == 1 and fake.asked[0].at == w.at
        wait(lambda: fake.fired)
        assert fake.fired == [(w.name, 200)]
        assert target.tokens == ["tok"]
        assert dt.datetime.now(dt.UTC) >= w.at


def test_http_scheduler_unreachable_is_a_wakeup_error() -> None:
    with FakeWakeupScheduler() as fake:
        url = fake.url
    with pytest.raises(wakeups.WakeupError, match="wake-up scheduler"):
        wakeups.HttpScheduler(url).schedule(wakeups.Wakeup(CLUSTER, soon(), "http://x", "t"))


def test_cloud_tasks_scheduler_creates_an_http_task_through_the_rest_api() -> None:
    queue = "projects/p1/locations/europe-west1/queues/det-wakeups"
    with Target() as target, FakeWakeupScheduler() as fake:
        # A plain requests session: google-auth's AuthorizedSession is one, with credentials.
        sched = wakeups.CloudTasksScheduler(
            queue, endpoint_url=fake.url, session=requests.Session()
        )
        w = wakeups.Wakeup(CLUSTER, soon(), target.url + wakeups.WAKEUP_PATH, "tok2")
        sched.schedule(w)
        sched.schedule(w)  # 409 ALREADY_EXISTS: success
        (asked,) = fake.asked
        assert asked.name == f"{queue}/tasks/{w.name}"
        assert asked.method == "POST" and asked.body == b"{}"
        wait(lambda: fake.fired)
        assert target.tokens == ["tok2"]


def test_eventbridge_request_puts_the_wakeup_on_the_bus_once() -> None:
    sched = wakeups.EventBridgeScheduler(
        "arn:aws:events:us-east-1:123456789012:event-bus/det", "arn:aws:iam::123456789012:role/r"
    )
    w = wakeups.Wakeup(
        CLUSTER, dt.datetime(2026, 5, 1, 10, 0, 1, tzinfo=dt.UTC), "https://m/w", "t"
    )
    req = sched.request(w)
    assert req["ScheduleExpression"] == "at(2026-05-01T10:00:01)"
    assert req["ScheduleExpressionTimezone"] == "UTC"
    assert req["ActionAfterCompletion"] == "DELETE"
    assert req["Target"]["EventBridgeParameters"] == {
        "DetailType": wakeups.EVENT_DETAIL_TYPE,
        "Source": wakeups.EVENT_SOURCE,
    }


@pytest.mark.parametrize(
    ("block", "kind"),
    [
        ({"type": "none"}, type(None)),
        ({"type": "http", "url": "http://127.0.0.1:1/"}, wakeups.HttpScheduler),
        (
            {"type": "cloud_tasks", "queue": "projects/p/locations/l/queues/q"},
            wakeups.CloudTasksScheduler,
        ),
        (
            {"type": "eventbridge", "target_arn": "arn:bus", "role_arn": "arn:role"},
            wakeups.EventBridgeScheduler,
        ),
    ],
)
def test_build_picks_the_configured_scheduler_without_importing_an_sdk(
    block: dict[str, Any], kind: type
) -> None:
    assert isinstance(wakeups.build(WakeupsConfig.model_validate(block)), kind)


def test_fired_calls_run_concurrently() -> None:
    # Two wake-ups at the same second both fire (names differ by cluster).
    with Target() as target, FakeWakeupScheduler() as fake:
        sched = wakeups.HttpScheduler(fake.url)
        at = soon()
        for cluster in ("a", "b"):
            sched.schedule(wakeups.Wakeup(cluster, at, target.url, cluster))
        wait(lambda: len(fake.fired) == 2)
        assert sorted(t or "" for t in target.tokens) == ["a", "b"]


def test_eventbridge_with_the_put_metric_data_target_sends_a_datapoint() -> None:
    sched = wakeups.EventBridgeScheduler(
        "arn:aws:scheduler:::aws-sdk:cloudwatch:putMetricData",
        "arn:aws:iam::123456789012:role/r",
        metric_namespace="det/c1",
    )
    w = wakeups.Wakeup(
        CLUSTER, dt.datetime(2026, 5, 1, 10, 0, 1, tzinfo=dt.UTC), "https://m/w", "t"
    )
    target = sched.request(w)["Target"]
    assert json.loads(target["Input"]) == {
        "Namespace": "det/c1",
        "MetricData": [{"MetricName": "WakeUp", "Value": 1, "Unit": "Count"}],
    }
    assert "EventBridgeParameters" not in target and "secret-token" not in target["Input"]


def test_cloud_tasks_carries_an_oidc_token_of_the_named_account() -> None:
    sched = wakeups.CloudTasksScheduler(
        "projects/p/locations/l/queues/q", service_account_email="waker@p.iam.gserviceaccount.com"
    )
    w = wakeups.Wakeup(CLUSTER, soon(), "https://det-c-1.a.run.app/api/v1/master/wakeup", "t")
    oidc = sched.request_body(w)["task"]["httpRequest"]["oidcToken"]
    assert oidc == {
        "serviceAccountEmail": "waker@p.iam.gserviceaccount.com",
        "audience": "https://det-c-1.a.run.app",
    }
    plain = wakeups.CloudTasksScheduler("projects/p/locations/l/queues/q").request_body(w)
    assert "oidcToken" not in plain["task"]["httpRequest"]
