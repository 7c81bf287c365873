"""What the environment block means on Docker agents: secrets kept out of what is shown, and
notes for fields that only other resource managers use.

Registry credentials (``environment.registry_auth``) are stored with the experiment because
every trial run pulls its image with them, but they leave the master only towards the agent that
pulls: the experiment's ``config`` and ``originalConfig`` in the API, the WebUI, the CLI and the
``DET_EXPERIMENT_CONFIG`` a task sees all carry ``********`` instead (Determined 0.38 returns the
password as written; it hides only the master config's).
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

HIDDEN = "********"
#: The AuthConfig keys whose values are secrets.
SECRET_KEYS = ("password", "auth", "identitytoken", "registrytoken")


def _has_secret(auth: Any) -> bool:
    return isinstance(auth, dict) and any(auth.get(k) for k in SECRET_KEYS)


def redact(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (resolved or raw) with registry secrets replaced; the input is not changed."""
    env = config.get("environment")
    if not isinstance(env, dict) or not _has_secret(env.get("registry_auth")):
        return config
    out = dict(config)
    auth = dict(env["registry_auth"])
    for key in SECRET_KEYS:
        if auth.get(key):
            auth[key] = HIDDEN
    out["environment"] = {**env, "registry_auth": auth}
    return out


def redact_text(config_text: str) -> str:
    """The experiment's original YAML, re-written without registry secrets when it has any
    (comments and layout are then lost); unchanged otherwise."""
    try:
        data = yaml.safe_load(config_text)
    except yaml.YAMLError:
        return config_text
    if not isinstance(data, dict):
        return config_text
    clean = redact(data)
    if clean is data:
        return config_text
    return yaml.safe_dump(copy.deepcopy(clean), sort_keys=False)


def docker_notes(config: dict[str, Any]) -> list[str]:
    """Warnings for accepted fields that have no effect on Docker agents (recorded as events
    on the experiment, so a migrated config runs and says what it ignored)."""
    env = config.get("environment") or {}
    notes = []
    if env.get("pod_spec"):
        notes.append(
            "environment.pod_spec is ignored: it configures Kubernetes pods, and this cluster runs"
            " tasks in Docker containers on its agents"
        )
    if env.get("proxy_ports"):
        names = ", ".join(str(p.get("proxy_port", "?")) for p in env["proxy_ports"])
        notes.append(
            f"environment.proxy_ports ({names}) is ignored: the master does not proxy task ports;"
            " tasks run with the agent's network, so reach a port on the agent's address"
        )
    for key in ("slurm", "pbs"):
        if env.get(key):
            notes.append(
                f"environment.{key} is ignored: this cluster has no {key.upper()} launcher"
            )
    return notes
