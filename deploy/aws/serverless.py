"""The AWS cluster with a serverless master (``up --master serverless``): ECS Fargate.

* The ``det-master`` image in the cluster's ECR repository (``up`` pushes it between its two
  passes, ``common.serverless.Rollout``).
* An ECS Fargate service (API, WebUI and loops) behind an Application Load Balancer. With
  ``--domain`` the ALB faces the internet with an ACM certificate for that name; without, the
  ALB is internal and a CloudFront distribution (a VPC origin: CloudFront alone reaches the
  ALB) serves the master on its own ``*.cloudfront.net`` name with CloudFront's certificate.
  WebSockets pass through both. Agents and clients use that URL with public-CA TLS.
* The task origin (notebooks, TensorBoards: det.master.task_origin) has a name of its own:
  ``tasks.<domain>`` on the certificate with ``--domain``, else a second CloudFront
  distribution to the same ALB. An ALB rule sends its requests to a second target group, the
  master's task listener (:data:`~det.deploy.common.serverless.TASK_CONTAINER_PORT`), which
  serves only the task proxy: by ``Host`` with a domain, by ``front.FRONT_HEADER`` (set by each
  distribution, see ``front.distribution``) behind CloudFront (``det.deploy.aws.front``).
* Scale to zero: 0 to :data:`~det.deploy.common.serverless.MAX_INSTANCES` tasks; Application
  Auto Scaling alone sets the service's desired count (``up`` sets only the scalable target's
  bounds; the service's ``desiredCount`` is ignored on update). While no task runs, the ALB has
  no registered target and answers every request itself with 503, which AWS counts as
  ``HTTPCode_ELB_503_Count``, never as ``RequestCount`` (counted only when the ALB could choose
  a target): the wake alarm watches the 503s and sets one task; the sleep alarm watches both and
  sets none after :data:`SLEEP_AFTER_MINUTES` minutes without either. The loop's wake-ups
  (``det.master.wakeups``) are one-time Application Auto Scaling scheduled actions that raise
  the scalable target's minimum to 1 at the time and back to 0 :data:`SLEEP_AFTER_MINUTES`
  later: no HTTP call that would need a running task (docs/deploy.md, "Waking the master").
* The database: Aurora Serverless v2 pausing at 0 ACU (``--db serverless``, the default here),
  or RDS (``--db rds``); private subnets only, reachable from the master's tasks only.
* Secrets in Secrets Manager (database password, agent token, admin password, a registry's
  password), injected by ECS; only the task execution role may read them.
* The migration (``det-master migrate``) is its own task definition; ``up`` runs it once and
  waits for it to succeed before the second pass rolls the service. The service never migrates.
* The task role may launch and terminate only instances tagged with the cluster
  (``aws:RequestTag``/``aws:ResourceTag``, ``iam.master_policy``), pass only the agent role,
  and manage only the scheduled actions of its own service's scalable target.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import pulumi
import pulumi_aws as aws
import pulumi_random as random

from det.common.ports import TASK_SERVICE_PORTS
from det.deploy.aws import front as aws_front
from det.deploy.aws import iam, image_mirror, logs, master, network, storage
from det.deploy.aws.config import AURORA_POSTGRES_VERSION, AwsConfig
from det.deploy.aws.front import CLOUDFRONT_READ_TIMEOUT_S
from det.deploy.common import masteryaml, passwords, release
from det.deploy.common import serverless as sl

TASK_CPU = "512"
TASK_MEMORY = "1024"
CONTAINER = "master"
CLOUDFRONT_PREFIX_LIST = "com.amazonaws.global.cloudfront.origin-facing"
SLEEP_AFTER_MINUTES = 15
WAKEUP_KIND = "scheduled_scaling"
AURORA_MIN_ACU = 0.0
AURORA_MAX_ACU = 4.0
AURORA_PAUSE_AFTER_S = 600
# Aurora PostgreSQL Serverless v2's max_connections follows the maximum ACU, whatever the
# capacity of the moment, and is capped at 2,000 with a minimum of 0 or 0.5 ACU (Amazon Aurora
# User Guide, "Performance and scaling for Aurora Serverless v2"). Only the figures confirmed
# from AWS's own material are kept (an AWS re:Post article shows `show max_connections` at each):
# 189 at a maximum of 1 ACU, 3,360 at 16 (minimum 1), 5,000 from 32. The guide's table has rows
# in between (2, 4, 8 ACU) that could not be checked here, so a maximum between two rows counts
# as the lower row: the default 4 ACU is budgeted at 1 ACU's 189, a floor the real figure only
# exceeds.
AURORA_PG_MAX_CONNECTIONS = ((1.0, 189), (16.0, 3360), (32.0, 5000))
AURORA_LOW_MIN_CAP = 2000
# superuser_reserved_connections (PostgreSQL's default, kept by Aurora): not for det's user.
RESERVED_CONNECTIONS = 3
# The ECS service's master processes, explicit in its environment (the master's defaults are a
# VM's): up to sl.MAX_INSTANCES tasks of a front and two user API processes (0.5 vCPU each),
# sl.DB_POOL_SIZE connections each. During a deployment ECS may run up to
# DEPLOYMENT_MAX_PERCENT of the desired count, old tasks beside new ones.
SERVICE_SHAPE = sl.Shape(
    instances=sl.MAX_INSTANCES, pool=sl.DB_POOL_SIZE, user_processes=2, loops=True
)
DEPLOYMENT_MAX_PERCENT = 200


def aurora_connections(min_acu: float, max_acu: float) -> int:
    """The connections an Aurora PostgreSQL Serverless v2 instance gives det's user at this
    capacity range (:data:`AURORA_PG_MAX_CONNECTIONS`, less the reserved ones)."""
    rows = [n for acu, n in AURORA_PG_MAX_CONNECTIONS if acu <= max_acu]
    if not rows:
        raise ValueError(f"Aurora Serverless v2's maximum is at least 1 ACU here, not {max_acu}")
    most = rows[-1]
    if min_acu <= 0.5:
        most = min(most, AURORA_LOW_MIN_CAP)
    return most - RESERVED_CONNECTIONS


def service_connections(shape: sl.Shape, deployment_max_percent: int) -> int:
    """The most connections the service and the migration task hold at once: ``shape`` at
    its most tasks, times the deployment's overlap, and the migration's."""
    return shape.connections() * deployment_max_percent // 100 + sl.MIGRATION_CONNECTIONS


def ecs_names(cfg: AwsConfig) -> tuple[str, str]:
    """The ECS cluster's and service's names, fixed (not Pulumi's random suffixes) so the
    service's own environment can name its scalable target (:func:`service_resource_id`)
    without depending on the service."""
    return f"det-{cfg.cluster_id}", f"det-{cfg.cluster_id}-master"


def service_resource_id(cfg: AwsConfig) -> str:
    """Application Auto Scaling's id of the master's ECS service."""
    cluster, service = ecs_names(cfg)
    return f"service/{cluster}/{service}"


def release_image(cfg: AwsConfig, repository_url: str) -> str:
    rel = cfg.boot.release or release.placeholder()
    return f"{repository_url}:{sl.image_tag(rel)}"


def execution_policy(
    repo_arn: str, log_group_arn: str, secret_arns: list[str]
) -> iam.PolicyDocument:
    """What ECS needs to start the master's tasks: pull its image, write its logs, read its
    secrets (those only)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "EcrLogin",
                "Effect": "Allow",
                "Action": "ecr:GetAuthorizationToken",
                "Resource": "*",
            },
            {
                "Sid": "PullMasterImage",
                "Effect": "Allow",
                "Action": [
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                    "ecr:BatchCheckLayerAvailability",
                ],
                "Resource": repo_arn,
            },
            {
                "Sid": "Logs",
                "Effect": "Allow",
                "Action": list(iam.LOG_WRITE_ACTIONS),
                "Resource": [log_group_arn, f"{log_group_arn}:*"],
            },
            {
                "Sid": "MasterSecrets",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": secret_arns,
            },
        ],
    }


