"""The agent bootstrap, Python side: render the user-data script, and say what it will run.

``bootstrap.sh`` beside this module is the one script: cloud-init runs it as user data on a new
VM (AWS ``UserData``, GCP ``startup-script``), and the agent image carries the same file. The
master renders it with :func:`render_user_data`, which fills the values block at its top.
:func:`agent_launch` returns exactly what the script ends up running for a given instance id
(argv, environment and the agent.yaml contents), so a test fixture can turn a fake-cloud instance
into a real agent the way a VM would.
"""

from __future__ import annotations

import ast
import base64
import dataclasses
import gzip
import importlib.resources
import re
import shlex
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from det.agent.notice_aws import AwsSpotNotice

if TYPE_CHECKING:
    from det.master.provisioner.config import AgentInstall

Cloud = Literal["aws", "gcp", "auto"]

DEFAULT_CONFIG_PATH = "/etc/det/agent.yaml"
DEFAULT_IMDS_URL = "http://169.254.169.254"
DEFAULT_GCE_METADATA_URL = "http://metadata.google.internal"
MARKER = "# DET_RENDERED_VALUES"
# AWS rejects user data above 16 KiB (before base64); GCE a metadata value above 256 KiB.
MAX_USER_DATA_BYTES = 16 * 1024
MAX_GCE_METADATA_BYTES = 256 * 1024

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def script_text() -> str:
    """The unrendered bootstrap script."""
    return (
        importlib.resources.files("det.master.provisioner")
        .joinpath("bootstrap.sh")
        .read_text(encoding="utf-8")
    )


def render_user_data(
    master_url: str,
    agent_token: str,
    pool: str,
    cluster_id: str,
    cloud: Cloud,
    extra_env: Mapping[str, str] | None = None,
    *,
    startup_script: str = "",
) -> str:
    """The bootstrap script with its values filled in, ready to be a VM's user data.

    ``extra_env`` is exported before anything runs (for example ``DET_AGENT_PIP_SPEC`` to
    install the agent from a given wheel URL, or ``DET_IMDS_URL`` in tests). ``startup_script``
    is Determined's pool ``startup_script``: run as root before the agent starts.
    """
    values: dict[str, str] = {
        "DET_MASTER_URL": master_url.rstrip("/"),
        "DET_AGENT_TOKEN": agent_token,
        "DET_RESOURCE_POOL": pool,
        "DET_CLUSTER_ID": cluster_id,
        "DET_CLOUD": cloud,
    }
    if startup_script:
        values["DET_STARTUP_SCRIPT_B64"] = base64.b64encode(startup_script.encode()).decode()
    for key, value in (extra_env or {}).items():
        if not _ENV_NAME.match(key):
            raise ValueError(f"extra_env: {key!r} is not a valid environment variable name")
        values[key] = value
    block = "\n".join(f"export {key}={shlex.quote(value)}" for key, value in values.items())
    text = script_text()
    if MARKER not in text:  # pragma: no cover - guards edits of bootstrap.sh
        raise RuntimeError("bootstrap.sh lost its values marker")
    body = _strip_comments(text).replace(MARKER, "", 1).encode()
    packed = base64.b64encode(gzip.compress(body, compresslevel=9, mtime=0)).decode()
    rendered = _WRAPPER.format(
        values=block,
        fetcher=fetcher_gzip_base64(),
        logship=packed_module("logship.py"),
        bootstrap="\n".join(packed[i : i + 76] for i in range(0, len(packed), 76)),
    )
    size = len(rendered.encode())
    if cloud == "gcp" and size > MAX_GCE_METADATA_BYTES:
        raise ValueError(f"user data is {size} bytes, above the 256 KiB limit of GCE metadata")
    if cloud != "gcp" and size > MAX_USER_DATA_BYTES:
        raise ValueError(f"user data is {size} bytes, above the 16 KiB limit of EC2")
    return rendered


