"""Cluster defaults merged under an experiment config, and ``--config KEY=VALUE`` overrides.

Both work on plain dicts before validation, so the result is validated as a whole and errors name
the experiment's own field paths.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from det.common.jsontypes import JSONObject, JSONValue

from .errors import ConfigError
from .yamltext import YAMLError, load_json

_DEVICE_TYPES = ("cpu", "cuda", "rocm")


def _per_device(value: JSONValue) -> JSONObject | None:
    """``"img"`` / ``["A=1"]`` / ``{cpu, cuda, gpu, rocm}`` → a per-device-type dict."""
    if value is None:
        return None
    if isinstance(value, str | list):
        return {t: value for t in _DEVICE_TYPES}
    if isinstance(value, dict):
        out = dict(value)
        if "gpu" in out:
            out.setdefault("cuda", out.pop("gpu"))
        return out
    return None


def _entries(value: JSONValue) -> list[JSONValue]:
    return value if isinstance(value, list) else []


def _merge_env_vars(cluster: JSONValue, exp: JSONValue) -> JSONValue:
    """Per device type: cluster variables first, the experiment's replace any of the same name."""
    c, e = _per_device(cluster), _per_device(exp)
    if c is None or e is None:
        return exp if exp is not None else cluster
    out: JSONObject = {}
    for t in sorted(set(c) | set(e)):
        merged: dict[str, JSONValue] = {}
        for entry in _entries(c.get(t)) + _entries(e.get(t)):
            if not isinstance(entry, str):
                return exp  # malformed: let validation report it against the experiment
            merged[entry.split("=", 1)[0]] = entry
        out[t] = list(merged.values())
    return out


def _merge_by_container_path(cluster: JSONValue, exp: JSONValue) -> JSONValue:
    """Mounts/devices: both lists, the experiment's entry wins for the same container path."""
    if not isinstance(cluster, list) or not cluster:
        return exp
    if exp is None:
        return copy.deepcopy(cluster)
    if not isinstance(exp, list):
        return exp
    mine = {m.get("container_path") for m in exp if isinstance(m, dict)}
    kept = [
        copy.deepcopy(m)
        for m in cluster
        if not (isinstance(m, dict) and m.get("container_path") in mine)
    ]
    return kept + exp


def _merge_storage(cluster: JSONObject | None, exp: JSONValue) -> JSONValue:
    """The cluster's storage when the experiment has none; field by field when the experiment's
    is of the same type or names none (``checkpoint_storage: {save_trial_best: 2}`` keeps the
    master's storage and changes one policy, as Determined merges it)."""
    if exp is None:
        return copy.deepcopy(cluster) if cluster else None
    if (
        isinstance(exp, dict)
        and isinstance(cluster, dict)
        and exp.get("type") in (None, cluster.get("type"))
    ):
        return {**copy.deepcopy(cluster), **{k: v for k, v in exp.items() if v is not None}}
    return exp


def merge_cluster_defaults(
    config_dict: JSONObject,
    task_container_defaults: JSONObject | None,
    checkpoint_storage: JSONObject | None,
) -> JSONObject:
    """A new config dict with the master's defaults filled in under the experiment's values.

    ``task_container_defaults`` uses master.yaml's names: ``image``, ``environment_variables``,
    ``force_pull_image``, ``registry_auth``, ``add_capabilities``, ``drop_capabilities``,
    ``bind_mounts``, ``devices``, ``shm_size_bytes`` (or ``shm_size``), ``log_policies``,
    ``preemption_timeout``. Keys only meaningful for other resource managers or the agent
    (``network_mode``, ``cpu_pod_spec``, ``work_dir``…) are left alone. Experiment values win; list
    values are combined (environment variables by name, mounts and devices by container path).
    """
    out = copy.deepcopy(config_dict)
    tcd = task_container_defaults or {}

    env_raw = out.get("environment")
    env: JSONObject = dict(env_raw) if isinstance(env_raw, dict) else {}
    if env_raw is None or isinstance(env_raw, dict):
        if tcd.get("image") is not None:
            c, e = _per_device(tcd["image"]), _per_device(env.get("image"))
            if isinstance(env.get("image"), str) or c is None:
                pass  # one experiment image for every device type wins outright
            elif e is None:
                env["image"] = c
            else:
                env["image"] = {**c, **{k: v for k, v in e.items() if v is not None}}
        if tcd.get("environment_variables") is not None:
            env["environment_variables"] = _merge_env_vars(
                tcd["environment_variables"], env.get("environment_variables")
            )
        for key in ("force_pull_image", "registry_auth", "add_capabilities", "drop_capabilities"):
            if env.get(key) is None and tcd.get(key) is not None:
                env[key] = copy.deepcopy(tcd[key])
        if env:
            out["environment"] = env

    if tcd.get("bind_mounts"):
        out["bind_mounts"] = _merge_by_container_path(tcd["bind_mounts"], out.get("bind_mounts"))

    res_raw = out.get("resources")
    if res_raw is None or isinstance(res_raw, dict):
        res: JSONObject = dict(res_raw or {})
        shm = tcd.get("shm_size_bytes", tcd.get("shm_size"))
        if res.get("shm_size") is None and shm is not None:
            res["shm_size"] = shm
        if tcd.get("devices"):
            res["devices"] = _merge_by_container_path(tcd["devices"], res.get("devices"))
        if res:
            out["resources"] = res

    for key in ("log_policies", "preemption_timeout"):
        if out.get(key) is None and tcd.get(key) is not None:
            out[key] = copy.deepcopy(tcd[key])

    storage = _merge_storage(checkpoint_storage, out.get("checkpoint_storage"))
    if storage is not None:
        out["checkpoint_storage"] = storage
    return out