def task_policy(
    *,
    cfg: AwsConfig,
    bucket_arn: str,
    agent_role_arn: str,
    agent_subnet_arn: str,
    agent_sg_arn: str,
) -> iam.PolicyDocument:
    """The master's own identity: the VM master's policy (tagged agents only, the bucket)
    without its secret (ECS injects the secrets). Its wake-ups are a second policy,
    :func:`wakeup_policy`, attached once the service's scalable target exists."""
    doc = iam.master_policy(
        cluster_id=cfg.cluster_id,
        region=cfg.region,
        bucket_arn=bucket_arn,
        agent_role_arn=agent_role_arn,
        agent_subnet_arn=agent_subnet_arn,
        agent_sg_arn=agent_sg_arn,
        secret_arn="",
        keypair=cfg.keypair,
    )
    statements = [s for s in doc["Statement"] if s.get("Sid") != "ClusterSecret"]
    return {"Version": "2012-10-17", "Statement": statements}


def wakeup_policy(scalable_target_arn: str) -> iam.PolicyDocument:
    """The master's wake-ups (det.master.wakeups.ScheduledScalingScheduler): scheduled actions
    of its own service's scalable target only. Application Auto Scaling takes a scalable
    target's ARN for these two actions; listing scheduled actions takes no resource (the
    Service Authorization Reference), and reads only scaling settings. Application Auto
    Scaling then updates the service with its own service-linked role: det passes no role."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "WakeUpActions",
                "Effect": "Allow",
                "Action": [
                    "application-autoscaling:PutScheduledAction",
                    "application-autoscaling:DeleteScheduledAction",
                ],
                "Resource": scalable_target_arn,
            },
            {
                "Sid": "ListWakeUpActions",
                "Effect": "Allow",
                "Action": "application-autoscaling:DescribeScheduledActions",
                "Resource": "*",
            },
        ],
    }


def container_definitions(
    *,
    image: str,
    command: list[str] | None,
    environment: Mapping[str, str],
    secrets: Mapping[str, str],
    log_group: str,
    region: str,
    prefix: str,
) -> str:
    """One container: plain HTTP on the container port, a read-only root with a scratch volume
    on ``/tmp`` (the data directory), secrets from Secrets Manager by ARN."""
    container: _ContainerDefinition = {
        "name": CONTAINER,
        "image": image,
        "essential": True,
        "readonlyRootFilesystem": True,
        "portMappings": [
            {"containerPort": port, "protocol": "tcp"}
            for port in (sl.CONTAINER_PORT, sl.TASK_CONTAINER_PORT)
        ],
        "environment": [{"name": k, "value": v} for k, v in environment.items()],
        "secrets": [{"name": k, "valueFrom": v} for k, v in secrets.items()],
        "mountPoints": [{"sourceVolume": "tmp", "containerPath": "/tmp", "readOnly": False}],
        "logConfiguration": {
            "logDriver": "awslogs",
            "options": {
                "awslogs-group": log_group,
                "awslogs-region": region,
                "awslogs-stream-prefix": prefix,
            },
        },
    }
    if command:
        container["command"] = command
    return json.dumps([container])


class _PortMapping(TypedDict):
    containerPort: int
    protocol: str


class _Variable(TypedDict):
    name: str
    value: str


class _Secret(TypedDict):
    name: str
    valueFrom: str


class _MountPoint(TypedDict):
    sourceVolume: str
    containerPath: str
    readOnly: bool


class _LogConfiguration(TypedDict):
    logDriver: str
    options: dict[str, str]


class _ContainerDefinition(TypedDict):
    """The keys of ECS's ``ContainerDefinition`` the master's task definitions set."""

    name: str
    image: str
    essential: bool
    readonlyRootFilesystem: bool
    portMappings: list[_PortMapping]
    environment: list[_Variable]
    secrets: list[_Secret]
    mountPoints: list[_MountPoint]
    logConfiguration: _LogConfiguration
    command: NotRequired[list[str]]


@dataclasses.dataclass
class _Groups:
    alb: aws.ec2.SecurityGroup
    task: aws.ec2.SecurityGroup
    agent: aws.ec2.SecurityGroup
    db: aws.ec2.SecurityGroup


def _security_groups(
    name: str, cfg: AwsConfig, vpc_id: pulumi.Input[str], child: pulumi.ResourceOptions
) -> _Groups:
    """Who reaches whom: the world (``--inbound-cidr``, HTTPS) or CloudFront (HTTP, through its
    VPC origin) the ALB; the ALB the tasks' port; the tasks the agents' task ports and the
    database; agents each other. Tasks and agents go out to the internet (the master's public
    URL, the AWS APIs); the ALB and the database nowhere else."""
    group = functools.partial(network.security_group, name, vpc_id, cfg.tags, child)
    groups = _Groups(
        alb=group("alb", "det master load balancer", False),
        task=group("task", "det master tasks", True),
        agent=group("agent", "det agents", True),
        db=group("db", "det database", False),
    )

    _alb_rules(name, cfg, groups, child)
    _cluster_rules(name, cfg, groups, child)
    return groups


def _alb_rules(name: str, cfg: AwsConfig, groups: _Groups, child: pulumi.ResourceOptions) -> None:
    """Into the ALB: the world on HTTPS (and HTTP, redirected) with a domain, else CloudFront's
    VPC origin on HTTP; out of it: the tasks' API and task-origin ports only."""
    ingress = functools.partial(network.ingress_rule, name, child)
    if cfg.domain:
        ingress(
            "world-to-alb",
            groups.alb,
            (443, 443),
            "det API and WebUI (HTTPS)",
            cidr=cfg.inbound_cidr,
        )
        ingress(
            "world-to-alb-http", groups.alb, (80, 80), "redirect to HTTPS", cidr=cfg.inbound_cidr
        )
    else:
        cloudfront = aws.ec2.get_managed_prefix_list_output(name=CLOUDFRONT_PREFIX_LIST)
        ingress(
            "cloudfront-to-alb",
            groups.alb,
            (80, 80),
            "CloudFront (VPC origin)",
            prefix_list=cloudfront.id,
        )
    port = (sl.CONTAINER_PORT, sl.CONTAINER_PORT)
    task_port = (sl.TASK_CONTAINER_PORT, sl.TASK_CONTAINER_PORT)
    for suffix, ports, what in (("", port, "API"), ("-origin", task_port, "task origin")):
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-alb-to-task{suffix}",
            security_group_id=groups.alb.id,
            ip_protocol="tcp",
            from_port=ports[0],
            to_port=ports[1],
            referenced_security_group_id=groups.task.id,
            description=f"the master's tasks ({what})",
            opts=child,
        )
        ingress(
            f"alb-to-task{suffix}", groups.task, ports, f"the load balancer ({what})",
            source=groups.alb,
        )  # fmt: skip


