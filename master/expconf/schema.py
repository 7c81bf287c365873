"""The experiment config model: top level, resources, environment, mounts.

Field names and defaults follow Determined 0.38's experiment-config JSON schema. Sections that
only configure training code or other resource managers (profiling, optimizations, integrations,
pod_spec, slurm, pbs…) are accepted as Determined accepts them and have no effect here.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, PrivateAttr, field_validator

from det.common.jsontypes import JSONObject, JSONValue

from . import hyperparameters as hp
from .base import DEFAULT_PROPAGATION, ConfigModel, Length
from .searcher import SearcherConfig
from .storage import CheckpointStorage

# Task images used when neither the experiment nor task_container_defaults names one: the image
# with torch and the official determined package, so Determined users' scripts run unchanged.
# No CUDA build of it exists yet, so GPU tasks get the same image until the cluster names one.
DEFAULT_CPU_IMAGE = "det-task:py3.11-cpu-torch"
DEFAULT_CUDA_IMAGE = DEFAULT_CPU_IMAGE

# Determined's default log policies: a matching log line names the failure in the WebUI.
DEFAULT_LOG_POLICIES: list[JSONObject] = [
    {"name": "CUDA OOM", "pattern": ".*CUDA out of memory.*"},
    {"name": "ECC Error", "pattern": ".*uncorrectable ECC error encountered.*"},
]

_SIZE = re.compile(r"^\s*((?:[0-9]*\.)?[0-9]+)\s*(?:([kmgtpKMGTP])[iI]?[bB]?|[bB])?\s*$")
_SIZE_POWER = {"k": 1, "m": 2, "g": 3, "t": 4, "p": 5}


def parse_memory_size(value: int | str) -> int:
    """Bytes from an int or a size such as ``"4G"``, ``"512Mi"``, ``"1.5 GB"`` (powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number of bytes or a size like '4G' (got {value!r})")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must be >= 0 (got {value})")
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"must be a number of bytes or a size like '4G' (got {value!r})")
    number, unit = m.group(1), m.group(2)
    return int(float(number) * 1024 ** _SIZE_POWER[unit.lower()] if unit else float(number))


class Device(ConfigModel):
    host_path: str
    container_path: str
    mode: str = "mrw"


def _device_from_string(value: object) -> object:
    """Docker's ``host:container[:mode]`` short form."""
    if isinstance(value, str):
        parts = value.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"expected 'host_path:container_path[:mode]' (got {value!r})")
        out = {"host_path": parts[0], "container_path": parts[1]}
        if len(parts) == 3:
            out["mode"] = parts[2]
        return out
    return value


# resources.shm_size and resources.devices, typed once for the experiment's and the task's
# resources (each model keeps its own fields, in the order the wire shows them).
ShmSize = Annotated[
    int | None,
    BeforeValidator(lambda v: parse_memory_size(v) if isinstance(v, int | str) else v),
]
Devices = Annotated[
    list[Device],
    BeforeValidator(lambda v: [_device_from_string(d) for d in v] if isinstance(v, list) else v),
]


class Resources(ConfigModel):
    slots_per_trial: int = Field(default=1, ge=0)
    max_slots: int | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, ge=0)
    priority: int | None = Field(default=None, ge=1, le=99)
    resource_pool: str = ""
    shm_size: ShmSize = None
    devices: Devices = Field(default_factory=list)
    native_parallel: bool = False
    is_single_node: bool | None = None
    # Ignored by Determined since 0.20 (agent_label) or never used by trials (slots).
    agent_label: str | None = None
    slots: int | None = None


class BindMount(ConfigModel):
    host_path: str
    container_path: str
    read_only: bool = False
    propagation: str = DEFAULT_PROPAGATION


class ImageMap(ConfigModel):
    cpu: str = DEFAULT_CPU_IMAGE
    cuda: str = DEFAULT_CUDA_IMAGE
    rocm: str | None = None


class EnvVarMap(ConfigModel):
    cpu: list[str] = Field(default_factory=list)
    cuda: list[str] = Field(default_factory=list)
    rocm: list[str] = Field(default_factory=list)


class RegistryAuth(ConfigModel):
    username: str | None = None
    password: str | None = None
    auth: str | None = None
    email: str | None = None
    serveraddress: str | None = None
    identitytoken: str | None = None
    registrytoken: str | None = None


def _per_device(value: object) -> object:
    """A single image / variable list applies to every device type; ``gpu`` is the old ``cuda``."""
    if isinstance(value, str | list):
        return {"cpu": value, "cuda": value, "rocm": value}
    if isinstance(value, dict) and "gpu" in value:
        value = dict(value)
        gpu = value.pop("gpu")
        value.setdefault("cuda", gpu)
    return value


