"""``det deploy aws|gcp up|down|list``: the cloud commands' flags (Determined's names and
defaults) and dispatch (``det deploy local`` is ``deploy/local/``; ``cli/deploy.py`` adds both
to the ``det`` CLI).

Integration with the ``det`` CLI: call :func:`add_parsers` with the ``deploy`` noun's
subparsers; each leaf parser gets ``func=handle`` (``handle(args) -> int`` exit code). On its
own: :func:`run` takes an argv list (``["aws", "up", "--dry-run", ...]``) and returns the exit
code; errors are one line on stderr (traceback only with ``--debug``).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import traceback
from collections.abc import Callable
from typing import Any, TextIO

from det.deploy.common.errors import DeployError

logger = logging.getLogger(__name__)

SCHEDULERS = ["fair_share", "priority", "round_robin"]


def _bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    lowered = value.strip().lower()
    if lowered in ("true", "t", "yes", "y", "1", "on"):
        return True
    if lowered in ("false", "f", "no", "n", "0", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def _key_value(reserved: set[str]) -> Callable[[str], tuple[str, str]]:
    def parse(text: str) -> tuple[str, str]:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise argparse.ArgumentTypeError("expected key=value with both a key and a value")
        if key in reserved:
            raise argparse.ArgumentTypeError(f"{key!r} is reserved")
        return key, value

    return parse


def _price(text: str) -> str:
    try:
        if float(text) <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            "must be a positive number such as 0.50 (no currency sign)"
        ) from None
    return text


def _common_up(p: argparse.ArgumentParser) -> None:
    """The flags ``up`` takes on every cloud."""
    _mode_flags(p)
    _pool_flags(p)
    _access_flags(p)
    _install_flags(p)


def _mode_flags(p: argparse.ArgumentParser) -> None:
    """The master's kind, and a dry-run instead of a deploy."""
    p.add_argument(
        "--master",
        choices=["vm", "serverless"],
        help="where the master runs: serverless (the default for a new cluster: Cloud Run / "
        "ECS Fargate behind the platform's HTTPS, scaling to zero when idle) or a VM; an "
        "existing cluster keeps the kind it was deployed with",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="render every resource offline (no credentials needed); create nothing",
    )
    p.add_argument(
        "--json", action="store_true", help="with --dry-run: print JSON instead of a table"
    )


def _pool_flags(p: argparse.ArgumentParser) -> None:
    """The pools: instance types, sizes and scheduling."""
    p.add_argument("--master-instance-type", help="instance type of the master")
    p.add_argument(
        "--compute-agent-instance-type",
        "--gpu-agent-instance-type",
        dest="compute_agent_instance_type",
        help="instance type of agents in the compute pool",
    )
    p.add_argument(
        "--aux-agent-instance-type",
        "--cpu-agent-instance-type",
        dest="aux_agent_instance_type",
        help="instance type of agents in the auxiliary pool",
    )
    p.add_argument(
        "--max-aux-containers-per-agent",
        "--max-cpu-containers-per-agent",
        dest="max_aux_containers_per_agent",
        type=int,
    )
    p.add_argument("--min-dynamic-agents", type=int, help="minimum number of agent instances")
    p.add_argument("--max-dynamic-agents", type=int, help="maximum number of agent instances")
    p.add_argument(
        "--max-idle-agent-period", help="idle time before an agent is shut down, e.g. 10m"
    )
    p.add_argument("--max-agent-starting-period", help="time an agent may take to start, e.g. 20m")
    p.add_argument("--scheduler-type", choices=SCHEDULERS, help="scheduler (default fair_share)")
    p.add_argument(
        "--preemption-enabled",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        help="preemption (priority scheduler only)",
    )


