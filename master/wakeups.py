"""Wake-ups: timers that must fire while no request keeps a master running.

A serverless master (Cloud Run, ECS Fargate) may have no instance at all when nobody calls. The
control loop still owes some passes at known times: a launch backoff ends with work queued, an
idle agent's period runs out, a starting agent's deadline passes, a new budget month begins.
After each pass the loop computes the earliest such time from PostgreSQL
(:func:`det.master.provisioner.decider.next_change`) and asks a :class:`Scheduler` for one call
of the master's wake-up URL (``POST /api/v1/master/wakeup``) at that time. The call is what
starts an instance; the loop resumes from the database.

Each wake-up is named after the cluster and its time in whole seconds, so asking twice for the
same time creates one (Cloud Tasks and EventBridge Scheduler refuse a second of the same name,
which counts as success here). The wake-up URL is authenticated by a token derived from the
cluster's secret (:func:`token`), carried in the :data:`TOKEN_HEADER` header.

Implementations: :class:`HttpScheduler` (POSTs the wake-up as JSON to a scheduler service; the
simulation's fake platform), :class:`CloudTasksScheduler` (a Cloud Tasks HTTP task, through the
REST API with google-auth: no extra SDK) and :class:`EventBridgeScheduler` (a one-time
EventBridge Scheduler schedule whose target is an event bus, whose rule sends it to the master
through an API destination with the token from the event's ``detail.token``; or, with the
scheduler's CloudWatch ``putMetricData`` target, a datapoint that an alarm turns into a running
ECS task, since ECS starts no task on a request) and :class:`ScheduledScalingScheduler` (two
one-time Application Auto Scaling scheduled actions on the ECS service: its minimum is 1 from the
time for a while, then 0; what an ECS master uses, since nothing needs to answer HTTP for it to
start a task). The cloud SDKs are imported when a scheduler is built, not at import.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import hmac
import json
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any, NotRequired, Protocol

import requests
from typing_extensions import TypedDict

from det.master.config import WakeupsConfig
from det.master.errors import MasterError

logger = logging.getLogger(__name__)

WAKEUP_PATH = "/api/v1/master/wakeup"
TOKEN_HEADER = "X-Det-Wakeup-Token"
# What EventBridge events of a wake-up carry (the bus's rule matches them).
EVENT_SOURCE = "det.master"
EVENT_DETAIL_TYPE = "det wake-up"
# EventBridge Scheduler's universal target for CloudWatch PutMetricData (its ARN ends so).
PUT_METRIC_DATA = ":cloudwatch:putMetricData"
_TIMEOUT = 15.0


class WakeupError(MasterError):
    """The scheduler refused or could not be reached: the loop asks again on a later pass."""


def token(token_secret: str) -> str:
    """The wake-up URL's token: derived from the cluster's secret, never stored."""
    return hmac.new(token_secret.encode(), b"det-wakeup", hashlib.sha256).hexdigest()


def check_token(token_secret: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(token(token_secret), presented or "")


@dataclasses.dataclass(frozen=True)
class Wakeup:
    """One call of ``url`` at ``at`` (UTC, whole seconds) with the token header."""

    cluster_id: str
    at: dt.datetime
    url: str
    token: str

    @property
    def name(self) -> str:
        # Cloud Tasks ids and EventBridge schedule names both take [A-Za-z0-9_-] (64 max).
        return f"det-{self.cluster_id}-{int(self.at.timestamp())}"[:64]

    def at_text(self) -> str:
        return self.at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def at_second(when: dt.datetime) -> dt.datetime:
    """``when`` rounded up to the next whole second (a wake-up never comes early)."""
    when = when.astimezone(dt.UTC)
    if when.microsecond:
        when = when.replace(microsecond=0) + dt.timedelta(seconds=1)
    return when


class Scheduler(Protocol):
    def schedule(self, wakeup: Wakeup) -> None:
        """Arrange one call at ``wakeup.at``; one of the same name already there is success.
        Raises WakeupError."""


class HttpScheduler:
    """POSTs ``{"name", "at", "url", "method", "headers"}`` to a scheduler service; 2xx or 409
    (already there) is success."""

    def __init__(self, url: str) -> None:
        self.url = url

    def schedule(self, wakeup: Wakeup) -> None:
        body = {
            "name": wakeup.name,
            "at": wakeup.at_text(),
            "url": wakeup.url,
            "method": "POST",
            "headers": {TOKEN_HEADER: wakeup.token},
        }
        try:
            r = requests.post(self.url, json=body, timeout=_TIMEOUT)
        except requests.RequestException as e:
            raise WakeupError(f"wake-up scheduler {self.url}: {e}") from None
        if r.status_code != 409 and not 200 <= r.status_code < 300:
            raise WakeupError(f"wake-up scheduler {self.url}: HTTP {r.status_code}")


class OidcToken(TypedDict):
    serviceAccountEmail: str
    audience: str


class CloudTaskHttpRequest(TypedDict):
    url: str
    httpMethod: str
    headers: dict[str, str]
    #: base64 of the JSON body.
    body: str
    oidcToken: NotRequired[OidcToken]


class CloudTask(TypedDict):
    name: str
    scheduleTime: str
    httpRequest: CloudTaskHttpRequest


class CreateTaskRequest(TypedDict):
    """Cloud Tasks' ``tasks.create`` body."""

    task: CloudTask


