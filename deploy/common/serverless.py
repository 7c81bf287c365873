"""What the serverless control plane (``up --master serverless``) shares on both clouds.

The master runs as the ``det-master`` image (``infra/``): plain HTTP on ``$PORT`` behind the
platform's TLS, its config from the environment, migrations as a one-off run of the same image
(``det-master migrate``), never by the service. An ``up`` rolls out in two passes
(:class:`Rollout`): the first creates or updates everything but leaves the service (and the
migration job on GCP) on the image it already runs, so the registry exists before the image
is pushed; then the image is pushed, the migration runs, and the second pass rolls the service.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any, ClassVar, Protocol, TypeVar

from det.common.jsontypes import JSONObject
from det.deploy.common import masteryaml
from det.deploy.common.errors import DeployError
from det.deploy.common.release import Release

VM = "vm"
SERVERLESS = "serverless"
MASTER_KINDS = (VM, SERVERLESS)
# The default ``--master`` of a new cluster: serverless, since its simulation (the image under
# Docker behind a TLS proxy, two instances, scale to zero and back, a wake-up, a trial run by a
# woken loop) passes on both clouds. An existing cluster keeps the kind it was deployed with.
DEFAULT_MASTER = SERVERLESS

IMAGE_NAME = "det-master"
# The port the platform sends requests to (Cloud Run sets ``$PORT`` to it; the ECS task
# definition maps it); the master serves plain HTTP there.
CONTAINER_PORT = 8080
# The master's second listener (``task_port``, det.master.task_origin): every connection on it
# goes to the task proxy as the task origin, one request each, whatever its ``Host``. The
# platform sends the task origin's requests there (a Cloud Run service of its own on GCP, an
# ALB rule and target group on AWS), never to :data:`CONTAINER_PORT`.
TASK_CONTAINER_PORT = 8081
# Read-only root file system: the master's data directory is on the platform's writable tmpfs.
DATA_DIR = "/tmp/det-master"
# Connections per master process on AWS (Aurora Serverless v2 allows hundreds at its maximum
# ACU) and the most ECS tasks of the master service.
DB_POOL_SIZE = 5
MAX_INSTANCES = 2
# The platforms' request limit: Cloud Run's maximum request timeout is 60 minutes; an ALB's
# idle timeout may be set up to 4000 s. Long requests (log follows, WebSockets) end before it.
REQUEST_TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class Shape:
    """A serverless service's master processes, as PostgreSQL sees them."""

    instances: int  # the most instances (Cloud Run revisions' max instances, ECS tasks)
    pool: int  # db_pool_size: each process's pool
    user_processes: int  # user_api_processes
    loops: bool  # run_loops: the front process takes part in the leader election
    fronts: int = 1  # api_processes: front processes sharing the instance's port

    def connections(self) -> int:
        """The most connections the service holds: in every process its pool and the two
        long-poll listeners it may open (det.master.preemptwait: the tasks' and the agents'
        channels); in the first front process also the revocation listener
        (det.master.authcache) and, with the loops, the leader lock's
        (det.master.leader_lock)."""
        process = self.pool + 2
        first = process + 1 + (1 if self.loops else 0)
        others = (self.fronts - 1 + self.user_processes) * process
        return self.instances * (first + others)

    def env(self) -> dict[str, str]:
        """The service's settings of these, as the master's ``DET_*`` overrides."""
        return {
            DB_POOL_SIZE_ENV: str(self.pool),
            API_PROCESSES_ENV: str(self.fronts),
            USER_PROCESSES_ENV: str(self.user_processes),
            RUN_LOOPS_ENV: "true" if self.loops else "false",
        }


# The migration job's: one connection (det.master.db.upgrade).
MIGRATION_CONNECTIONS = 1


# The image's entry point is det-master (after mapping $PORT); its default command is ``run``.
# The migration job replaces the command only (Cloud Run ``args``, ECS ``command``).
MIGRATE_ARGS = ("migrate",)