def _union_kind(value: JSONObject) -> JSONValue:
    """The discriminator of a union value (storage/hyperparameter ``type``, searcher ``name``)."""
    return value.get("type", value.get("name"))


def _merge_under(template: JSONValue, exp: JSONValue, path: str) -> JSONValue:
    if exp is None:
        return copy.deepcopy(template)
    if not isinstance(template, dict) or not isinstance(exp, dict):
        return exp  # scalars and lists: the experiment's value wins outright
    if path in ("checkpoint_storage", "searcher") or "type" in exp or "type" in template:
        kind_t, kind_e = _union_kind(template), _union_kind(exp)
        if kind_e is not None and kind_t is not None and kind_e != kind_t:
            return exp  # another kind of the union: nothing of the template's applies
    out = {k: copy.deepcopy(v) for k, v in template.items()}
    for key, value in exp.items():
        child = f"{path}.{key}" if path else key
        if child in ("bind_mounts", "resources.devices"):
            out[key] = _merge_by_container_path(template.get(key), value)
        elif child == "environment.environment_variables":
            out[key] = _merge_env_vars(template.get(key), value)
        else:
            out[key] = _merge_under(template.get(key), value, child)
    return out


def merge_template(config_dict: JSONObject, template: JSONObject) -> JSONObject:
    """A new config dict with a configuration template merged under the experiment's config,
    as Determined applies templates: mappings merge key by key and the experiment's value wins;
    lists are the experiment's (``bind_mounts`` and ``resources.devices`` combine by container
    path, environment variables by name); a union value of another kind (a storage ``type``, a
    searcher ``name``, a hyperparameter ``type``) is the experiment's alone."""
    merged = _merge_under(template, config_dict, "")
    assert isinstance(merged, dict)
    return merged


def apply_overrides(config_dict: JSONObject, overrides: Iterable[str]) -> JSONObject:
    """A new dict with ``a.b.c=value`` overrides set; values are parsed as YAML scalars
    (``4`` is an int, ``true`` a bool, ``[1, 2]`` a list, ``null`` clears the field).

    Raises ConfigError for an override without ``=`` or one that walks through a non-mapping.
    """
    out = copy.deepcopy(config_dict)
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")):
            raise ConfigError(
                f"invalid override {item!r}: expected KEY=VALUE, e.g. searcher.max_trials=4", key
            )
        try:
            value = load_json(text) if text.strip() else ""
        except YAMLError as e:
            raise ConfigError(
                f"invalid override {item!r}: the value is not valid YAML ({e.reason})", key
            ) from None
        parts = key.split(".")
        cur: JSONObject | list[JSONValue] = out
        for i, part in enumerate(parts[:-1]):
            nxt = _child(cur, part)
            if nxt is None:
                nxt = {}
                _set(cur, part, nxt, item)
            elif not isinstance(nxt, dict | list):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"invalid override {item!r}: {where} is not a mapping", where)
            cur = nxt
        _set(cur, parts[-1], value, item)
    return out


def _child(cur: JSONObject | list[JSONValue], part: str) -> JSONValue:
    if isinstance(cur, list):
        return cur[int(part)] if part.isdigit() and int(part) < len(cur) else None
    return cur.get(part)


def _set(cur: JSONObject | list[JSONValue], part: str, value: JSONValue, item: str) -> None:
    if isinstance(cur, list):
        if not part.isdigit() or int(part) >= len(cur):
            raise ConfigError(f"invalid override {item!r}: no list index {part}", part)
        cur[int(part)] = value
    else:
        cur[part] = value