def _access_flags(p: argparse.ArgumentParser) -> None:
    """Who reaches the master, and the images and registry the tasks use."""
    p.add_argument(
        "--inbound-cidr", help="addresses allowed to reach the master (default 0.0.0.0/0)"
    )
    p.add_argument("--enable-ssh", action="store_true", help="allow SSH from --inbound-cidr")
    p.add_argument("--port", type=int, help="master port (default 8443; 8080 with --no-tls)")
    p.add_argument("--cpu-env-image", help="Docker image for CPU tasks")
    p.add_argument("--gpu-env-image", help="Docker image for GPU tasks")
    p.add_argument(
        "--registry-server",
        help="private registry of the task images (host[:port]); agents log in to it",
    )
    p.add_argument("--registry-username", help="user name for --registry-server")
    p.add_argument(
        "--registry-password",
        help="password for --registry-server (default: $DET_REGISTRY_PASSWORD); kept in the "
        "cluster's secret store, never in master.yaml or the VMs' user data",
    )
    p.add_argument(
        "--no-registry",
        action="store_true",
        help="stop using the private registry a previous up set (its server, user name and "
        "password are removed from the cluster)",
    )
    p.add_argument(
        "--mirror-images",
        action="store_true",
        help="copy the task images into the cluster's own registry (ECR / Artifact Registry) "
        "and point the pools' defaults at the copies, with det's checkpoint-GC image (built "
        "here when missing); needs the docker command",
    )
    p.add_argument(
        "--checkpoint-gc-image",
        help="the image of checkpoint-GC tasks (Python 3.11+ with boto3 and "
        "google-cloud-storage, e.g. det-checkpoint-gc:py3.11 pushed to your registry); default: "
        "det's own with --mirror-images, else the task image",
    )


def _install_flags(p: argparse.ArgumentParser) -> None:
    """The bucket, det's installation on the VMs, TLS, and how ``up`` runs."""
    p.add_argument(
        "--bucket-versioning", action="store_true", help="keep old versions of checkpoint objects"
    )
    p.add_argument(
        "--det-wheel-url",
        help="install det on the VMs from this wheel (s3://, gs:// or https://) instead of "
        "the running det's wheel, which is uploaded into the cluster's bucket",
    )
    p.add_argument("--det-wheel-sha256", help="with --det-wheel-url: the wheel's sha256")
    p.add_argument(
        "--det-package-index",
        help="package index the VMs install det's dependencies from (pinned by a constraints "
        "file; det itself always comes from its wheel)",
    )
    p.add_argument(
        "--master-tls-cert", help="the master's TLS certificate (PEM; default: generated)"
    )
    p.add_argument("--master-tls-key", help="the key of --master-tls-cert (PEM)")
    p.add_argument(
        "--no-tls",
        action="store_true",
        help="serve the master over plain HTTP (default: HTTPS on port 8443)",
    )
    p.add_argument(
        "--initial-user-password", help="password of the built-in admin and determined users"
    )
    p.add_argument("--no-preflight-checks", action="store_true", help="skip the quota check")
    p.add_argument(
        "--no-wait-for-master", action="store_true", help="do not wait for the master to answer"
    )
    p.add_argument(
        "--master-timeout",
        type=float,
        # The master's first boot alone may wait up to 600 s for apt's lock (unattended
        # upgrades), then installs its packages and det: 600 s gave up on healthy boots.
        default=1500.0,
        help="seconds to wait for the master (default 1500)",
    )
    p.add_argument("--yes", "--no-prompt", dest="yes", action="store_true", help="never prompt")


def _cloud_verbs(
    sub: Any, cloud: str, help: str
) -> tuple[
    argparse.ArgumentParser,
    argparse.ArgumentParser,
    argparse.ArgumentParser,
    argparse.ArgumentParser,
]:
    """The ``up``, ``down``, ``list`` and ``status`` parsers of one cloud; ``down`` and
    ``status`` have ``--cluster-id``."""
    parser = sub.add_parser(cloud, help=help)
    verbs = parser.add_subparsers(dest="verb", metavar="{up,down,list,status}", required=True)
    up = verbs.add_parser("up", help="create or update a cluster")
    down = verbs.add_parser("down", help="delete a cluster")
    down.add_argument("--cluster-id", required=True)
    ls = verbs.add_parser("list", aliases=["ls"], help="list clusters deployed from this machine")
    status = verbs.add_parser(
        "status",
        aliases=["logs"],
        help="a cluster's outputs, its master's health and the tail of its boot logs",
    )
    status.add_argument("--cluster-id", required=True)
    status.add_argument(
        "--lines", type=int, default=50, help="lines of each machine's logs (default 50)"
    )
    status.add_argument(
        "--agents",
        type=int,
        default=3,
        help="agents shown beside the master, those that wrote last (default 3)",
    )
    status.add_argument(
        "--master-cert-file",
        help="the master's certificate (default: the one `up` saved for the cluster)",
    )
    status.add_argument("--json", action="store_true")
    return up, down, ls, status