class CloudTasksScheduler:
    """An HTTP task in a Cloud Tasks queue (``projects/P/locations/L/queues/Q``), created with
    the REST API (``tasks.create``) and the service's own credentials."""

    API = "https://cloudtasks.googleapis.com"

    def __init__(
        self,
        queue: str,
        endpoint_url: str | None = None,
        session: requests.Session | None = None,
        service_account_email: str | None = None,
    ) -> None:
        self.queue = queue
        self.base = (endpoint_url or self.API).rstrip("/")
        self._session = session
        self.service_account_email = service_account_email

    def _authorized(self) -> requests.Session:
        if self._session is None:
            # det-platform[gcp] (google-cloud-compute brings google-auth): only a GCP master needs it.
            try:
                import google.auth  # det-platform[gcp]
                import google.auth.transport.requests  # det-platform[gcp]
            except ImportError:
                raise MasterError(
                    "wakeups: Cloud Tasks needs det-platform[gcp] (google-auth) on this master"
                ) from None

            credentials, _ = google.auth.default(
                scopes=["https://www.googleapis.com/auth/cloud-platform"]
            )
            self._session = google.auth.transport.requests.AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
        return self._session

    def request_body(self, wakeup: Wakeup) -> CreateTaskRequest:
        http: CloudTaskHttpRequest = {
            "url": wakeup.url,
            "httpMethod": "POST",
            "headers": {TOKEN_HEADER: wakeup.token, "Content-Type": "application/json"},
            "body": base64.b64encode(b"{}").decode(),
        }
        if self.service_account_email:
            parts = urllib.parse.urlsplit(wakeup.url)
            http["oidcToken"] = {
                "serviceAccountEmail": self.service_account_email,
                "audience": f"{parts.scheme}://{parts.netloc}",
            }
        return {
            "task": {
                "name": f"{self.queue}/tasks/{wakeup.name}",
                "scheduleTime": wakeup.at_text(),
                "httpRequest": http,
            }
        }

    def schedule(self, wakeup: Wakeup) -> None:
        url = f"{self.base}/v2/{self.queue}/tasks"
        try:
            r = self._authorized().post(url, json=self.request_body(wakeup), timeout=_TIMEOUT)
        except requests.RequestException as e:
            raise WakeupError(f"Cloud Tasks {self.queue}: {e}") from None
        if r.status_code == 409:  # ALREADY_EXISTS: this wake-up was asked for before
            return
        if not 200 <= r.status_code < 300:
            raise WakeupError(f"Cloud Tasks {self.queue}: HTTP {r.status_code}: {r.text[:300]}")


class EventBridgeParameters(TypedDict):
    DetailType: str
    Source: str


class ScheduleTarget(TypedDict):
    Arn: str
    RoleArn: str
    #: The event's detail, or the datapoint, as JSON text.
    Input: str
    EventBridgeParameters: NotRequired[EventBridgeParameters]


class FlexibleTimeWindow(TypedDict):
    Mode: str


class CreateScheduleRequest(TypedDict):
    """EventBridge Scheduler's ``CreateSchedule`` arguments."""

    Name: str
    GroupName: str
    ScheduleExpression: str
    ScheduleExpressionTimezone: str
    FlexibleTimeWindow: FlexibleTimeWindow
    ActionAfterCompletion: str
    Target: ScheduleTarget


class _SchedulerExceptions(Protocol):
    ConflictException: type[Exception]


class _SchedulerClient(Protocol):
    """What det calls of boto3's ``scheduler`` client (which has no type stubs here)."""

    exceptions: _SchedulerExceptions

    def create_schedule(self, **request: Any) -> object: ...


