"""``det deploy aws|gcp status``: the stack's outputs, the master's health and the boot log's tail.

Each cloud passes in how to read its boot log (CloudWatch Logs / Cloud Logging); the rest is
shared: the outputs come from the deploy state (read from the state files when they are on this
machine, so no Pulumi CLI is needed), the health is ``GET /info`` over HTTPS trusting only the
cluster's saved certificate.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from det.deploy.common import automation, commands, state, tls
from det.deploy.common.errors import DeployError

# The stack outputs worth a line (the rest is in `--json`).
_SHOWN = (
    "master_url",
    "region",
    "project_id",
    "zone",
    "master_instance_id",
    "master_instance_name",
    "bucket",
    "db_endpoint",
    "log_group",
    "boot_log_name",
    "images",
)


def stack_outputs(project: str, cluster_id: str) -> dict[str, Any]:
    """The stack's plain outputs (secret ones left out)."""
    directory = state.state_dir()
    if state.is_local(state.backend_url(directory), directory):
        if cluster_id not in state.list_stacks(directory, project):
            raise DeployError(f"no cluster {cluster_id!r} in {directory}")
        return commands.stack_outputs(project, cluster_id, directory)
    from det.deploy.common.preflight import check_pulumi_cli

    check_pulumi_cli()
    outputs = automation.outputs(project, cluster_id)
    return {k: v for k, v in outputs.items() if k != "initial_user_password"}


def master_health(
    url: str, cert_file: Path | None, cert_name: str, get: Callable[..., Any] | None = None
) -> tuple[bool, str]:
    """(healthy, one line) from ``GET {url}/info``; HTTPS trusts only ``cert_file``."""
    import requests

    if get is None:
        if url.startswith("https://"):
            if cert_file is None or not cert_file.is_file():
                return False, (
                    f"cannot check {url}: the cluster's certificate is not saved on this machine "
                    "(pass --master-cert-file)"
                )
            get = tls.verified_get(cert_file, cert_name)
        else:
            get = requests.get
    try:
        response = get(f"{url.rstrip('/')}/info", timeout=10)
    except requests.exceptions.SSLError as e:
        return False, f"{url} does not present the cluster's certificate ({type(e).__name__})"
    except requests.RequestException as e:
        return False, f"{url} does not answer ({type(e).__name__})"
    if response.status_code != 200:
        return False, f"{url} answers HTTP {response.status_code}"
    info = response.json()
    return True, (
        f"{url} is up: cluster {info.get('clusterName') or '-'}, "
        f"version {info.get('version') or '-'}"
    )


def report(
    args: argparse.Namespace,
    out: TextIO,
    cloud: str,
    project: str,
    boot_log: Callable[[Mapping[str, Any], int], tuple[str, list[str]]],
) -> int:
    """``boot_log(outputs, lines)`` → (where the log is, its last lines, oldest first)."""
    outputs = stack_outputs(project, args.cluster_id)
    cert_file = Path(args.master_cert_file) if getattr(args, "master_cert_file", None) else None
    if cert_file is None:
        cert_file = tls.cluster_dir(state.state_dir(), cloud, args.cluster_id) / "master.crt"
    url = str(outputs.get("master_url") or "")
    healthy, health = (
        master_health(url, cert_file, tls.CERT_NAME) if url else (False, "no master_url output")
    )
    try:
        where, lines = boot_log(outputs, args.lines)
        log_error = None
    except DeployError as e:
        where, lines, log_error = "boot log", [], str(e)
    if args.json:
        doc = {
            "clusterId": args.cluster_id,
            "outputs": outputs,
            "master": {"healthy": healthy, "message": health},
            "bootLog": {"source": where, "lines": lines, "error": log_error},
        }
        json.dump(doc, out, indent=2, default=str)
        out.write("\n")
        return 0 if healthy else 1
    out.write(f"Cluster {args.cluster_id!r} ({cloud}):\n")
    for key in _SHOWN:
        if key in outputs and outputs[key] not in (None, ""):
            value = outputs[key]
            shown = json.dumps(value) if isinstance(value, dict | list) else value
            out.write(f"  {key}: {shown}\n")
    out.write(f"\nMaster: {health}\n")
    out.write(f"\nBoot log ({where}), last {args.lines} lines:\n")
    if log_error:
        out.write(f"  cannot read it: {log_error}\n")
    elif not lines:
        out.write("  (nothing yet: the machines ship their log about a minute after they boot)\n")
    out.write("".join(f"  {line}\n" for line in lines))
    return 0 if healthy else 1
