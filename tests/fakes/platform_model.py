"""A model of the serverless platforms' wake path, as strict as the clouds, in simulated time.

It reads the resources the Pulumi program renders (``det.deploy.common.dryrun.Rendered``) and
acts on them as each provider documents, so a wrong metric, threshold, policy or scheduler
target in the program fails here. Nothing sleeps: the clock is a number of simulated seconds
that :meth:`AwsPlatform.advance` moves from event to event.

AWS (ECS Fargate behind an ALB, Application Auto Scaling, CloudWatch alarms):

* The ALB answers 503 itself while its target group has no registered target, and counts that
  as ``HTTPCode_ELB_503_Count``; ``RequestCount`` only when it could choose a target (a running
  task). Metrics are per 60 s period, readable :data:`METRIC_DELAY_S` after the period ends;
  no request in a period means no datapoint.
* Alarms evaluate once a minute over their rendered queries (metrics, ``FILL``, sums), threshold,
  comparison, evaluation periods, datapoints to alarm and missing-data treatment. An alarm's
  Application Auto Scaling action runs on entering ALARM and again every minute it stays there
  (CloudWatch: "Except for Auto Scaling actions, the actions happen only on state transitions").
* A step scaling policy (by the ARN the alarm names) applies its step adjustment for the
  alarm's value less its threshold; ``ExactCapacity`` only; the result is clamped to the
  scalable target's bounds. Scheduled actions (read from Application Auto Scaling: moto, where
  the master put them) set the bounds at their time and scale into them.
* The service starts a task :data:`TASK_START_S` after its desired count rises; the task is
  registered when running and healthy after the rendered health check's
  ``interval * healthy_threshold``; a task over the desired count stops at once.

GCP (Cloud Run, Cloud Tasks): a request starts an instance when none runs (up to the rendered
maximum) and is held until it is ready, :data:`CLOUD_RUN_COLD_START_S` later, unless that is
past the rendered startup probe's bound or request timeout; an instance stops after
:data:`CLOUD_RUN_IDLE_S` without requests. A Cloud Tasks task is a request at its time.

Figures the providers do not publish (metric delay, task start, cold start) are assumptions,
stated beside each constant and in docs/deploy.md ("Waking the master").
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from det.deploy.common import dryrun

EPOCH = dt.datetime(2026, 1, 5, tzinfo=dt.UTC)
PERIOD_S = 60  # ALB metrics: "measures and sends its metrics in 60-second intervals"
# Assumed: a period's datapoint is readable by alarms within a minute after the period ends
# (CloudWatch publishes no figure for AWS/ApplicationELB).
METRIC_DELAY_S = 60
ALARM_EVERY_S = 60  # a standard-resolution alarm evaluates once a minute
# Assumed: a Fargate task from desired count to RUNNING (provisioning, a ~200 MB image pull,
# the master's start); AWS publishes no figure.
TASK_START_S = 60
# Assumed: a Cloud Run cold start of the master with Direct VPC egress, which Google says can
# take "a minute or more" to connect.
CLOUD_RUN_COLD_START_S = 70
CLOUD_RUN_IDLE_S = 15 * 60  # Cloud Run keeps an idle instance up to 15 minutes

ALARM = "aws:cloudwatch/metricAlarm:MetricAlarm"
POLICY = "aws:appautoscaling/policy:Policy"
TARGET = "aws:appautoscaling/target:Target"
ALB = "aws:lb/loadBalancer:LoadBalancer"
TARGET_GROUP = "aws:lb/targetGroup:TargetGroup"
SERVICE = "aws:ecs/service:Service"
TASKDEF = "aws:ecs/taskDefinition:TaskDefinition"
RUN_SERVICE = "gcp:cloudrunv2/service:Service"


class ModelError(AssertionError):
    """The rendered graph asks for something the model (and so, as modelled, the cloud) does
    not do."""


def at(seconds: float) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=seconds)


def seconds(when: dt.datetime) -> float:
    return (when - EPOCH).total_seconds()


def _computed(resource: dryrun.RecordedResource, key: str) -> Any:
    # The mocks' computed attributes (an ARN, an ALB's ARN suffix) as later resources saw them.
    return dryrun._computed(resource.type, resource.name, resource.inputs)[key]


def _one(graph: dryrun.Rendered, type_: str, name: str | None = None) -> dryrun.RecordedResource:
    found = [r for r in graph.of_type(type_) if name is None or r.name == name]
    if len(found) != 1:
        raise ModelError(f"expected one {type_} {name or ''}, got {[r.name for r in found]}")
    return found[0]


# -- CloudWatch -----------------------------------------------------------------------------


class Metrics:
    """Sums per (namespace, name, dimensions) and 60 s period."""

    def __init__(self) -> None:
        self._sums: dict[tuple[str, str, tuple[tuple[str, str], ...], int], float] = {}

    def add(self, namespace: str, name: str, dims: dict[str, str], t: float) -> None:
        key = (namespace, name, tuple(sorted(dims.items())), int(t // PERIOD_S) * PERIOD_S)
        self._sums[key] = self._sums.get(key, 0.0) + 1

    def sum(self, namespace: str, name: str, dims: dict[str, str], start: int) -> float | None:
        return self._sums.get((namespace, name, tuple(sorted(dims.items())), start))


_FILL = re.compile(r"FILL\((\w+),\s*(-?[\d.]+)\)")


def _expression(expr: str, values: dict[str, float | None]) -> float | None:
    """The metric math det renders: terms ``FILL(id, n)`` or ``id`` joined by ``+``."""
    total: float | None = None
    for term in (t.strip() for t in expr.split("+")):
        m = _FILL.fullmatch(term)
        if m:
            value: float | None = values.get(m.group(1))
            if value is None:
                value = float(m.group(2))
        elif term in values:
            value = values[term]
        else:
            raise ModelError(f"metric math the model does not know: {expr!r}")
        if value is not None:
            total = (total or 0.0) + value
    return total


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "GreaterThanOrEqualToThreshold": lambda v, t: v >= t,
    "GreaterThanThreshold": lambda v, t: v > t,
    "LessThanThreshold": lambda v, t: v < t,
    "LessThanOrEqualToThreshold": lambda v, t: v <= t,
}


@dataclasses.dataclass
class Alarm:
    name: str
    inputs: dict[str, Any]
    state: str = "INSUFFICIENT_DATA"
    last_value: float | None = None

    def _value(self, metrics: Metrics, start: int) -> float | None:
        queries = self.inputs.get("metricQueries")
        if not queries:  # a plain single-metric alarm
            if self.inputs.get("statistic", "Sum") != "Sum":
                raise ModelError(f"{self.name}: only Sum is modelled")
            return metrics.sum(
                self.inputs["namespace"],
                self.inputs["metricName"],
                dict(self.inputs.get("dimensions") or {}),
                start,
            )
        values: dict[str, float | None] = {}
        for q in queries:
            if "metric" in q:
                m = q["metric"]
                if m.get("stat") != "Sum" or int(m.get("period", 0)) != PERIOD_S:
                    raise ModelError(f"{self.name}: only Sum over 60 s is modelled: {m}")
                values[q["id"]] = metrics.sum(
                    m["namespace"], m["metricName"], dict(m.get("dimensions") or {}), start
                )
        returned = [q for q in queries if q.get("returnData")]
        if len(returned) != 1:
            raise ModelError(f"{self.name}: an alarm returns exactly one query")
        q = returned[0]
        return values[q["id"]] if "metric" in q else _expression(q["expression"], values)

    def evaluate(self, metrics: Metrics, now: float) -> bool:
        """Evaluate at ``now``; True when the alarm's actions run (entering or staying in
        ALARM: its actions are Application Auto Scaling policies)."""
        n = int(self.inputs["evaluationPeriods"])
        m = int(self.inputs.get("datapointsToAlarm") or n)
        threshold = float(self.inputs["threshold"])
        compare = _COMPARE[self.inputs["comparisonOperator"]]
        treat = self.inputs.get("treatMissingData", "missing")
        newest = int((now - METRIC_DELAY_S) // PERIOD_S) * PERIOD_S - PERIOD_S
        breaching = present = 0
        self.last_value = None
        for k in range(n):
            value = self._value(metrics, newest - k * PERIOD_S)
            if k == 0:
                self.last_value = value
            if value is None:
                if treat == "breaching":
                    breaching += 1
                    present += 1
                elif treat == "notBreaching":
                    present += 1
                continue
            present += 1
            breaching += compare(value, threshold)
        if breaching >= m:
            self.state = "ALARM"
        elif present:
            self.state = "OK"
        else:
            self.state = "INSUFFICIENT_DATA"
        return self.state == "ALARM"


# -- Application Auto Scaling and ECS ---------------------------------------------------------


@dataclasses.dataclass
class Task:
    running_at: float
    healthy_at: float
    stopped_at: float | None = None
    announced: bool = False

    def registered(self, now: float) -> bool:
        return self.running_at <= now and (self.stopped_at is None or now < self.stopped_at)


@dataclasses.dataclass
class Event:
    t: float
    what: str


class AwsPlatform:
    """The ECS master's wake path as rendered: see the module docstring.

    ``scheduled_actions``: Application Auto Scaling's scheduled actions of the service (the
    ``DescribeScheduledActions`` items), read on each step; ``on_running(now)``: the master's
    task started (its loop runs a pass); ``on_stopped(now)``: a task that had started stopped
    (the serverless simulation runs and removes a container on these)."""

    def __init__(
        self,
        graph: dryrun.Rendered,
        scheduled_actions: Callable[[], Iterable[dict[str, Any]]] = list,
        on_running: Callable[[float], None] | None = None,
        on_stopped: Callable[[float], None] | None = None,
    ) -> None:
        self.now = 0.0
        self.on_stopped = on_stopped
        self.metrics = Metrics()
        self.events: list[Event] = []
        self._scheduled_actions = scheduled_actions
        self._done_actions: set[tuple[str, str]] = set()
        self.on_running = on_running
        alb = _one(graph, ALB)
        self.alb_suffix: str = _computed(alb, "arnSuffix")
        service = _one(graph, SERVICE)
        target = _one(graph, TARGET)
        self.resource_id = str(target.inputs["resourceId"])
        # Without a name input, the mocks name a resource by its logical name.
        service_name = str(service.inputs.get("name") or service.name)
        if target.inputs["serviceNamespace"] != "ecs" or not self.resource_id.endswith(
            "/" + service_name
        ):
            raise ModelError(f"the scalable target {self.resource_id} is not the master's service")
        self.min = int(target.inputs["minCapacity"])
        self.max = int(target.inputs["maxCapacity"])
        self.policies = {
            _computed(p, "arn"): p.inputs
            for p in graph.of_type(POLICY)
            if p.inputs.get("resourceId") == self.resource_id
        }
        self.alarms = [Alarm(a.name, a.inputs) for a in graph.of_type(ALARM)]
        (main_tg,) = [t for t in graph.of_type(TARGET_GROUP) if t.name.endswith("-master")] or [
            _one(graph, TARGET_GROUP)
        ]
        check = main_tg.inputs["healthCheck"]
        self.healthy_after = int(check["interval"]) * int(check["healthyThreshold"])
        self.desired = int(service.inputs["desiredCount"])
        self.tasks: list[Task] = []
        self._reconcile()

    # -- what a client sees ---------------------------------------------------------------------

    def active(self) -> list[Task]:
        return [t for t in self.tasks if t.stopped_at is None]

    def request(self) -> int:
        """One request through the ALB now: 503 from the ALB itself, or 200 from a task."""
        dims = {"LoadBalancer": self.alb_suffix}
        if not any(t.registered(self.now) for t in self.tasks):
            self.metrics.add("AWS/ApplicationELB", "HTTPCode_ELB_503_Count", dims, self.now)
            self.events.append(Event(self.now, "503 from the ALB (no registered target)"))
            return 503
        self.metrics.add("AWS/ApplicationELB", "RequestCount", dims, self.now)
        return 200

    def serving(self) -> bool:
        return any(t.registered(self.now) and t.healthy_at <= self.now for t in self.tasks)

    # -- the clock ------------------------------------------------------------------------------

    def advance(self, until: float, step: float = 1.0) -> None:
        """Move the clock to ``until``, running every alarm evaluation, scheduled action and
        task start on the way (``step``: the resolution of task starts)."""
        while self.now < until:
            nxt = min(until, self.now + step)
            for boundary in range(math.floor(self.now) + 1, math.floor(nxt) + 1):
                if boundary % ALARM_EVERY_S == 0:
                    self.now = float(boundary)
                    self._minute()
            self.now = nxt
            self._start_tasks()

    def advance_until(self, done: Callable[[], bool], limit: float, step: float = 1.0) -> float:
        end = self.now + limit
        while not done():
            if self.now >= end:
                raise AssertionError(f"not within {limit:.0f} simulated s: {self.events[-8:]}")
            self.advance(self.now + step, step)
        return self.now

    def _minute(self) -> None:
        self._run_scheduled_actions()
        for alarm in self.alarms:
            if alarm.evaluate(self.metrics, self.now):
                for arn in alarm.inputs.get("alarmActions", []):
                    self._invoke(arn, alarm)

    def _invoke(self, arn: str, alarm: Alarm) -> None:
        policy = self.policies.get(arn)
        if policy is None:
            raise ModelError(f"{alarm.name}: its action {arn} is no policy of the service")
        config = policy["stepScalingPolicyConfiguration"]
        if config["adjustmentType"] != "ExactCapacity":
            raise ModelError(f"only ExactCapacity is modelled: {config['adjustmentType']}")
        value = alarm.last_value if alarm.last_value is not None else 0.0
        delta = value - float(alarm.inputs["threshold"])
        for step in config["stepAdjustments"]:
            lower = step.get("metricIntervalLowerBound")
            upper = step.get("metricIntervalUpperBound")
            if (lower is None or delta >= float(lower)) and (upper is None or delta < float(upper)):
                self._set_desired(int(step["scalingAdjustment"]), f"{alarm.name} in ALARM")
                return

    def _set_desired(self, capacity: int, why: str) -> None:
        capacity = max(self.min, min(self.max, capacity))
        if capacity != self.desired:
            self.events.append(Event(self.now, f"desired {self.desired} -> {capacity} ({why})"))
            self.desired = capacity
        self._reconcile()

    def _run_scheduled_actions(self) -> None:
        for action in self._scheduled_actions():
            if action.get("ResourceId") != self.resource_id:
                continue
            m = re.fullmatch(r"at\((.+)\)", str(action.get("Schedule", "")))
            if not m:
                raise ModelError(f"only one-time at() actions are modelled: {action}")
            when = dt.datetime.fromisoformat(m.group(1)).replace(tzinfo=dt.UTC)
            key = (str(action["ScheduledActionName"]), m.group(1))
            if seconds(when) > self.now or key in self._done_actions:
                continue
            self._done_actions.add(key)
            bounds = action.get("ScalableTargetAction", {})
            self.min = int(bounds.get("MinCapacity", self.min))
            self.max = int(bounds.get("MaxCapacity", self.max))
            self.events.append(Event(self.now, f"scheduled {key[0]}: min {self.min}"))
            self._set_desired(self.desired, f"scheduled {key[0]}")

    def _reconcile(self) -> None:
        active = self.active()
        while len(active) < self.desired:
            start = self.now + TASK_START_S
            task = Task(running_at=start, healthy_at=start + self.healthy_after)
            self.tasks.append(task)
            active.append(task)
        while len(active) > self.desired:
            task = active.pop()
            task.stopped_at = self.now
            self.events.append(Event(self.now, "task stopped"))
            if task.announced and self.on_stopped:
                self.on_stopped(self.now)

    def _start_tasks(self) -> None:
        for task in self.active():
            if task.running_at <= self.now and not task.announced:
                task.announced = True
                self.events.append(Event(self.now, "task running (registered)"))
                if self.on_running:
                    self.on_running(self.now)


def delays(platform: AwsPlatform) -> str:
    """The modelled delays of the AWS wake path, for a test's printout."""
    return (
        f"modelled: metric period {PERIOD_S} s + readable {METRIC_DELAY_S} s after it (assumed), "
        f"alarm every {ALARM_EVERY_S} s, task start {TASK_START_S} s (assumed), "
        f"health check {platform.healthy_after} s (rendered)"
    )


