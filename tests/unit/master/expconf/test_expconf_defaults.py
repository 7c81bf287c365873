"""Defaults filled in, generated values injected, the resolved shape stable."""

from __future__ import annotations

import random

import pytest

from det.master.expconf import (
    DEFAULT_CPU_IMAGE,
    DEFAULT_CUDA_IMAGE,
    default_name,
    default_seed,
    parse_experiment_config,
    parse_memory_size,
)

MINIMAL = """
entrypoint: python3 train.py
searcher:
  name: single
  metric: loss
checkpoint_storage:
  type: directory
  container_path: /ckpt
"""


def test_minimal_config_gets_determined_defaults() -> None:
    d = parse_experiment_config(
        MINIMAL, seed_factory=lambda: 123, name_factory=lambda: "n"
    ).to_dict()
    assert d["name"] == "n"
    assert d["reproducibility"] == {"experiment_seed": 123}
    assert d["labels"] == [] and d["hyperparameters"] == {} and d["data"] == {}
    assert d["max_restarts"] == 5
    assert d["scheduling_unit"] == 100
    assert d["records_per_epoch"] == 0
    assert d["checkpoint_policy"] == "best"
    assert d["min_validation_period"] == {"batches": 0}
    assert d["min_checkpoint_period"] == {"batches": 0}
    assert d["perform_initial_validation"] is False
    assert d["searcher"]["smaller_is_better"] is True
    assert d["searcher"]["source_trial_id"] is None
    r = d["resources"]
    assert (r["slots_per_trial"], r["weight"], r["priority"], r["resource_pool"]) == (
        1,
        1.0,
        None,
        "",
    )
    assert r["native_parallel"] is False and r["shm_size"] is None
    env = d["environment"]
    assert env["image"] == {"cpu": DEFAULT_CPU_IMAGE, "cuda": DEFAULT_CUDA_IMAGE, "rocm": None}
    assert env["environment_variables"] == {"cpu": [], "cuda": [], "rocm": []}
    assert env["force_pull_image"] is False
    storage = d["checkpoint_storage"]
    assert (
        storage["save_experiment_best"],
        storage["save_trial_best"],
        storage["save_trial_latest"],
    ) == (0, 1, 1)
    # what the official harness reads without a .get()
    assert d["optimizations"]["average_training_metrics"] is True
    assert d["profiling"]["enabled"] is False
    assert [p["name"] for p in d["log_policies"]] == ["CUDA OOM", "ECC Error"]


def test_searcher_defaults_per_kind() -> None:
    base = "entrypoint: x\ncheckpoint_storage: {type: gcs, bucket: b}\n"
    rnd = parse_experiment_config(
        base + "searcher: {name: random, metric: m, max_trials: 3}"
    ).to_dict()
    assert rnd["searcher"]["max_concurrent_trials"] == 16
    grid = parse_experiment_config(base + "searcher: {name: grid, metric: m}").to_dict()
    assert grid["searcher"]["max_concurrent_trials"] == 16
    ah = parse_experiment_config(
        base + "searcher: {name: async_halving, metric: m, max_trials: 9, num_rungs: 3, "
        "time_metric: batches, max_time: 90}"
    ).to_dict()
    assert (
        ah["searcher"]["divisor"],
        ah["searcher"]["num_rungs"],
        ah["searcher"]["stop_once"],
    ) == (4.0, 3, False)


def test_seed_is_kept_when_given_and_generated_once_when_absent() -> None:
    calls: list[int] = []

    def seed() -> int:
        calls.append(1)
        return 99

    cfg = parse_experiment_config(MINIMAL, seed_factory=seed)
    assert cfg.reproducibility.experiment_seed == 99
    assert len(calls) == 1
    again = parse_experiment_config(cfg.to_dict(), seed_factory=seed)
    assert again.reproducibility.experiment_seed == 99
    assert len(calls) == 1  # the stored config already has it


def test_default_seed_and_name_shapes() -> None:
    seeds = {default_seed() for _ in range(20)}
    assert all(0 <= s < 2**31 for s in seeds) and len(seeds) > 1
    name = default_name(random.Random(3))
    assert name.startswith("Experiment (") and name.endswith(")") and name.count("-") == 2
    assert default_name(random.Random(3)) == name


def test_given_name_is_kept() -> None:
    cfg = parse_experiment_config("name: mine\n" + MINIMAL, name_factory=lambda: "other")
    assert cfg.name == "mine"


def test_nulls_mean_defaults() -> None:
    cfg = parse_experiment_config(
        MINIMAL + "max_restarts: null\nresources: {slots_per_trial: null}\n"
    )
    assert cfg.max_restarts == 5
    assert cfg.resources.slots_per_trial == 1


