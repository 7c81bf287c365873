"""Reading a stored config in the services, typed, with one default per field.

What the master stores is ``ExperimentConfig.to_dict()`` (every field resolved), a task's is
``TaskConfig``'s; a service reads the value it needs from that dict through these functions. A
key the dict lacks or holds as null (a row written by hand, a test's ``{}``; null means "the
default" in Determined's configs) gets the schema's default, read from the model: the default is
written once, where the field is declared (``schema.py``, ``searcher.py``, ``storage.py``,
``task.py``), never again in a service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from det.master.expconf.schema import BindMount, Device, Environment, ExperimentConfig, Resources
from det.master.expconf.searcher import _SearcherBase
from det.master.expconf.storage import SharedFSStorage, _StorageBase
from det.master.expconf.task import TaskConfig


def default(model: type[BaseModel], field: str) -> Any:
    """The schema's default of ``model.field``."""
    return model.model_fields[field].get_default(call_default_factory=True)


def value(section: Any, model: type[BaseModel], field: str) -> Any:
    """``section[field]`` (a stored dict's part that ``model`` describes), else its default."""
    found = section.get(field) if isinstance(section, Mapping) else None
    return default(model, field) if found is None else found


def slots_per_trial(config: Mapping[str, Any]) -> int:
    return int(value(config.get("resources"), Resources, "slots_per_trial"))


def weight(config: Mapping[str, Any]) -> float:
    return float(value(config.get("resources"), Resources, "weight"))


def max_restarts(config: Mapping[str, Any]) -> int:
    return int(value(config, ExperimentConfig, "max_restarts"))


def smaller_is_better(config: Mapping[str, Any]) -> bool:
    return bool(value(config.get("searcher"), _SearcherBase, "smaller_is_better"))


def retention(config: Mapping[str, Any]) -> tuple[int, int, int]:
    """``checkpoint_storage``'s save_experiment_best, save_trial_best, save_trial_latest."""
    storage = config.get("checkpoint_storage")
    return (
        int(value(storage, _StorageBase, "save_experiment_best")),
        int(value(storage, _StorageBase, "save_trial_best")),
        int(value(storage, _StorageBase, "save_trial_latest")),
    )


def force_pull_image(config: Mapping[str, Any]) -> bool:
    return bool(value(config.get("environment"), Environment, "force_pull_image"))


def mount_propagation(mount: Mapping[str, Any]) -> str:
    """A bind mount's (or shared_fs storage's) propagation."""
    return str(value(mount, BindMount, "propagation"))


def device_mode(device: Mapping[str, Any]) -> str:
    return str(value(device, Device, "mode"))


def shared_fs_container_path(storage: Mapping[str, Any]) -> str:
    return str(value(storage, SharedFSStorage, "container_path"))


def notebook_idle_type(task_config: Mapping[str, Any]) -> str:
    """An interactive task's ``notebook_idle_type`` (what counts as a notebook's activity)."""
    return str(value(task_config, TaskConfig, "notebook_idle_type"))