def _cluster_rules(
    name: str, cfg: AwsConfig, groups: _Groups, child: pulumi.ResourceOptions
) -> None:
    """The tasks to the agents' task services and the database; agents to each other; SSH
    to the agents with ``--enable-ssh``."""
    ingress = functools.partial(network.ingress_rule, name, child)
    ingress(
        "task-to-agent",
        groups.agent,
        (TASK_SERVICE_PORTS[0], TASK_SERVICE_PORTS[-1]),
        "master to task services on the agents (the task proxy)",
        source=groups.task,
    )
    ingress(
        "agent-to-agent",
        groups.agent,
        None,
        "between agents (distributed training)",
        source=groups.agent,
    )
    ingress(
        "task-to-db", groups.db, (5432, 5432), "PostgreSQL from the master only", source=groups.task
    )
    if cfg.enable_ssh:
        ingress("ssh-agent", groups.agent, (22, 22), "SSH", cidr=cfg.inbound_cidr)


@dataclasses.dataclass
class _Database:
    host: pulumi.Output[str]
    port: pulumi.Output[int]
    final_snapshot: pulumi.Output[str | None]


def _aurora(
    name: str,
    cfg: AwsConfig,
    subnets: list[pulumi.Output[str]],
    sg: pulumi.Input[str],
    password: pulumi.Input[str],
    child: pulumi.ResourceOptions,
) -> _Database:
    """Aurora PostgreSQL Serverless v2, 0 ACU (paused) after 10 minutes without connections."""
    tags = cfg.tags
    suffix = random.RandomId(f"{name}-final", byte_length=4, opts=child)
    snapshot = suffix.hex.apply(lambda h: f"{name}-final-{h}")
    group = aws.rds.SubnetGroup(name, subnet_ids=subnets, tags=tags, opts=child)
    cluster = aws.rds.Cluster(
        name,
        engine="aurora-postgresql",
        engine_mode="provisioned",
        engine_version=AURORA_POSTGRES_VERSION,
        database_name="determined",
        master_username="postgres",
        master_password=password,
        db_subnet_group_name=group.name,
        vpc_security_group_ids=[sg],
        storage_encrypted=True,
        backup_retention_period=7,
        copy_tags_to_snapshot=True,
        deletion_protection=False,
        final_snapshot_identifier=snapshot,
        apply_immediately=True,
        serverlessv2_scaling_configuration=aws.rds.ClusterServerlessv2ScalingConfigurationArgs(
            min_capacity=AURORA_MIN_ACU,
            max_capacity=AURORA_MAX_ACU,
            seconds_until_auto_pause=AURORA_PAUSE_AFTER_S,
        ),
        tags=tags,
        opts=child,
    )
    aws.rds.ClusterInstance(
        name,
        cluster_identifier=cluster.id,
        instance_class="db.serverless",
        engine=aws.rds.EngineType.AURORA_POSTGRESQL,
        engine_version=AURORA_POSTGRES_VERSION,
        db_subnet_group_name=group.name,
        publicly_accessible=False,
        tags=tags,
        opts=child,
    )
    return _Database(cluster.endpoint, cluster.port, snapshot)


