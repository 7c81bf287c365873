"""``det deploy aws|gcp status``: the stack's outputs, the master's health and the boot logs'
tails, per machine.

Each cloud passes in how to read its boot logs (CloudWatch Logs / Cloud Logging) as one
:class:`MachineLog` per machine: the master and the agents that wrote last, each file's last
lines on their own, so a busy master's log never crowds an agent's boot out of view. The rest is
shared: the outputs come from the deploy state (read from the state files when they are on this
machine, so no Pulumi CLI is needed), the health is ``GET /info`` over HTTPS trusting only the
cluster's saved certificate.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import requests

from det.common.jsontypes import JSONObject
from det.deploy.common import automation, commands, state, tls
from det.deploy.common.errors import DeployError
from det.deploy.common.preflight import check_pulumi_cli

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


# The files a machine ships (``common.logship``): its boot log, then its service's log.
BOOT_FILE = "det-bootstrap.log"
MASTER_FILE = "det-master.log"
AGENT_FILE = "det-agent.log"

# How many agents `status` shows by default (those whose logs were written last).
DEFAULT_AGENTS = 3
MAX_LINES = 10_000


@dataclass(frozen=True)
class MachineLog:
    """One machine's shipped logs: ``files`` maps a file name to its last lines as
    ``(time, text)``, oldest first, the boot log first. ``role`` is ``master``, ``agent`` or
    ``machine`` (neither, e.g. a master that was replaced)."""

    machine: str
    role: str
    files: Mapping[str, Sequence[tuple[str, str]]] = field(default_factory=dict)

    def lines(self, name: str) -> list[str]:
        """``TIME text`` lines of one file."""
        return [f"{t} {text}" for t, text in self.files.get(name, ())]

    def flat(self) -> list[str]:
        """``TIME [machine/file] text`` lines, file after file."""
        return [
            f"{t} [{self.machine}/{name}] {text}"
            for name, lines in self.files.items()
            for t, text in lines
        ]


def file_order(name: str) -> tuple[int, str]:
    """The boot log first, then the service's log, then anything else by name."""
    return ({BOOT_FILE: 0, MASTER_FILE: 1, AGENT_FILE: 1}.get(name, 2), name)


def role_of(machine: str, files: Sequence[str], master: str | None) -> str:
    """``master`` for the cluster's current master; ``agent`` for a machine that shipped no
    master log; ``machine`` for another (a master an ``up --refresh-images`` replaced)."""
    if master and machine == master:
        return "master"
    if MASTER_FILE in files:
        return "master" if not master else "machine"
    return "agent"


def check_lines(lines: int, agents: int) -> None:
    """``--lines`` and ``--agents`` in range, or one line naming the flag."""
    if not 1 <= lines <= MAX_LINES:
        raise DeployError(f"--lines must be between 1 and {MAX_LINES} (got {lines})")
    if not 0 <= agents <= 100:
        raise DeployError(f"--agents must be between 0 and 100 (got {agents})")


def stack_outputs(project: str, cluster_id: str) -> JSONObject:
    """The stack's plain outputs (secret ones left out)."""
    directory = state.state_dir()
    if state.is_local(state.backend_url(directory), directory):
        if cluster_id not in state.list_stacks(directory, project):
            raise DeployError(f"no cluster {cluster_id!r} in {directory}")
        return commands.stack_outputs(project, cluster_id, directory)

    check_pulumi_cli()
    outputs = automation.outputs(project, cluster_id)
    return {k: v for k, v in outputs.items() if k != "initial_user_password"}


def master_health(
    url: str, cert_file: Path | None, cert_name: str, get: Callable[..., Any] | None = None
) -> tuple[bool, str]:
    """(healthy, one line) from ``GET {url}/info``; HTTPS trusts only ``cert_file``."""

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


def _certificate(cert_file: Path | None, cloud: str, cluster_id: str) -> str:
    """One line on the saved certificate's validity: when ``up`` will renew it, and why."""
    if cert_file is None or not cert_file.is_file():
        return ""
    try:
        _, until = tls.validity(cert_file.read_text())
        reason = tls.renewal_reason(cert_file.read_text())
    except ValueError:
        return f"{cert_file} is not a PEM certificate"
    if reason:
        return f"{reason}: `det deploy {cloud} up --cluster-id {cluster_id}` renews it"
    return f"valid until {until:%Y-%m-%d}"


def report(
    args: argparse.Namespace,
    out: TextIO,
    cloud: str,
    project: str,
    boot_log: Callable[[JSONObject, int, int], tuple[str, list[MachineLog]]],
) -> int:
    """``boot_log(outputs, lines, agents)`` → (where the logs are, the master's and the last
    ``agents`` agents' logs, the master first)."""
    agents = getattr(args, "agents", DEFAULT_AGENTS)
    check_lines(args.lines, agents)
    outputs = stack_outputs(project, args.cluster_id)
    cert_file = Path(args.master_cert_file) if getattr(args, "master_cert_file", None) else None
    if cert_file is None:
        cert_file = tls.cluster_dir(state.state_dir(), cloud, args.cluster_id) / "master.crt"
    url = str(outputs.get("master_url") or "")
    healthy, health = (
        master_health(url, cert_file, tls.CERT_NAME) if url else (False, "no master_url output")
    )
    certificate = _certificate(cert_file, cloud, args.cluster_id) if url.startswith("https") else ""
    machines: list[MachineLog]
    try:
        where, machines = boot_log(outputs, args.lines, agents)
        log_error = None
    except DeployError as e:
        where, machines, log_error = "boot log", [], str(e)
    if args.json:
        doc = {
            "clusterId": args.cluster_id,
            "outputs": outputs,
            "master": {"healthy": healthy, "message": health, "certificate": certificate},
            "bootLog": {
                "source": where,
                "machines": [
                    {
                        "machine": m.machine,
                        "role": m.role,
                        "files": {n: m.lines(n) for n in m.files},
                    }
                    for m in machines
                ],
                "lines": [line for m in machines for line in m.flat()],
                "error": log_error,
            },
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
    if certificate:
        out.write(f"Certificate: {certificate}\n")
    out.write(f"\nBoot logs ({where}), the last {args.lines} lines of each file:\n")
    if log_error:
        out.write(f"  cannot read them: {log_error}\n")
    elif not machines:
        out.write("  (nothing yet: the machines ship their log about a minute after they boot)\n")
    if not log_error and not any(m.role == "master" for m in machines):
        out.write("  master: nothing shipped yet\n")
    for m in machines:
        for name in m.files:
            out.write(f"  {m.role} {m.machine}, {name}:\n")
            out.write("".join(f"    {line}\n" for line in m.lines(name)))
    return 0 if healthy else 1