def _finish_verbs(
    up: argparse.ArgumentParser,
    down: argparse.ArgumentParser,
    ls: argparse.ArgumentParser,
    status: argparse.ArgumentParser,
    commands: Any,
) -> None:
    """Add the flags every cloud shares after its own, and bind the cloud's commands."""
    _common_up(up)
    up.set_defaults(func=handle, _deploy_func=commands.up)
    down.add_argument(
        "--delete-bucket",
        action="store_true",
        help="also delete the checkpoint bucket and every checkpoint in it",
    )
    down.add_argument(
        "--yes", "--no-prompt", dest="yes", action="store_true", help="do not ask for confirmation"
    )
    down.set_defaults(func=handle, _deploy_func=commands.down)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=handle, _deploy_func=commands.list_)
    status.set_defaults(func=handle, _deploy_func=commands.status)


# Top-level modules of the packages the ``deploy`` extra adds (pyproject.toml).
DEPLOY_EXTRA_MODULES = frozenset(
    {"pulumi", "pulumi_aws", "pulumi_gcp", "pulumi_random", "boto3", "botocore", "google",
     "cryptography"}
)  # fmt: skip


class _Lazy:
    """Stands for a cloud's ``commands`` module without importing it (and Pulumi and the cloud
    SDKs) until a command of that cloud actually runs: ``det deploy local`` needs none of them."""

    def __init__(self, module: str) -> None:
        self.module = module

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:

            try:
                module = importlib.import_module(self.module)
            except ModuleNotFoundError as e:
                if (e.name or "").split(".")[0] not in DEPLOY_EXTRA_MODULES:
                    raise
                raise DeployError(
                    f"the cloud deploy needs the 'deploy' extra ({e.name} is not installed): "
                    "in det's clone, pip install -e '.[deploy]' (docs/deploy.md, Install)"
                ) from None
            return getattr(module, name)(*args, **kwargs)

        return call


def _aws(sub: Any) -> None:
    commands = _Lazy("det.deploy.aws.commands")

    up, down, ls, status = _cloud_verbs(sub, "aws", "a cluster on AWS (EC2, RDS, S3)")
    up.add_argument(
        "--cluster-id", required=True, help="unique name of the cluster (lower case, at most 32)"
    )
    up.add_argument("--keypair", required=True, help="EC2 key pair for the master and agents")
    up.add_argument("--region", help="AWS region (default us-west-2)")
    up.add_argument("--profile", help="AWS profile")
    up.add_argument(
        "--add-tag",
        type=_key_value({"det-cluster", "managed-by"}),
        action="append",
        help="extra tag key=value (repeatable)",
    )
    up.add_argument(
        "--agent-subnet-id", help="subnet for agents (default: the first public subnet)"
    )
    up.add_argument(
        "--agent-image-id",
        help="AMI of both agent pools (default: Ubuntu 24.04 for the aux pool, the AWS Deep "
        "Learning Base GPU AMI for the compute pool)",
    )
    up.add_argument("--master-image-id", help="AMI of the master (default: Ubuntu 24.04)")
    up.add_argument(
        "--refresh-images",
        action="store_true",
        help="look the default images up again instead of keeping the ones the cluster pinned "
        "(replaces the master)",
    )
    up.add_argument(
        "--keep-agents",
        action="store_true",
        help="keep agents launched for an older master config (default: replace them)",
    )
    up.add_argument("--vpc-id", help="use this VPC instead of creating one")
    up.add_argument(
        "--public-subnet-ids", nargs="+", help="with --vpc-id: subnets for the master and agents"
    )
    up.add_argument(
        "--private-subnet-ids", nargs="+", help="with --vpc-id: subnets (2 AZs) for the database"
    )
    up.add_argument(
        "--db",
        choices=["rds", "serverless"],
        help="the database: RDS for PostgreSQL, or Aurora Serverless v2 pausing at 0 ACU when "
        "idle (default: rds with --master vm, serverless with --master serverless)",
    )
    up.add_argument(
        "--domain",
        help="with --master serverless: serve the master on this name with an ACM certificate "
        "on the load balancer (default: a CloudFront distribution's own name)",
    )
    up.add_argument("--db-instance-type", help="RDS instance class (default db.m7g.large)")
    up.add_argument("--db-size", type=int, help="database storage in GB (default 20)")
    up.add_argument("--spot", action="store_true", help="use spot instances for agents")
    up.add_argument("--spot-max-price", type=_price, help="maximum hourly spot price")
    down.add_argument("--region", help="AWS region (default: the cluster's)")
    down.add_argument("--profile", help="AWS profile")
    down.add_argument(
        "--delete-data",
        action="store_true",
        help="also delete the database's final snapshot (default: kept)",
    )
    ls.add_argument("--region", help=argparse.SUPPRESS)
    ls.add_argument("--profile", help=argparse.SUPPRESS)
    status.add_argument("--region", help="AWS region (default: the cluster's)")
    status.add_argument("--profile", help="AWS profile")
    for parser in (up, down, ls, status):
        parser.add_argument(
            "--state-url",
            help="where the deploy state lives, e.g. s3://bucket/prefix (default: "
            "$DET_DEPLOY_STATE_URL, else this machine)",
        )
    _finish_verbs(up, down, ls, status, commands)


