"""``det deploy aws up|down|list``: preflight, then the Automation API; or a dry-run."""

from __future__ import annotations

import argparse
import logging
from typing import Any, TextIO

from det.deploy.aws import preflight, program, teardown
from det.deploy.aws.config import PROJECT, AwsConfig
from det.deploy.common import automation, commands
from det.deploy.common.errors import DeployError
from det.deploy.common.preflight import check_pulumi_cli

logger = logging.getLogger(__name__)


def config_from_args(args: argparse.Namespace) -> AwsConfig:
    defaults = AwsConfig(cluster_id=args.cluster_id)

    def pick(name: str) -> Any:
        value = getattr(args, name, None)
        return getattr(defaults, name) if value is None else value

    cfg = AwsConfig(
        cluster_id=args.cluster_id,
        region=pick("region"),
        keypair=args.keypair,
        inbound_cidr=pick("inbound_cidr"),
        enable_ssh=args.enable_ssh,
        port=pick("port"),
        master_instance_type=pick("master_instance_type"),
        aux_agent_instance_type=pick("aux_agent_instance_type"),
        compute_agent_instance_type=pick("compute_agent_instance_type"),
        agent_image_id=args.agent_image_id,
        min_dynamic_agents=pick("min_dynamic_agents"),
        max_dynamic_agents=pick("max_dynamic_agents"),
        max_aux_containers_per_agent=pick("max_aux_containers_per_agent"),
        max_idle_agent_period=pick("max_idle_agent_period"),
        max_agent_starting_period=pick("max_agent_starting_period"),
        spot=args.spot,
        spot_max_price=args.spot_max_price,
        scheduler_type=pick("scheduler_type"),
        preemption_enabled=bool(args.preemption_enabled),
        db_instance_type=pick("db_instance_type"),
        db_size=pick("db_size"),
        bucket_versioning=args.bucket_versioning,
        vpc_id=args.vpc_id,
        public_subnet_ids=tuple(args.public_subnet_ids or ()),
        private_subnet_ids=tuple(args.private_subnet_ids or ()),
        agent_subnet_id=args.agent_subnet_id,
        det_package=pick("det_package"),
        extra_tags=tuple(args.add_tag or ()),
        cpu_env_image=args.cpu_env_image,
        gpu_env_image=args.gpu_env_image,
    )
    cfg.validate()
    return cfg


def _session(region: str | None, profile: str | None) -> Any:
    import boto3

    return boto3.Session(profile_name=profile, region_name=region)


def up(args: argparse.Namespace, out: TextIO) -> int:
    cfg = config_from_args(args)
    if args.dry_run:
        return int(
            commands.print_dry_run(
                "aws",
                cfg.cluster_id,
                lambda: program.build(cfg),
                program.MOCK_CALLS,
                args.json,
                out,
            )
        )
    check_pulumi_cli()
    session = _session(cfg.region, args.profile)
    preflight.check_credentials(session)
    if cfg.keypair:
        preflight.check_keypair(session, cfg.keypair)
    if not args.no_preflight_checks:
        warning = preflight.check_vcpu_quota(
            session, cfg.compute_agent_instance_type, cfg.max_dynamic_agents, cfg.spot
        )
        if warning:
            out.write(f"warning: {warning}\n")
    new = not automation.has_stack(PROJECT, cfg.cluster_id)
    password = commands.initial_password(args.initial_user_password, new, args.yes)
    config: dict[str, tuple[str, bool]] = {"aws:region": (cfg.region, False)}
    if args.profile:
        config["aws:profile"] = (args.profile, False)
    if password:
        config["det:initialUserPassword"] = (password, True)

    def pulumi_program() -> None:
        import pulumi

        given = pulumi.Config("det").get_secret("initialUserPassword")
        for key, value in program.build(cfg, given).items():
            pulumi.export(key, value)

    out.write(f"Deploying cluster {cfg.cluster_id!r} to {cfg.region}...\n")
    outputs = automation.up(
        PROJECT, cfg.cluster_id, pulumi_program, config, on_output=commands.lines(out)
    )
    return int(
        commands.finish_up(
            outputs, not args.no_wait_for_master, args.master_timeout, new and not password, out
        )
    )


def down(args: argparse.Namespace, out: TextIO) -> int:
    question = (
        f"Delete cluster {args.cluster_id!r}: its master, agents, database and network"
        f"{' and the checkpoint bucket' if args.delete_bucket else ''}?"
    )
    if not commands.confirm(question, args.yes):
        out.write("Delete cancelled.\n")
        return 0
    check_pulumi_cli()
    if not automation.has_stack(PROJECT, args.cluster_id):
        raise DeployError(f"no AWS cluster {args.cluster_id!r} (see `det deploy aws list`)")
    outputs = automation.outputs(PROJECT, args.cluster_id)
    session = _session(args.region or outputs.get("region"), args.profile)
    preflight.check_credentials(session)
    ec2 = session.client("ec2")
    master_id = outputs.get("master_instance_id")
    if master_id:
        teardown.stop_master(ec2, master_id)
    removed = teardown.terminate_agents(
        ec2, args.cluster_id, exclude=frozenset({master_id} if master_id else ())
    )
    out.write(f"Terminated {len(removed)} agent instances.\n")
    bucket = outputs.get("bucket")
    if args.delete_bucket and bucket:
        count = teardown.delete_bucket(session.client("s3"), bucket)
        out.write(f"Deleted bucket {bucket} ({count} objects).\n")
    automation.destroy(PROJECT, args.cluster_id, on_output=commands.lines(out))
    if bucket and not args.delete_bucket:
        out.write(f"Kept checkpoint bucket {bucket} (remove it with `down --delete-bucket`).\n")
    out.write("Delete successful.\n")
    return 0


def list_(args: argparse.Namespace, out: TextIO) -> int:
    return int(commands.print_list(PROJECT, args.json, out))
