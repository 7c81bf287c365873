"""``parse_experiment_config``: text or dict in, a fully defaulted ExperimentConfig out.

Order: load YAML → merge cluster defaults → refuse removed features with a message saying what to
use instead → validate the models → checks across fields → fill the generated defaults (name,
seed) → note deprecations.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from typing import TypedDict

from pydantic import BaseModel, ValidationError

from det.common.jsontypes import JSONObject, JSONValue

from . import hyperparameters as hp
from . import schema as schema_mod
from . import searcher as searchers
from . import storage
from .errors import ConfigError, at, make_error, problems_of
from .merge import merge_cluster_defaults
from .schema import ExperimentConfig
from .yamltext import YAMLError, load_json

logger = logging.getLogger(__name__)


class ClusterDefaults(TypedDict, total=False):
    """What the master merges under an experiment config (its own values win)."""

    task_container_defaults: JSONObject | None  # master.yaml's (or the pool's) section
    checkpoint_storage: JSONObject | None  # the master's default storage


SeedFactory = Callable[[], int]
NameFactory = Callable[[], str]


def load_yaml(text: str) -> JSONObject:
    """The config document as a dict, or ConfigError naming line and column."""
    try:
        data = load_json(text)
    except YAMLError as e:
        if e.line is None:
            raise ConfigError(f"invalid YAML: {e.reason}") from None
        raise ConfigError(f"invalid YAML at line {e.line}, column {e.column}: {e.reason}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"the config must be a mapping of fields (got a {type(data).__name__})")
    return data


def default_seed() -> int:
    """A fresh experiment seed, as Determined records one at creation."""
    return random.SystemRandom().randrange(0, 2**31)


_ADJECTIVES = (
    "brave",
    "calm",
    "eager",
    "gentle",
    "happy",
    "keen",
    "lively",
    "proud",
    "quick",
    "witty",
)
_NOUNS = ("badger", "falcon", "heron", "lynx", "otter", "panda", "raven", "tiger", "walrus", "yak")


def default_name(rng: random.Random | None = None) -> str:
    """``Experiment (adjective-noun)``, as Determined names experiments created without one."""
    r = rng or random.Random()
    return f"Experiment ({r.choice(_ADJECTIVES)}-{r.choice(_ADJECTIVES)}-{r.choice(_NOUNS)})"


def _known_field_names() -> frozenset[str]:
    names: set[str] = set()
    todo: list[type[BaseModel]] = [ExperimentConfig]
    done: set[type[BaseModel]] = set()

    todo += [
        v
        for mod in (schema_mod, searchers, storage, hp)
        for v in vars(mod).values()
        if isinstance(v, type) and issubclass(v, BaseModel)
    ]
    for model in todo:
        if model not in done:
            done.add(model)
            names.update(model.model_fields)
    return frozenset(names)


_KNOWN = _known_field_names()
_TOP = frozenset(ExperimentConfig.model_fields)


def _within(path: str, parent: str) -> bool:
    """``path`` is ``parent`` or lies under it (``searcher.name`` within ``searcher``)."""
    return path == parent or path.startswith((parent + ".", parent + "["))


def _prechecks(data: JSONObject) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    if data.get("searcher") is None:
        problems.append(
            ("searcher", "required field missing (e.g. {name: single, metric: validation_loss})")
        )
    else:
        problems += searchers.precheck(data["searcher"])
    problems += storage.precheck(data.get("checkpoint_storage"))
    return problems


def _check_env_vars(cfg: ExperimentConfig, raw: JSONValue) -> list[tuple[str, str]]:
    """The first malformed variable, at the path the user wrote (a list applies to every device)."""
    env_vars = cfg.environment.environment_variables
    for device in ("cpu", "cuda", "rocm"):
        for j, entry in enumerate(getattr(env_vars, device)):
            if "=" not in entry or entry.startswith("="):
                base = "environment.environment_variables"
                path = f"{base}[{j}]" if isinstance(raw, list) else f"{base}.{device}[{j}]"
                return [(path, f"expected NAME=VALUE (got {entry!r})")]
    return []


def _checks(
    cfg: ExperimentConfig, raw_env_vars: JSONValue, unmanaged: bool = False
) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    internal = cfg.internal or {}
    if unmanaged and cfg.entrypoint is None:
        pass  # its script runs outside the cluster: nothing to launch
    elif cfg.entrypoint is None and internal.get("native") is None:
        problems.append(("entrypoint", "required field missing (e.g. python3 train.py)"))
    elif (isinstance(cfg.entrypoint, str) and not cfg.entrypoint.strip()) or (
        isinstance(cfg.entrypoint, list) and not cfg.entrypoint
    ):
        problems.append(("entrypoint", "must not be empty"))
    problems += hp.check(cfg.hyperparameters, grid=cfg.searcher.name == "grid")
    if cfg.checkpoint_storage is None:
        problems.append(
            (
                "checkpoint_storage",
                "required: set it in the experiment or in the master's checkpoint_storage",
            )
        )
    else:
        problems += storage.check(cfg.checkpoint_storage)
    for i, bm in enumerate(cfg.bind_mounts):
        if not bm.host_path.startswith("/"):
            problems.append(
                (f"bind_mounts[{i}].host_path", f"must be an absolute path (got {bm.host_path!r})")
            )
        if not bm.container_path.strip() or bm.container_path.strip() in (".", "/"):
            problems.append(
                (f"bind_mounts[{i}].container_path", f"cannot mount over {bm.container_path!r}")
            )
    problems += _check_env_vars(cfg, raw_env_vars)
    r = cfg.resources
    if r.max_slots is not None and r.max_slots < r.slots_per_trial and r.max_slots > 0:
        problems.append(
            (
                "resources.max_slots",
                f"must be >= resources.slots_per_trial ({r.slots_per_trial}) (got {r.max_slots})",
            )
        )
    return problems


def _deprecations(cfg: ExperimentConfig, data: JSONObject) -> list[str]:
    notes = searchers.deprecations(cfg.searcher)
    for key in (
        "scheduling_unit",
        "min_validation_period",
        "min_checkpoint_period",
        "optimizations",
    ):
        if data.get(key) is not None:
            notes.append(f"{key} is deprecated since 0.38: configure it in your training code")
    if data.get("tensorboard_storage") is not None:
        notes.append(
            "tensorboard_storage is deprecated and ignored: TensorBoard files go to checkpoint_storage"
        )
    if data.get("data_layer") is not None:
        notes.append("data_layer was removed from Determined and is ignored")
    ep = cfg.entrypoint
    if isinstance(ep, str) and re.fullmatch(r"[\w.]+:\w+", ep.strip()):
        notes.append(
            "entrypoint 'module:TrialClass' is deprecated since 0.38: invoke your training script "
            "(e.g. python3 train.py)"
        )
    return notes


def parse_experiment_config(
    text_or_dict: str | bytes | JSONObject,
    cluster_defaults: ClusterDefaults | None = None,
    *,
    seed_factory: SeedFactory = default_seed,
    name_factory: NameFactory = default_name,
    unmanaged: bool = False,
) -> ExperimentConfig:
    """Validate an experiment config and fill every default.

    ``cluster_defaults`` may hold ``task_container_defaults`` (master.yaml's section) and
    ``checkpoint_storage`` (the master's default storage); the experiment's own values win.
    ``seed_factory`` / ``name_factory`` produce ``reproducibility.experiment_seed`` and ``name``
    when the config has none (tests inject fixed ones). ``unmanaged`` (a core_v2 script's
    config) needs no ``entrypoint``. Raises ConfigError with one readable line.
    """
    if isinstance(text_or_dict, bytes):
        text_or_dict = text_or_dict.decode("utf-8", errors="replace")
    if isinstance(text_or_dict, str):
        data = load_yaml(text_or_dict)
    elif isinstance(text_or_dict, dict):
        data = text_or_dict
    else:
        raise ConfigError(
            f"the config must be YAML text or a mapping (got {type(text_or_dict).__name__})"
        )
    bad_keys = [k for k in data if not isinstance(k, str)]
    if bad_keys:
        raise ConfigError(f"field names must be strings (got {bad_keys[0]!r})")

    defaults: ClusterDefaults = cluster_defaults or {}
    merged = merge_cluster_defaults(
        data, defaults.get("task_container_defaults"), defaults.get("checkpoint_storage")
    )

    # Every problem at once: the prechecks' (better worded) and the schema's, except where the
    # schema repeats a precheck's path (a missing searcher is both).
    problems = [at(p, m) for p, m in _prechecks(merged)]
    try:
        cfg = ExperimentConfig.model_validate(merged)
    except ValidationError as e:
        covered = [p for p, _ in problems]
        problems += [
            (where, message)
            for where, message in problems_of(e, merged, _KNOWN, _TOP, given=data)
            if not any(_within(where, c) for c in covered)
        ]
        raise make_error(problems) from None
    if problems:
        raise make_error(problems)
    env = merged.get("environment")
    problems = _checks(
        cfg, env.get("environment_variables") if isinstance(env, dict) else None, unmanaged
    )
    if problems:
        raise make_error([at(p, m) for p, m in problems])

    if not cfg.name:
        cfg.name = name_factory()
    if cfg.reproducibility.experiment_seed is None:
        cfg.reproducibility.experiment_seed = seed_factory()
    cfg._warnings = _deprecations(cfg, data)
    for note in cfg._warnings:
        logger.debug("experiment config: %s", note)
    return cfg
