"""The EventBridge Scheduler wake-up (det.master.wakeups) against moto in server mode: one
one-time schedule per wake-up, asking twice is one schedule, its target carries the wake-up."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest

from det.master import wakeups

pytestmark = pytest.mark.integration


def test_one_schedule_per_wakeup_with_the_wakeup_in_its_input(aws_endpoint: str) -> None:
    client = boto3.client("scheduler", endpoint_url=aws_endpoint, region_name="us-east-1")
    sched = wakeups.EventBridgeScheduler(
        "arn:aws:events:us-east-1:123456789012:event-bus/det-wakeups",
        "arn:aws:iam::123456789012:role/det-wakeups",
        region="us-east-1",
        endpoint_url=aws_endpoint,
    )
    at = wakeups.at_second(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    w = wakeups.Wakeup("c1", at, "https://m.example/api/v1/master/wakeup", "tok")
    sched.schedule(w)
    sched.schedule(w)  # ConflictException: already asked for
    names = [s["Name"] for s in client.list_schedules()["Schedules"]]
    assert names.count(w.name) == 1
    got = client.get_schedule(Name=w.name, GroupName="default")
    assert got["ScheduleExpression"] == f"at({at:%Y-%m-%dT%H:%M:%S})"
    assert json.loads(got["Target"]["Input"]) == {"name": w.name, "url": w.url, "token": "tok"}


def test_a_refused_schedule_is_a_wakeup_error(aws_endpoint: str) -> None:
    sched = wakeups.EventBridgeScheduler(
        "arn:bus", "arn:role", group="no-such-group", region="us-east-1", endpoint_url=aws_endpoint
    )
    w = wakeups.Wakeup("c1", wakeups.at_second(dt.datetime.now(dt.UTC)), "https://m/w", "t")
    with pytest.raises(wakeups.WakeupError, match="EventBridge Scheduler no-such-group"):
        sched.schedule(w)


def test_the_put_metric_data_target_is_scheduled_with_the_datapoint(aws_endpoint: str) -> None:
    client = boto3.client("scheduler", endpoint_url=aws_endpoint, region_name="us-east-1")
    sched = wakeups.EventBridgeScheduler(
        "arn:aws:scheduler:::aws-sdk:cloudwatch:putMetricData",
        "arn:aws:iam::123456789012:role/det-wakeups",
        region="us-east-1",
        endpoint_url=aws_endpoint,
        metric_namespace="det/c1",
    )
    at = wakeups.at_second(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    w = wakeups.Wakeup("c1", at, "https://m.example/api/v1/master/wakeup", "tok")
    sched.schedule(w)
    got = client.get_schedule(Name=w.name, GroupName="default")
    assert got["Target"]["Arn"].endswith(":cloudwatch:putMetricData")
    assert json.loads(got["Target"]["Input"])["Namespace"] == "det/c1"
