"""The GCP cluster with a serverless master (``up --master serverless``): Cloud Run.

* The ``det-master`` image in the cluster's Artifact Registry repository (``up`` pushes it
  between its two passes, ``common.serverless.Rollout``).
* A Cloud Run (v2) service for the API and WebUI on its ``run.app`` URL (Google-managed HTTPS,
  public CA): request timeout 3600 s (Cloud Run's maximum), CPU always allocated
  (``cpu_idle=False``: instance-based billing, so the control loop runs while an instance
  lives), 0 to :data:`~det.deploy.common.serverless.MAX_INSTANCES` instances, Direct VPC egress
  (private ranges only) into the cluster's subnet: Cloud SQL's private IP and the agents' task
  ports, with the network tag the firewall gives the master.
* A second service, ``det-<cluster>-tasks``, for the task origin (notebooks, TensorBoards:
  det.master.task_origin): the same image and config, its loops off, Cloud Run's requests sent
  to the master's task listener (:data:`~det.deploy.common.serverless.TASK_CONTAINER_PORT`),
  which serves only the task proxy. A service answers on two ``run.app`` URLs, a deterministic
  one (``SERVICE-PROJECT_NUMBER.REGION.run.app``) and a hash-based one known only once it
  exists; the master's config names both origins before either service exists, so each gets
  a service of its own and its deterministic URL (the hash-based URLs reach the same
  listeners: the API's one more origin of the WebUI, the tasks' one more task origin).
* Secrets in Secret Manager, one per value (database password, agent token, admin password, a
  private registry's password), read by Cloud Run into the environment; the master's service
  account may access those secrets and no other.
* A Cloud Run job ``det-master migrate`` that runs, and must complete, before the service
  rolls: its ``run_execution_token`` is a hash of the image (``execution_token``) (Pulumi waits for the execution to
  complete), and the service depends on it.
* A Cloud Tasks queue for the loop's wake-ups (``det.master.wakeups``: HTTP tasks calling the
  public URL with the master's wake-up token); the master may enqueue on that queue only.
* Least privilege for launching agents: the provisioner role with an IAM condition on the
  instance and disk names (``det-agent-<cluster>-``, ``iam.agents_only_condition``).

The master's config travels in the environment (``DET_MASTER_CONFIG``): no secret in it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any, TypedDict, TypeVar

import pulumi
import pulumi_gcp as gcp

from det.deploy.common import dryrun, masteryaml, passwords, release
from det.deploy.common import serverless as sl
from det.deploy.gcp import iam, image_mirror, master, network, storage
from det.deploy.gcp.config import GcpConfig

RUN_CPU = "1"
RUN_MEMORY = "1Gi"
WAKEUP_KIND = "cloud_tasks"
MIGRATED_ANNOTATION = "det-migrated"
# The services' processes fit the database's connections (Cloud SQL's default max_connections
# by tier: db-f1-micro 25, db-g1-small 50, every other tier at least 100; Cloud SQL docs,
# "Quotas and limits", maximum concurrent connections), less superuser_reserved_connections' 3
# for Cloud SQL's own user, with the migration job. The API service: one instance (1 vCPU) with
# one user API process, so a user's flood never delays agents and tasks, and two front
# processes where the tier leaves room for the second through a rollout (on one core two
# fronts answer agents and tasks sooner than one: docs/deploy.md, Scale); the default
# serverless tier, db-f1-micro, does not (API_SHAPE and TASKS_SHAPE and the job take its 22),
# nor does db-g1-small (47: room for a rollout's overlap with one front, not with two). The
# tasks service: one instance of one process (no loops), many proxied connections in it (Cloud
# Run's limit is 1000 requests an instance; a JupyterLab tab holds a few).
SQL_CONNECTIONS = {"db-f1-micro": 25, "db-g1-small": 50}
SQL_LEAST_CONNECTIONS = 100  # any other tier
SQL_RESERVED_CONNECTIONS = 3
SMALL_DB_CONNECTIONS = SQL_CONNECTIONS["db-f1-micro"] - SQL_RESERVED_CONNECTIONS
API_SHAPE = sl.Shape(instances=1, pool=4, user_processes=1, loops=True)
TASKS_SHAPE = sl.Shape(instances=1, pool=4, user_processes=0, loops=False)


def sql_connections(tier: str) -> int:
    """The connections a Cloud SQL tier gives det's user (its default max_connections less the
    reserved ones)."""
    return SQL_CONNECTIONS.get(tier, SQL_LEAST_CONNECTIONS) - SQL_RESERVED_CONNECTIONS


# Cloud Run may run up to about twice a revision's maximum instances for a while (a rollout's
# old and new instances, spikes, maintenance: "About instance autoscaling").
ROLLOUT_OVERLAP = 2


def api_shape(tier: str) -> sl.Shape:
    """The API service's processes on ``tier``: a second front where the tier leaves room for
    it beside the tasks service and the migration job, with both services' instances doubled
    as in a rollout (db-custom-1-3840, the VM master's default tier, and larger)."""
    two = dataclasses.replace(API_SHAPE, fronts=2)
    services = two.connections() + TASKS_SHAPE.connections()
    needed = ROLLOUT_OVERLAP * services + sl.MIGRATION_CONNECTIONS
    return two if needed <= sql_connections(tier) else API_SHAPE


TASKS_MAX_INSTANCES = TASKS_SHAPE.instances
TASKS_CONCURRENCY = 250


def image_repository(cfg: GcpConfig) -> str:
    """The Artifact Registry path images are pushed to (``up`` appends ``det-master:<tag>``)."""
    return f"{cfg.region}-docker.pkg.dev/{cfg.project_id}/det-{cfg.cluster_id}"


def release_image(cfg: GcpConfig) -> str:
    """The image this det ships (the placeholder release on a dry-run)."""
    rel = cfg.boot.release or release.placeholder()
    return f"{image_repository(cfg)}/{sl.IMAGE_NAME}:{sl.image_tag(rel)}"


def rollout(cfg: GcpConfig) -> sl.Rollout:
    if cfg.rollout is not None:
        return cfg.rollout
    image = release_image(cfg)
    return sl.Rollout(release=image, service=image)


def service_name(cfg: GcpConfig) -> str:
    return f"det-{cfg.cluster_id}"


def tasks_service_name(cfg: GcpConfig) -> str:
    return f"det-{cfg.cluster_id}-tasks"


def execution_token(image: str) -> str:
    """The migration job's execution token for ``image``: a new image, a new token (so Pulumi
    runs the job again); the same image, the same one. It ends the execution's name, so it is
    what Cloud Run accepts there (a-z 0-9, no '.' or '+' of a version) and short enough that the
    job's name and it make fewer than 63 characters (``names.run_execution_token``): 12
    hexadecimal digits of the reference's sha256, with a 47-character job name 59."""
    return hashlib.sha256(image.encode()).hexdigest()[:12]


def public_url(cfg: GcpConfig, project_number: str) -> str:
    """The service's deterministic URL, known before the service exists (the master's config,
    which the service carries, names it): ``https://SERVICE-PROJECT_NUMBER.REGION.run.app``.
    Cloud Run gives one when ``SERVICE-PROJECT_NUMBER`` fits a 63-character DNS label
    (https://cloud.google.com/run/docs/triggering/https-request#deterministic): a cluster id
    has at most 35 characters, so ``det-<id>-tasks`` and a 12-digit number make 58."""
    return f"https://{service_name(cfg)}-{project_number}.{cfg.region}.run.app"


def task_url(cfg: GcpConfig, project_number: str) -> str:
    """The task origin: the tasks service's deterministic URL."""
    return f"https://{tasks_service_name(cfg)}-{project_number}.{cfg.region}.run.app"


@dataclasses.dataclass
class Secrets:
    """One Secret Manager secret per value the master reads from its environment."""

    ids: dict[str, pulumi.Output[str]]
    """Environment variable → secret id."""
    db_password: pulumi.Output[str]
    initial_user_password: pulumi.Output[str]


def _secrets(
    name: str,
    cfg: GcpConfig,
    initial_user_password: pulumi.Input[str] | None,
    registry_password: pulumi.Input[str] | None,
    member: pulumi.Output[str],
    child: pulumi.ResourceOptions,
) -> Secrets:
    values = passwords.serverless_values(
        name, initial_user_password, registry_password if cfg.registry else None, child
    )
    made = values.passwords
    ids: dict[str, pulumi.Output[str]] = {}
    for env, (suffix, value) in values.by_env.items():
        secret = gcp.secretmanager.Secret(
            f"{name}-{suffix}",
            project=cfg.project_id,
            secret_id=f"{name}-{suffix}",
            labels=cfg.all_labels,
            replication=gcp.secretmanager.SecretReplicationArgs(
                auto=gcp.secretmanager.SecretReplicationAutoArgs()
            ),
            opts=child,
        )
        gcp.secretmanager.SecretVersion(
            f"{name}-{suffix}", secret=secret.id, secret_data=value, opts=child
        )
        gcp.secretmanager.SecretIamMember(
            f"{name}-{suffix}-master",
            project=cfg.project_id,
            secret_id=secret.id,
            role="roles/secretmanager.secretAccessor",
            member=member,
            opts=child,
        )
        ids[env] = secret.secret_id
    return Secrets(ids, made.db_password, made.initial_user_password)


def _env_spec(
    config_yaml: pulumi.Input[str],
    secrets: Secrets,
    wakeup: dict[str, pulumi.Input[str]],
    job: bool,
) -> tuple[dict[str, pulumi.Input[str]], dict[str, pulumi.Input[str]]]:
    """(plain variables, variable → secret id): the migration gets the config and the database
    password only."""
    plain: dict[str, pulumi.Input[str]] = {sl.CONFIG_ENV: config_yaml}
    if not job:
        plain.update(wakeup)
    wanted = [sl.DB_PASSWORD_ENV] if job else list(secrets.ids)
    return plain, {env: secrets.ids[env] for env in wanted}


_Env = TypeVar("_Env")


def _envs(
    plain: dict[str, pulumi.Input[str]],
    secret: dict[str, pulumi.Input[str]],
    env: Callable[..., _Env],
    source: Callable[..., Any],
    key_ref: Callable[..., Any],
) -> list[_Env]:
    """A container's variables: ``plain`` by value, ``secret`` from Secret Manager's latest
    version. ``env``, ``source`` and ``key_ref`` are the Args classes of a service's or a job's
    container (the same fields, two sets of classes)."""
    out = [env(name=k, value=v) for k, v in plain.items()]
    for name, secret_id in secret.items():
        ref = key_ref(secret=secret_id, version="latest")
        out.append(env(name=name, value_source=source(secret_key_ref=ref)))
    return out


def _service_env(
    plain: dict[str, pulumi.Input[str]], secret: dict[str, pulumi.Input[str]]
) -> list[gcp.cloudrunv2.ServiceTemplateContainerEnvArgs]:
    return _envs(
        plain,
        secret,
        gcp.cloudrunv2.ServiceTemplateContainerEnvArgs,
        gcp.cloudrunv2.ServiceTemplateContainerEnvValueSourceArgs,
        gcp.cloudrunv2.ServiceTemplateContainerEnvValueSourceSecretKeyRefArgs,
    )


def _job_env(
    plain: dict[str, pulumi.Input[str]], secret: dict[str, pulumi.Input[str]]
) -> list[gcp.cloudrunv2.JobTemplateTemplateContainerEnvArgs]:
    return _envs(
        plain,
        secret,
        gcp.cloudrunv2.JobTemplateTemplateContainerEnvArgs,
        gcp.cloudrunv2.JobTemplateTemplateContainerEnvValueSourceArgs,
        gcp.cloudrunv2.JobTemplateTemplateContainerEnvValueSourceSecretKeyRefArgs,
    )


class _Nic(TypedDict):
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    tags: list[str]


class _VpcEgress(TypedDict):
    """A Cloud Run service's or job's VPC access (each takes it in its own Args class)."""

    egress: str
    network_interfaces: list[_Nic]


def _vpc(network_id: pulumi.Input[str], subnetwork_id: pulumi.Input[str], tag: str) -> _VpcEgress:
    """Direct VPC egress (no connector): private ranges (Cloud SQL's private IP, the agents)
    through the cluster's subnet with the master's network tag; the rest (Google APIs, the
    internet) the usual way."""
    return {
        "egress": "PRIVATE_RANGES_ONLY",
        "network_interfaces": [{"network": network_id, "subnetwork": subnetwork_id, "tags": [tag]}],
    }


def build(
    cfg: GcpConfig,
    initial_user_password: pulumi.Input[str] | None = None,
    registry_password: pulumi.Input[str] | None = None,
) -> dict[str, pulumi.Output[Any]]:
    name = f"det-{cfg.cluster_id}"
    master_tag, agent_tag = f"{name}-master", f"{name}-agent"
    roll = rollout(cfg)
    net = network.for_cluster(name, cfg, master_tag, agent_tag)
    bucket = storage.checkpoint_bucket(name, cfg)
    agent_prefix = f"det-agent-{cfg.cluster_id}-"
    accounts = iam.ServiceAccounts(
        name,
        iam.ServiceAccountsArgs(
            project=cfg.project_id,
            cluster_id=cfg.cluster_id,
            bucket=bucket.name,
            agent_name_prefix=agent_prefix,
        ),
    )
    plane = ServerlessMaster(
        f"{name}-master",
        ServerlessMasterArgs(
            config=cfg,
            rollout=roll,
            network_id=net.network_id,
            subnetwork_id=net.subnetwork_id,
            master_tag=master_tag,
            agent_tag=agent_tag,
            bucket=bucket.name,
            master_email=accounts.master_email,
            master_member=accounts.master_member,
            agent_email=accounts.agent_email,
            initial_user_password=initial_user_password,
            registry_password=registry_password,
        ),
    )
    mirrors = image_mirror.repositories(cfg, accounts.agent_email)
    return {
        **mirrors,
        "cluster_id": pulumi.Output.from_input(cfg.cluster_id),
        "project_id": pulumi.Output.from_input(cfg.project_id),
        "zone": pulumi.Output.from_input(cfg.zone_name),
        "region": pulumi.Output.from_input(cfg.region),
        "master": pulumi.Output.from_input(sl.SERVERLESS),
        "master_url": plane.url,
        "master_service": plane.service_name,
        "task_url": plane.task_url,
        "tasks_service": plane.tasks_service_name,
        "master_image": pulumi.Output.from_input(roll.service),
        "image_repository": plane.repository,
        "migration_job": plane.job_name,
        "wakeup_queue": plane.queue,
        "config_hash": plane.config_hash,
        "bucket": bucket.name,
        "db_endpoint": plane.db_host.apply(lambda h: f"{h}:5432"),
        "network": net.network_name,
        "network_created": pulumi.Output.from_input(not cfg.existing_network),
        "service_peering": plane.peering,
        "agent_service_account": accounts.agent_email,
        "master_service_account": accounts.master_email,
        "initial_user_password": plane.initial_user_password,
        "master_yaml": plane.master_yaml,
    }


@dataclasses.dataclass
class ServerlessMasterArgs:
    config: GcpConfig
    rollout: sl.Rollout
    network_id: pulumi.Input[str]
    subnetwork_id: pulumi.Input[str]
    master_tag: str
    agent_tag: str
    bucket: pulumi.Output[str]
    master_email: pulumi.Output[str]
    master_member: pulumi.Output[str]
    agent_email: pulumi.Output[str]
    initial_user_password: pulumi.Input[str] | None = None
    registry_password: pulumi.Input[str] | None = None


class ServerlessMaster(pulumi.ComponentResource):
    url: pulumi.Output[str]
    task_url: pulumi.Output[str]
    service_name: pulumi.Output[str | None]
    tasks_service_name: pulumi.Output[str | None]
    job_name: pulumi.Output[str | None]
    repository: pulumi.Output[str]
    queue: pulumi.Output[str]
    db_host: pulumi.Output[str]
    peering: pulumi.Output[str]
    master_yaml: pulumi.Output[str]
    config_hash: pulumi.Output[str]
    initial_user_password: pulumi.Output[str]

    def __init__(
        self, name: str, args: ServerlessMasterArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:gcp:ServerlessMaster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        repo = gcp.artifactregistry.Repository(
            name,
            project=cfg.project_id,
            location=cfg.region,
            repository_id=f"det-{cfg.cluster_id}",
            format="DOCKER",
            description=f"det master images ({cfg.cluster_id})",
            labels=cfg.all_labels,
            opts=child,
        )
        secrets = _secrets(
            name,
            cfg,
            args.initial_user_password,
            args.registry_password,
            args.master_member,
            child,
        )
        db = storage.Database(
            f"{name}-db",
            storage.DatabaseArgs(
                project=cfg.project_id,
                region=cfg.region,
                network_id=args.network_id,
                password=secrets.db_password,
                tier=cfg.db_tier,
                edition=cfg.sql_edition,
            ),
            opts=child,
        )
        # Agents install det from the bucket, as with a VM master.
        uploads = master.release_objects(name, cfg.boot, args.bucket, child)
        number = gcp.organizations.get_project_output(project_id=cfg.project_id).number
        url = number.apply(lambda n: public_url(cfg, str(n)))
        tasks = number.apply(lambda n: task_url(cfg, str(n)))
        wakeup = self._wakeup(name, cfg, args, child)
        config = pulumi.Output.all(
            url=url,
            task_url=tasks,
            bucket=args.bucket,
            db_host=db.host,
            agent_email=args.agent_email,
            network_id=args.network_id,
            subnetwork_id=args.subnetwork_id,
            uploads=pulumi.Output.all(*uploads),
        ).apply(lambda v: _master_config(cfg, args.master_tag, args.agent_tag, **v))
        self.master_yaml = config.apply(sl.render_config)
        self.config_hash = config.apply(master.agent_config_hash)
        self.service_name = pulumi.Output.from_input(None)
        self.tasks_service_name = pulumi.Output.from_input(None)
        self.job_name = pulumi.Output.from_input(None)
        image = args.rollout.service
        if image is not None:
            self._service(name, cfg, args, image, secrets, wakeup, child)
        self.url = url
        self.task_url = tasks
        self.repository = repo.name.apply(lambda _: image_repository(cfg))
        self.db_host = db.host
        self.peering = db.peering
        self.initial_user_password = secrets.initial_user_password
        self.register_outputs({"url": url, "repository": self.repository})

    def _wakeup(
        self,
        name: str,
        cfg: GcpConfig,
        args: ServerlessMasterArgs,
        child: pulumi.ResourceOptions,
    ) -> dict[str, pulumi.Input[str]]:
        """The Cloud Tasks queue the loop puts its wake-up calls in (HTTP tasks to the public URL,
        authenticated by the master's wake-up token: no Google identity needed, as invoker IAM is
        off); the service's own settings and the queue as environment."""
        queue = gcp.cloudtasks.Queue(
            f"{name}-wakeup",
            project=cfg.project_id,
            location=cfg.region,
            rate_limits=gcp.cloudtasks.QueueRateLimitsArgs(
                max_dispatches_per_second=1, max_concurrent_dispatches=1
            ),
            retry_config=gcp.cloudtasks.QueueRetryConfigArgs(
                max_attempts=5, min_backoff="10s", max_backoff="300s"
            ),
            opts=child,
        )
        gcp.cloudtasks.QueueIamMember(
            f"{name}-wakeup-enqueuer",
            project=cfg.project_id,
            location=cfg.region,
            name=queue.name,
            role="roles/cloudtasks.enqueuer",
            member=args.master_member,
            opts=child,
        )
        queue_path = queue.name.apply(
            lambda q: f"projects/{cfg.project_id}/locations/{cfg.region}/queues/{q}"
        )
        self.queue = queue_path
        return {
            **sl.service_env(sl.REQUEST_TIMEOUT_S),
            sl.WAKEUPS_TYPE_ENV: WAKEUP_KIND,
            sl.WAKEUPS_QUEUE_ENV: queue_path,
        }

    def _service(
        self,
        name: str,
        cfg: GcpConfig,
        args: ServerlessMasterArgs,
        image: str,
        secrets: Secrets,
        wakeup: dict[str, pulumi.Input[str]],
        child: pulumi.ResourceOptions,
    ) -> None:
        vpc = _vpc(args.network_id, args.subnetwork_id, args.master_tag)
        shape = api_shape(cfg.db_tier)
        api_env = {**wakeup, **shape.env()}
        env = _service_env(*_env_spec(self.master_yaml, secrets, api_env, job=False))
        job_env = _job_env(*_env_spec(self.master_yaml, secrets, wakeup, job=True))
        job = _migration_job(
            name,
            cfg,
            args,
            image,
            job_env,
            _job_vpc(vpc),
            child,
        )
        migrated = job.run_execution_token.apply(lambda t: t or "")
        after_job = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[job]))
        service = _run_service(
            name,
            service_name(cfg),
            cfg,
            _template(
                args,
                vpc,
                migrated,
                image,
                env,
                port=sl.CONTAINER_PORT,
                instances=shape.instances,
                concurrency=80,
                # The master answers /info once it serves.
                probe=gcp.cloudrunv2.ServiceTemplateContainerStartupProbeArgs(
                    http_get=gcp.cloudrunv2.ServiceTemplateContainerStartupProbeHttpGetArgs(
                        path="/info"
                    ),
                    period_seconds=5,
                    failure_threshold=24,
                ),
            ),
            # The migration completes before the service rolls to the image.
            after_job,
        )
        tasks = _tasks_service(
            name, cfg, args, self.master_yaml, secrets, vpc, migrated, image, after_job
        )
        self.tasks_service_name = tasks.name
        self.service_name = service.name
        self.job_name = job.name