# Environment the master reads (det.master.config): the config document itself and the
# secrets, each from the platform's secret store.
CONFIG_ENV = "DET_MASTER_CONFIG"
DB_PASSWORD_ENV = "DET_DB_PASSWORD"
AGENT_TOKEN_ENV = "DET_SECURITY_AGENT_TOKEN"
ADMIN_PASSWORD_ENV = "DET_SECURITY_INITIAL_USER_PASSWORD"
REGISTRY_PASSWORD_ENV = "DET_TASK_CONTAINER_DEFAULTS_REGISTRY_AUTH_PASSWORD"
# The serverless keys of det.master.config, as environment variables (``DET_*`` overrides):
# the service never migrates (the job does), long requests end before the platform's limit,
# and the loop's wake-ups go to the platform's scheduler (det.master.wakeups).
MIGRATE_ON_START_ENV = "DET_MIGRATE_ON_START"
# The master's own port (the image's entry point takes ``$PORT`` unless this is set) and
# whether an instance runs the control loops: the task origin's instances set both.
PORT_ENV = "DET_PORT"
RUN_LOOPS_ENV = "DET_RUN_LOOPS"
# The task origin's instances serve the proxy only, in their front process: no user process
# (each would hold database connections for nothing).
USER_PROCESSES_ENV = "DET_USER_API_PROCESSES"
# Front processes an instance (Shape.fronts): set by each service, as its budget counts them.
API_PROCESSES_ENV = "DET_API_PROCESSES"
DB_POOL_SIZE_ENV = "DET_DB_POOL_SIZE"
REQUEST_LIMIT_ENV = "DET_REQUEST_TIME_LIMIT_SECONDS"
WAKEUPS_TYPE_ENV = "DET_WAKEUPS_TYPE"
WAKEUPS_QUEUE_ENV = "DET_WAKEUPS_QUEUE"
WAKEUPS_TARGET_ARN_ENV = "DET_WAKEUPS_TARGET_ARN"
WAKEUPS_ROLE_ARN_ENV = "DET_WAKEUPS_ROLE_ARN"
WAKEUPS_GROUP_ENV = "DET_WAKEUPS_GROUP"
WAKEUPS_REGION_ENV = "DET_WAKEUPS_REGION"
WAKEUPS_RESOURCE_ID_ENV = "DET_WAKEUPS_RESOURCE_ID"
WAKEUPS_HOLD_SECONDS_ENV = "DET_WAKEUPS_HOLD_SECONDS"
# What the master's wake-up call looks like (det.master.wakeups: POST with a token header the
# master derives from its cluster secret; EventBridge events carry it in detail.token).
WAKEUP_PATH = "/api/v1/master/wakeup"
WAKEUP_TOKEN_HEADER = "X-Det-Wakeup-Token"
WAKEUP_EVENT_SOURCE = "det.master"
WAKEUP_EVENT_DETAIL_TYPE = "det wake-up"


def service_env(request_limit_s: int) -> dict[str, str]:
    """The service's own settings (not the migration job's)."""
    return {MIGRATE_ON_START_ENV: "false", REQUEST_LIMIT_ENV: str(request_limit_s)}


def master_kind(given: str | None, previous: JSONObject | None) -> str:
    """The master kind of this ``up``: ``--master`` if given; else the kind the existing stack
    (``previous``: its outputs; None for a new cluster) was deployed with, so a later ``up``
    without the flag never turns a VM cluster into a serverless one; else the default.

    A serverless stack records ``master: serverless`` in its outputs; a stack without the key
    is a VM one. Changing the kind of an existing cluster would replace its master and its
    database (a serverless cluster has its own), so it is refused: ``down`` the cluster and
    deploy it again."""
    recorded = None if previous is None else str(previous.get("master") or VM)
    if given and recorded and given != recorded:
        raise DeployError(
            f"the cluster's master is deployed as --master {recorded}, not {given}: a cluster "
            "cannot change its master kind in place (its database would be replaced); pass "
            f"--master {recorded}, or `down` the cluster and deploy it again"
        )
    return given or recorded or DEFAULT_MASTER