def _secrets(
    name: str,
    cfg: AwsConfig,
    by_env: Mapping[str, tuple[str, pulumi.Input[str]]],
    child: pulumi.ResourceOptions,
) -> dict[str, pulumi.Output[str]]:
    """One Secrets Manager secret per environment variable ECS injects: its ARN by variable."""
    secret_arns: dict[str, pulumi.Output[str]] = {}
    for env, (suffix, value) in by_env.items():
        secret = aws.secretsmanager.Secret(
            f"{name}-{suffix}", recovery_window_in_days=0, tags=cfg.tags, opts=child
        )
        aws.secretsmanager.SecretVersion(
            f"{name}-{suffix}", secret_id=secret.id, secret_string=value, opts=child
        )
        secret_arns[env] = secret.arn
    return secret_arns


def _database(
    name: str,
    cfg: AwsConfig,
    net: network.Network,
    sgs: _Groups,
    password: pulumi.Input[str],
    child: pulumi.ResourceOptions,
) -> _Database:
    """Aurora Serverless v2 (``--db serverless``) or RDS, in the private subnets."""
    if cfg.db_kind == "serverless":
        return _aurora(f"{name}-db", cfg, net.private_subnet_ids, sgs.db.id, password, child)
    rds = storage.Database(
        f"{name}-db",
        storage.DatabaseArgs(
            private_subnet_ids=net.private_subnet_ids,
            security_group_id=sgs.db.id,
            password=password,
            tags=cfg.tags,
            instance_class=cfg.db_instance_type,
            allocated_storage=cfg.db_size,
            final_snapshot_prefix=f"{name}-final",
        ),
    )
    return _Database(rds.address, rds.port, rds.final_snapshot_identifier)