# The user data: the values, then the standard-library helpers and bootstrap.sh itself, each
# gzipped (EC2's 16 KiB); sourcing it (tests) only sets the values.
_WRAPPER = """#!/bin/bash
# det agent boot (rendered by the master): the values, then bootstrap.sh, fetch_release.py and
# logship.py unpacked into DET_LIB_DIR, then bootstrap.sh.
{values}
if [ "${{BASH_SOURCE[0]}}" = "$0" ]; then
  set -euo pipefail
  lib=${{DET_LIB_DIR:-/usr/local/lib/det}}
  mkdir -p "$lib"
  base64 -d <<'DET_FETCHER' | gzip -dc >"$lib/fetch_release.py"
{fetcher}
DET_FETCHER
  base64 -d <<'DET_LOGSHIP' | gzip -dc >"$lib/logship.py"
{logship}
DET_LOGSHIP
  base64 -d <<'DET_BOOTSTRAP' | gzip -dc >"$lib/bootstrap.sh"
{bootstrap}
DET_BOOTSTRAP
  exec bash "$lib/bootstrap.sh" "$@"
fi
"""


def unpacked_bootstrap(user_data: str) -> str:
    """The bootstrap.sh that user data rendered by :func:`render_user_data` carries."""
    start = user_data.index("\n", user_data.index("<<'DET_BOOTSTRAP'")) + 1
    packed = user_data[start : user_data.index("\nDET_BOOTSTRAP\n", start)]
    return gzip.decompress(base64.b64decode(packed)).decode()


def _strip_comments(text: str) -> str:
    """Drop whole-line comments (user data is limited to 16 KiB); keeps the shebang and the
    markers. bootstrap.sh has no heredoc whose lines start with '#'."""
    keep = (MARKER,)
    lines = text.splitlines(keepends=True)
    out = lines[:1] + [
        line for line in lines[1:] if not line.lstrip().startswith("#") or line.strip() in keep
    ]
    return "".join(out)


