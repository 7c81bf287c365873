"""expconf.stored: a stored experiment config is validated back into the typed model once per
experiment and config (bounded); the dict reads of task configs' parts give the schema's own
default for a key the dict lacks or holds as null."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.expconf import parse_experiment_config, stored

STORAGE = {"type": "shared_fs", "host_path": "/tmp"}
MINIMAL: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 10}},
    "checkpoint_storage": STORAGE,
}


def test_a_stored_config_reads_back_as_the_parsed_one() -> None:
    typed = parse_experiment_config(
        {
            **MINIMAL,
            "resources": {"slots_per_trial": 4, "weight": 2.5},
            "max_restarts": 0,
            "searcher": {**MINIMAL["searcher"], "smaller_is_better": False},
            "checkpoint_storage": {**STORAGE, "save_trial_best": 3, "save_trial_latest": 0},
            "environment": {"force_pull_image": True},
        }
    )
    cfg = stored.experiment_config(9001, typed.to_dict())
    assert cfg.to_dict() == typed.to_dict()
    assert (cfg.resources.slots_per_trial, cfg.resources.weight, cfg.max_restarts) == (4, 2.5, 0)
    assert cfg.searcher.smaller_is_better is False
    assert stored.retention(cfg) == (0, 3, 0)
    assert cfg.environment.force_pull_image is True


def test_validated_once_per_experiment_and_config_and_the_cache_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolved = parse_experiment_config(MINIMAL).to_dict()
    first = stored.experiment_config(9002, resolved)
    assert stored.experiment_config(9002, dict(resolved)) is first
    # An edited config (the API changes priority, weight, max_slots) is validated anew.
    edited = {**resolved, "resources": {**resolved["resources"], "weight": 3.0}}
    again = stored.experiment_config(9002, edited)
    assert again is not first and again.resources.weight == 3.0
    # Another experiment with the same config has its own entry.
    assert stored.experiment_config(9003, resolved) is not first

    monkeypatch.setattr(stored, "CACHE_SIZE", 2)
    for eid in (9004, 9005, 9006):
        stored.experiment_config(eid, resolved)
    assert len(stored._cache) <= 2
    assert stored.experiment_config(9006, resolved) is stored.experiment_config(9006, resolved)


def test_a_stored_config_the_model_refuses_names_the_experiment_and_field() -> None:
    resolved = parse_experiment_config(MINIMAL).to_dict()
    bad = {**resolved, "resources": {**resolved["resources"], "slots_per_trial": -1}}
    with pytest.raises(stored.StoredConfigError) as e:
        stored.experiment_config(9007, bad)
    assert str(e.value).startswith("experiment 9007: stored config: resources.slots_per_trial:")
    with pytest.raises(stored.StoredConfigError, match="experiment 9008: stored config: searcher"):
        stored.experiment_config(9008, {})


def test_retention_without_storage_is_the_storage_models_default() -> None:
    cfg = parse_experiment_config(MINIMAL).model_copy(update={"checkpoint_storage": None})
    parsed = parse_experiment_config(MINIMAL).checkpoint_storage
    assert parsed is not None
    assert stored.retention(cfg) == (
        parsed.save_experiment_best,
        parsed.save_trial_best,
        parsed.save_trial_latest,
    )


def test_force_pull_image_of_a_partial_dict_is_the_default() -> None:
    typed = parse_experiment_config(MINIMAL)
    assert stored.force_pull_image({}) is typed.environment.force_pull_image
    assert stored.force_pull_image({"environment": {"force_pull_image": True}}) is True


@pytest.mark.parametrize(
    ("read", "part", "expected"),
    [
        (stored.mount_propagation, {}, "rprivate"),
        (stored.mount_propagation, {"propagation": "rshared"}, "rshared"),
        (stored.device_mode, {}, "mrw"),
        (stored.device_mode, {"mode": "r"}, "r"),
        (stored.shared_fs_container_path, {}, "/determined_shared_fs"),
        (stored.shared_fs_container_path, {"container_path": "/ckpt"}, "/ckpt"),
        (stored.notebook_idle_type, {}, "kernels_or_terminals"),
        (stored.notebook_idle_type, {"notebook_idle_type": "activity"}, "activity"),
    ],
)
def test_mount_device_and_task_parts(read: Any, part: dict[str, Any], expected: str) -> None:
    assert read(part) == expected