def service_environment(graph: dryrun.Rendered) -> dict[str, str]:
    """The rendered ECS master service's container environment (its ``DET_*`` settings)."""
    (found,) = [r for r in graph.of_type(TASKDEF) if r.name.endswith("-service")]
    (container,) = json.loads(found.inputs["containerDefinitions"])
    return {e["name"]: e["value"] for e in container["environment"]}


def register_service(graph: dryrun.Rendered, client: Callable[[str], Any]) -> dict[str, Any]:
    """What `up` makes in the account for the wake-ups, in moto: the ECS cluster and service
    (by their rendered names) and the scalable target (by the rendered target's inputs).
    ``client(service_name)``: a boto3 client. Returns the rendered target's inputs."""
    (cluster,) = graph.of_type("aws:ecs/cluster:Cluster")
    service = _one(graph, SERVICE)
    target = _one(graph, TARGET).inputs
    ecs = client("ecs")
    ecs.create_cluster(clusterName=cluster.inputs["name"])
    ecs.create_service(
        cluster=cluster.inputs["name"], serviceName=service.inputs["name"], desiredCount=1
    )
    client("application-autoscaling").register_scalable_target(
        ServiceNamespace=target["serviceNamespace"],
        ResourceId=target["resourceId"],
        ScalableDimension=target["scalableDimension"],
        MinCapacity=target["minCapacity"],
        MaxCapacity=target["maxCapacity"],
    )
    return dict(target)