def build(
    cfg: AwsConfig,
    amis: dict[str, pulumi.Output[str]],
    initial_user_password: pulumi.Input[str] | None = None,
    registry_password: pulumi.Input[str] | None = None,
) -> dict[str, pulumi.Output[Any]]:
    name = f"det-{cfg.cluster_id}"
    tags = cfg.tags
    child = pulumi.ResourceOptions()
    net = network.for_cluster(name, cfg)
    sgs = _security_groups(name, cfg, net.vpc_id, child)
    bucket = storage.checkpoint_bucket(name, cfg)
    log_group = logs.BootLogs(
        f"{name}-logs",
        logs.BootLogsArgs(
            name=cfg.log_group_name, retention_days=cfg.log_retention_days, tags=tags
        ),
    )
    values = passwords.serverless_values(
        name, initial_user_password, registry_password if cfg.registry else None, child
    )
    made = values.passwords
    secret_arns = _secrets(name, cfg, values.by_env, child)
    db = _database(name, cfg, net, sgs, made.db_password, child)
    plane = ServerlessMaster(
        f"{name}-master",
        ServerlessMasterArgs(
            config=cfg,
            vpc_id=net.vpc_id,
            public_subnet_ids=net.public_subnet_ids,
            private_subnet_ids=net.private_subnet_ids,
            alb_sg=sgs.alb.id,
            task_sg=sgs.task.id,
            agent_sg=sgs.agent,
            bucket=bucket,
            log_group=log_group.name,
            secret_arns=secret_arns,
            db=db,
            amis=amis,
        ),
    )
    mirrors = image_mirror.repositories(name, cfg, plane.agent_role_arn)
    return {
        **mirrors,
        "cluster_id": pulumi.Output.from_input(cfg.cluster_id),
        "region": pulumi.Output.from_input(cfg.region),
        "master": pulumi.Output.from_input(sl.SERVERLESS),
        "master_url": plane.url,
        "task_url": plane.task_url,
        "master_image": pulumi.Output.from_input(
            cfg.rollout.service if cfg.rollout else plane.release
        ),
        "image_repository": plane.repository_url,
        "ecs_cluster": plane.ecs_cluster,
        "ecs_service": plane.ecs_service,
        "migration_task_definition": plane.migration_task_definition,
        "task_subnet_ids": pulumi.Output.all(*net.public_subnet_ids),
        "task_security_group_id": sgs.task.id,
        "load_balancer_dns": plane.alb_dns,
        "certificate_validation": plane.certificate_validation,
        "bucket": bucket.bucket,
        "db_endpoint": pulumi.Output.all(db.host, db.port).apply(lambda v: f"{v[0]}:{v[1]}"),
        "db_final_snapshot": db.final_snapshot,
        "vpc_id": net.vpc_id,
        "zones": pulumi.Output.all(*net.zones),
        "agent_security_group_id": sgs.agent.id,
        "agent_instance_profile_arn": plane.agent_profile_arn,
        "initial_user_password": made.initial_user_password,
        "master_yaml": plane.master_yaml,
        "images": pulumi.Output.all(**amis),
        "log_group": log_group.name,
        "config_hash": plane.config_hash,
    }


@dataclasses.dataclass
class ServerlessMasterArgs:
    config: AwsConfig
    vpc_id: pulumi.Output[str]
    public_subnet_ids: list[pulumi.Output[str]]
    private_subnet_ids: list[pulumi.Output[str]]
    alb_sg: pulumi.Output[str]
    task_sg: pulumi.Output[str]
    agent_sg: aws.ec2.SecurityGroup
    bucket: storage.CheckpointBucket
    log_group: pulumi.Output[str]
    secret_arns: dict[str, pulumi.Output[str]]
    db: _Database
    amis: dict[str, pulumi.Output[str]]

    def front(self) -> aws_front.FrontArgs:
        return aws_front.FrontArgs(
            vpc_id=self.vpc_id,
            public_subnet_ids=self.public_subnet_ids,
            private_subnet_ids=self.private_subnet_ids,
            alb_sg=self.alb_sg,
        )


@dataclasses.dataclass(frozen=True)
class _Roles:
    """The identities of the serverless master and its agents."""

    agent_profile: pulumi.Output[str]
    agent_role: pulumi.Output[str]
    execution: pulumi.Output[str]
    """ECS's role for the master's tasks: pull the image, write the logs, read the secrets."""
    task: pulumi.Output[str]
    task_role: aws.iam.Role
    """The master's own identity (its ARN: ``task``)."""
    wakeup_env: dict[str, str]
    """The service's environment besides master.yaml: its wake-ups, its shape."""


def _task_definition(
    name: str,
    role: str,
    cfg: AwsConfig,
    args: ServerlessMasterArgs,
    roles: _Roles,
    plain: dict[str, pulumi.Input[str]],
    image: pulumi.Input[str],
    migrate: bool,
    child: pulumi.ResourceOptions,
) -> aws.ecs.TaskDefinition:
    """The master's Fargate task ``<name>-<role>``: the service's, or with ``migrate`` the
    migration's (the database password its only secret; it runs ``det-master migrate``);
    ``plain`` is its environment besides the secrets."""
    env_names = [sl.DB_PASSWORD_ENV] if migrate else list(args.secret_arns)
    definitions = pulumi.Output.all(
        image=image,
        log_group=args.log_group,
        env=pulumi.Output.all(**plain),
        secrets=pulumi.Output.all(**{k: args.secret_arns[k] for k in env_names}),
    ).apply(
        lambda v: container_definitions(
            image=v["image"],
            command=list(sl.MIGRATE_ARGS) if migrate else None,
            environment=v["env"],
            secrets=v["secrets"],
            log_group=v["log_group"],
            region=cfg.region,
            prefix=role,
        )
    )
    return aws.ecs.TaskDefinition(
        f"{name}-{role}",
        family=f"{name}-{role}",
        requires_compatibilities=["FARGATE"],
        network_mode="awsvpc",
        cpu=TASK_CPU,
        memory=TASK_MEMORY,
        execution_role_arn=roles.execution,
        task_role_arn=roles.task,
        runtime_platform=aws.ecs.TaskDefinitionRuntimePlatformArgs(
            operating_system_family="LINUX", cpu_architecture="X86_64"
        ),
        volumes=[aws.ecs.TaskDefinitionVolumeArgs(name="tmp")],
        container_definitions=definitions,
        tags=cfg.tags,
        opts=child,
    )


