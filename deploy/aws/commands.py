"""``det deploy aws up|down|list|status``: preflight, then the Automation API; or a dry-run.

``up`` on an existing stack keeps the stack's region (another ``--region`` is refused) and its
pinned images (unless ``--refresh-images``), and afterwards replaces the agents launched for an
older master config (unless ``--keep-agents``). ``down`` keeps the database's final snapshot
unless ``--delete-data``.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import logging
import os
import shutil
from collections.abc import Callable
from typing import Any, TextIO, TypeVar

import boto3

from det.common.jsontypes import JSONObject
from det.deploy.aws import bootlog, master, preflight, program, teardown
from det.deploy.aws import serverless as aws_serverless
from det.deploy.aws.config import POSTGRES_MAJOR, PROJECT, AwsConfig, Images
from det.deploy.common import (
    automation,
    boot,
    commands,
    costs,
    flow,
    mirror,
    outs,
    registry,
    rollout,
    serverless,
    state,
)
from det.deploy.common import status as status_report
from det.deploy.common.errors import DeployError
from det.deploy.common.preflight import check_pulumi_cli

logger = logging.getLogger(__name__)
T = TypeVar("T")


def config_from_args(
    args: argparse.Namespace,
    region: str | None = None,
    previous: JSONObject | None = None,
) -> AwsConfig:
    defaults = AwsConfig(cluster_id=args.cluster_id)

    def pick(name: str, default: T) -> T:
        return commands.pick(args, name, default)

    cfg = AwsConfig(
        cluster_id=args.cluster_id,
        region=region or pick("region", defaults.region),
        keypair=args.keypair,
        agent_image_id=args.agent_image_id,
        master_image_id=getattr(args, "master_image_id", None),
        spot=args.spot,
        spot_max_price=args.spot_max_price,
        db_instance_type=pick("db_instance_type", defaults.db_instance_type),
        db_size=pick("db_size", defaults.db_size),
        vpc_id=args.vpc_id,
        public_subnet_ids=tuple(args.public_subnet_ids or ()),
        private_subnet_ids=tuple(args.private_subnet_ids or ()),
        agent_subnet_id=args.agent_subnet_id,
        extra_tags=tuple(args.add_tag or ()),
        cpu_env_image=args.cpu_env_image,
        gpu_env_image=args.gpu_env_image,
        checkpoint_gc_image=getattr(args, "checkpoint_gc_image", None),
        db=getattr(args, "db", None),
        domain=getattr(args, "domain", None),
        # The account is known after the credentials check (up's preflight): until then, and in
        # a dry run, its place is held by ACCOUNT.
        mirror_registry=ecr_registry(
            "ACCOUNT", region or pick("region", defaults.region), args.cluster_id
        )
        if getattr(args, "mirror_images", False)
        else None,
        **commands.shared_settings(args, defaults),
    )
    cfg = serverless.with_master_kind(cfg, args, previous)
    cfg.validate()
    master.check_user_data_size(cfg)
    boot.check_agent_user_data(cfg.boot, "s3", "agent,aws", cfg.port)
    return cfg


def ecr_registry(account: str, region: str, cluster_id: str) -> str:
    """Where ``--mirror-images`` puts the task images (``common.mirror``)."""
    return f"{account}.dkr.ecr.{region}.amazonaws.com/det-{cluster_id}"


def estimates(cfg: AwsConfig) -> tuple[costs.Estimate, ...]:
    """The control plane's cost with these flags, for ``--master vm`` and ``serverless``."""
    vm, sl = costs.aws(
        costs.AwsChoices(
            master_instance_type=cfg.master_instance_type,
            db_instance_type=cfg.db_instance_type,
            db_size_gb=cfg.db_size,
            serverless_db="rds" if cfg.db == "rds" else "aurora",
            secrets=3 + (1 if cfg.registry else 0),
            public_alb=bool(cfg.domain),
        )
    )
    return (vm, sl)


def stack_region(given: str | None, previous: JSONObject | None) -> str | None:
    """The region of ``up``: an existing stack's, which ``--region`` may not contradict."""
    recorded = outs.text(previous, "region")
    if given and recorded and given != recorded:
        raise DeployError(
            f"the cluster is deployed in {recorded}, not {given}: pass --region {recorded} "
            "(a cluster cannot move; `down` it and deploy it anew in the other region)"
        )
    return given or recorded


def pinned_images(previous: JSONObject | None, refresh: bool) -> Images | None:
    """The images an existing stack pinned (None: look them up, on a new stack or refresh)."""
    recorded = outs.mapping(previous, "images")
    if refresh or recorded is None:
        return None
    try:
        return Images(**{k: str(recorded[k]) for k in ("master", "aux_agent", "compute_agent")})
    except KeyError:
        return None


def pinned_zones(previous: JSONObject | None) -> tuple[str, ...] | None:
    """The availability zones an existing stack's VPC was made in; () for a stack that did not
    record them (its subnets stay in the region's first two zones); None for a new stack."""
    if previous is None:
        return None
    return tuple(outs.texts(previous, "zones") or ())


