"""Steps every cloud's ``up``/``down``/``list`` share: dry-run output, prompts, listing, finish."""

from __future__ import annotations

import argparse
import dataclasses
import getpass
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TextIO, TypedDict, TypeVar

from det.common.jsontypes import JSONObject
from det.deploy.common import (
    automation,
    boot,
    costs,
    dryrun,
    outs,
    quotas,
    registry,
    state,
    summary,
    tls,
)
from det.deploy.common.errors import DeployError

T = TypeVar("T")


class SharedDefaults(Protocol):
    """The defaults of the settings named like the ``up`` flags every cloud shares
    (``deploy.clouds._common_up``): ``AwsConfig``'s and ``GcpConfig``'s."""

    @property
    def inbound_cidr(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def master_instance_type(self) -> str: ...
    @property
    def aux_agent_instance_type(self) -> str: ...
    @property
    def compute_agent_instance_type(self) -> str: ...
    @property
    def min_dynamic_agents(self) -> int: ...
    @property
    def max_dynamic_agents(self) -> int: ...
    @property
    def max_aux_containers_per_agent(self) -> int: ...
    @property
    def max_idle_agent_period(self) -> str: ...
    @property
    def max_agent_starting_period(self) -> str: ...
    @property
    def scheduler_type(self) -> str: ...


class SharedSettings(TypedDict):
    """Both clouds' config keyword arguments from the shared ``up`` flags."""

    inbound_cidr: str
    port: int
    master_instance_type: str
    aux_agent_instance_type: str
    compute_agent_instance_type: str
    min_dynamic_agents: int
    max_dynamic_agents: int
    max_aux_containers_per_agent: int
    max_idle_agent_period: str
    max_agent_starting_period: str
    scheduler_type: str
    tls: bool
    boot: boot.BootOptions
    registry: registry.RegistryAuth | None
    enable_ssh: bool
    preemption_enabled: bool
    bucket_versioning: bool


def shared_settings(args: argparse.Namespace, defaults: SharedDefaults) -> SharedSettings:
    """Config keyword arguments from the shared ``up`` flags; ``defaults`` is the cloud's config
    with its default values (an unset flag, None, keeps the default)."""
    d = defaults
    port = pick(args, "port", d.port)
    plain_http = bool(getattr(args, "no_tls", False))
    if plain_http and getattr(args, "port", None) is None:
        port = tls.PLAIN_PORT
    given = getattr(args, "port", None)
    if given is not None and (not 1 <= given < 65535 or 22 in (given, given + 1)):
        raise DeployError(
            f"--port {given}: must be 1-65534, and neither it nor the next port (the master's "
            "task origin) may be 22 (SSH)"
        )
    cloud = "aws" if type(defaults).__name__.lower().startswith("aws") else "gcp"
    return {
        "inbound_cidr": pick(args, "inbound_cidr", d.inbound_cidr),
        "port": port,
        "master_instance_type": pick(args, "master_instance_type", d.master_instance_type),
        "aux_agent_instance_type": pick(args, "aux_agent_instance_type", d.aux_agent_instance_type),
        "compute_agent_instance_type": pick(
            args, "compute_agent_instance_type", d.compute_agent_instance_type
        ),
        "min_dynamic_agents": pick(args, "min_dynamic_agents", d.min_dynamic_agents),
        "max_dynamic_agents": pick(args, "max_dynamic_agents", d.max_dynamic_agents),
        "max_aux_containers_per_agent": pick(
            args, "max_aux_containers_per_agent", d.max_aux_containers_per_agent
        ),
        "max_idle_agent_period": pick(args, "max_idle_agent_period", d.max_idle_agent_period),
        "max_agent_starting_period": pick(
            args, "max_agent_starting_period", d.max_agent_starting_period
        ),
        "scheduler_type": pick(args, "scheduler_type", d.scheduler_type),
        "tls": not plain_http,
        "boot": boot.from_args(args, cloud, args.cluster_id),
        "registry": registry.from_args(args),
        "enable_ssh": args.enable_ssh,
        "preemption_enabled": bool(args.preemption_enabled),
        "bucket_versioning": args.bucket_versioning,
    }


def pick(args: argparse.Namespace, name: str, default: T) -> T:
    """The flag ``name``'s value, or ``default`` (the cloud config's) when it was not given."""
    value: T | None = getattr(args, name, None)
    return default if value is None else value


def print_dry_run(
    cloud: str,
    cluster_id: str,
    program: Callable[[], dryrun.ProgramOutputs],
    mock_calls: Mapping[str, dryrun.MockCall],
    as_json: bool,
    out: TextIO,
    estimates: tuple[costs.Estimate, ...] = (),
    master: str = "vm",
    quota_needs: tuple[quotas.Need, ...] = (),
) -> int:
    """``estimates``: the control plane's cost for each ``--master`` (``master``: this one)."""
    rendered = dryrun.render(program, mock_calls, project=f"det-{cloud}", stack=cluster_id)
    doc = summary.to_json(rendered, cloud, cluster_id)
    if estimates:
        doc["costEstimate"] = costs.to_json(estimates, master)
    if quota_needs:
        doc["quotaNeeds"] = [dataclasses.asdict(need) for need in quota_needs]
    if as_json:
        json.dump(doc, out, indent=2, sort_keys=False)
        out.write("\n")
        return 0
    out.write(summary.table(doc["resources"]) + "\n\n")
    outputs = dict(doc["outputs"])
    master_yaml = outputs.pop("master_yaml", "")
    out.write("Outputs (placeholder values; real ones are known after `up`):\n")
    for key, value in outputs.items():
        out.write(f"  {key}: {value}\n")
    out.write("\nmaster.yaml (passwords come from the cloud's secret store at boot):\n")
    out.write("".join(f"  {line}\n" for line in str(master_yaml).splitlines()))
    if estimates:
        out.write("\n" + costs.render(estimates, master) + "\n")
    if quota_needs:
        out.write("\n" + quotas.render(list(quota_needs)) + "\n")
    out.write(
        f"\n{len(doc['resources'])} resources. Nothing was created: run without --dry-run to deploy.\n"
    )
    return 0


def lines(out: TextIO) -> Callable[[str], None]:
    """Pulumi's ``on_output`` passes lines without their newline."""
    return lambda line: print(line, file=out, flush=True)


def confirm(question: str, assume_yes: bool, inp: Callable[[str], str] = input) -> bool:
    if assume_yes:
        return True
    if not sys.stdin.isatty():
        raise DeployError(f"{question.rstrip('? ')}: pass --yes to confirm when not on a terminal")
    return inp(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def initial_password(given: str | None, new_cluster: bool, assume_yes: bool) -> str | None:
    """The admin password for a new cluster: the flag, a prompt, or None (generated)."""
    if given or not new_cluster or assume_yes or not sys.stdin.isatty():
        return given
    first = getpass.getpass(
        "Password for the built-in `determined` and `admin` users (empty: generate one): "
    )
    if not first:
        return None
    if getpass.getpass("Enter the password again: ") != first:
        raise DeployError("passwords did not match")
    return first


def stack_outputs(project: str, cluster_id: str, directory: Path) -> JSONObject:
    """A stack's outputs as its local state file has them, secret ones (stored encrypted) left
    out."""
    path = directory / ".pulumi" / "stacks" / project / f"{cluster_id}.json"
    try:
        doc = json.loads(path.read_text())
        for res in doc.get("checkpoint", {}).get("latest", {}).get("resources", []) or []:
            if res.get("type") == "pulumi:pulumi:Stack":
                return {
                    k: v
                    for k, v in (res.get("outputs") or {}).items()
                    if not (isinstance(v, dict) and dryrun.SECRET_SIG_KEY in v)
                }
    except (OSError, ValueError):
        pass
    return {}


class ClusterRow(TypedDict):
    """One cluster of ``list`` (``--json`` prints these keys)."""

    clusterId: str
    masterUrl: str | None
    bucket: str | None


def cluster_summaries(project: str, directory: Path | None = None) -> list[ClusterRow]:
    """Clusters with their plain (non-secret) outputs, read from the state files only."""
    directory = directory or state.state_dir()
    return [
        cluster_summary(cluster_id, stack_outputs(project, cluster_id, directory))
        for cluster_id in state.list_stacks(directory, project)
    ]


def cluster_summary(cluster_id: str, outputs: JSONObject) -> ClusterRow:
    """One row of ``list``: the cluster, its master's URL and its bucket."""
    return {
        "clusterId": cluster_id,
        "masterUrl": outs.text(outputs, "master_url"),
        "bucket": outs.text(outputs, "bucket"),
    }


def write_list(rows: list[ClusterRow], as_json: bool, out: TextIO, none: str = "") -> int:
    """``list``'s output: JSON, or a line per cluster (``none`` when there is none)."""
    if as_json:
        json.dump(rows, out, indent=2)
        out.write("\n")
    elif not rows:
        out.write(none)
    else:
        for row in rows:
            out.write(f"{row['clusterId']}\t{row['masterUrl'] or '-'}\t{row['bucket'] or '-'}\n")
    return 0


def print_list(project: str, as_json: bool, out: TextIO) -> int:
    """``list`` from this machine's state files."""
    return write_list(
        cluster_summaries(project), as_json, out, f"no clusters in {state.state_dir()}\n"
    )


def replace_stale_agents(
    outputs: JSONObject,
    previous: JSONObject,
    keep_agents: bool,
    replace: Callable[[str], Sequence[str]],
    removed: str,
    out: TextIO,
) -> None:
    """After an ``up`` that changed the master's config (the stack's ``config_hash`` output
    differs from ``previous``): ``replace(new digest)`` removes the agents launched for the old
    one, unless ``--keep-agents``; trials resume from their latest checkpoints on new ones.
    ``removed`` is what the cloud did to them ("terminated", "deleted")."""
    digest = outputs.get("config_hash")
    if not digest or digest == previous.get("config_hash"):
        return
    if keep_agents:
        out.write("The master's config changed; agents keep running (--keep-agents).\n")
        return
    replaced = replace(str(digest))
    if replaced:
        out.write(
            f"The master's config changed: {removed} {len(replaced)} agents launched for the "
            "old one; the master launches new ones for queued work (trials resume from their "
            "latest checkpoints).\n"
        )


def finish_up(
    outputs: JSONObject,
    wait: bool,
    timeout: float,
    password_generated: bool,
    out: TextIO,
    cert: tls.TlsMaterial | None = None,
    status_command: str | None = None,
) -> int:
    """``cert``: the master's certificate as saved here (None: plain HTTP);
    ``status_command``: what the timeout message tells the user to run."""
    url = str(outputs["master_url"])
    cert_file = cert.cert_file if cert else None
    if wait:
        out.write(f"Waiting for the master at {url} (up to {timeout:.0f}s)...\n")
        if cert and cert_file:
            automation.wait_for_master(
                url,
                timeout,
                get=tls.verified_get(cert_file, cert.cert_name),
                status_command=status_command,
            )
        else:
            automation.wait_for_master(url, timeout, status_command=status_command)
    if cert_file:
        out.write(f"The master's TLS certificate is saved in {cert_file}\n")
    out.write(
        f"Cluster ready. Point the CLI at it:\n\n  {tls.client_exports(url, cert_file, cert.cert_name if cert else tls.CERT_NAME)}\n\n"
    )
    if outputs.get("task_url"):
        # A serverless master's task origin: a name of its own (with --domain, one to add to
        # the DNS beside the master's).
        out.write(f"Notebooks and TensorBoards open on {outputs['task_url']} (the task origin).\n")
    if password_generated and outputs.get("initial_user_password"):
        out.write(
            f"Generated password for `admin` and `determined`: {outputs['initial_user_password']}\n"
            "(shown once; change it with `det user change-password`)\n"
        )
    return 0