def _gcp(sub: Any) -> None:
    commands = _Lazy("det.deploy.gcp.commands")

    up, down, ls, status = _cloud_verbs(sub, "gcp", "a cluster on GCP (GCE, Cloud SQL, GCS)")
    up.add_argument(
        "--cluster-id", required=True, help="unique name of the cluster (lower case, at most 35)"
    )
    up.add_argument("--project-id", required=True, help="GCP project")
    up.add_argument(
        "--keypath", help="service account key file (default: application default credentials)"
    )
    up.add_argument("--region", help="region (default us-west1)")
    up.add_argument("--zone", help="zone (default <region>-b)")
    up.add_argument("--network", help="network name (default det-<cluster-id>)")
    up.add_argument(
        "--existing-network",
        action="store_true",
        help="use --network as it is instead of creating it",
    )
    up.add_argument("--subnetwork", help="with --existing-network: the subnetwork to use")
    up.add_argument("--subnet-cidr", help="range of the new subnetwork (default 10.10.0.0/16)")
    up.add_argument("--gpu-type", help="GPU of compute agents (default nvidia-tesla-t4)")
    up.add_argument("--gpu-num", type=int, help="GPUs per compute agent (default 4)")
    up.add_argument(
        "--preemptible", type=_bool, nargs="?", const=True, default=False, help="preemptible agents"
    )
    up.add_argument(
        "--agent-image",
        help="boot image (or projects/P/global/images/family/F) of all agents "
        "(default: Ubuntu 24.04 for CPU agents, a Deep Learning VM image for GPU agents)",
    )
    up.add_argument(
        "--refresh-images",
        action="store_true",
        help="resolve the image families again (default: keep the images pinned at the first up)",
    )
    up.add_argument(
        "--keep-agents",
        action="store_true",
        help="keep agents launched for an older master config (default: replace them)",
    )
    up.add_argument("--disk-size", type=int, help="agent boot disk in GB (default 200)")
    up.add_argument("--disk-type", help="agent boot disk type (default pd-standard)")
    up.add_argument("--operation-timeout-period", help="GCE operation timeout, e.g. 5m")
    up.add_argument("--db-tier", help="Cloud SQL tier (default db-custom-1-3840)")
    up.add_argument(
        "--db-edition",
        help="Cloud SQL edition, ENTERPRISE or ENTERPRISE_PLUS (default: the tier's own)",
    )
    up.add_argument(
        "--filestore", action="store_true", help="create a Filestore share mounted into tasks"
    )
    up.add_argument("--filestore-address", help="mount an existing Filestore, 'ip:/share'")
    up.add_argument("--no-filestore", action="store_true", help=argparse.SUPPRESS)
    up.add_argument(
        "--add-label",
        type=_key_value({"det-cluster", "managed-by"}),
        action="append",
        help="extra label key=value (repeatable)",
    )
    down.add_argument("--project-id", help="GCP project (default: the cluster's)")
    down.add_argument("--keypath", help="service account key file")
    ls.add_argument("--project-id", help=argparse.SUPPRESS)
    status.add_argument("--project-id", help="GCP project (default: the cluster's)")
    status.add_argument("--keypath", help="service account key file")
    _finish_verbs(up, down, ls, status, commands)


def add_parsers(subparsers: Any) -> None:
    """Register ``aws`` and ``gcp`` under the ``deploy`` noun's subparsers."""
    _aws(subparsers)
    _gcp(subparsers)


def handle(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the parsed command; ``DeployError`` becomes one line on stderr and exit code 1."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        code: int = args._deploy_func(args, out)
        return code
    except DeployError as e:
        if getattr(args, "debug", False):
            traceback.print_exc(file=err)
        err.write(f"det deploy: error: {e}\n")
        return 1
    except KeyboardInterrupt:
        err.write("det deploy: interrupted\n")
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="det deploy", description="Deploy det clusters to the clouds."
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    add_parsers(parser.add_subparsers(dest="cloud", metavar="{aws,gcp}", required=True))
    return parser


def run(argv: list[str], out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``det deploy`` on its own: parse ``argv`` and run; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    return handle(args, out, err)


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    sys.exit(run(sys.argv[1:]))


if __name__ == "__main__":
    main()
