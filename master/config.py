"""The master's configuration: Determined's master.yaml keys, parsed once at start.

Precedence: built-in defaults < the config file < ``DET_*`` environment variables. Environment
overrides use Determined's convention: ``DET_`` + the upper-cased key path joined by ``_`` for
top-level scalars (``DET_PORT``, ``DET_DATA_DIR``, ``DET_LOG_LEVEL``) and ``DET_DB_*`` for the
database (``DET_DB_HOST``, ``DET_DB_PASSWORD``…). Unknown keys in the file are rejected with a
message naming the key.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from pathlib import Path
from typing import Literal

import pydantic
import yaml
from psycopg.conninfo import make_conninfo
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from det.common.image_ref import check_image_reference
from det.common.jsontypes import JSONObject, JSONValue
from det.master import log_schedule
from det.master.clientaddr import parse_networks
from det.master.container_policy import ContainerPolicy
from det.master.egress import EgressConfig
from det.master.errors import MasterError
from det.master.expconf.environment import SECRET_KEYS, STORAGE_SECRET_KEYS, hide_secrets
from det.master.provisioner.config import ProvisionerConfig, parse_provider_config
from det.master.scheduler.model import DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT


class MasterConfigError(MasterError, ValueError):
    """The master configuration is invalid; the message names the key."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DbConfig(_Model):
    """Determined's ``db`` block, or ``url``. No ``db`` at all means the embedded database."""

    url: str | None = None
    host: str = "localhost"
    port: int = 5432
    name: str = "determined"
    user: str = "postgres"
    password: str = ""
    ssl_mode: str = "disable"
    ssl_root_cert: str | None = None

    def conninfo(self) -> str:
        if self.url:
            return self.url

        extra: dict[str, str] = {}
        if self.ssl_root_cert:
            extra["sslrootcert"] = self.ssl_root_cert
        return make_conninfo(
            host=self.host,
            port=self.port,
            dbname=self.name,
            user=self.user,
            password=self.password,
            sslmode=self.ssl_mode,
            **extra,
        )


class SchedulerConfig(_Model):
    type: Literal["priority", "fair_share", "round_robin"] = "priority"
    preemption: bool = False
    default_priority: int = Field(42, ge=1, le=99)
    fitting_policy: Literal["best", "worst"] = "best"


class ResourceManagerConfig(_Model):
    type: Literal["agent"] = "agent"
    scheduler: SchedulerConfig = SchedulerConfig()
    default_aux_resource_pool: str = "default"
    default_compute_resource_pool: str = "default"
    no_default_resource_pools: bool = False


class TaskContainerDefaults(_Model):
    """Determined's ``task_container_defaults`` keys (master.yaml, top level or per pool).

    Only checked here (unknown keys and wrong types are refused at start); the config keeps the
    block as the dict the user wrote, and ``det.master.expconf.merge_cluster_defaults`` merges it
    under each experiment's config. ``network_mode`` applies to every task container of the pool
    (it is no experiment field). Kubernetes, Slurm and PBS keys are accepted and unused.
    """

    image: str | dict[str, str | None] | None = None
    registry_auth: JSONObject | None = None
    force_pull_image: bool | None = None
    environment_variables: list[str] | dict[str, list[str] | None] | None = None
    shm_size_bytes: int | str | None = None
    network_mode: str | None = None
    bind_mounts: list[JSONObject] | None = None
    devices: list[JSONObject | str] | None = None
    add_capabilities: list[str] | None = None
    drop_capabilities: list[str] | None = None
    log_policies: list[JSONObject] | None = None
    preemption_timeout: int | None = Field(None, ge=0)
    work_dir: str | None = None
    startup_hook: str | None = None
    dtrain_network_interface: str | None = None
    nccl_port_range: str | None = None
    gloo_port_range: str | None = None
    cpu_pod_spec: JSONObject | None = None
    gpu_pod_spec: JSONObject | None = None
    checkpoint_gc_pod_spec: JSONObject | None = None
    # The image of every checkpoint-GC task (det: no Determined key; it sits beside Determined's
    # Kubernetes ``checkpoint_gc_pod_spec``): a small image with the storage clients
    # (``det-checkpoint-gc``, infra/build-images.sh gc) instead of the experiment's. Unset: the
    # experiment's image, as in Determined. Pulled with this block's ``registry_auth``.
    checkpoint_gc_image: str | None = None
    kubernetes: JSONObject | None = None
    slurm: JSONObject | None = None
    pbs: JSONObject | None = None

    @field_validator("checkpoint_gc_image")
    @classmethod
    def _gc_image(cls, value: str | None) -> str | None:
        return value if value is None else check_image_reference(value)