class EventBridgeScheduler:
    """A one-time EventBridge Scheduler schedule (``at(...)``, deleted after it fires) that puts
    an event on ``target_arn`` (an event bus) with the wake-up in its detail, or, when
    ``target_arn`` is the scheduler's CloudWatch ``putMetricData`` target, a datapoint of
    ``metric_namespace``/``metric_name``."""

    def __init__(
        self,
        target_arn: str,
        role_arn: str,
        group: str = "default",
        region: str | None = None,
        endpoint_url: str | None = None,
        client: _SchedulerClient | None = None,
        metric_namespace: str | None = None,
        metric_name: str = "WakeUp",
    ) -> None:
        self.target_arn = target_arn
        self.metric_namespace = metric_namespace
        self.metric_name = metric_name
        self.role_arn = role_arn
        self.group = group
        self.region = region
        self.endpoint_url = endpoint_url
        self._client = client

    def _scheduler(self) -> _SchedulerClient:
        if self._client is None:
            # det-platform[aws]: only an AWS master needs boto3.
            try:
                import boto3  # det-platform[aws]
            except ImportError:
                raise MasterError(
                    "wakeups: EventBridge Scheduler needs det-platform[aws] (boto3) on this master"
                ) from None

            made: _SchedulerClient = boto3.client(
                "scheduler", region_name=self.region, endpoint_url=self.endpoint_url
            )
            self._client = made
        return self._client

    def request(self, wakeup: Wakeup) -> CreateScheduleRequest:
        target: ScheduleTarget
        if self.target_arn.endswith(PUT_METRIC_DATA):
            # The wake-up is a datapoint an alarm turns into a running task.
            datapoint = {
                "Namespace": self.metric_namespace,
                "MetricData": [{"MetricName": self.metric_name, "Value": 1, "Unit": "Count"}],
            }
            target = {
                "Arn": self.target_arn,
                "RoleArn": self.role_arn,
                "Input": json.dumps(datapoint),
            }
        else:
            detail = {"name": wakeup.name, "url": wakeup.url, "token": wakeup.token}
            target = {
                "Arn": self.target_arn,
                "RoleArn": self.role_arn,
                "Input": json.dumps(detail),
                "EventBridgeParameters": {"DetailType": EVENT_DETAIL_TYPE, "Source": EVENT_SOURCE},
            }
        return {
            "Name": wakeup.name,
            "GroupName": self.group,
            "ScheduleExpression": f"at({wakeup.at_text().removesuffix('Z')})",
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Target": target,
        }

    def schedule(self, wakeup: Wakeup) -> None:
        client = self._scheduler()
        try:
            client.create_schedule(**self.request(wakeup))
        except client.exceptions.ConflictException:
            return  # this wake-up was asked for before
        except Exception as e:  # botocore's ClientError and connection errors alike
            raise WakeupError(f"EventBridge Scheduler {self.group}: {e}") from None


class _ScalingExceptions(Protocol):
    ObjectNotFoundException: type[Exception]


class _ScheduledAction(TypedDict, total=False):
    """What det reads of one listed scheduled action."""

    ScheduledActionName: str
    Schedule: str


class _ScheduledActions(TypedDict, total=False):
    ScheduledActions: list[_ScheduledAction]


class _ScalingClient(Protocol):
    """What det calls of boto3's ``application-autoscaling`` client."""

    exceptions: _ScalingExceptions

    def put_scheduled_action(self, **request: Any) -> object: ...

    def describe_scheduled_actions(self, **request: Any) -> _ScheduledActions: ...

    def delete_scheduled_action(self, **request: Any) -> object: ...


class ScalableTargetAction(TypedDict):
    MinCapacity: int


class PutScheduledActionRequest(TypedDict):
    """Application Auto Scaling's ``PutScheduledAction`` arguments."""

    ServiceNamespace: str
    ScalableDimension: str
    ResourceId: str
    ScheduledActionName: str
    Schedule: str
    Timezone: str
    ScalableTargetAction: ScalableTargetAction


