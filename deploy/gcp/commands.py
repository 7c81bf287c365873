"""``det deploy gcp up|down|list|status``: preflight, then the Automation API; or a dry-run."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
from collections.abc import Callable
from typing import TextIO, TypeVar

import google.cloud.storage as gcs
from google.auth.credentials import Credentials
from google.auth.transport.requests import AuthorizedSession, Request

from det.common.jsontypes import JSONObject
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
)
from det.deploy.common import status as status_report
from det.deploy.common.errors import DeployError
from det.deploy.gcp import bootlog, images, preflight, program, teardown
from det.deploy.gcp import serverless as gcp_serverless
from det.deploy.gcp.config import BOOT_LOG_NAME, PROJECT, SERVERLESS_DB_TIER, GcpConfig

T = TypeVar("T")


def config_from_args(args: argparse.Namespace, previous: JSONObject | None = None) -> GcpConfig:
    """The config of ``up``'s flags; ``previous``: the existing stack's outputs (None: a new
    cluster), which decide the master kind when ``--master`` is not given."""
    # HTTPS on 8443 by default; shared_settings gives tls=False and port 8080 with --no-tls.
    defaults = GcpConfig(cluster_id=args.cluster_id, project_id=args.project_id)

    def pick(name: str, default: T) -> T:
        return commands.pick(args, name, default)

    cfg = GcpConfig(
        cluster_id=args.cluster_id,
        project_id=args.project_id,
        region=pick("region", defaults.region),
        zone=args.zone,
        network=args.network,
        existing_network=args.existing_network,
        subnetwork=args.subnetwork,
        subnet_cidr=pick("subnet_cidr", defaults.subnet_cidr),
        gpu_type=pick("gpu_type", defaults.gpu_type),
        gpu_num=pick("gpu_num", defaults.gpu_num),
        preemptible=bool(args.preemptible),
        agent_image=pick("agent_image", defaults.agent_image),
        aux_agent_image=args.agent_image or defaults.aux_agent_image,
        disk_size=pick("disk_size", defaults.disk_size),
        disk_type=pick("disk_type", defaults.disk_type),
        operation_timeout_period=pick(
            "operation_timeout_period", defaults.operation_timeout_period
        ),
        db_tier=pick("db_tier", defaults.db_tier),
        db_edition=getattr(args, "db_edition", None),
        filestore=args.filestore,
        filestore_address=args.filestore_address or None,
        labels=tuple(args.add_label or ()),
        cpu_env_image=pick("cpu_env_image", defaults.cpu_env_image),
        gpu_env_image=pick("gpu_env_image", defaults.gpu_env_image),
        mirror_images=bool(getattr(args, "mirror_images", False)),
        checkpoint_gc_image=getattr(args, "checkpoint_gc_image", None),
        **commands.shared_settings(args, defaults),
    )
    cfg = _master_kind(args, cfg, previous)
    cfg.validate()
    boot.check_agent_user_data(cfg.boot, "gs", "agent,gcp", cfg.port)
    return cfg


def _check_flags_alone(args: argparse.Namespace) -> None:
    """Refuse flags that are wrong whatever the cluster's master kind (a region that does not
    exist, a bad cluster id), before anything runs; the error of the kind ``up`` would take
    for a new cluster when no kind accepts them."""
    given = getattr(args, "master", None)
    kinds = (given,) if given else tuple(dict.fromkeys((serverless.DEFAULT_MASTER, serverless.VM)))
    first: DeployError | None = None
    for kind in kinds:
        try:
            config_from_args(args, {"master": kind})
            return
        except DeployError as e:
            first = first or e
    assert first is not None
    raise first


def _master_kind(
    args: argparse.Namespace, cfg: GcpConfig, previous: JSONObject | None
) -> GcpConfig:
    """``--master`` (or the existing cluster's kind, or the default): a serverless master is
    served by Cloud Run's HTTPS on its port, and its database defaults to the smallest tier
    (the idle cluster pays for it)."""
    return serverless.with_master_kind(
        cfg, args, previous, db_tier=getattr(args, "db_tier", None) or SERVERLESS_DB_TIER
    )


def estimates(args: argparse.Namespace, cfg: GcpConfig) -> tuple[costs.Estimate, ...]:
    """The control plane's cost with these flags, for ``--master vm`` and ``serverless``."""
    given_tier = getattr(args, "db_tier", None)
    vm, sl = costs.gcp(
        costs.GcpChoices(
            master_machine_type=cfg.master_instance_type,
            db_tier=given_tier or GcpConfig.db_tier,
            serverless_db_tier=given_tier or SERVERLESS_DB_TIER,
            secrets=3 + (1 if cfg.registry else 0),
        )
    )
    return (vm, sl)


def _use_keypath(keypath: str | None) -> None:
    if keypath:
        os.environ["GOOGLE_APPLICATION_CREDENTIALS"] = os.path.abspath(keypath)


def _previous_outputs(cluster_id: str) -> JSONObject:
    """The outputs of the cluster's last ``up`` (empty for a new cluster)."""
    if not automation.has_stack(PROJECT, cluster_id):
        return {}
    return automation.outputs(PROJECT, cluster_id)


def up(args: argparse.Namespace, out: TextIO) -> int:
    if args.dry_run:
        cfg = config_from_args(args)
    else:
        # An existing cluster keeps its master kind (serverless.master_kind), which only its
        # stack's outputs tell: the flags alone are checked first, then the Pulumi CLI, then
        # the outputs are read and the config is made for the kind they record.
        _check_flags_alone(args)
        _use_keypath(args.keypath)
        recorded = _previous_outputs(args.cluster_id) if shutil.which("pulumi") else {}
        flow.require_local(args, recorded or None, preflight.local_credentials)
        cfg = config_from_args(args, recorded or None)
    # The dry-run renders the image families as asked; a real `up` pins them in `check` (after
    # the credentials and APIs are known good) and the program is built from the pinned config.
    pinned = {"cfg": cfg}
    found = _Found()
    stack_config = {
        "gcp:project": (cfg.project_id, False),
        "gcp:region": (cfg.region, False),
        "gcp:zone": (cfg.zone_name, False),
    }

    def prepare() -> None:
        pinned["cfg"] = dataclasses.replace(
            pinned["cfg"], boot=boot.with_release(pinned["cfg"].boot)
        )

    previous = _previous_outputs(cfg.cluster_id) if not args.dry_run else None
    plan = flow.UpPlan(
        cloud="gcp",
        project=PROJECT,
        cluster_id=cfg.cluster_id,
        build=lambda password, registry_password, auth: program.build(
            dataclasses.replace(pinned["cfg"], registry=auth), password, registry_password
        ),
        mock_calls=program.MOCK_CALLS,
        stack_config=stack_config,
        target=f"{cfg.project_id}/{cfg.zone_name}",
        preflight=lambda quota: _check(args, pinned, found, stack_config, quota),
        cert=cfg.boot.tls if cfg.tls else None,
        estimates=estimates(args, cfg),
        quota_needs=tuple(preflight.quota_needs(cfg)),
        master=cfg.master,
        registry_password=registry.password_from_args(args, cfg.registry),
        registry=cfg.registry,
        remove_config=registry.removed_keys(args),
        prepare=prepare,
        gc_image=cfg.gc_image,
        mirror_login=(lambda: _registry_login(found, cfg.region)) if cfg.mirror_images else None,
        replace_stale=_stale(args, cfg, previous, out) if previous else None,
    )
    if cfg.serverless:
        plan = dataclasses.replace(plan, serverless=_rollout_steps(pinned, found))
    return flow.up(plan, args, out)


def _check(
    args: argparse.Namespace,
    pinned: dict[str, GcpConfig],
    found: _Found,
    stack_config: dict[str, tuple[str, bool]],
    quota: bool,
) -> str | None:
    """``up``'s cloud preflight: credentials, the APIs, the zone's machine types, the image
    families pinned into ``pinned["cfg"]`` (and the stack config); with ``quota``, the GPU and
    CPU quotas (a warning returned)."""
    cfg = pinned["cfg"]
    _use_keypath(args.keypath)
    credentials, get_json = preflight.check_credentials(cfg.project_id)
    required = [*preflight.REQUIRED_APIS, *([preflight.FILESTORE_API] if cfg.filestore else [])]
    if cfg.serverless:
        required += [a for a in SERVERLESS_APIS if a not in required]
    if cfg.mirror_images:
        mirror.check_docker()
        required += [a for a in (MIRROR_API,) if a not in required]
    found.credentials = credentials
    preflight.check_apis(get_json, cfg.project_id, required)
    preflight.check_zone_offers(
        get_json,
        cfg.project_id,
        cfg.zone_name,
        [cfg.master_instance_type, cfg.aux_agent_instance_type, cfg.compute_agent_instance_type],
        cfg.gpu_type if cfg.gpu_num else None,
    )
    pinned["cfg"] = images.pin(
        cfg,
        _previous_outputs(cfg.cluster_id),
        bool(getattr(args, "refresh_images", False)),
        lambda: images.images_client(credentials),
    )
    stack_config.update(images.stack_config(pinned["cfg"]))
    if not quota:
        return None
    gpu_warning = preflight.check_gpu_quota(
        get_json,
        cfg.project_id,
        cfg.region,
        cfg.gpu_type,
        cfg.gpu_num,
        cfg.max_dynamic_agents,
        cfg.preemptible,
    )
    cpu_warning = preflight.check_cpu_quota(get_json, cfg.project_id, cfg.zone_name, cfg)
    return "; ".join(w for w in (gpu_warning, cpu_warning) if w) or None


# What --mirror-images needs enabled.
MIRROR_API = "artifactregistry.googleapis.com"


@dataclasses.dataclass
class _Found:
    """What ``up``'s preflight learnt that the later steps use."""

    credentials: Credentials | None = None
    """The deploying identity (set by the preflight, before any step that logs in)."""


def _registry_login(found: _Found, region: str) -> rollout.Login:
    """Artifact Registry's docker login: ``oauth2accesstoken`` and the deploying identity's
    access token (an hour)."""

    credentials = found.credentials
    if credentials is None:
        raise DeployError("no Google credentials yet: the preflight runs before the login")
    credentials.refresh(Request())  # type: ignore[no-untyped-call]
    return rollout.Login(f"{region}-docker.pkg.dev", "oauth2accesstoken", str(credentials.token))


# What a serverless master needs enabled besides the VM deploy's APIs.
SERVERLESS_APIS = (
    "run.googleapis.com",
    "artifactregistry.googleapis.com",
    "cloudtasks.googleapis.com",
)


def _rollout_steps(pinned: dict[str, GcpConfig], found: _Found) -> rollout.Steps:
    """Push to the cluster's Artifact Registry with the deploying identity's access token; the
    migration is the Cloud Run job the program runs before the service."""

    return rollout.steps(
        pinned,
        gcp_serverless.release_image,
        lambda cfg: _registry_login(found, cfg.region),
    )


def _stale(
    args: argparse.Namespace, cfg: GcpConfig, previous: JSONObject, out: TextIO
) -> Callable[[], None]:
    """After ``up`` of an existing cluster: delete the agents started with an older config
    (``flow.stale_agents``), never the master."""

    def replace(outputs: JSONObject, digest: str) -> list[str]:
        instances, zone_operations, _, _ = teardown.compute_clients()
        return teardown.replace_stale_agents(
            instances,
            zone_operations,
            cfg.project_id,
            cfg.cluster_id,
            digest,
            outs.text(outputs, "master_instance_name"),
        )

    return flow.stale_agents(PROJECT, cfg.cluster_id, previous, args, replace, "deleted", out)


def down(args: argparse.Namespace, out: TextIO) -> int:
    def connect(outputs: JSONObject) -> flow.Teardown:
        # Reading the stack's outputs needs no Google credentials; the steps below do.
        _use_keypath(args.keypath)
        project = args.project_id or str(outputs["project_id"])
        preflight.check_credentials(project)

        def remove_instances() -> str:
            service, region = outputs.get("master_service"), outputs.get("region")
            if service and region:
                # google-auth comes with det[deploy]'s Google clients; only a serverless master
                # needs a raw authorized session.

                credentials, _ = preflight.check_credentials(project)
                teardown.delete_run_service(
                    AuthorizedSession(credentials),  # type: ignore[no-untyped-call]
                    project,
                    str(region),
                    str(service),
                )
            return teardown.remove_cluster_machines(
                teardown.compute_clients(), project, args.cluster_id, outputs
            )

        def delete_bucket(bucket: str) -> int:

            return teardown.delete_bucket(gcs.Client(project=project), bucket)

        return flow.Teardown(remove_instances=remove_instances, delete_bucket=delete_bucket)

    return flow.down("gcp", PROJECT, args, out, connect)


def list_(args: argparse.Namespace, out: TextIO) -> int:
    return int(commands.print_list(PROJECT, args.json, out))


def status(args: argparse.Namespace, out: TextIO) -> int:
    """The stack's outputs, the master's health and the tail of the boot logs."""

    def boot_log(
        outputs: JSONObject, lines: int, agents: int
    ) -> tuple[str, list[status_report.MachineLog]]:
        project = args.project_id or str(outputs.get("project_id") or "")
        log_name = str(outputs.get("boot_log_name") or BOOT_LOG_NAME)
        where = f"Cloud Logging log {log_name} in {project}"
        _use_keypath(args.keypath)
        credentials, _ = preflight.check_credentials(project)

        session = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]
        return where, bootlog.tail(
            session.post,
            project,
            log_name,
            args.cluster_id,
            lines,
            master=str(outputs.get("master_instance_name") or "") or None,
            agents=agents,
        )

    return status_report.report(args, out, "gcp", PROJECT, boot_log)
