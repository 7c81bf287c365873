"""The config of an interactive task: Determined 0.38's command, notebook, shell and TensorBoard
config, validated and defaulted like an experiment's.

Accepted fields (defaults in brackets; ``null`` means the default):

- ``description`` [e.g. "Command (tidy-owl)"], ``entrypoint`` (string or list; a command's
  is required, the others get their service's), ``work_dir`` [the context directory],
  ``debug`` [false], ``idle_timeout`` (a notebook's or a TensorBoard's: a duration such as
  ``30m``, ``1h``, ``90s`` or seconds; none: never), ``notebook_idle_type``
  [kernels_or_terminals] (``kernels_or_terminals``, ``kernel_connections``, ``activity``).
- ``resources``: ``slots`` [1 for commands, 0 for the others], ``resource_pool``
  [the cluster's default], ``priority`` (1-99), ``weight`` [1], ``shm_size``, ``devices``,
  ``is_single_node``, ``agent_label`` (ignored).
- ``environment`` and ``bind_mounts``: as an experiment's (the cluster's
  ``task_container_defaults`` merged under them).
- ``tensorboard_args``: more flags for a TensorBoard's ``tensorboard`` program.
- Accepted as Determined accepts them and unused here: ``pbs``, ``slurm``, ``integrations``,
  ``log_policies``, ``preemption_timeout``.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, ValidationError, field_validator

from det.common.jsontypes import JSONObject, JSONValue

from .base import ConfigModel
from .errors import ConfigError, from_validation_error
from .merge import merge_cluster_defaults
from .schema import BindMount, Devices, Environment, ShmSize

TaskKind = Literal["COMMAND", "NOTEBOOK", "SHELL", "TENSORBOARD"]
#: The user-facing name of each kind (descriptions, messages).
KIND_NAMES: dict[str, str] = {
    "COMMAND": "Command",
    "NOTEBOOK": "JupyterLab",
    "SHELL": "Shell",
    "TENSORBOARD": "TensorBoard",
}
IdleType = Literal["kernels_or_terminals", "kernel_connections", "activity"]

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d)?\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, None: 1}


def parse_duration(value: object) -> float:
    """Seconds from ``90``, ``"90s"``, ``"30m"``, ``"1h"``, ``"1d"``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a duration such as '30m' or '1h' (got {value!r})")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        m = _DURATION.match(value)
        if not m:
            raise ValueError(f"must be a duration such as '30m' or '1h' (got {value!r})")
        seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if seconds <= 0:
        raise ValueError(f"must be a positive duration (got {value!r})")
    return seconds


class TaskResources(ConfigModel):
    slots: int | None = Field(default=None, ge=0)
    resource_pool: str = ""
    priority: int | None = Field(default=None, ge=1, le=99)
    weight: float = Field(default=1.0, ge=0)
    shm_size: ShmSize = None
    devices: Devices = Field(default_factory=list)
    is_single_node: bool | None = None
    agent_label: str | None = None
    max_slots: int | None = Field(default=None, ge=0)


class TaskConfig(ConfigModel):
    description: str | None = None
    entrypoint: str | list[str] | None = None
    work_dir: str | None = None
    debug: bool = False
    idle_timeout: float | None = None
    notebook_idle_type: IdleType = "kernels_or_terminals"
    resources: TaskResources = Field(default_factory=TaskResources)
    environment: Environment = Field(default_factory=Environment)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    tensorboard_args: list[str] = Field(default_factory=list)
    integrations: JSONObject | None = None
    log_policies: list[JSONObject] | None = None
    preemption_timeout: int | None = None
    pbs: JSONValue = None
    slurm: JSONValue = None

    @field_validator("idle_timeout", mode="before")
    @classmethod
    def _idle(cls, v: object) -> object:
        return parse_duration(v)

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and not all(isinstance(a, str) for a in v):
            raise ValueError("must be a string or a list of strings")
        if v is not None and not v:
            raise ValueError("must not be empty")
        return v


_KNOWN = frozenset(TaskConfig.model_fields) | frozenset(TaskResources.model_fields)


def parse_task_config(
    kind: TaskKind, data: JSONValue, task_container_defaults: JSONObject | None
) -> JSONObject:
    """The resolved config of a ``kind`` task (cluster defaults merged under it), as a dict;
    ConfigError names the field and the reason."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"the config must be a mapping (got {type(data).__name__})")
    merged = merge_cluster_defaults(data, task_container_defaults, None)
    try:
        cfg = TaskConfig.model_validate(merged)
    except ValidationError as e:
        raise from_validation_error(e, merged, _KNOWN) from None
    if kind == "COMMAND" and not cfg.entrypoint:
        raise ConfigError("entrypoint: a command needs one (det cmd run CMD…)", "entrypoint")
    if cfg.resources.slots is None:
        cfg.resources.slots = 1 if kind == "COMMAND" else 0
    for i, m in enumerate(cfg.bind_mounts):
        if not m.host_path.startswith("/"):
            raise ConfigError(
                f"bind_mounts[{i}].host_path: must be an absolute path (got {m.host_path!r})",
                f"bind_mounts[{i}].host_path",
            )
    return cfg.model_dump(mode="json")