class ScheduledScalingScheduler:
    """A wake-up as two one-time scheduled actions on the ECS service ``resource_id``
    (``service/CLUSTER/SERVICE``): at ``wakeup.at`` the scalable target's minimum becomes 1
    (Application Auto Scaling starts a task if none runs), ``hold`` later 0 again (the sleep
    alarm then stops the task unless requests keep it). Only the minimum moves: the maximum
    stays what ``up`` set, and the desired count has one owner, Application Auto Scaling.

    ``PutScheduledAction`` creates or replaces an action of the same name, so asking twice is
    harmless. A one-time action stays listed after it ran (and a target holds at most 200):
    each call deletes this cluster's actions that ran more than :data:`STALE` ago."""

    NAMESPACE = "ecs"
    DIMENSION = "ecs:service:DesiredCount"
    STALE = dt.timedelta(hours=1)

    def __init__(
        self,
        resource_id: str,
        hold: dt.timedelta,
        region: str | None = None,
        endpoint_url: str | None = None,
        client: _ScalingClient | None = None,
        now: Callable[[], dt.datetime] | None = None,
    ) -> None:
        self.resource_id = resource_id
        self.hold = hold
        self.region = region
        self.endpoint_url = endpoint_url
        self._client = client
        self._now = now or (lambda: dt.datetime.now(dt.UTC))

    def _scaling(self) -> _ScalingClient:
        if self._client is None:
            try:
                import boto3  # det-platform[aws]
            except ImportError:
                raise MasterError(
                    "wakeups: Application Auto Scaling needs det-platform[aws] (boto3) on this"
                    " master"
                ) from None

            made: _ScalingClient = boto3.client(
                "application-autoscaling", region_name=self.region, endpoint_url=self.endpoint_url
            )
            self._client = made
        return self._client

    def requests(self, wakeup: Wakeup) -> list[PutScheduledActionRequest]:
        """The two actions: the wake at ``wakeup.at``, the rest ``hold`` later."""
        rest = wakeup.at + self.hold
        return [
            self._action(wakeup.name, wakeup.at, 1),
            self._action(f"{wakeup.name}-rest", rest, 0),
        ]

    def _action(self, name: str, at: dt.datetime, minimum: int) -> PutScheduledActionRequest:
        return {
            "ServiceNamespace": self.NAMESPACE,
            "ScalableDimension": self.DIMENSION,
            "ResourceId": self.resource_id,
            "ScheduledActionName": name,
            "Schedule": f"at({at.astimezone(dt.UTC).strftime('%Y-%m-%dT%H:%M:%S')})",
            "Timezone": "UTC",
            "ScalableTargetAction": {"MinCapacity": minimum},
        }

    def schedule(self, wakeup: Wakeup) -> None:
        client = self._scaling()
        try:
            for request in self.requests(wakeup):
                client.put_scheduled_action(**request)
        except Exception as e:  # botocore's ClientError and connection errors alike
            raise WakeupError(f"Application Auto Scaling {self.resource_id}: {e}") from None
        try:
            self._forget_past(client, prefix=f"det-{wakeup.cluster_id}-")
        except Exception as e:  # housekeeping only: the next wake-up tries again
            logger.warning("could not delete past wake-ups of %s: %s", self.resource_id, e)

    def _forget_past(self, client: _ScalingClient, prefix: str) -> None:
        listed = client.describe_scheduled_actions(
            ServiceNamespace=self.NAMESPACE,
            ResourceId=self.resource_id,
            ScalableDimension=self.DIMENSION,
        )
        cutoff = self._now() - self.STALE
        for action in listed.get("ScheduledActions", []):
            name = str(action.get("ScheduledActionName", ""))
            at = _at_time(str(action.get("Schedule", "")))
            if name.startswith(prefix) and at is not None and at < cutoff:
                client.delete_scheduled_action(
                    ServiceNamespace=self.NAMESPACE,
                    ScheduledActionName=name,
                    ResourceId=self.resource_id,
                    ScalableDimension=self.DIMENSION,
                )


def _at_time(schedule: str) -> dt.datetime | None:
    """The time of a one-time ``at(YYYY-MM-DDTHH:MM:SS)`` schedule (UTC); None for others."""
    if not (schedule.startswith("at(") and schedule.endswith(")")):
        return None
    try:
        return dt.datetime.strptime(schedule[3:-1], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def build(config: WakeupsConfig) -> Scheduler | None:
    """The configured scheduler; None when wake-ups are off."""
    if config.type == "http":
        assert config.url is not None  # the config's check
        return HttpScheduler(config.url)
    if config.type == "cloud_tasks":
        assert config.queue is not None
        return CloudTasksScheduler(
            config.queue, config.endpoint_url, service_account_email=config.service_account_email
        )
    if config.type == "eventbridge":
        assert config.target_arn is not None and config.role_arn is not None
        return EventBridgeScheduler(
            config.target_arn,
            config.role_arn,
            config.group,
            config.region,
            config.endpoint_url,
            metric_namespace=config.metric_namespace,
            metric_name=config.metric_name,
        )
    if config.type == "scheduled_scaling":
        assert config.resource_id is not None
        return ScheduledScalingScheduler(
            config.resource_id,
            dt.timedelta(seconds=config.hold_seconds),
            config.region,
            config.endpoint_url,
        )
    return None
