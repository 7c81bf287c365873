"""What the environment block means on Docker agents: secrets kept out of what is shown, and
notes for fields that only other resource managers use.

Registry credentials (``environment.registry_auth``) are stored with the experiment because
every trial run pulls its image with them, but they leave the master only towards the agent that
pulls: the experiment's ``config`` and ``originalConfig`` in the API, the WebUI, the CLI and the
``DET_EXPERIMENT_CONFIG`` a task sees all carry ``********`` instead (Determined 0.38 returns the
password as written; it hides only the master config's).

Checkpoint storage credentials (S3's ``access_key``/``secret_key``, Azure's
``connection_string``/``credential``) are hidden the same way in everything shown to users (any
user may read any experiment's config), but the trial's own ``DET_EXPERIMENT_CONFIG`` keeps
them: its harness writes the checkpoints with them.

:func:`redact` is the one rule for every stored config the API returns, to every user, its
owner and admins included (Determined's API hides S3 keys the same way for everyone):
experiments, checkpoints, templates, commands, notebooks, TensorBoards and shells.
"""

from __future__ import annotations

import copy

import yaml

from det.common.jsontypes import JSONObject, JSONValue

HIDDEN = "********"
#: The AuthConfig keys whose values are secrets.
SECRET_KEYS = ("password", "auth", "identitytoken", "registrytoken")


#: The checkpoint_storage keys whose values are secrets (S3 and Azure).
STORAGE_SECRET_KEYS = ("access_key", "secret_key", "connection_string", "credential")


def _has_secret(block: JSONValue, keys: tuple[str, ...] = SECRET_KEYS) -> bool:
    return isinstance(block, dict) and any(block.get(k) for k in keys)


def _hidden(block: JSONObject, keys: tuple[str, ...]) -> JSONObject:
    return {k: HIDDEN if k in keys and v else v for k, v in block.items()}


def hide_secrets(block: JSONValue, keys: tuple[str, ...]) -> JSONValue:
    """``block`` with the values of ``keys`` that are set replaced by ``********`` (a new dict),
    or ``block`` itself when it holds none (or is not a dict)."""
    return _hidden(block, keys) if isinstance(block, dict) and _has_secret(block, keys) else block


def redact(config: JSONObject, *, storage: bool = True) -> JSONObject:
    """``config`` (resolved or raw) with registry secrets replaced, and checkpoint storage
    credentials too unless ``storage`` is false (the trial's own copy); the input is not changed
    (it is returned as it is when it holds no secret)."""
    out = config
    env = config.get("environment")
    auth = env.get("registry_auth") if isinstance(env, dict) else None
    if isinstance(env, dict) and isinstance(auth, dict) and _has_secret(auth):
        out = dict(out)
        out["environment"] = {**env, "registry_auth": _hidden(auth, SECRET_KEYS)}
    cs = config.get("checkpoint_storage")
    if storage and isinstance(cs, dict) and _has_secret(cs, STORAGE_SECRET_KEYS):
        out = dict(out) if out is config else out
        out["checkpoint_storage"] = _hidden(cs, STORAGE_SECRET_KEYS)
    return out


def unredact(config: JSONObject, stored: JSONObject) -> JSONObject:
    """``config`` sent back by a client that read it redacted: each secret that reads
    ``********`` takes ``stored``'s value again (a template read, edited and put back keeps its
    credentials); other values, and secrets the client changed, stay as sent."""
    out = config
    for section, sub, keys in (
        ("environment", "registry_auth", SECRET_KEYS),
        ("checkpoint_storage", None, STORAGE_SECRET_KEYS),
    ):
        new_block, old_block = _block(config, section, sub), _block(stored, section, sub)
        if new_block is None or old_block is None:
            continue
        restored = {
            k: old_block[k] if k in keys and v == HIDDEN and old_block.get(k) else v
            for k, v in new_block.items()
        }
        if restored == new_block:
            continue
        out = copy.deepcopy(out) if out is config else out
        parent = out if sub is None else _block(out, section, None)
        assert parent is not None  # _block found the section in config, which out copies
        parent[section if sub is None else sub] = restored
    return out


def _block(config: JSONObject, section: str, sub: str | None) -> JSONObject | None:
    block = config.get(section)
    if sub is not None:
        block = block.get(sub) if isinstance(block, dict) else None
    return block if isinstance(block, dict) else None


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


def docker_notes(config: JSONObject) -> list[str]:
    """Warnings for accepted fields that have no effect on Docker agents (recorded as events
    on the experiment, so a migrated config runs and says what it ignored)."""
    env = config.get("environment")
    if not isinstance(env, dict):
        return []
    notes = []
    if env.get("pod_spec"):
        notes.append(
            "environment.pod_spec is ignored: it configures Kubernetes pods, and this cluster runs"
            " tasks in Docker containers on its agents"
        )
    ports = env.get("proxy_ports")
    if isinstance(ports, list) and ports:
        names = ", ".join(
            str(p.get("proxy_port", "?")) if isinstance(p, dict) else "?" for p in ports
        )
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