def _tasks_service(
    name: str,
    cfg: GcpConfig,
    args: ServerlessMasterArgs,
    master_yaml: pulumi.Output[str],
    secrets: Secrets,
    vpc: _VpcEgress,
    migrated: pulumi.Output[str],
    image: str,
    after_job: pulumi.ResourceOptions,
) -> gcp.cloudrunv2.Service:
    # The task origin: Cloud Run sends its requests to the task listener ($PORT is that
    # port; DET_PORT keeps the API on its own port, which Cloud Run never routes to), so
    # this service serves the task proxy only, whatever Host a request names. Its loops are
    # off (the API service runs them) and it has no user API process (TASKS_SHAPE); each
    # proxied connection is a request of its concurrency.
    tasks_env = _service_env(
        *_env_spec(
            master_yaml,
            secrets,
            {
                **sl.service_env(sl.REQUEST_TIMEOUT_S),
                **TASKS_SHAPE.env(),
                sl.PORT_ENV: str(sl.CONTAINER_PORT),
            },
            job=False,
        )
    )
    return _run_service(
        f"{name}-tasks",
        tasks_service_name(cfg),
        cfg,
        _template(
            args,
            vpc,
            migrated,
            image,
            tasks_env,
            port=sl.TASK_CONTAINER_PORT,
            instances=TASKS_MAX_INSTANCES,
            concurrency=TASKS_CONCURRENCY,
            # The task listener accepts once the master has started.
            probe=gcp.cloudrunv2.ServiceTemplateContainerStartupProbeArgs(
                tcp_socket=gcp.cloudrunv2.ServiceTemplateContainerStartupProbeTcpSocketArgs(
                    port=sl.TASK_CONTAINER_PORT
                ),
                period_seconds=5,
                failure_threshold=24,
            ),
        ),
        after_job,
    )