def check_flags(args: argparse.Namespace) -> None:
    """Refuse the ``up`` flags a serverless master has no use for (one line, naming the flag)."""
    for flag, given in (
        ("--no-tls", getattr(args, "no_tls", False)),
        ("--master-tls-cert", getattr(args, "master_tls_cert", None)),
        ("--master-tls-key", getattr(args, "master_tls_key", None)),
        ("--port", getattr(args, "port", None)),
        ("--master-instance-type", getattr(args, "master_instance_type", None)),
    ):
        if given:
            default = "" if getattr(args, "master", None) else " (the default for a new cluster)"
            raise DeployError(
                f"{flag} does not apply to --master serverless{default}: the platform serves "
                "the master over HTTPS with a public certificate on its own port and sizes its "
                "instances; pass --master vm for a VM master"
            )


class _Config(Protocol):
    """A cloud's config (``AwsConfig``, ``GcpConfig``): a dataclass with the master's kind."""

    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]


C = TypeVar("C", bound=_Config)


def with_master_kind(
    cfg: C, args: argparse.Namespace, previous: JSONObject | None, **changes: object
) -> C:
    """``cfg`` with this ``up``'s master kind (:func:`master_kind`); a serverless master is
    served by the platform's HTTPS on :data:`CONTAINER_PORT` (its flags checked,
    :func:`check_flags`) and takes the cloud's own ``changes`` too."""
    kind = master_kind(getattr(args, "master", None), previous)
    if kind != SERVERLESS:
        return dataclasses.replace(cfg, master=kind)
    check_flags(args)
    return dataclasses.replace(cfg, master=kind, tls=False, port=CONTAINER_PORT, **changes)


def image_tag(rel: Release) -> str:
    """The image's tag: det's version and the wheel's hash, so a new build is a new tag."""
    return f"{rel.filename.split('-')[1]}-{rel.sha256[:12]}"


@dataclasses.dataclass(frozen=True)
class Rollout:
    """Which image each part of the serverless master runs in this pass of ``up``."""

    release: str
    """The image this ``up`` ships (registry path and tag)."""
    service: str | None
    """The image the service runs after this pass; None: no service yet (the first pass of
    a new cluster, before the image is pushed)."""

    @property
    def final(self) -> bool:
        """The pass that rolls the service to the release."""
        return self.service == self.release


def serverless_master_config(
    config: masteryaml.MasterConfig, public_url: str, task_url: str
) -> masteryaml.MasterConfig:
    """A VM master.yaml document (``masteryaml.master_config``, built without TLS) made into the
    serverless master's: plain HTTP on :data:`CONTAINER_PORT`, the platform's public URL for
    agents and tasks (public-CA TLS: no pinned certificate), a tmpfs data directory and a small
    connection pool. Interactive tasks live on ``task_url`` (a second host name of the
    platform's, one origin for all tasks), served by the listener on
    :data:`TASK_CONTAINER_PORT`."""
    out = config.copy()
    out["port"] = CONTAINER_PORT
    out["master_url"] = public_url
    out["task_origin"] = task_url
    out["task_port"] = TASK_CONTAINER_PORT
    out["data_dir"] = DATA_DIR
    out["db_pool_size"] = DB_POOL_SIZE
    # One front process an instance unless the service's environment says more (each
    # service's Shape.env, the count its connection budget holds).
    out["api_processes"] = 1
    out.pop("security", None)
    pools = []
    for pool in out["resource_pools"]:
        provider = pool["provider"].copy()
        provider["master_url"] = public_url
        provider.pop("master_cert_name", None)
        new = pool.copy()
        new["provider"] = provider
        pools.append(new)
    out["resource_pools"] = pools
    return out


def render_config(config: masteryaml.MasterConfig) -> str:
    return masteryaml.render(config)
