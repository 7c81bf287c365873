"""The serverless master's wake path through the platform model (tests/fakes/platform_model.py),
driven by the resources the Pulumi program renders and by the master's own wake-up scheduler
(det.master.wakeups, built from the rendered service environment) against moto: a sleeping
cluster wakes on a client's request and on a scheduled wake-up, and sleeps again. All in
simulated seconds; the latencies are printed beside the modelled delays."""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any

import boto3
import pytest
import yaml
from conftest import AWS, GCP

from det.common import api
from det.deploy.aws import program as aws_program
from det.deploy.aws import serverless as asl
from det.deploy.common import dryrun
from det.deploy.common import serverless as sl
from det.deploy.gcp import program as gcp_program
from det.master import wakeups
from det.master.config import parse_config
from tests.fakes import platform_model as pm
from tests.fakes.moto_server import MotoServer

SLEEP_S = asl.SLEEP_AFTER_MINUTES * 60


@pytest.fixture(scope="session")
def sl_aws_graph() -> dryrun.Rendered:
    cfg = dataclasses.replace(AWS, master="serverless", spot=False)
    return dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)


@pytest.fixture(scope="session")
def sl_gcp_graph() -> dryrun.Rendered:
    cfg = dataclasses.replace(GCP, master="serverless")
    return dryrun.render(lambda: gcp_program.build(cfg), gcp_program.MOCK_CALLS)


def _service_env(graph: dryrun.Rendered) -> dict[str, str]:
    (found,) = [r for r in graph.of_type(pm.TASKDEF) if r.name.endswith("-service")]
    (container,) = json.loads(found.inputs["containerDefinitions"])
    return {e["name"]: e["value"] for e in container["environment"]}


def _client_waits(platform: pm.AwsPlatform) -> tuple[int, float]:
    """A det client's call: tried, then tried again after each of the client's own wake
    delays (det.common.api.wake_delays) while the platform answers 503. (status, waited)."""
    start = platform.now
    status = platform.request()
    for delay in api.wake_delays(api.DEFAULT_WAKE_SECONDS):
        if status != 503:
            break
        platform.advance(platform.now + delay)
        status = platform.request()
    return status, platform.now - start


def _up(platform: pm.AwsPlatform) -> None:
    """`up`'s first task: ECS starts it at once, but the sleep alarm, breaching on no data
    from its creation, sets 0 within a minute; `up`'s wait for the URL is a client's call."""
    status, _ = _client_waits(platform)
    assert status == 200, platform.events


def _asleep(platform: pm.AwsPlatform) -> float:
    """Idle until no task runs; the simulated seconds it took."""
    start = platform.now
    platform.advance_until(lambda: not platform.active(), SLEEP_S + 10 * 60, step=5)
    return platform.now - start


def _delays(platform: pm.AwsPlatform) -> str:
    return (
        f"modelled: metric period {pm.PERIOD_S} s + readable {pm.METRIC_DELAY_S} s after it, "
        f"alarm every {pm.ALARM_EVERY_S} s, task start {pm.TASK_START_S} s (assumed), "
        f"health check {platform.healthy_after} s (rendered)"
    )


def test_a_sleeping_aws_master_wakes_on_a_client_request_and_sleeps_again(sl_aws_graph):
    platform = pm.AwsPlatform(sl_aws_graph)
    _up(platform)
    slept = _asleep(platform)
    assert platform.desired == 0 and not platform.active()
    platform.advance(platform.now + 3600)  # asleep it stays while nobody calls
    assert not platform.active()
    status, waited = _client_waits(platform)
    print(f"\nAWS: asleep {slept:.0f} s after the last request; a client's call answered after "
          f"{waited:.0f} simulated s ({_delays(platform)}); the client waits up to "
          f"{api.DEFAULT_WAKE_SECONDS:.0f} s")  # fmt: skip
    assert status == 200, platform.events[-10:]
    assert waited < api.DEFAULT_WAKE_SECONDS
    slept = _asleep(platform)
    assert SLEEP_S <= slept <= SLEEP_S + 4 * 60, slept


def test_the_rendered_wake_alarm_must_count_what_the_alb_counts_with_no_target(sl_aws_graph):
    """The model is strict: an alarm on RequestCount (what a sleeping ALB never counts) never
    wakes the service, whatever the clients do."""
    wrong = copy.deepcopy(sl_aws_graph)
    (alarm,) = [r for r in wrong.of_type(pm.ALARM) if r.name.endswith("-wake")]
    for query in alarm.inputs["metricQueries"]:
        if "metric" in query:
            query["metric"]["metricName"] = "RequestCount"
    platform = pm.AwsPlatform(wrong)
    for _ in range(3):  # `up`'s wait, then a client now and then: 503 from the ALB each time
        status, waited = _client_waits(platform)
        assert status == 503 and waited == sum(api.wake_delays(api.DEFAULT_WAKE_SECONDS))
        platform.advance(platform.now + 3600)
    assert not platform.active() and platform.desired == 0


class _Master:
    """What the master does when its task starts: one loop pass, which asks its wake-up
    scheduler (built from the rendered environment) for the next timer, once."""

    def __init__(self, scheduler: wakeups.Scheduler, wake_after: float) -> None:
        self.scheduler = scheduler
        self.wake_after = wake_after
        self.passes: list[float] = []
        self.asked: list[float] = []

    def on_running(self, now: float) -> None:
        self.passes.append(now)
        if not self.asked:
            when = now + self.wake_after
            self.asked.append(when)
            self.scheduler.schedule(
                wakeups.Wakeup(
                    cluster_id="c1", at=pm.at(when), url="https://unused/wakeup", token="t"
                )
            )