def _migration_job(
    name: str,
    cfg: GcpConfig,
    args: ServerlessMasterArgs,
    image: str,
    env: list[gcp.cloudrunv2.JobTemplateTemplateContainerEnvArgs],
    vpc_access: gcp.cloudrunv2.JobTemplateTemplateVpcAccessArgs,
    child: pulumi.ResourceOptions,
) -> gcp.cloudrunv2.Job:
    """The Cloud Run job that runs ``det-master migrate`` once per image (Pulumi runs it and
    waits for it to complete before the services roll)."""
    return gcp.cloudrunv2.Job(
        f"{name}-migrate",
        name=f"{service_name(cfg)}-migrate",
        project=cfg.project_id,
        location=cfg.region,
        deletion_protection=False,
        labels=cfg.all_labels,
        # A new token (a new image) makes Pulumi run the job and wait for it to complete.
        run_execution_token=execution_token(image),
        template=gcp.cloudrunv2.JobTemplateArgs(
            task_count=1,
            parallelism=1,
            template=gcp.cloudrunv2.JobTemplateTemplateArgs(
                service_account=args.master_email,
                max_retries=1,
                timeout="900s",
                containers=[
                    gcp.cloudrunv2.JobTemplateTemplateContainerArgs(
                        image=image,
                        args=list(sl.MIGRATE_ARGS),
                        envs=env,
                        resources=gcp.cloudrunv2.JobTemplateTemplateContainerResourcesArgs(
                            limits={"cpu": RUN_CPU, "memory": RUN_MEMORY}
                        ),
                    )
                ],
                vpc_access=vpc_access,
            ),
        ),
        opts=child,
    )


