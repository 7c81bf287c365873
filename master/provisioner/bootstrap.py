"""The agent bootstrap, Python side: render the user-data script, and say what it will run.

``bootstrap.sh`` beside this module is the one script: cloud-init runs it as user data on a new
VM (AWS ``UserData``, GCP ``startup-script``), and the agent image carries the same file. The
master renders it with :func:`render_user_data`, which fills the values block at its top.
:func:`agent_launch` returns exactly what the script ends up running for a given instance id
(argv, environment and the agent.yaml contents), so a test fixture can turn a fake-cloud instance
into a real agent the way a VM would.
"""

from __future__ import annotations

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
# Replaced by fetch_release.py (gzip, base64): the agent downloads det's wheel with it.
FETCHER_MARKER = "# DET_FETCHER_GZIP_BASE64"
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
    rendered = _strip_comments(text).replace(MARKER, block, 1)
    rendered = rendered.replace(FETCHER_MARKER, fetcher_gzip_base64(), 1)
    size = len(rendered.encode())
    if cloud == "gcp" and size > MAX_GCE_METADATA_BYTES:
        raise ValueError(f"user data is {size} bytes, above the 256 KiB limit of GCE metadata")
    if cloud != "gcp" and size > MAX_USER_DATA_BYTES:
        raise ValueError(f"user data is {size} bytes, above the 16 KiB limit of EC2")
    return rendered


def _strip_comments(text: str) -> str:
    """Drop whole-line comments (user data is limited to 16 KiB); keeps the shebang and the
    markers. bootstrap.sh has no heredoc whose lines start with '#'."""
    keep = (MARKER, FETCHER_MARKER)
    lines = text.splitlines(keepends=True)
    out = lines[:1] + [
        line for line in lines[1:] if not line.lstrip().startswith("#") or line.strip() in keep
    ]
    return "".join(out)


def fetcher_gzip_base64() -> str:
    """fetch_release.py (standard library only) gzipped, in base64 lines."""
    source = importlib.resources.files("det.master.provisioner").joinpath("fetch_release.py")
    packed = base64.b64encode(gzip.compress(source.read_bytes(), mtime=0)).decode()
    return "\n".join(packed[i : i + 76] for i in range(0, len(packed), 76))


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