def _repository(name: str, cfg: AwsConfig, child: pulumi.ResourceOptions) -> aws.ecr.Repository:
    """The cluster's ECR repository of the master image (tags immutable, scanned on push)."""
    return aws.ecr.Repository(
        name,
        name=f"det-{cfg.cluster_id}/{sl.IMAGE_NAME}",
        image_tag_mutability="IMMUTABLE",
        image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(
            scan_on_push=True
        ),
        force_delete=True,
        tags=cfg.tags,
        opts=child,
    )


class ServerlessMaster(pulumi.ComponentResource):
    url: pulumi.Output[str]
    task_url: pulumi.Output[str]
    release: pulumi.Output[str]
    repository_url: pulumi.Output[str]
    ecs_cluster: pulumi.Output[str]
    ecs_service: pulumi.Output[str | None]
    migration_task_definition: pulumi.Output[str]
    alb_dns: pulumi.Output[str]
    certificate_validation: pulumi.Output[Any]
    agent_profile_arn: pulumi.Output[str]
    agent_role_arn: pulumi.Output[str]
    master_yaml: pulumi.Output[str]
    config_hash: pulumi.Output[str]

    def __init__(
        self, name: str, args: ServerlessMasterArgs, opts: pulumi.ResourceOptions | None = None
    ):
        super().__init__("det:aws:ServerlessMaster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cfg = args.config
        tags = cfg.tags
        repo = _repository(name, cfg, child)
        self.repository_url = repo.repository_url
        self.release = repo.repository_url.apply(lambda u: release_image(cfg, u))
        roll = cfg.rollout
        service_image: pulumi.Output[str] | None = (
            self.release
            if roll is None
            else (pulumi.Output.from_input(roll.service) if roll.service else None)
        )
        migration_image = self.release if roll is None else pulumi.Output.from_input(roll.release)
        agent_subnet = (
            pulumi.Output.from_input(cfg.agent_subnet_id)
            if cfg.agent_subnet_id
            else args.public_subnet_ids[0]
        )
        roles = self._roles(name, cfg, args, repo, agent_subnet, child)
        front = aws_front.build(name, cfg, args.front(), child)
        self.url = front.url
        self.task_url = front.task_url
        self.alb_dns = front.alb.dns_name
        self.certificate_validation = front.validation
        limit = sl.REQUEST_TIMEOUT_S if cfg.domain else CLOUDFRONT_READ_TIMEOUT_S
        roles.wakeup_env.update(sl.service_env(limit))
        roles.wakeup_env.update(SERVICE_SHAPE.env())
        uploads = master.release_objects(name, cfg.boot, args.bucket.bucket, child)
        config = pulumi.Output.all(
            url=self.url,
            task_url=self.task_url,
            bucket=args.bucket.bucket,
            db_host=args.db.host,
            db_port=args.db.port,
            agent_image_id=args.amis["aux_agent"],
            compute_image_id=args.amis["compute_agent"],
            agent_subnet_id=agent_subnet,
            agent_sg_id=args.agent_sg.id,
            agent_profile_arn=roles.agent_profile,
            uploads=pulumi.Output.all(*uploads),
        ).apply(lambda v: _master_config(cfg, **v))
        self.master_yaml = config.apply(sl.render_config)
        self.config_hash = config.apply(master.agent_config_hash)
        cluster = aws.ecs.Cluster(name, name=ecs_names(cfg)[0], tags=tags, opts=child)
        self.ecs_cluster = cluster.name

        def task_definition(
            role: str, image: pulumi.Input[str], migrate: bool
        ) -> aws.ecs.TaskDefinition:
            plain: dict[str, pulumi.Input[str]] = {sl.CONFIG_ENV: self.master_yaml}
            if not migrate:
                plain.update(roles.wakeup_env)
            return _task_definition(name, role, cfg, args, roles, plain, image, migrate, child)

        migration = task_definition("migrate", migration_image, migrate=True)
        self.migration_task_definition = migration.arn
        self.ecs_service = pulumi.Output.from_input(None)
        self.agent_profile_arn = roles.agent_profile
        self.agent_role_arn = roles.agent_role
        if service_image is not None:
            self._service(
                name,
                cfg,
                args,
                cluster,
                task_definition("service", service_image, migrate=False),
                migration,
                front,
                roles,
                child,
            )
        self.register_outputs({"url": self.url, "repository_url": repo.repository_url})

    def _roles(
        self,
        name: str,
        cfg: AwsConfig,
        args: ServerlessMasterArgs,
        repo: aws.ecr.Repository,
        agent_subnet: pulumi.Output[str],
        child: pulumi.ResourceOptions,
    ) -> _Roles:
        tags = cfg.tags
        logs_arn = iam.log_group_arn(cfg.region, cfg.log_group_name)
        agent_role = iam.service_role(
            f"{name}-agent",
            "ec2.amazonaws.com",
            args.bucket.arn.apply(lambda b: json.dumps(iam.agent_policy(b, cfg.region, logs_arn))),
            tags,
            child,
        )
        agent_profile = aws.iam.InstanceProfile(
            f"{name}-agent", role=agent_role.name, tags=tags, opts=child
        )
        execution = iam.service_role(
            f"{name}-execution",
            "ecs-tasks.amazonaws.com",
            pulumi.Output.all(repo.arn, pulumi.Output.all(*args.secret_arns.values())).apply(
                lambda v: json.dumps(execution_policy(v[0], logs_arn, list(v[1])))
            ),
            tags,
            child,
        )
        task = iam.service_role(
            f"{name}-task",
            "ecs-tasks.amazonaws.com",
            pulumi.Output.all(
                bucket=args.bucket.arn,
                agent_role=agent_role.arn,
                subnet=agent_subnet.apply(lambda s: f"arn:aws:ec2:{cfg.region}:*:subnet/{s}"),
                sg=args.agent_sg.id.apply(
                    lambda s: f"arn:aws:ec2:{cfg.region}:*:security-group/{s}"
                ),
            ).apply(
                lambda v: json.dumps(
                    task_policy(
                        cfg=cfg,
                        bucket_arn=v["bucket"],
                        agent_role_arn=v["agent_role"],
                        agent_subnet_arn=v["subnet"],
                        agent_sg_arn=v["sg"],
                    )
                )
            ),
            tags,
            child,
        )
        return _Roles(
            agent_profile=agent_profile.arn,
            agent_role=agent_role.arn,
            execution=execution.arn,
            task=task.arn,
            task_role=task,
            wakeup_env={
                sl.WAKEUPS_TYPE_ENV: WAKEUP_KIND,
                sl.WAKEUPS_RESOURCE_ID_ENV: service_resource_id(cfg),
                sl.WAKEUPS_HOLD_SECONDS_ENV: str(SLEEP_AFTER_MINUTES * 60),
                sl.WAKEUPS_REGION_ENV: cfg.region,
            },
        )

    def _service(
        self,
        name: str,
        cfg: AwsConfig,
        args: ServerlessMasterArgs,
        cluster: aws.ecs.Cluster,
        definition: aws.ecs.TaskDefinition,
        migration: aws.ecs.TaskDefinition,
        front: aws_front.Front,
        roles: _Roles,
        child: pulumi.ResourceOptions,
    ) -> None:
        tags = cfg.tags
        service = aws.ecs.Service(
            name,
            name=ecs_names(cfg)[1],
            cluster=cluster.arn,
            task_definition=definition.arn,
            launch_type="FARGATE",
            # The first task serves `up`'s wait; from then on Application Auto Scaling owns it.
            desired_count=1,
            deployment_minimum_healthy_percent=0,
            deployment_maximum_percent=DEPLOYMENT_MAX_PERCENT,
            health_check_grace_period_seconds=120,
            network_configuration=aws.ecs.ServiceNetworkConfigurationArgs(
                subnets=args.public_subnet_ids,
                assign_public_ip=True,  # ECR, Secrets Manager and the AWS APIs without a NAT gateway
                security_groups=[args.task_sg],
            ),
            load_balancers=[
                aws.ecs.ServiceLoadBalancerArgs(
                    target_group_arn=target.arn,
                    container_name=CONTAINER,
                    container_port=port,
                )
                for target, port in (
                    (front.target, sl.CONTAINER_PORT),
                    (front.tasks_target, sl.TASK_CONTAINER_PORT),
                )
            ],
            propagate_tags="SERVICE",
            enable_execute_command=False,
            tags=tags,
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=[front.listener, front.rule, migration],
                    ignore_changes=["desiredCount"],
                ),
            ),
        )
        self.ecs_service = service.name
        _scale_to_zero(name, cfg, service, front, roles, child)