def test_yaml_exponent_floats_are_numbers() -> None:
    cfg = parse_experiment_config(
        MINIMAL + "hyperparameters:\n  lr: 1e-3\n  wd: {type: log, minval: -5, maxval: -1e0}\n"
    )
    d = cfg.to_dict()["hyperparameters"]
    assert d["lr"] == {"type": "const", "val": 0.001}
    assert d["wd"]["maxval"] == -1.0


def test_image_string_applies_to_cpu_and_cuda() -> None:
    d = parse_experiment_config(MINIMAL + "environment: {image: my/img:1}\n").to_dict()
    assert d["environment"]["image"] == {"cpu": "my/img:1", "cuda": "my/img:1", "rocm": None}


def test_legacy_gpu_image_key_means_cuda() -> None:
    d = parse_experiment_config(MINIMAL + "environment: {image: {gpu: g:1}}\n").to_dict()
    assert d["environment"]["image"]["cuda"] == "g:1"
    assert d["environment"]["image"]["cpu"] == DEFAULT_CPU_IMAGE


def test_env_var_list_applies_to_every_device_type() -> None:
    d = parse_experiment_config(
        MINIMAL + "environment: {environment_variables: [A=1, B=x=y]}\n"
    ).to_dict()
    assert d["environment"]["environment_variables"]["cpu"] == ["A=1", "B=x=y"]
    assert d["environment"]["environment_variables"]["cuda"] == ["A=1", "B=x=y"]


def test_pod_spec_is_accepted_and_ignored() -> None:
    cfg = parse_experiment_config(
        MINIMAL + "environment: {pod_spec: {spec: {containers: [{name: c}]}}}\n"
    )
    assert cfg.warnings == []


def test_deprecated_fields_load_with_notes() -> None:
    cfg = parse_experiment_config(
        MINIMAL
        + "scheduling_unit: 10\nmin_validation_period: {batches: 100}\ntensorboard_storage: {type: s3}\n"
    )
    text = " | ".join(cfg.warnings)
    assert "scheduling_unit is deprecated" in text
    assert "min_validation_period is deprecated" in text
    assert "tensorboard_storage" in text
    assert cfg.to_dict()["min_validation_period"] == {"batches": 100}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (4096, 4096),
        ("4G", 4 * 1024**3),
        ("4Gi", 4 * 1024**3),
        ("512MB", 512 * 1024**2),
        ("1.5 GB", int(1.5 * 1024**3)),
        ("100", 100),
        ("64k", 64 * 1024),
        ("10b", 10),
    ],
)
def test_memory_sizes(value: int | str, expected: int) -> None:
    assert parse_memory_size(value) == expected


@pytest.mark.parametrize("value", ["4X", "G", "-1", "", True, -5])
def test_bad_memory_sizes(value: int | str) -> None:
    with pytest.raises(ValueError):
        parse_memory_size(value)


# Keys the official determined 0.38.1 harness accepts in each storage section (after it drops the
# save_* retention keys, and folds checkpoint_path/tensorboard_path into storage_path).
HARNESS_STORAGE_KEYS = {
    "shared_fs": {"host_path", "storage_path", "container_path", "propagation"},
    "directory": {"container_path"},
    "s3": {"bucket", "access_key", "secret_key", "endpoint_url", "prefix"},
    "gcs": {"bucket", "prefix"},
}


@pytest.mark.parametrize(
    "storage",
    [
        {"type": "shared_fs", "host_path": "/ckpt"},
        {"type": "directory", "container_path": "/ckpt"},
        {"type": "s3", "bucket": "b"},
        {"type": "gcs", "bucket": "b"},
    ],
    ids=lambda s: s["type"],
)
def test_resolved_storage_keys_suit_the_official_harness(storage: dict[str, str]) -> None:
    cfg = parse_experiment_config(
        {
            "entrypoint": "x",
            "searcher": {"name": "single", "metric": "m"},
            "checkpoint_storage": storage,
        }
    )
    resolved = dict(cfg.to_dict()["checkpoint_storage"])
    kind = resolved.pop("type")
    for key in (
        "save_experiment_best",
        "save_trial_best",
        "save_trial_latest",
        "checkpoint_path",
        "tensorboard_path",
    ):
        resolved.pop(key, None)
    assert set(resolved) <= HARNESS_STORAGE_KEYS[kind]


def test_trial_class_entrypoint_loads_with_a_note() -> None:
    cfg = parse_experiment_config(MINIMAL.replace("python3 train.py", "model_def:MNistTrial"))
    assert any("module:TrialClass" in w for w in cfg.warnings)