def _check_tcd(value: JSONObject | None) -> JSONObject | None:
    if value is not None:
        TaskContainerDefaults.model_validate(value)
    return value


def _strings(value: JSONValue) -> list[str]:
    """A list of strings (capabilities, environment variables); anything else: none."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def merge_task_container_defaults(cluster: JSONObject, pool: JSONObject | None) -> JSONObject:
    """A pool's defaults over the master's, as Determined's agent resource manager merges them:
    the pool's value wins key by key; environment variables are combined by name, capabilities
    are the union, bind mounts and devices are combined by container path (the pool's first),
    image maps by device type, and ``registry_auth`` is replaced whole."""
    if not pool:
        return dict(cluster)
    out = dict(cluster)
    for key, value in pool.items():
        if value is None:
            continue
        mine = out.get(key)
        if key in ("add_capabilities", "drop_capabilities") and isinstance(mine, list):
            out[key] = [c for c in sorted(set(_strings(mine)) | set(_strings(value)))]
        elif key in ("bind_mounts", "devices") and isinstance(mine, list):
            theirs: list[JSONValue] = value if isinstance(value, list) else [value]
            paths = {_container_path(v) for v in theirs}
            out[key] = theirs + [v for v in mine if _container_path(v) not in paths]
        elif key == "environment_variables" and mine is not None:
            out[key] = _merge_env(mine, value)
        elif key == "image" and isinstance(mine, dict) and isinstance(value, dict):
            out[key] = {**mine, **{k: v for k, v in value.items() if v}}
        else:
            out[key] = value
    return out


def _container_path(mount: JSONValue) -> str | None:
    if isinstance(mount, dict):
        path = mount.get("container_path")
        return path if isinstance(path, str) else None
    parts = str(mount).split(":")
    return parts[1] if len(parts) > 1 else parts[0]


def _merge_env(cluster: JSONValue, pool: JSONValue) -> JSONObject:
    def per_device(v: JSONValue) -> dict[str, list[str]]:
        if isinstance(v, dict):
            return {t: _strings(v.get(t)) for t in ("cpu", "cuda", "rocm")}
        return {t: _strings(v) for t in ("cpu", "cuda", "rocm")}

    c, p = per_device(cluster), per_device(pool)
    out: JSONObject = {}
    for t in ("cpu", "cuda", "rocm"):
        merged: dict[str, JSONValue] = {e.split("=", 1)[0]: e for e in c[t] + p[t]}
        out[t] = list(merged.values())
    return out


class PoolPrice(_Model):
    """det's ``resource_pools[].price``: what a pool's agents cost, for the usage reports. An
    allocation pays ``slot_hour`` for each slot-hour it holds, and its share of its agents'
    ``agent_hour`` (the slots it held on an agent over the agent's slots). USD."""

    slot_hour: float = Field(0.0, ge=0, allow_inf_nan=False)
    agent_hour: float = Field(0.0, ge=0, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _not_empty(cls, value: object) -> object:
        if isinstance(value, dict) and not value:
            raise ValueError("give slot_hour or agent_hour (USD)")
        return value

    def hourly(self, slots: int) -> float:
        """USD per hour of one agent of ``slots`` slots."""
        return self.agent_hour + self.slot_hour * slots


class ResourcePoolConfig(_Model):
    pool_name: str
    description: str = ""
    max_aux_containers_per_agent: int = Field(DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT, ge=0)
    agent_reattach_enabled: bool = True
    agent_reconnect_wait: str = "25s"
    scheduler: SchedulerConfig | None = None
    # The cloud provider block as written (``GET /api/v1/master/config`` shows it); parsed
    # once, when the master config is, into :attr:`provider_config`.
    provider: JSONObject | None = None
    task_container_defaults: JSONObject | None = None
    # What non-admins' tasks in this pool may use of the host; the keys set here replace the
    # master's (det.master.container_policy).
    task_container_policy: ContainerPolicy | None = None
    # det's own: a price for the usage reports, on any pool (on-prem ones too).
    price: PoolPrice | None = None
    _provider_config: ProvisionerConfig | None = PrivateAttr(None)

    _tcd = field_validator("task_container_defaults")(_check_tcd)

    @property
    def provider_config(self) -> ProvisionerConfig | None:
        """The parsed ``provider`` block (None for a static pool): what the provisioner, the
        scheduler's never-fits check and the cost view read."""
        if self.provider is not None and self._provider_config is None:
            self._provider_config = parse_provider_config(self.provider)
        return self._provider_config


class TlsConfig(_Model):
    """Determined's ``security.tls``: PEM files of the master's certificate (its chain may
    follow it in the same file) and private key. Both set: the master serves HTTPS only."""

    cert: Path | None = None
    key: Path | None = None

    @model_validator(mode="after")
    def _both_or_neither(self) -> TlsConfig:
        if (self.cert is None) != (self.key is None):
            missing = "key" if self.key is None else "cert"
            raise ValueError(f"cert and key go together: {missing} is not set")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert is not None and self.key is not None


class SecurityConfig(_Model):
    initial_user_password: str = ""
    # Local development only: lets the master start with an empty admin password.
    allow_empty_initial_password: bool = False
    agent_token: str | None = None
    session_hours: float = Field(24 * 7, gt=0)
    tls: TlsConfig = TlsConfig()
    ssh: JSONObject | None = None
    authz: JSONObject | None = None
    # Load balancers and reverse proxies whose X-Forwarded-For and X-Forwarded-Proto the master
    # believes (addresses or networks; det.master.clientaddr). Empty: the TCP peer is the client.
    trusted_proxies: list[str] = Field(default_factory=list)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _proxies_from_text(cls, value: object) -> object:
        # DET_SECURITY_TRUSTED_PROXIES gives them comma-separated.
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _proxies_parse(cls, value: list[str]) -> list[str]:
        parse_networks(value)
        return value


class ProxyConfig(_Model):
    """How many connections the task proxy serves at once in each master process: in all, for
    one user and for one task (det.master.proxy_limits). A user's or a task's share stays below
    the whole, so that no one user fills it."""

    max_connections: int = Field(1024, ge=1)
    max_connections_per_user: int = Field(128, ge=1)
    max_connections_per_task: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _shares_below_total(self) -> ProxyConfig:
        for name in ("max_connections_per_user", "max_connections_per_task"):
            if getattr(self, name) > self.max_connections:
                raise ValueError(
                    f"{name} ({getattr(self, name)}) must not exceed max_connections"
                    f" ({self.max_connections})"
                )
        return self


class WakeupsConfig(_Model):
    """Where the control loop asks to be woken when a timer must fire while no request keeps a
    master running (a serverless deploy scaled to zero): see det.master.wakeups.

    ``none``: no wake-ups (a master that always runs). ``http``: POST each wake-up as JSON to
    ``url``, a scheduler service that calls the master back at the time. ``cloud_tasks``: a task
    in the Cloud Tasks ``queue`` (``projects/P/locations/L/queues/Q``). ``eventbridge``: a
    one-time EventBridge Scheduler schedule in ``group`` whose target is ``target_arn`` (an event
    bus whose rule calls the master), assumed with ``role_arn``. ``scheduled_scaling``: two
    one-time Application Auto Scaling scheduled actions on the ECS service ``resource_id``
    (``service/CLUSTER/SERVICE``): its minimum is 1 from the time for ``hold_seconds``, then 0
    (an ECS master: nothing needs to answer HTTP for the wake-up to start a task).
    """

    type: Literal["none", "http", "cloud_tasks", "eventbridge", "scheduled_scaling"] = "none"
    url: str | None = None
    queue: str | None = None
    # cloud_tasks: the account whose OIDC token the task carries (for a service that requires
    # an invoker's identity); none: the task carries only det's wake-up token.
    service_account_email: str | None = None
    target_arn: str | None = None
    role_arn: str | None = None
    group: str = "default"
    region: str | None = None
    # eventbridge with EventBridge Scheduler's CloudWatch PutMetricData target: the datapoint
    # (value 1) an alarm turns into a running task (ECS cannot start one on a request).
    metric_namespace: str | None = None
    metric_name: str = "WakeUp"
    # scheduled_scaling: the scalable target's id and how long a wake-up keeps a task running.
    resource_id: str | None = None
    hold_seconds: int = Field(default=900, ge=60)
    # Tests and private endpoints only: the cloud API's base URL.
    endpoint_url: str | None = None

    @model_validator(mode="after")
    def _required(self) -> WakeupsConfig:
        needs = {
            "http": ("url",),
            "cloud_tasks": ("queue",),
            "eventbridge": ("target_arn", "role_arn"),
            "scheduled_scaling": ("resource_id",),
        }.get(self.type, ())
        for key in needs:
            if not getattr(self, key):
                raise ValueError(f"{key} is required when type is {self.type}")
        if self.type == "http" and not (self.url or "").startswith(("http://", "https://")):
            raise ValueError("url must be an http:// or https:// URL")
        if self.type == "cloud_tasks" and not re.fullmatch(
            r"projects/[^/]+/locations/[^/]+/queues/[^/]+", self.queue or ""
        ):
            raise ValueError("queue must be projects/PROJECT/locations/LOCATION/queues/QUEUE")
        if self.type == "scheduled_scaling" and not re.fullmatch(
            r"service/[^/]+/[^/]+", self.resource_id or ""
        ):
            raise ValueError("resource_id must be service/CLUSTER/SERVICE")
        if (
            self.type == "eventbridge"
            and (self.target_arn or "").endswith(":cloudwatch:putMetricData")
            and not self.metric_namespace
        ):
            raise ValueError("metric_namespace is required with the putMetricData target")
        return self


class WebhookDeliveryConfig(_Model):
    """det's ``webhooks.delivery``: each receiver (URL) has its own queue; up to ``workers``
    receivers are sent to at once, one event at a time each. A failed attempt is tried again
    after ``retry_initial_seconds``, doubling up to ``retry_max_seconds``; an event still not
    delivered ``dead_letter_after_seconds`` after it was queued (or re-sent) is a dead letter
    until an admin re-sends it (det.master.services.webhook_delivery)."""

    workers: int = Field(10, ge=1, le=100)
    timeout_seconds: float = Field(10.0, gt=0, le=300)
    retry_initial_seconds: float = Field(2.0, gt=0, le=86400)
    retry_max_seconds: float = Field(3600.0, gt=0, le=86400)
    dead_letter_after_seconds: float = Field(86400.0, gt=0, le=30 * 86400)


class WebhooksConfig(_Model):
    """Determined's ``webhooks`` block. ``signing_key`` signs deliveries (default: derived from
    the cluster's secret; ``det master config`` never shows it); ``delivery`` is det's own."""

    signing_key: str | None = None
    base_url: str | None = None
    delivery: WebhookDeliveryConfig = WebhookDeliveryConfig()


class RetentionPolicyConfig(_Model):
    """Determined's ``retention_policy``: task logs are deleted ``log_retention_days`` after
    their task ended (-1: kept forever; a trial's own ``det trial|e set log-retention`` wins),
    on ``schedule``: a duration (``24h``, ``90m``) or a five-field cron expression in UTC
    (``0 0 * * *``, the default)."""

    log_retention_days: int = Field(-1, ge=-1, le=32767)
    schedule: str = "0 0 * * *"

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        log_schedule.parse(value)  # ValueError names the rule
        return value


class LogConfig(_Model):
    level: Literal["trace", "debug", "info", "warn", "warning", "error", "fatal"] = "info"
    color: bool = True


_DEFAULT_STORAGE: JSONObject = {
    "type": "shared_fs",
    "host_path": "/tmp",
    "storage_path": "det-checkpoints",
}


class MasterConfig(_Model):
    port: int = Field(8080, ge=1, le=65535)
    bind_address: str = "0.0.0.0"
    data_dir: Path = Path.home() / ".local" / "share" / "det" / "master"
    cluster_name: str = ""
    # The URL agents and task containers use to reach this master (default: derived from port).
    master_url: str | None = None
    # Interactive tasks' pages are served on an origin that is not the WebUI's (docs/security.md,
    # det.master.task_origin): the master's second listener, which serves only the task proxy
    # (0: a port the system picks at start; null: none, when ``task_origin`` names a host the
    # load balancer sends to ``port``), and the origin browsers reach tasks at
    # (``scheme://host[:port]``, ``{task}`` as the host's first label for one origin per task;
    # default: the host the browser reached the master by, at ``task_port``).
    task_port: int | None = Field(0, ge=0, le=65535)
    task_origin: str | None = None
    db: DbConfig | None = None
    checkpoint_storage: JSONObject = Field(default_factory=lambda: dict(_DEFAULT_STORAGE))
    resource_manager: ResourceManagerConfig = ResourceManagerConfig()
    resource_pools: list[ResourcePoolConfig] = Field(
        default_factory=lambda: [ResourcePoolConfig(pool_name="default")]
    )
    security: SecurityConfig = SecurityConfig()
    task_container_defaults: JSONObject = Field(default_factory=dict)
    # What non-admins' tasks may use of the host (det.master.container_policy).
    task_container_policy: ContainerPolicy = ContainerPolicy()
    log: LogConfig = LogConfig()
    proxy: ProxyConfig = ProxyConfig()
    telemetry: JSONObject | None = None
    # Whether this process runs the control loops (when it holds the leader lock); off: it
    # serves the API only (``det-master --no-loops`` too). DET_RUN_LOOPS.
    run_loops: bool = True
    # Apply pending migrations at start. A serverless deploy runs ``det-master migrate`` as a
    # one-off job and sets this false: the service then refuses to start on a database that is
    # not migrated. DET_MIGRATE_ON_START.
    migrate_on_start: bool = True
    # The request time limit of the platform in front (Cloud Run's timeout, the load balancer's
    # idle timeout, CloudFront's origin response timeout): log follows, long-polls and proxied
    # WebSockets end cleanly before it, and clients resume them. None: no limit.
    request_time_limit_seconds: float | None = Field(None, gt=0, le=86400)
    wakeups: WakeupsConfig = WakeupsConfig()
    webhooks: WebhooksConfig = WebhooksConfig()
    # What a non-admin's webhook or checkpoint storage endpoint may reach (det.master.egress).
    egress: EgressConfig = EgressConfig()
    retention_policy: RetentionPolicyConfig = RetentionPolicyConfig()
    # Control loop tuning (seconds).
    tick_seconds: float = Field(0.5, gt=0)
    agent_timeout_seconds: float = Field(30.0, gt=0)
    # An unmanaged trial (a core_v2 script run outside the cluster) whose script sends nothing
    # for this long is ERROR (Determined's 5 minutes; its scripts send a heartbeat each minute).
    unmanaged_timeout_seconds: float = Field(300.0, ge=10)
    # How many API worker threads the HTTP server runs, in each of ``api_processes`` processes
    # sharing the port (the extra processes serve the API only; the control loops run in one).
    # A request that waits with nothing to do (a trial's preemption long-poll, an agent's wait
    # for work) runs on an extra thread meanwhile (det.master.dispatch.parked), so these serve
    # the requests that work, however many trials wait.
    api_threads: int = Field(128, ge=1)
    # The same for each of the api_processes when user_api_processes > 0: they then serve only
    # agents, tasks and /info (short database work each), and more threads than requests that
    # can run at once only contend for the interpreter's lock (docs/deploy.md, Scale).
    cluster_api_threads: int = Field(16, ge=1)
    api_processes: int = Field(1, ge=1, le=64)
    # The HTTP server's event loop: ``readiness`` (det.master.evloop: one epoll set, a
    # connection asked for its readiness only when it changed) or ``poll`` (waitress's own,
    # which asks every open connection at every wake-up; kept to compare with).
    api_event_loop: Literal["readiness", "poll"] = "readiness"
    # Seconds in which the readiness loop asks every connection again, a tenth at a time: the
    # bound on what a readiness change it was not told of could cost (det.master.evloop).
    api_full_pass_seconds: float = Field(10.0, gt=0, le=3600)
    # A waiting long-poll parks without a thread (det.master.deferred) instead of in one of its
    # own. Off until its young collections are understood (docs/deploy.md, Scale).
    api_park_without_thread: bool = False
    # Processes that serve users' requests, apart from the ones serving agents, tasks and /info
    # (det.master.dispatch): 0 serves everything in the api_processes. Two by default: on a
    # 2-core machine the second serves 1.1-1.6x the reads of one (docs/benchmarks.md).
    user_api_processes: int = Field(2, ge=0, le=64)
    # Database connections per process. Waiting requests (long-polls, log follows) give theirs
    # back while they wait, so this can be far below api_threads.
    db_pool_size: int = Field(20, ge=2)
    # How long an API process may answer from its own cache of session lookups (revocations
    # reach every process at once: det.master.authcache); 0 looks every request's token up.
    session_cache_seconds: float = Field(10.0, ge=0)
    # The same for tasks' allocation tokens (an allocation's end reaches every process at once,
    # migration 0051). Longer by default: a trial's token is used every few seconds for as long
    # as it runs, from every front (its reports, log batches and long-polls); 0 looks it up each
    # time.
    task_token_cache_seconds: float = Field(300.0, ge=0)
    # Idle interactive tasks (Determined's keys and defaults): a TensorBoard no request reached
    # through the proxy for this many seconds is killed; a notebook idle this long (by its
    # ``notebook_idle_type``) too, off by default. A task's own ``idle_timeout`` wins; 0 or null
    # here: never.
    tensorboard_timeout: int | None = Field(300, ge=0)
    notebook_timeout: int | None = Field(None, ge=0)

    _tcd = field_validator("task_container_defaults")(_check_tcd)

    @field_validator("task_origin")
    @classmethod
    def _check_task_origin(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        m = re.fullmatch(
            r"(https?)://((?:\{task\}\.)?[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:\d{1,5})?", value
        )
        if m is None:
            raise ValueError(
                "must be scheme://host[:port] (http or https, no path; {task} only as the"
                f" host's first label), not {value!r}"
            )
        if m.group(3) and not 0 < int(m.group(3)[1:]) < 65536:
            raise ValueError(f"port out of range in {value!r}")
        return value

    @model_validator(mode="after")
    def _task_origin_is_not_the_masters(self) -> MasterConfig:
        if self.task_origin is None and self.task_port is None:
            raise ValueError(
                "task_port: null needs task_origin (interactive tasks are served on an origin"
                " of their own)"
            )
        if self.task_port is not None and self.task_port == self.port:
            raise ValueError(f"task_port: must differ from port ({self.port})")
        if self.task_origin is not None and self.master_url:
            ours = urllib.parse.urlsplit(self.master_url)
            theirs = urllib.parse.urlsplit(self.task_origin)
            if (ours.scheme, ours.netloc.lower()) == (theirs.scheme, theirs.netloc.lower()):
                raise ValueError("task_origin: must not be the master's own origin (master_url)")
        return self

    @model_validator(mode="after")
    def _parse_providers(self) -> MasterConfig:
        # Once, here: an invalid provider block stops the master at start-up, naming the field.
        for i, pool in enumerate(self.resource_pools):
            if pool.provider is not None:
                pool._provider_config = parse_provider_config(
                    pool.provider, path=f"resource_pools[{i}].provider"
                )
            cost = pool._provider_config.cost if pool._provider_config else None
            if pool.price is not None and cost is not None and (cost.prices or cost.spot_prices):
                raise ValueError(
                    f"resource_pools[{i}].price: give a price or provider.cost.prices, not both"
                )
        return self

    def pool(self, name: str) -> ResourcePoolConfig | None:
        return next((p for p in self.resource_pools if p.pool_name == name), None)

    def task_container_defaults_for(self, pool_name: str) -> JSONObject:
        """The ``task_container_defaults`` that apply in a pool: the pool's over the master's."""
        pool = self.pool(pool_name)
        return merge_task_container_defaults(
            self.task_container_defaults, pool.task_container_defaults if pool else None
        )

    def task_container_policy_for(self, pool_name: str) -> ContainerPolicy:
        """The ``task_container_policy`` that applies in a pool: the pool's keys over the
        master's."""
        pool = self.pool(pool_name)
        if pool is None or pool.task_container_policy is None:
            return self.task_container_policy
        return pool.task_container_policy.over(self.task_container_policy)

    def long_request_seconds(self, wanted: float | None = None) -> float | None:
        """How long a long request (a log follow, a long-poll, a proxied WebSocket) may last:
        ``wanted`` (None: unbounded), ended early enough before ``request_time_limit_seconds``
        (a tenth of it, between 2 and 10 s) that the platform never cuts it."""
        limit = self.request_time_limit_seconds
        if limit is None:
            return wanted
        budget = max(limit - min(max(limit * 0.1, 2.0), 10.0), limit / 2)
        return budget if wanted is None else min(wanted, budget)

    def url(self) -> str:
        scheme = "https" if self.security.tls.enabled else "http"
        return self.master_url or f"{scheme}://127.0.0.1:{self.port}"

    def redacted(self) -> JSONObject:
        """The config as JSON, secrets replaced (for ``GET /api/v1/master/config``)."""
        out = self.model_dump(mode="json")
        if out.get("db"):
            out["db"]["password"] = "********" if out["db"].get("password") else ""
            if out["db"].get("url"):
                out["db"]["url"] = "********"
        out["security"]["initial_user_password"] = "********"
        if out["security"].get("agent_token"):
            out["security"]["agent_token"] = "********"
        if out["webhooks"].get("signing_key"):
            out["webhooks"]["signing_key"] = "********"
        # The rule every stored config the API returns follows (det.master.expconf.redact).
        out["checkpoint_storage"] = hide_secrets(out.get("checkpoint_storage"), STORAGE_SECRET_KEYS)
        for tcd in [out.get("task_container_defaults")] + [
            p.get("task_container_defaults") for p in out.get("resource_pools") or []
        ]:
            if isinstance(tcd, dict) and "registry_auth" in tcd:
                tcd["registry_auth"] = hide_secrets(tcd["registry_auth"], SECRET_KEYS)
        return out


_ENV_SCALARS = {
    "DET_PORT": ("port",),
    "DET_DATA_DIR": ("data_dir",),
    "DET_MASTER_URL": ("master_url",),
    "DET_TASK_PORT": ("task_port",),
    "DET_TASK_ORIGIN": ("task_origin",),
    "DET_LOG_LEVEL": ("log", "level"),
    "DET_SECURITY_INITIAL_USER_PASSWORD": ("security", "initial_user_password"),
    "DET_SECURITY_AGENT_TOKEN": ("security", "agent_token"),
    "DET_SECURITY_TRUSTED_PROXIES": ("security", "trusted_proxies"),
    "DET_SECURITY_TLS_CERT": ("security", "tls", "cert"),
    "DET_SECURITY_TLS_KEY": ("security", "tls", "key"),
    "DET_RUN_LOOPS": ("run_loops",),
    "DET_API_PROCESSES": ("api_processes",),
    "DET_CLUSTER_API_THREADS": ("cluster_api_threads",),
    "DET_API_FULL_PASS_SECONDS": ("api_full_pass_seconds",),
    "DET_API_PARK_WITHOUT_THREAD": ("api_park_without_thread",),
    "DET_USER_API_PROCESSES": ("user_api_processes",),
    "DET_DB_POOL_SIZE": ("db_pool_size",),
    "DET_MIGRATE_ON_START": ("migrate_on_start",),
    "DET_REQUEST_TIME_LIMIT_SECONDS": ("request_time_limit_seconds",),
    "DET_WAKEUPS_TYPE": ("wakeups", "type"),
    "DET_WAKEUPS_URL": ("wakeups", "url"),
    "DET_WAKEUPS_QUEUE": ("wakeups", "queue"),
    "DET_WAKEUPS_TARGET_ARN": ("wakeups", "target_arn"),
    "DET_WAKEUPS_ROLE_ARN": ("wakeups", "role_arn"),
    "DET_WAKEUPS_GROUP": ("wakeups", "group"),
    "DET_WAKEUPS_REGION": ("wakeups", "region"),
    "DET_WAKEUPS_RESOURCE_ID": ("wakeups", "resource_id"),
    "DET_WAKEUPS_HOLD_SECONDS": ("wakeups", "hold_seconds"),
    "DET_WEBHOOKS_SIGNING_KEY": ("webhooks", "signing_key"),
    "DET_DB_URL": ("db", "url"),
    "DET_DB_HOST": ("db", "host"),
    "DET_DB_PORT": ("db", "port"),
    "DET_DB_NAME": ("db", "name"),
    "DET_DB_USER": ("db", "user"),
    "DET_DB_PASSWORD": ("db", "password"),
    "DET_DB_SSL_MODE": ("db", "ssl_mode"),
    # The private registry's password (``det deploy … --registry-password``): kept in the
    # cluster's secret store, never in master.yaml.
    "DET_TASK_CONTAINER_DEFAULTS_REGISTRY_AUTH_PASSWORD": (
        "task_container_defaults",
        "registry_auth",
        "password",
    ),
}


def _format_error(err: pydantic.ValidationError) -> str:
    parts = []
    for e in err.errors():
        path = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            parts.append(f"unknown key '{path}'")
        elif not path:  # a check of the whole config: its message names the key
            parts.append(e["msg"].removeprefix("Value error, "))
        else:
            parts.append(f"{path}: {e['msg'].removeprefix('Value error, ')}")
    return "invalid master config: " + "; ".join(parts)


def parse_config(raw: JSONObject | None, env: dict[str, str] | None = None) -> MasterConfig:
    data: JSONObject = dict(raw or {})
    for var, path in _ENV_SCALARS.items():
        value = (env or {}).get(var)
        if value is None:
            continue
        node = data
        for key in path[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):  # absent or null: the variable's block starts here
                child = node[key] = {}
            node = child
        node[path[-1]] = value
    try:
        return MasterConfig.model_validate(data)
    except pydantic.ValidationError as e:
        raise MasterConfigError(_format_error(e)) from None


# The whole master.yaml document in one environment variable, for platforms that give a
# container no file of its own (Cloud Run, ECS Fargate: ``det deploy … --master serverless``).
# A ``--config-file`` wins over it; the ``DET_*`` overrides apply on top of either.
CONFIG_ENV = "DET_MASTER_CONFIG"


def load_config(
    path: str | os.PathLike[str] | None, env: dict[str, str] | None = None
) -> MasterConfig:
    env = env if env is not None else dict(os.environ)
    raw: JSONObject | None = None
    text: str | None = None
    where = f"${CONFIG_ENV}"
    if path is not None:
        where = str(path)
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise MasterConfigError(f"cannot read master config {path}: {e.strerror}") from None
    elif env.get(CONFIG_ENV):
        text = env[CONFIG_ENV]
    if text is not None:
        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise MasterConfigError(f"invalid YAML in {where}: {e}") from None
        if raw is not None and not isinstance(raw, dict):
            raise MasterConfigError(f"master config {where} must be a mapping of keys")
    return parse_config(raw, env)