def _run_service(
    resource: str,
    name: str,
    cfg: GcpConfig,
    template: gcp.cloudrunv2.ServiceTemplateArgs,
    opts: pulumi.ResourceOptions,
) -> gcp.cloudrunv2.Service:
    """A public Cloud Run service of the master's image in the cluster's region. det
    authenticates every request itself (agents, tasks, users): no Google identity is asked."""
    return gcp.cloudrunv2.Service(
        resource,
        name=name,
        project=cfg.project_id,
        location=cfg.region,
        deletion_protection=False,
        labels=cfg.all_labels,
        ingress="INGRESS_TRAFFIC_ALL",
        invoker_iam_disabled=True,
        template=template,
        opts=opts,
    )


def _template(
    args: ServerlessMasterArgs,
    vpc: _VpcEgress,
    migrated: pulumi.Input[str],
    image: str,
    env: list[gcp.cloudrunv2.ServiceTemplateContainerEnvArgs],
    *,
    port: int,
    instances: int,
    concurrency: int,
    probe: gcp.cloudrunv2.ServiceTemplateContainerStartupProbeArgs,
) -> gcp.cloudrunv2.ServiceTemplateArgs:
    """A revision of the master's image: the request limit, CPU always allocated, scale to zero,
    Direct VPC egress."""
    return gcp.cloudrunv2.ServiceTemplateArgs(
        # The execution token of the migration that ran for this image: the revision waits for
        # the job's output (besides depends_on), so it cannot roll first.
        annotations={MIGRATED_ANNOTATION: migrated},
        service_account=args.master_email,
        timeout=f"{sl.REQUEST_TIMEOUT_S}s",
        max_instance_request_concurrency=concurrency,
        session_affinity=True,
        scaling=gcp.cloudrunv2.ServiceTemplateScalingArgs(
            min_instance_count=0, max_instance_count=instances
        ),
        containers=[
            gcp.cloudrunv2.ServiceTemplateContainerArgs(
                image=image,
                ports=gcp.cloudrunv2.ServiceTemplateContainerPortsArgs(container_port=port),
                envs=env,
                resources=gcp.cloudrunv2.ServiceTemplateContainerResourcesArgs(
                    limits={"cpu": RUN_CPU, "memory": RUN_MEMORY},
                    cpu_idle=False,
                    startup_cpu_boost=True,
                ),
                startup_probe=probe,
            )
        ],
        vpc_access=gcp.cloudrunv2.ServiceTemplateVpcAccessArgs(
            egress=vpc["egress"],
            network_interfaces=[
                gcp.cloudrunv2.ServiceTemplateVpcAccessNetworkInterfaceArgs(**n)
                for n in vpc["network_interfaces"]
            ],
        ),
    )


