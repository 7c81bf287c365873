"""expconf.stored: the services' reads of a stored config give what the typed config holds, and
the schema's own default for a key the stored dict lacks or holds as null."""

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


def _readings(config: dict[str, Any]) -> dict[str, Any]:
    return {
        "slots_per_trial": stored.slots_per_trial(config),
        "weight": stored.weight(config),
        "max_restarts": stored.max_restarts(config),
        "smaller_is_better": stored.smaller_is_better(config),
        "retention": stored.retention(config),
        "force_pull_image": stored.force_pull_image(config),
    }


def test_a_partial_config_reads_as_the_parsed_one_does() -> None:
    """What a hand-written row lacks reads as the schema's default: the same as parsing the
    config would have stored (fails when a reader's fallback differs from the model's)."""
    typed = parse_experiment_config(MINIMAL)
    resolved = typed.to_dict()
    assert _readings({}) == _readings(resolved)
    assert _readings(resolved) == {
        "slots_per_trial": typed.resources.slots_per_trial,
        "weight": typed.resources.weight,
        "max_restarts": typed.max_restarts,
        "smaller_is_better": typed.searcher.smaller_is_better,
        "retention": (
            typed.checkpoint_storage.save_experiment_best,  # type: ignore[union-attr]
            typed.checkpoint_storage.save_trial_best,  # type: ignore[union-attr]
            typed.checkpoint_storage.save_trial_latest,  # type: ignore[union-attr]
        ),
        "force_pull_image": typed.environment.force_pull_image,
    }


def test_what_the_config_sets_is_read_and_null_is_the_default() -> None:
    config = parse_experiment_config(
        {
            **MINIMAL,
            "resources": {"slots_per_trial": 4, "weight": 2.5},
            "max_restarts": 0,
            "searcher": {**MINIMAL["searcher"], "smaller_is_better": False},
            "checkpoint_storage": {**STORAGE, "save_trial_best": 3, "save_trial_latest": 0},
            "environment": {"force_pull_image": True},
        }
    ).to_dict()
    assert _readings(config) == {
        "slots_per_trial": 4,
        "weight": 2.5,
        "max_restarts": 0,
        "smaller_is_better": False,
        "retention": (0, 3, 0),
        "force_pull_image": True,
    }
    nulls = {"resources": {"slots_per_trial": None}, "max_restarts": None, "searcher": None}
    assert (stored.slots_per_trial(nulls), stored.max_restarts(nulls)) == (1, 5)
    assert stored.smaller_is_better(nulls) is True


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