def use_state_url(args: argparse.Namespace) -> None:
    """``--state-url`` overrides ``DET_DEPLOY_STATE_URL`` for this process."""
    url = getattr(args, "state_url", None)
    if url:
        os.environ[state.STATE_URL_ENV] = state.check_state_url(url)
    elif os.environ.get(state.STATE_URL_ENV):
        state.check_state_url(os.environ[state.STATE_URL_ENV])


def _session(region: str | None, profile: str | None) -> boto3.Session:

    return boto3.Session(profile_name=profile, region_name=region)


def up(args: argparse.Namespace, out: TextIO) -> int:
    use_state_url(args)
    previous: JSONObject | None = None
    if not args.dry_run:
        if shutil.which("pulumi") and automation.has_stack(PROJECT, args.cluster_id):
            previous = automation.outputs(PROJECT, args.cluster_id)
        flow.require_local(args, previous, lambda: preflight.local_credentials(args.profile))
    current = {"cfg": config_from_args(args, stack_region(args.region, previous), previous)}
    cfg = current["cfg"]
    config: dict[str, tuple[str, bool]] = {"aws:region": (cfg.region, False)}
    if args.profile:
        config["aws:profile"] = (args.profile, False)

    def prepare() -> None:
        current["cfg"] = dataclasses.replace(
            current["cfg"], boot=boot.with_release(current["cfg"].boot)
        )

    plan = flow.UpPlan(
        cloud="aws",
        project=PROJECT,
        cluster_id=cfg.cluster_id,
        build=lambda password, registry_password, auth: program.build(
            dataclasses.replace(current["cfg"], registry=auth), password, registry_password
        ),
        mock_calls=program.MOCK_CALLS,
        stack_config=config,
        target=cfg.region,
        preflight=lambda quota: _check(args, current, previous, quota, out),
        cert=cfg.boot.tls if cfg.tls else None,
        estimates=estimates(cfg),
        master=cfg.master,
        registry_password=registry.password_from_args(args, cfg.registry),
        registry=cfg.registry,
        remove_config=registry.removed_keys(args),
        quota_needs=tuple(preflight.quota_needs(cfg)),
        prepare=prepare,
        gc_image=cfg.gc_image,
        mirror_login=(lambda: _ecr_login(_session(cfg.region, args.profile)))
        if cfg.mirror_registry
        else None,
        replace_stale=None if previous is None else _stale(args, cfg, previous, out),
    )
    if cfg.serverless:
        plan = dataclasses.replace(plan, serverless=_rollout_steps(current, args.profile))
    return flow.up(plan, args, out)


def _check(
    args: argparse.Namespace,
    current: dict[str, AwsConfig],
    previous: JSONObject | None,
    quota: bool,
    out: TextIO,
) -> str | None:
    """``up``'s cloud preflight: credentials, key pair, images and zones pinned into
    ``current["cfg"]``; with ``quota``, the master image, database class and vCPU quotas (a
    warning returned)."""
    cfg = current["cfg"]
    session = _session(cfg.region, args.profile)
    account = preflight.check_credentials(session)
    if cfg.mirror_registry:
        mirror.check_docker()
    if cfg.keypair:
        preflight.check_keypair(session, cfg.keypair)
    images = pinned_images(previous, getattr(args, "refresh_images", False))
    if images is None and cfg.agent_image_id and cfg.master_image_id:
        images = Images(cfg.master_image_id, cfg.agent_image_id, cfg.agent_image_id)
    if images is None:
        images = preflight.resolve_images(session)
        out.write(
            f"Images: master and aux pool {images.master}, compute pool "
            f"{images.compute_agent} (pinned; `up --refresh-images` to update)\n"
        )
    spot_role = cfg.spot and not preflight.spot_service_role_exists(session)
    zones = pinned_zones(previous)
    if zones is None and not cfg.vpc_id:
        types = [cfg.master_instance_type]
        if not cfg.agent_subnet_id:
            types += [cfg.aux_agent_instance_type, cfg.compute_agent_instance_type]
        zones = preflight.pick_zones(session, types)
    current["cfg"] = dataclasses.replace(
        cfg,
        images=images,
        create_spot_service_role=spot_role,
        zones=zones or (),
        mirror_registry=ecr_registry(account, cfg.region, cfg.cluster_id)
        if cfg.mirror_registry
        else None,
    )
    if not quota:  # --no-preflight-checks: only what the config needs (above)
        return None
    preflight.check_master_image(
        session, cfg.master_image_id or images.master, master.MASTER_VOLUME_GIB
    )
    db_warning = preflight.check_db_instance_class(session, cfg.db_instance_type, POSTGRES_MAJOR)
    quota_warning = preflight.check_vcpu_quota(
        session, cfg.compute_agent_instance_type, cfg.max_dynamic_agents, cfg.spot
    )
    # The CPU pool's family quota too (standard vCPUs: m, c, r, t…), or its first task waits.
    aux_warning = preflight.check_vcpu_quota(
        session, cfg.aux_agent_instance_type, cfg.max_dynamic_agents, cfg.spot
    )
    warnings = (db_warning, quota_warning, aux_warning)
    return "; ".join(w for w in warnings if w) or None