def _scale_to_zero(
    name: str,
    cfg: AwsConfig,
    service: aws.ecs.Service,
    front: aws_front.Front,
    roles: _Roles,
    child: pulumi.ResourceOptions,
) -> None:
    """The service's scalable target (0 to SERVICE_SHAPE.instances tasks), the task role's
    right to schedule its own wake-ups, and the wake and sleep alarms on the ALB's counts."""
    tags = cfg.tags
    # The target names the service by its fixed name (the wake-ups' environment names it
    # the same way); it waits for the service, which ECS requires to exist.
    scalable = aws.appautoscaling.Target(
        name,
        service_namespace="ecs",
        scalable_dimension="ecs:service:DesiredCount",
        resource_id=service_resource_id(cfg),
        min_capacity=0,
        max_capacity=SERVICE_SHAPE.instances,
        tags=tags,
        opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[service])),
    )
    aws.iam.RolePolicy(
        f"{name}-task-wakeups",
        role=roles.task_role.id,
        policy=scalable.arn.apply(lambda a: json.dumps(wakeup_policy(a))),
        opts=child,
    )

    wake = _step_policy(f"{name}-wake", scalable, 1, "0", None, child)
    sleep = _step_policy(f"{name}-sleep", scalable, 0, None, "0", child)
    aws.cloudwatch.MetricAlarm(
        f"{name}-wake",
        alarm_description="the ALB answered 503 itself (no task registered): run a task",
        comparison_operator="GreaterThanOrEqualToThreshold",
        threshold=1,
        evaluation_periods=1,
        metric_queries=wake_query(front.alb.arn_suffix),
        treat_missing_data="notBreaching",
        alarm_actions=[wake.arn],
        tags=tags,
        opts=child,
    )
    # An Auto Scaling action is invoked again every minute its alarm stays in ALARM (the
    # CloudWatch User Guide, "Alarm actions"): the sleep alarm must leave ALARM on the same
    # 503s that wake the service, or it would set 0 again a minute after the wake alarm's 1.
    aws.cloudwatch.MetricAlarm(
        f"{name}-sleep",
        alarm_description=f"no request for {SLEEP_AFTER_MINUTES} minutes: no task",
        comparison_operator="LessThanThreshold",
        threshold=1,
        evaluation_periods=SLEEP_AFTER_MINUTES,
        datapoints_to_alarm=SLEEP_AFTER_MINUTES,
        metric_queries=calls_query(front.alb.arn_suffix),
        treat_missing_data="breaching",
        alarm_actions=[sleep.arn],
        tags=tags,
        opts=child,
    )


