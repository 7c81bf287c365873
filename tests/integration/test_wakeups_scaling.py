"""The Application Auto Scaling wake-up (det.master.wakeups.ScheduledScalingScheduler, an ECS
master's) against moto in server mode: two one-time scheduled actions per wake-up (minimum 1 at
the time, 0 after the hold) on the service's scalable target, asking twice is harmless, past
actions are deleted, and a refusal is a WakeupError."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import boto3
import pytest

from det.master import wakeups
from tests.ports import free_port

pytestmark = pytest.mark.integration

REGION = "us-east-1"


def _service(endpoint: str) -> tuple[str, Any]:
    """A fresh ECS service with a scalable target (what `up` makes); its resource id."""
    name = f"det-{uuid.uuid4().hex[:8]}"
    ecs = boto3.client("ecs", endpoint_url=endpoint, region_name=REGION)
    ecs.create_cluster(clusterName=name)
    ecs.create_service(cluster=name, serviceName=f"{name}-master", desiredCount=1)
    resource_id = f"service/{name}/{name}-master"
    scaling = boto3.client("application-autoscaling", endpoint_url=endpoint, region_name=REGION)
    scaling.register_scalable_target(
        ServiceNamespace="ecs",
        ResourceId=resource_id,
        ScalableDimension="ecs:service:DesiredCount",
        MinCapacity=0,
        MaxCapacity=2,
    )
    return resource_id, scaling


def _actions(scaling: Any, resource_id: str) -> dict[str, tuple[str, dict[str, int]]]:
    listed = scaling.describe_scheduled_actions(ServiceNamespace="ecs", ResourceId=resource_id)
    return {
        a["ScheduledActionName"]: (a["Schedule"], a["ScalableTargetAction"])
        for a in listed["ScheduledActions"]
    }


def test_a_wakeup_raises_the_minimum_at_its_time_and_lowers_it_after_the_hold(
    aws_endpoint: str,
) -> None:
    resource_id, scaling = _service(aws_endpoint)
    sched = wakeups.ScheduledScalingScheduler(
        resource_id, dt.timedelta(minutes=15), region=REGION, endpoint_url=aws_endpoint
    )
    at = wakeups.at_second(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5))
    w = wakeups.Wakeup("c1", at, "https://m.example/api/v1/master/wakeup", "tok")
    sched.schedule(w)
    sched.schedule(w)  # the same names: replaced, not added
    rest = at + dt.timedelta(minutes=15)
    assert _actions(scaling, resource_id) == {
        w.name: (f"at({at:%Y-%m-%dT%H:%M:%S})", {"MinCapacity": 1}),
        f"{w.name}-rest": (f"at({rest:%Y-%m-%dT%H:%M:%S})", {"MinCapacity": 0}),
    }


def test_actions_that_ran_over_an_hour_ago_are_deleted(aws_endpoint: str) -> None:
    resource_id, scaling = _service(aws_endpoint)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    sched = wakeups.ScheduledScalingScheduler(
        resource_id, dt.timedelta(minutes=15), region=REGION, endpoint_url=aws_endpoint,
        now=lambda: now,
    )  # fmt: skip
    old = wakeups.Wakeup("c1", now - dt.timedelta(hours=3), "https://m/w", "t")
    recent = wakeups.Wakeup("c1", now - dt.timedelta(minutes=50), "https://m/w", "t")
    for w in (old, recent):
        for request in sched.requests(w):
            scaling.put_scheduled_action(**request)
    other = dict(sched.requests(old)[0], ScheduledActionName="someone-elses")
    scaling.put_scheduled_action(**other)
    new = wakeups.Wakeup("c1", now + dt.timedelta(minutes=5), "https://m/w", "t")
    sched.schedule(new)
    # The recent wake's rest (10 minutes from now) and its start (50 minutes ago) stay.
    assert set(_actions(scaling, resource_id)) == {
        "someone-elses",
        recent.name,
        f"{recent.name}-rest",
        new.name,
        f"{new.name}-rest",
    }


def test_an_unreachable_api_is_a_wakeup_error() -> None:
    closed = free_port()  # nothing listens there
    sched = wakeups.ScheduledScalingScheduler(
        "service/no-such/service", dt.timedelta(minutes=15), region=REGION,
        endpoint_url=f"http://127.0.0.1:{closed}",
    )  # fmt: skip
    w = wakeups.Wakeup("c1", wakeups.at_second(dt.datetime.now(dt.UTC)), "https://m/w", "t")
    with pytest.raises(wakeups.WakeupError, match="Application Auto Scaling service/no-such"):
        sched.schedule(w)
