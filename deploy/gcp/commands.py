"""``det deploy gcp up|down|list``: preflight, then the Automation API; or a dry-run."""

from __future__ import annotations

import argparse
import os
from typing import Any, TextIO

from det.deploy.common import automation, commands
from det.deploy.common.errors import DeployError
from det.deploy.common.preflight import check_pulumi_cli
from det.deploy.gcp import preflight, program, teardown
from det.deploy.gcp.config import PROJECT, GcpConfig


def config_from_args(args: argparse.Namespace) -> GcpConfig:
    defaults = GcpConfig(cluster_id=args.cluster_id, project_id=args.project_id)

    def pick(name: str) -> Any:
        value = getattr(args, name, None)
        return getattr(defaults, name) if value is None else value

    cfg = GcpConfig(
        cluster_id=args.cluster_id,
        project_id=args.project_id,
        region=pick("region"),
        zone=args.zone,
        network=args.network,
        existing_network=args.existing_network,
        subnetwork=args.subnetwork,
        subnet_cidr=pick("subnet_cidr"),
        inbound_cidr=pick("inbound_cidr"),
        enable_ssh=args.enable_ssh,
        port=pick("port"),
        master_instance_type=pick("master_instance_type"),
        aux_agent_instance_type=pick("aux_agent_instance_type"),
        compute_agent_instance_type=pick("compute_agent_instance_type"),
        gpu_type=pick("gpu_type"),
        gpu_num=pick("gpu_num"),
        preemptible=bool(args.preemptible),
        agent_image=pick("agent_image"),
        disk_size=pick("disk_size"),
        disk_type=pick("disk_type"),
        min_dynamic_agents=pick("min_dynamic_agents"),
        max_dynamic_agents=pick("max_dynamic_agents"),
        max_aux_containers_per_agent=pick("max_aux_containers_per_agent"),
        max_idle_agent_period=pick("max_idle_agent_period"),
        max_agent_starting_period=pick("max_agent_starting_period"),
        operation_timeout_period=pick("operation_timeout_period"),
        scheduler_type=pick("scheduler_type"),
        preemption_enabled=bool(args.preemption_enabled),
        db_tier=pick("db_tier"),
        bucket_versioning=args.bucket_versioning,
        filestore=args.filestore,
        filestore_address=args.filestore_address or None,
        det_package=pick("det_package"),
        labels=tuple(args.add_label or ()),
        cpu_env_image=args.cpu_env_image or None,
        gpu_env_image=args.gpu_env_image or None,
    )
    cfg.validate()
    return cfg


def up(args: argparse.Namespace, out: TextIO) -> int:
    cfg = config_from_args(args)
    if args.dry_run:
        return int(
            commands.print_dry_run(
                "gcp",
                cfg.cluster_id,
                lambda: program.build(cfg),
                program.MOCK_CALLS,
                args.json,
                out,
            )
        )
    check_pulumi_cli()
    if args.keypath:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = os.path.abspath(args.keypath)
    _, get_json = preflight.check_credentials(cfg.project_id)
    required = [*preflight.REQUIRED_APIS, *([preflight.FILESTORE_API] if cfg.filestore else [])]
    preflight.check_apis(get_json, cfg.project_id, required)
    if not args.no_preflight_checks:
        warning = preflight.check_gpu_quota(
            get_json,
            cfg.project_id,
            cfg.region,
            cfg.gpu_type,
            cfg.gpu_num,
            cfg.max_dynamic_agents,
            cfg.preemptible,
        )
        if warning:
            out.write(f"warning: {warning}\n")
    new = not automation.has_stack(PROJECT, cfg.cluster_id)
    password = commands.initial_password(args.initial_user_password, new, args.yes)
    config = {
        "gcp:project": (cfg.project_id, False),
        "gcp:region": (cfg.region, False),
        "gcp:zone": (cfg.zone_name, False),
    }
    if password:
        config["det:initialUserPassword"] = (password, True)

    def pulumi_program() -> None:
        import pulumi

        given = pulumi.Config("det").get_secret("initialUserPassword")
        for key, value in program.build(cfg, given).items():
            pulumi.export(key, value)

    out.write(f"Deploying cluster {cfg.cluster_id!r} to {cfg.project_id}/{cfg.zone_name}...\n")
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
        raise DeployError(f"no GCP cluster {args.cluster_id!r} (see `det deploy gcp list`)")
    if args.keypath:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = os.path.abspath(args.keypath)
    outputs = automation.outputs(PROJECT, args.cluster_id)
    project = args.project_id or outputs["project_id"]
    preflight.check_credentials(project)
    instances, operations = teardown.compute_clients()
    zone = outputs["zone"]
    master_name = outputs.get("master_instance_name")
    if master_name:
        teardown.stop_master(instances, operations, project, zone, master_name)
    removed = teardown.delete_agents(instances, operations, project, args.cluster_id, master_name)
    out.write(f"Deleted {len(removed)} agent instances.\n")
    bucket = outputs.get("bucket")
    if args.delete_bucket and bucket:
        import google.cloud.storage as gcs

        count = teardown.delete_bucket(gcs.Client(project=project), bucket)
        out.write(f"Deleted bucket {bucket} ({count} objects).\n")
    automation.destroy(PROJECT, args.cluster_id, on_output=commands.lines(out))
    if bucket and not args.delete_bucket:
        out.write(f"Kept checkpoint bucket {bucket} (remove it with `down --delete-bucket`).\n")
    out.write("Delete successful.\n")
    return 0


def list_(args: argparse.Namespace, out: TextIO) -> int:
    return int(commands.print_list(PROJECT, args.json, out))