def compact_python(source: str) -> str:
    """``source`` without docstrings and comments (``ast.unparse``): the same program in fewer
    bytes, for user data limited to 16 KiB."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                node.body = node.body[1:] or [ast.Pass()]
    return ast.unparse(tree) + "\n"


def packed_module(name: str) -> str:
    """This package's standard-library module ``name`` (``fetch_release.py``, ``logship.py``),
    compacted, gzipped, in base64 lines of 76 characters."""
    source = importlib.resources.files("det.master.provisioner").joinpath(name).read_text("utf-8")
    data = gzip.compress(compact_python(source).encode(), compresslevel=9, mtime=0)
    packed = base64.b64encode(data).decode()
    return "\n".join(packed[i : i + 76] for i in range(0, len(packed), 76))


def fetcher_gzip_base64() -> str:
    """fetch_release.py (standard library only) gzipped, in base64 lines."""
    return packed_module("fetch_release.py")


# What a provider's user data holds until a launch puts a real ticket in (same length).
TICKET_STAND_IN = "detenroll1." + "x" * 43


def enroll_env(extra_env: Mapping[str, str] | None, ticket: str) -> dict[str, str]:
    """``extra_env`` with the one-time enrollment ticket the bootstrap exchanges for the agent's
    own token (det.master.services.enrollment)."""
    return {**(extra_env or {}), "DET_ENROLL_TICKET": ticket}


def render_for_launches(
    master_url: str,
    agent_token: str,
    pool: str,
    cluster_id: str,
    cloud: Cloud,
    extra_env: Mapping[str, str] | None,
    *,
    startup_script: str,
    enroll: Callable[[int], str] | None,
) -> tuple[str, Callable[[int], str] | None]:
    """A pool's user data (AWS) or startup script (GCP), and what renders each launch's.

    Without ``enroll`` the one script carries the agent token and serves every launch (None).
    With ``enroll`` (``count`` -> a one-time ticket for that many machines,
    det.master.services.enrollment) no script carries the agent token: the first, with a
    stand-in ticket of a real ticket's length, is for the size checks; each launch renders its
    own with a new ticket."""

    def render(token: str, env: Mapping[str, str] | None) -> str:
        return render_user_data(
            master_url, token, pool, cluster_id, cloud, env, startup_script=startup_script
        )

    if enroll is None:
        return render(agent_token, extra_env), None
    return render("", enroll_env(extra_env, TICKET_STAND_IN)), lambda count: render(
        "", enroll_env(extra_env, enroll(count))
    )


def install_env(
    install: AgentInstall | None, cert_pem: str | None, cert_name: str | None
) -> dict[str, str]:
    """The ``extra_env`` that makes bootstrap.sh install det from the master's own wheel
    (``agent_install`` of the pool's provider) and trust the master's certificate."""
    env: dict[str, str] = {}
    if install is not None:
        env["DET_AGENT_WHEEL_URL"] = install.wheel_url
        env["DET_AGENT_WHEEL_SHA256"] = install.wheel_sha256
        env["DET_AGENT_EXTRAS"] = install.extras
        if install.constraints_url:
            env["DET_AGENT_CONSTRAINTS_URL"] = install.constraints_url
        if install.package_index:
            env["DET_AGENT_PACKAGE_INDEX"] = install.package_index
        if install.log_target:
            env["DET_LOG_TARGET"] = install.log_target
    if cert_pem:
        env["DET_MASTER_CERT_B64"] = base64.b64encode(cert_pem.encode()).decode()
        if cert_name:
            env["DET_MASTER_CERT_NAME"] = cert_name
    return env


# Determined's master_url hosts that stand for "this master machine's address", each read from
# the EC2 metadata key of the same name (det.common.master_url.resolve takes this table).
EC2_ADDRESS_PLACEHOLDERS = {
    key: key for key in ("local-ipv4", "public-ipv4", "local-hostname", "public-hostname")
}


def ec2_metadata_lookup(base_url: str = DEFAULT_IMDS_URL) -> Callable[[str], str]:
    """A ``lookup`` for :func:`det.common.master_url.resolve` that asks this machine's IMDSv2."""
    lookup: Callable[[str], str] = AwsSpotNotice(base_url).metadata
    return lookup


@dataclasses.dataclass(frozen=True)
class AgentLaunch:
    """What the bootstrap runs: write ``config`` (YAML) to ``config_path``, then ``argv``."""

    argv: list[str]
    env: dict[str, str]
    config: dict[str, str]
    config_path: str


def agent_config(
    agent_id: str,
    *,
    master_url: str,
    agent_token: str,
    pool: str,
    cloud: Cloud,
    imds_url: str = DEFAULT_IMDS_URL,
    gce_metadata_url: str = DEFAULT_GCE_METADATA_URL,
) -> dict[str, str]:
    """The agent.yaml ``write_agent_config`` in bootstrap.sh writes (same keys, same rules)."""
    notice = cloud if cloud in ("aws", "gcp") else "none"
    config = {
        "master_url": master_url.rstrip("/"),
        "agent_id": agent_id,
        "agent_token": agent_token,
        "resource_pool": pool,
        "preemption_notice": notice,
    }
    if notice == "aws" and imds_url != DEFAULT_IMDS_URL:
        config["preemption_metadata_url"] = imds_url
    if notice == "gcp" and gce_metadata_url != DEFAULT_GCE_METADATA_URL:
        config["preemption_metadata_url"] = gce_metadata_url
    return config


def agent_launch(
    instance_id: str,
    *,
    master_url: str,
    agent_token: str,
    pool: str,
    cluster_id: str,
    cloud: Cloud,
    extra_env: Mapping[str, str] | None = None,
    config_path: str = DEFAULT_CONFIG_PATH,
    agent_bin: str = "det-agent",
) -> AgentLaunch:
    """The exact ``det-agent`` invocation bootstrap.sh makes on instance ``instance_id``."""
    extra = dict(extra_env or {})
    config = agent_config(
        instance_id,
        master_url=master_url,
        agent_token=agent_token,
        pool=pool,
        cloud=cloud,
        imds_url=extra.get("DET_IMDS_URL", DEFAULT_IMDS_URL),
        gce_metadata_url=extra.get("DET_GCE_METADATA_URL", DEFAULT_GCE_METADATA_URL),
    )
    env = {
        **extra,
        "DET_MASTER_URL": master_url.rstrip("/"),
        "DET_AGENT_TOKEN": agent_token,
        "DET_RESOURCE_POOL": pool,
        "DET_CLUSTER_ID": cluster_id,
        "DET_CLOUD": cloud,
    }
    return AgentLaunch(
        argv=[agent_bin, "--config-file", config_path],
        env=env,
        config=config,
        config_path=config_path,
    )
