"""The agent's configuration: `agent.yaml`, `DET_*` environment variables and command-line flags.

Precedence, lowest to highest: defaults < file < environment < flags. Every field `x` is read
from the environment as `DET_X` (for example `DET_MASTER_URL`, `DET_AGENT_ID`). Parsed once, in
`load_config`, into a frozen pydantic model; unknown keys in the file are rejected by name.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from det.agent.errors import AgentConfigError as AgentConfigError
from det.common import master_url as master_url_
from det.common import tls

DEFAULT_NOTICE_URLS = {
    "aws": "http://169.254.169.254",
    "gcp": "http://metadata.google.internal",
}


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    master_url: str
    agent_id: str = Field(default_factory=lambda: socket.gethostname(), min_length=1)
    agent_token: str | None = None
    agent_token_file: Path | None = None
    # The file this config was read from (--config-file / DET_CONFIG_FILE); set by load_config.
    # It may hold agent_token (a deployed agent's agent.yaml does): no task may mount it.
    config_file: Path | None = None
    resource_pool: str = "default"
    slot_type: Literal["auto", "gpu", "cpu", "none"] = "auto"
    artificial_slots: int = Field(default=0, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    container_network_mode: str = "host"
    preemption_notice: Literal["none", "aws", "gcp"] = "none"
    preemption_metadata_url: str | None = None
    preemption_poll_seconds: float = Field(default=5.0, gt=0)
    heartbeat_seconds: float = Field(default=1.0, gt=0)
    # Wait in the master's ``changes`` long-poll between heartbeats, so new work starts at once
    # (docs/internals.md); off: new work waits for the next heartbeat.
    wait_for_work: bool = True
    # Start a trial's container before its context is copied in (the wrapper waits for it:
    # det.common.context_ready); off: copy, then start (every task, as other task kinds are).
    context_after_start: bool = True
    max_backoff_seconds: float = Field(default=30.0, gt=0)
    # Stop every task container once no heartbeat has been answered for this long (fencing: the
    # master has given this agent up and runs its work elsewhere). Unset: a little less than the
    # agent timeout the master announces (det.agent.reconcile.fence_after); 0: never.
    fence_seconds: float | None = Field(default=None, ge=0)
    state_dir: Path = Field(default_factory=lambda: _default_state_dir())
    # Where the harness bundle is built (det.agent.harness_bundle); default: state_dir/harness.
    harness_dir: Path | None = None
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    # The master's TLS certificate (PEM) to trust besides the public CAs, or "noverify"; and the
    # name it was issued for when it differs from master_url's host (Determined's agent flags;
    # DET_MASTER_CERT_FILE / DET_MASTER_CERT_NAME). Task containers get both.
    master_cert_file: str | None = None
    master_cert_name: str | None = None

    @field_validator("master_url")
    @classmethod
    def _strip_slash(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return master_url_.canonicalize(value)

    def own_paths(self) -> list[Path]:
        """What is the agent's own and no task container mounts (``det.agent.mount_guard``):
        its state, the harness bundle, and the files that may hold its token."""
        own = [self.state_dir, self.harness_dir or self.state_dir / "harness"]
        return own + [p for p in (self.agent_token_file, self.config_file) if p is not None]

    def token(self) -> str | None:
        """The agent token: `agent_token`, else the first line of `agent_token_file`."""
        if self.agent_token:
            return self.agent_token
        if self.agent_token_file is not None:
            try:
                return self.agent_token_file.read_text().strip() or None
            except OSError as e:
                raise AgentConfigError(
                    f"agent_token_file: cannot read {self.agent_token_file}: {e}"
                ) from e
        return None

    def master_cert(self) -> tls.MasterCert:
        """How to verify the master; AgentConfigError when master_cert_file cannot be used."""
        try:
            return tls.load(
                self.master_cert_file, self.master_cert_name, setting="master_cert_file"
            )
        except tls.CertError as e:
            raise AgentConfigError(str(e)) from None

    def notice_url(self) -> str | None:
        if self.preemption_notice == "none":
            return None
        return self.preemption_metadata_url or DEFAULT_NOTICE_URLS[self.preemption_notice]


def _default_state_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/det-agent")
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "det-agent"


def _parse_labels(value: str) -> dict[str, str]:
    """`{"a": "b"}` (JSON) or `a=b,c=d`."""
    value = value.strip()
    if not value:
        return {}
    if value.startswith("{"):
        parsed = json.loads(value)
        if not isinstance(parsed, dict):
            raise ValueError("labels must be a mapping")
        return {str(k): str(v) for k, v in parsed.items()}
    labels = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"label {item!r} is not key=value")
        labels[key.strip()] = val.strip()
    return labels


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="det-agent", description="det agent daemon")
    p.add_argument("--config-file", type=Path, help="agent.yaml (default: none)")
    p.add_argument("--master-url", dest="master_url")
    p.add_argument("--agent-id", dest="agent_id")
    p.add_argument("--agent-token", dest="agent_token")
    p.add_argument("--agent-token-file", dest="agent_token_file")
    p.add_argument("--resource-pool", dest="resource_pool")
    p.add_argument("--slot-type", dest="slot_type", choices=["auto", "gpu", "cpu", "none"])
    p.add_argument("--artificial-slots", dest="artificial_slots", type=int)
    p.add_argument("--label", dest="labels", action="append", metavar="KEY=VALUE")
    p.add_argument("--container-network-mode", dest="container_network_mode")
    p.add_argument("--preemption-notice", dest="preemption_notice", choices=["none", "aws", "gcp"])
    p.add_argument("--preemption-metadata-url", dest="preemption_metadata_url")
    p.add_argument("--heartbeat-seconds", dest="heartbeat_seconds", type=float)
    p.add_argument(
        "--fence-seconds", dest="fence_seconds", type=float,
        help="stop every task container after this long without the master (0: never;"
        " default: a little less than the master's agent timeout)",
    )  # fmt: skip
    p.add_argument(
        "--no-wait-for-work", dest="wait_for_work", action="store_false", default=None,
        help="no long-poll for new work between heartbeats",
    )  # fmt: skip
    p.add_argument(
        "--no-context-after-start", dest="context_after_start", action="store_false",
        default=None, help="copy a trial's context in before its container starts",
    )  # fmt: skip
    p.add_argument("--state-dir", dest="state_dir")
    p.add_argument("--log-level", dest="log_level")
    p.add_argument("--master-cert-file", dest="master_cert_file", metavar="PEM|noverify")
    p.add_argument("--master-cert-name", dest="master_cert_name", metavar="HOSTNAME")
    return p


def _format_error(e: ValidationError, origin: Mapping[str, str]) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        where = origin.get(str(err["loc"][0]), "") if err["loc"] else ""
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        parts.append(f"{loc}{f' ({where})' if where else ''}: {msg}")
    return "invalid agent configuration: " + "; ".join(parts)


def load_config(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> AgentConfig:
    """Merge file, environment and flags into one validated `AgentConfig` or raise AgentConfigError."""
    environ = os.environ if environ is None else environ
    args = build_parser().parse_args(argv)
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}

    config_file = args.config_file or (
        Path(environ["DET_CONFIG_FILE"]) if environ.get("DET_CONFIG_FILE") else None
    )
    if config_file is not None:
        try:
            loaded = yaml.safe_load(config_file.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise AgentConfigError(f"cannot read config file {config_file}: {e}") from e
        if not isinstance(loaded, dict):
            raise AgentConfigError(
                f"config file {config_file}: expected a mapping at the top level"
            )
        for key, val in loaded.items():
            values[str(key)] = val
            origin[str(key)] = f"from {config_file}"

    for name in AgentConfig.model_fields:
        env_name = f"DET_{name.upper()}"
        if env_name in environ:
            raw = environ[env_name]
            try:
                values[name] = _parse_labels(raw) if name == "labels" else raw
            except ValueError as e:
                raise AgentConfigError(f"{env_name}: {e}") from e
            origin[name] = f"from ${env_name}"

    for name, val in vars(args).items():
        if name == "config_file" or val is None:
            continue
        if name == "labels":
            try:
                val = {k: v for item in val for k, v in _parse_labels(item).items()}
            except ValueError as e:
                raise AgentConfigError(f"--label: {e}") from e
        values[name] = val
        origin[name] = f"from --{name.replace('_', '-')}"

    if config_file is not None:
        values["config_file"] = config_file
        origin["config_file"] = "from --config-file"
    try:
        config = AgentConfig.model_validate(values)
    except ValidationError as e:
        raise AgentConfigError(_format_error(e, origin)) from None
    config.master_cert()  # an unreadable certificate stops the agent here, with its name
    return config
