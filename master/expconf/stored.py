"""Reading a stored config in the services, typed, with one default per field.

What the master stores for an experiment is ``ExperimentConfig.to_dict()`` (every field
resolved). :func:`experiment_config` validates it back into the typed ``ExperimentConfig`` once
per experiment and config (the key is the experiment's id and a digest of the stored JSON, so an
edit of the config, e.g. its priority, is a new entry), keeps the last ``CACHE_SIZE`` of them,
and services read fields off the model: ``cfg.resources.slots_per_trial``,
``cfg.searcher.smaller_is_better``, ``cfg.max_restarts``.

A task's stored config (``TaskConfig``'s) and the parts shared by both kinds (a bind mount, a
device, the environment) are still read from the dict through the functions below: a key the
dict lacks or holds as null (null means "the default" in Determined's configs) gets the
schema's default, read from the model. Either way the default is written once, where the field
is declared (``schema.py``, ``searcher.py``, ``storage.py``, ``task.py``), never in a service.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict

from pydantic import BaseModel, ValidationError

from det.common.jsontypes import JSONObject, JSONValue
from det.master.errors import MasterError
from det.master.expconf.base import default_of
from det.master.expconf.errors import join_path
from det.master.expconf.schema import BindMount, Device, Environment, ExperimentConfig
from det.master.expconf.searcher import _SearcherBase
from det.master.expconf.storage import SharedFSStorage, _StorageBase
from det.master.expconf.task import TaskConfig

#: How many validated experiment configs are kept (a few hundred bytes to a few KB each).
CACHE_SIZE = 1024

_cache: OrderedDict[tuple[int, str], ExperimentConfig] = OrderedDict()
_lock = threading.Lock()


class StoredConfigError(MasterError):
    """A stored experiment config the typed model refuses: the master never stores one (it
    stores what it parsed), so this is a row written some other way or a schema change that
    missed a migration. The message names the experiment, the field and the rule."""


def _digest(raw: JSONObject) -> str:
    text = json.dumps(raw, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def experiment_config(experiment_id: int, raw: JSONObject) -> ExperimentConfig:
    """The stored config of experiment ``experiment_id`` (``experiments.config``), typed.

    Validated once per (experiment, config digest) and shared between callers: treat the
    model as read-only (copy it with ``model_copy(deep=True)`` to change it).
    Raises StoredConfigError when the stored dict is not a valid config.
    """
    key = (experiment_id, _digest(raw))
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    try:
        cfg = ExperimentConfig.model_validate(dict(raw))
    except ValidationError as e:
        first = e.errors()[0]
        where = join_path(p for p in first["loc"] if isinstance(p, str | int)) or "config"
        raise StoredConfigError(
            f"experiment {experiment_id}: stored config: {where}: {first['msg']}"
        ) from None
    with _lock:
        _cache[key] = cfg
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return cfg


#: ``searcher.smaller_is_better``'s default as an SQL literal, for a statement that orders by
#: the stored config's direction (``coalesce(..., SMALLER_IS_BETTER_SQL)``).
SMALLER_IS_BETTER_SQL = "true" if default_of(_SearcherBase, "smaller_is_better", bool) else "false"


def retention(cfg: ExperimentConfig) -> tuple[int, int, int]:
    """``checkpoint_storage``'s save_experiment_best, save_trial_best, save_trial_latest (the
    storage model's defaults when the config has none, as an unmanaged experiment's may not)."""
    storage = cfg.checkpoint_storage
    if storage is None:
        return (
            default_of(_StorageBase, "save_experiment_best", int),
            default_of(_StorageBase, "save_trial_best", int),
            default_of(_StorageBase, "save_trial_latest", int),
        )
    return storage.save_experiment_best, storage.save_trial_best, storage.save_trial_latest


def value(section: JSONValue, model: type[BaseModel], field: str) -> JSONValue:
    """``section[field]`` (a stored dict's part that ``model`` describes), else its default."""
    found = section.get(field) if isinstance(section, dict) else None
    if found is not None:
        return found
    default = default_of(model, field)
    # The defaults read this way are scalars (a string, a flag).
    if not isinstance(default, bool | int | float | str):
        raise TypeError(f"{model.__name__}.{field}: not a scalar default: {default!r}")
    return default


def _str(section: JSONValue, model: type[BaseModel], field: str) -> str:
    return str(value(section, model, field))


def force_pull_image(config: JSONObject) -> bool:
    return bool(value(config.get("environment"), Environment, "force_pull_image"))


def mount_propagation(mount: JSONObject) -> str:
    """A bind mount's (or shared_fs storage's) propagation."""
    return _str(mount, BindMount, "propagation")


def device_mode(device: JSONObject) -> str:
    return _str(device, Device, "mode")


def shared_fs_container_path(storage: JSONObject) -> str:
    return _str(storage, SharedFSStorage, "container_path")


def shared_fs_propagation(storage: JSONObject) -> str:
    return _str(storage, SharedFSStorage, "propagation")


def notebook_idle_type(task_config: JSONObject) -> str:
    """An interactive task's ``notebook_idle_type`` (what counts as a notebook's activity)."""
    return _str(task_config, TaskConfig, "notebook_idle_type")
