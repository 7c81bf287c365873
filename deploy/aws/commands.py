"""``det deploy aws up|down|list``: preflight, then the Automation API; or a dry-run."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Mapping
from typing import Any, TextIO

from det.deploy.aws import preflight, program, teardown
from det.deploy.aws.config import PROJECT, AwsConfig
from det.deploy.common import commands, flow

logger = logging.getLogger(__name__)


def config_from_args(args: argparse.Namespace) -> AwsConfig:
    defaults = AwsConfig(cluster_id=args.cluster_id)

    def pick(name: str) -> Any:
        return commands.pick(args, defaults, name)

    cfg = AwsConfig(
        cluster_id=args.cluster_id,
        region=pick("region"),
        keypair=args.keypair,
        agent_image_id=args.agent_image_id,
        spot=args.spot,
        spot_max_price=args.spot_max_price,
        db_instance_type=pick("db_instance_type"),
        db_size=pick("db_size"),
        vpc_id=args.vpc_id,
        public_subnet_ids=tuple(args.public_subnet_ids or ()),
        private_subnet_ids=tuple(args.private_subnet_ids or ()),
        agent_subnet_id=args.agent_subnet_id,
        extra_tags=tuple(args.add_tag or ()),
        cpu_env_image=args.cpu_env_image,
        gpu_env_image=args.gpu_env_image,
        **commands.shared_settings(args, defaults),
    )
    cfg.validate()
    return cfg


def _session(region: str | None, profile: str | None) -> Any:
    import boto3

    return boto3.Session(profile_name=profile, region_name=region)


def up(args: argparse.Namespace, out: TextIO) -> int:
    cfg = config_from_args(args)
    config: dict[str, tuple[str, bool]] = {"aws:region": (cfg.region, False)}
    if args.profile:
        config["aws:profile"] = (args.profile, False)

    def check(quota: bool) -> str | None:
        session = _session(cfg.region, args.profile)
        preflight.check_credentials(session)
        if cfg.keypair:
            preflight.check_keypair(session, cfg.keypair)
        if not quota:
            return None
        return preflight.check_vcpu_quota(
            session, cfg.compute_agent_instance_type, cfg.max_dynamic_agents, cfg.spot
        )

    plan = flow.UpPlan(
        cloud="aws",
        project=PROJECT,
        cluster_id=cfg.cluster_id,
        build=lambda password: program.build(cfg, password),
        mock_calls=program.MOCK_CALLS,
        stack_config=config,
        target=cfg.region,
        preflight=check,
    )
    return flow.up(plan, args, out)


def down(args: argparse.Namespace, out: TextIO) -> int:
    def connect(outputs: Mapping[str, Any]) -> flow.Teardown:
        session = _session(args.region or outputs.get("region"), args.profile)
        preflight.check_credentials(session)

        def remove_instances() -> str:
            ec2 = session.client("ec2")
            master_id = outputs.get("master_instance_id")
            if master_id:
                teardown.stop_master(ec2, master_id)
            removed = teardown.terminate_agents(
                ec2, args.cluster_id, exclude=frozenset({master_id} if master_id else ())
            )
            return f"Terminated {len(removed)} agent instances."

        return flow.Teardown(
            remove_instances=remove_instances,
            delete_bucket=lambda bucket: teardown.delete_bucket(session.client("s3"), bucket),
        )

    return flow.down("aws", PROJECT, args, out, connect)


def list_(args: argparse.Namespace, out: TextIO) -> int:
    return int(commands.print_list(PROJECT, args.json, out))