class Environment(ConfigModel):
    image: ImageMap = Field(default_factory=ImageMap)
    environment_variables: EnvVarMap = Field(default_factory=EnvVarMap)
    force_pull_image: bool = False
    registry_auth: RegistryAuth | None = None
    add_capabilities: list[str] = Field(default_factory=list)
    drop_capabilities: list[str] = Field(default_factory=list)
    ports: dict[str, int] = Field(default_factory=dict)
    proxy_ports: list[JSONObject] = Field(default_factory=list)
    # Kubernetes / Slurm / PBS only: accepted so configs written for them load, never used.
    pod_spec: JSONObject | None = None
    slurm: JSONValue = None
    pbs: JSONValue = None

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, v: object) -> object:
        v = _per_device(v)
        if (
            isinstance(v, dict)
            and v.get("rocm") is not None
            and "cpu" in v
            and v["rocm"] == v["cpu"]
        ):
            # a single image string names no ROCm image of its own
            v = {**v, "rocm": None}
        return v

    @field_validator("environment_variables", mode="before")
    @classmethod
    def _env(cls, v: object) -> object:
        return _per_device(v)


class Reproducibility(ConfigModel):
    experiment_seed: int | None = Field(default=None, ge=0)


class Profiling(ConfigModel):
    enabled: bool = False
    begin_on_batch: int = Field(default=0, ge=0)
    end_after_batch: int | None = None
    sync_timings: bool = True


class Optimizations(ConfigModel):
    """Deprecated in 0.38 (set these in training code); the official harness still reads them."""

    aggregation_frequency: int = Field(default=1, ge=1)
    average_aggregated_gradients: bool = True
    average_training_metrics: bool = True
    gradient_compression: bool = False
    grad_updates_size_file: str | None = None
    mixed_precision: str = "O0"
    tensor_fusion_threshold: int = 64
    tensor_fusion_cycle_time: int = 5
    auto_tune_tensor_fusion: bool = False


class ExperimentConfig(ConfigModel):
    """A parsed experiment config. Build it with ``parse_experiment_config``."""

    name: str | None = None
    description: str | None = None
    labels: list[str] = Field(default_factory=list)
    workspace: str | None = None
    project: str | None = None
    entrypoint: str | list[str] | None = None
    hyperparameters: dict[str, hp.Hyperparameter] = Field(default_factory=dict)
    searcher: SearcherConfig
    resources: Resources = Field(default_factory=Resources)
    checkpoint_storage: CheckpointStorage | None = None
    checkpoint_policy: Literal["best", "all", "none"] = "best"
    min_validation_period: Length = Field(default_factory=lambda: Length(batches=0))
    min_checkpoint_period: Length = Field(default_factory=lambda: Length(batches=0))
    perform_initial_validation: bool = False
    max_restarts: int = Field(default=5, ge=0)
    records_per_epoch: int = Field(default=0, ge=0)
    scheduling_unit: int = Field(default=100, ge=1)
    preemption_timeout: int | None = Field(default=None, ge=0)
    environment: Environment = Field(default_factory=Environment)
    bind_mounts: list[BindMount] = Field(default_factory=list)
    reproducibility: Reproducibility = Field(default_factory=Reproducibility)
    data: JSONObject = Field(default_factory=dict)
    debug: bool = False
    profiling: Profiling = Field(default_factory=Profiling)
    optimizations: Optimizations = Field(default_factory=Optimizations)
    log_policies: list[JSONObject] = Field(default_factory=lambda: list(DEFAULT_LOG_POLICIES))
    # Accepted for compatibility, not acted upon.
    integrations: JSONObject | None = None
    tensorboard_storage: JSONObject | None = None
    data_layer: JSONObject | None = None
    security: JSONObject | None = None
    internal: JSONObject | None = None

    _warnings: list[str] = PrivateAttr(default_factory=list)

    @field_validator("hyperparameters", mode="before")
    @classmethod
    def _normalize_hparams(cls, v: object) -> object:
        return hp.normalize(v)

    @property
    def warnings(self) -> list[str]:
        """Deprecation notes found while parsing (the config is still valid)."""
        return list(self._warnings)

    def to_dict(self) -> JSONObject:
        """The fully defaulted config as a JSON-able dict, in Determined's snake_case shape.

        This is what the master stores, sends to trials as ``DET_EXPERIMENT_CONFIG`` and returns
        as an experiment's ``config``; ``parse_experiment_config`` accepts it back unchanged.
        """
        out: JSONObject = self.model_dump(mode="json")
        out["hyperparameters"] = hp.to_dict(self.hyperparameters)
        out["min_validation_period"] = self.min_validation_period.to_dict()
        out["min_checkpoint_period"] = self.min_checkpoint_period.to_dict()
        searcher = out["searcher"]
        assert isinstance(searcher, dict)  # a model dumps as a dict
        searcher["max_length"] = self.searcher.max_length_dict()
        return out

    def resolved(self) -> JSONObject:
        """Alias of ``to_dict``."""
        return self.to_dict()