def _step_policy(
    name: str,
    scalable: aws.appautoscaling.Target,
    capacity: int,
    lower: str | None,
    upper: str | None,
    child: pulumi.ResourceOptions,
) -> aws.appautoscaling.Policy:
    """Set the service to ``capacity`` tasks while its alarm's metric is within (lower, upper)."""
    return aws.appautoscaling.Policy(
        name,
        policy_type="StepScaling",
        service_namespace=scalable.service_namespace,
        scalable_dimension=scalable.scalable_dimension,
        resource_id=scalable.resource_id,
        step_scaling_policy_configuration=aws.appautoscaling.PolicyStepScalingPolicyConfigurationArgs(
            adjustment_type="ExactCapacity",
            cooldown=60,
            metric_aggregation_type="Maximum",
            step_adjustments=[
                aws.appautoscaling.PolicyStepScalingPolicyConfigurationStepAdjustmentArgs(
                    scaling_adjustment=capacity,
                    metric_interval_lower_bound=lower,
                    metric_interval_upper_bound=upper,
                )
            ],
        ),
        opts=child,
    )


def _alb_metric(
    query_id: str, metric_name: str, alb_suffix: pulumi.Input[str]
) -> aws.cloudwatch.MetricAlarmMetricQueryArgs:
    return aws.cloudwatch.MetricAlarmMetricQueryArgs(
        id=query_id,
        metric=aws.cloudwatch.MetricAlarmMetricQueryMetricArgs(
            namespace="AWS/ApplicationELB",
            metric_name=metric_name,
            dimensions={"LoadBalancer": alb_suffix},
            period=60,
            stat="Sum",
        ),
    )


def wake_query(alb_suffix: pulumi.Input[str]) -> list[aws.cloudwatch.MetricAlarmMetricQueryArgs]:
    """The 503s the ALB answered itself a minute at a time: with no registered target it
    answers every request so ("HTTP 503: Service Unavailable: the target groups for the load
    balancer have no registered targets", the ALB troubleshooting guide) and counts it as
    ``HTTPCode_ELB_503_Count``, never as ``RequestCount`` (only "incremented for requests
    where the load balancer node was able to choose a target", the ALB's CloudWatch metrics)."""
    return [
        _alb_metric("refused", "HTTPCode_ELB_503_Count", alb_suffix),
        aws.cloudwatch.MetricAlarmMetricQueryArgs(
            id="wake", expression="FILL(refused, 0)", label="refused", return_data=True
        ),
    ]


def calls_query(alb_suffix: pulumi.Input[str]) -> list[aws.cloudwatch.MetricAlarmMetricQueryArgs]:
    """Every request a minute at a time: those a task answered (``RequestCount``) and those the
    ALB answered itself while none ran (``HTTPCode_ELB_503_Count``); no datapoint is none."""
    return [
        _alb_metric("requests", "RequestCount", alb_suffix),
        _alb_metric("refused", "HTTPCode_ELB_503_Count", alb_suffix),
        aws.cloudwatch.MetricAlarmMetricQueryArgs(
            id="calls",
            expression="FILL(requests, 0) + FILL(refused, 0)",
            label="calls",
            return_data=True,
        ),
    ]


def _master_config(
    cfg: AwsConfig,
    *,
    url: str,
    task_url: str,
    db_port: float,
    uploads: list[object],
    **resolved: str,
) -> masteryaml.MasterConfig:
    """The serverless master.yaml once the resources it names exist (``resolved``: the other
    :class:`master.Resolved` fields); ``uploads``, the release objects, are only waited for."""
    plain = dataclasses.replace(cfg, tls=False, port=sl.CONTAINER_PORT)
    config = master.master_yaml_config(plain, master.Resolved(db_port=int(db_port), **resolved))
    return sl.serverless_master_config(config, url, task_url)