def _job_vpc(vpc: _VpcEgress) -> gcp.cloudrunv2.JobTemplateTemplateVpcAccessArgs:
    return gcp.cloudrunv2.JobTemplateTemplateVpcAccessArgs(
        egress=vpc["egress"],
        network_interfaces=[
            gcp.cloudrunv2.JobTemplateTemplateVpcAccessNetworkInterfaceArgs(**n)
            for n in vpc["network_interfaces"]
        ],
    )


def _master_config(
    cfg: GcpConfig,
    master_tag: str,
    agent_tag: str,
    *,
    url: str,
    task_url: str,
    uploads: list[object],
    **resolved: str,
) -> masteryaml.MasterConfig:
    """The serverless master.yaml once the resources it names exist (``resolved``: the
    :class:`master.Resolved` fields); ``uploads``, the release objects, are only waited for."""
    plain = dataclasses.replace(cfg, tls=False, port=sl.CONTAINER_PORT)
    config = master.master_yaml_config(plain, master.Resolved(**resolved), master_tag, agent_tag)
    return sl.serverless_master_config(config, url, task_url)


MOCK_CALLS: dict[str, dryrun.MockCall] = {
    "gcp:organizations/getProject:getProject": lambda a: {
        "number": "123456789012",
        "projectId": a.get("projectId"),
        "name": a.get("projectId"),
    },
}