def _ecr_login(session: Any) -> rollout.Login:
    """A 12-hour ECR token of the deployer's credentials (``GetAuthorizationToken``)."""
    data = session.client("ecr").get_authorization_token()["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    return rollout.Login(data["proxyEndpoint"].removeprefix("https://"), user, password)


def _rollout_steps(current: dict[str, AwsConfig], profile: str | None) -> rollout.Steps:
    """Push to the cluster's ECR repository with an ECR token; run the migration task."""

    def session() -> boto3.Session:
        return _session(current["cfg"].region, profile)

    def release(cfg: AwsConfig) -> str:
        account = preflight.check_credentials(session())
        repository = f"{account}.dkr.ecr.{cfg.region}.amazonaws.com/det-{cfg.cluster_id}/{serverless.IMAGE_NAME}"
        return aws_serverless.release_image(cfg, repository)

    def migrate(outputs: JSONObject) -> None:
        rollout.run_ecs_migration(session().client("ecs"), outputs)

    return rollout.steps(current, release, lambda _: _ecr_login(session()), migrate)


def _stale(
    args: argparse.Namespace, cfg: AwsConfig, previous: JSONObject, out: TextIO
) -> Callable[[], None]:
    """After ``up`` of an existing cluster: terminate the agents started with an older config
    (``flow.stale_agents``), never the master."""

    def replace(outputs: JSONObject, digest: str) -> list[str]:
        master_id = outs.text(outputs, "master_instance_id")
        ec2 = _session(cfg.region, args.profile).client("ec2")
        return teardown.replace_stale_agents(
            ec2, cfg.cluster_id, digest, exclude=frozenset({master_id} if master_id else ())
        )

    return flow.stale_agents(PROJECT, cfg.cluster_id, previous, args, replace, "terminated", out)


def down(args: argparse.Namespace, out: TextIO) -> int:
    use_state_url(args)
    found: list[tuple[boto3.Session, str | None]] = []  # connect's session and the snapshot

    def connect(outputs: JSONObject) -> flow.Teardown:
        session = _session(args.region or outs.text(outputs, "region"), args.profile)
        preflight.check_credentials(session)
        found.append((session, outs.text(outputs, "db_final_snapshot")))

        def remove_instances() -> str:
            ec2 = session.client("ec2")
            master_id = outs.text(outputs, "master_instance_id")
            if master_id:
                teardown.stop_master(ec2, master_id)
            if outputs.get("ecs_service"):
                teardown.stop_serverless_master(
                    session.client("application-autoscaling"),
                    session.client("ecs"),
                    str(outputs["ecs_cluster"]),
                    str(outputs["ecs_service"]),
                )
            removed = teardown.terminate_agents(
                ec2, args.cluster_id, exclude=frozenset({master_id} if master_id else ())
            )
            return f"Terminated {len(removed)} agent instances."

        return flow.Teardown(
            remove_instances=remove_instances,
            delete_bucket=lambda bucket: teardown.delete_bucket(session.client("s3"), bucket),
        )

    code = flow.down("aws", PROJECT, args, out, connect)
    session, snapshot = found[0] if found else (None, None)
    if code != 0 or not snapshot or session is None:
        return code
    if getattr(args, "delete_data", False):
        deleted = teardown.delete_final_snapshot(session.client("rds"), snapshot)
        out.write(f"Deleted the database's final snapshot {snapshot}.\n" if deleted else "")
    else:
        out.write(
            f"Kept the database's final snapshot {snapshot} (restore it with "
            f"`aws rds restore-db-instance-from-db-snapshot`; `down --delete-data` skips it).\n"
        )
    return code


def list_(args: argparse.Namespace, out: TextIO) -> int:
    use_state_url(args)
    directory = state.state_dir()
    if state.is_local(state.backend_url(directory), directory):
        return int(commands.print_list(PROJECT, args.json, out))
    check_pulumi_cli()
    rows = [
        commands.cluster_summary(cluster_id, automation.outputs(PROJECT, cluster_id))
        for cluster_id in automation.stack_names(PROJECT)
    ]
    return commands.write_list(rows, args.json, out)


def status(args: argparse.Namespace, out: TextIO) -> int:
    """The stack's outputs, the master's health and the tail of the boot logs."""
    use_state_url(args)

    def boot_log(
        outputs: JSONObject, lines: int, agents: int
    ) -> tuple[str, list[status_report.MachineLog]]:
        group = str(outputs.get("log_group") or f"/det/{args.cluster_id}")
        region = args.region or outs.text(outputs, "region")
        where = f"CloudWatch Logs group {group}"
        session = _session(region, args.profile)
        preflight.check_credentials(session)
        master = str(outputs.get("master_instance_id") or "") or None
        logs = session.client("logs")
        ec2 = session.client("ec2")
        return where, bootlog.tail(
            logs, group, lines, master=master, agents=agents, ec2=ec2, cluster_id=args.cluster_id
        )

    return status_report.report(args, out, "aws", PROJECT, boot_log)