# -- Cloud Run --------------------------------------------------------------------------------


def _duration(text: str) -> float:
    if not text.endswith("s"):
        raise ModelError(f"a duration in seconds: {text!r}")
    return float(text[:-1])


class CloudRunPlatform:
    """The Cloud Run master as rendered (see the module docstring); ``url``: the service's."""

    def __init__(self, graph: dryrun.Rendered, url: str, service_name: str) -> None:
        svc = _one(graph, RUN_SERVICE, service_name).inputs
        template = svc["template"]
        self.url = url.rstrip("/")
        self.timeout = _duration(template["timeout"])
        self.max = int(template["scaling"]["maxInstanceCount"])
        self.min = int(template["scaling"].get("minInstanceCount", 0))
        probe = template["containers"][0]["startupProbe"]
        self.startup_bound = int(probe["periodSeconds"]) * int(probe["failureThreshold"])
        self.now = 0.0
        self.instances: list[dict[str, float]] = []  # ready_at, last_request
        self.events: list[Event] = []
        self.tasks: list[tuple[float, str]] = []  # Cloud Tasks: (time, url)

    def _reap(self) -> None:
        keep = [
            i
            for i in self.instances
            if self.now - max(i["ready_at"], i["last"]) < CLOUD_RUN_IDLE_S
            or len(self.instances) <= self.min
        ]
        if len(keep) < len(self.instances):
            self.events.append(Event(self.now, "instance stopped (idle)"))
        self.instances = keep

    def request(self, url: str) -> tuple[int, float]:
        """A request now: (status, seconds the request was held)."""
        if not url.startswith(self.url + "/"):
            return 404, 0.0
        self._reap()
        if not self.instances:
            if self.max < 1:
                return 503, 0.0
            if min(self.startup_bound, self.timeout) < CLOUD_RUN_COLD_START_S:
                return 503, 0.0
            ready = self.now + CLOUD_RUN_COLD_START_S
            self.instances.append({"ready_at": ready, "last": ready})
            self.events.append(Event(self.now, "instance starting (a request)"))
        inst = min(self.instances, key=lambda i: i["ready_at"])
        held = max(0.0, inst["ready_at"] - self.now)
        inst["last"] = self.now + held
        return 200, held

    def enqueue(self, body: dict[str, Any]) -> None:
        """A Cloud Tasks ``tasks.create`` body (det.master.wakeups.CloudTasksScheduler)."""
        task = body["task"]
        when = dt.datetime.fromisoformat(task["scheduleTime"].replace("Z", "+00:00"))
        self.tasks.append((seconds(when), task["httpRequest"]["url"]))

    def advance(self, until: float) -> list[tuple[float, int, float]]:
        """Move the clock; the Cloud Tasks due on the way are requests: (time, status, held)."""
        fired = []
        for t, url in sorted(self.tasks):
            if t <= until:
                self.now = max(self.now, t)
                status, held = self.request(url)
                fired.append((t, status, held))
        self.tasks = [(t, u) for t, u in self.tasks if t > until]
        self.now = until
        self._reap()
        return fired

    def running(self) -> int:
        self._reap()
        return len(self.instances)