def _moto_service(graph: dryrun.Rendered, session: boto3.Session, region: str) -> dict[str, Any]:
    """What `up` made in the account: the ECS service (by its rendered names) and its
    scalable target (by the rendered target's inputs)."""
    (cluster,) = graph.of_type("aws:ecs/cluster:Cluster")
    service = pm._one(graph, pm.SERVICE)
    target = pm._one(graph, pm.TARGET).inputs
    ecs = session.client("ecs", region_name=region)
    ecs.create_cluster(clusterName=cluster.inputs["name"])
    ecs.create_service(
        cluster=cluster.inputs["name"], serviceName=service.inputs["name"], desiredCount=1
    )
    scaling = session.client("application-autoscaling", region_name=region)
    scaling.register_scalable_target(
        ServiceNamespace=target["serviceNamespace"],
        ResourceId=target["resourceId"],
        ScalableDimension=target["scalableDimension"],
        MinCapacity=target["minCapacity"],
        MaxCapacity=target["maxCapacity"],
    )
    return target


def test_a_scheduled_wakeup_wakes_a_sleeping_aws_master_which_sleeps_again(
    sl_aws_graph, session, moto: MotoServer
):
    env = _service_env(sl_aws_graph)
    config = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
    block = config.wakeups.model_copy(update={"endpoint_url": moto.endpoint})
    scheduler = wakeups.build(block)
    assert scheduler is not None
    if isinstance(scheduler, wakeups.ScheduledScalingScheduler):
        scheduler._now = lambda: pm.at(platform.now)
    region = str(config.wakeups.region)
    target = _moto_service(sl_aws_graph, session, region)
    scaling = session.client("application-autoscaling", region_name=region)

    def actions() -> list[dict[str, Any]]:
        listed = scaling.describe_scheduled_actions(
            ServiceNamespace=target["serviceNamespace"], ResourceId=target["resourceId"]
        )["ScheduledActions"]
        for action in listed:  # boto3 parses nothing of the schedule; keep it as sent
            action["Schedule"] = str(action["Schedule"])
        return listed

    wake_after = 40 * 60  # past the sleep: a timer owed while nothing runs
    master = _Master(scheduler, wake_after)
    platform = pm.AwsPlatform(sl_aws_graph, actions, master.on_running)
    _up(platform)
    assert master.asked, "the first pass asked for a wake-up"
    _asleep(platform)
    assert platform.now < master.asked[0] and len(master.passes) == 1

    platform.advance_until(lambda: len(master.passes) == 2, wake_after + 600, step=5)
    woke = master.passes[1] - master.asked[0]
    print(f"\nAWS: the scheduled wake-up ran the loop {woke:.0f} simulated s after its time "
          f"(task start {pm.TASK_START_S} s assumed; the minute's alarm tick runs scheduled "
          f"actions)")  # fmt: skip
    assert 0 <= woke <= pm.TASK_START_S + pm.ALARM_EVERY_S
    # No request comes: the hold ends, the sleep alarm (in ALARM all along) stops the task.
    _asleep(platform)
    assert platform.now - master.asked[0] <= config.wakeups.hold_seconds + 3 * 60
    # The master deleted nothing that had yet to run, and its actions name its service only.
    assert {a["ResourceId"] for a in actions()} == {target["resourceId"]}


def test_a_sleeping_cloud_run_master_wakes_on_a_request_and_on_a_scheduled_wakeup(sl_gcp_graph):
    url = str(sl_gcp_graph.outputs["master_url"])
    run = pm.CloudRunPlatform(sl_gcp_graph, url, "det-c1-master")
    status, held = run.request(url + "/api/v1/master")
    assert status == 200 and held == pm.CLOUD_RUN_COLD_START_S
    print(f"\nGCP: a request held {held:.0f} simulated s by a cold start (assumed "
          f"{pm.CLOUD_RUN_COLD_START_S} s; startup probe bound {run.startup_bound} s, request "
          f"timeout {run.timeout:.0f} s, rendered)")  # fmt: skip
    run.advance(run.now + pm.CLOUD_RUN_IDLE_S + 2 * pm.CLOUD_RUN_COLD_START_S)
    assert run.running() == 0

    env = {e["name"]: e.get("value") for e in _cloud_run_envs(sl_gcp_graph) if "value" in e}
    config = parse_config(yaml.safe_load(env.pop(sl.CONFIG_ENV)), env=env)
    scheduler = wakeups.build(config.wakeups)
    assert isinstance(scheduler, wakeups.CloudTasksScheduler), scheduler
    when = run.now + 600
    wakeup = wakeups.Wakeup(
        cluster_id="c1",
        at=pm.at(when),
        url=config.url().rstrip("/") + wakeups.WAKEUP_PATH,
        token=wakeups.token("s"),
    )
    run.enqueue(dict(scheduler.request_body(wakeup)))
    fired = run.advance(when + 1)
    assert fired == [(when, 200, pm.CLOUD_RUN_COLD_START_S)]
    assert run.running() == 1
    run.advance(run.now + pm.CLOUD_RUN_IDLE_S + 2 * pm.CLOUD_RUN_COLD_START_S)
    assert run.running() == 0


def _cloud_run_envs(graph: dryrun.Rendered) -> list[dict[str, Any]]:
    service = pm._one(graph, pm.RUN_SERVICE, "det-c1-master").inputs
    return list(service["template"]["containers"][0]["envs"])
