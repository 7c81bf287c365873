"""Example configs in the shape of Determined's documentation load unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from det.master.expconf import parse_experiment_config

CONFIGS = Path(__file__).parent / "configs"
CLUSTER = {
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/var/lib/det/checkpoints"},
    "task_container_defaults": {},
}


def load(name: str):
    return parse_experiment_config(
        (CONFIGS / name).read_text(),
        CLUSTER,
        seed_factory=lambda: 7,
        name_factory=lambda: "unnamed",
    )


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_sample_loads_and_round_trips(path: Path) -> None:
    cfg = load(path.name)
    resolved = cfg.to_dict()
    # JSON-able, and the stored form parses back to itself
    assert json.loads(json.dumps(resolved)) == resolved
    assert parse_experiment_config(resolved).to_dict() == resolved


def test_mnist_const_bare_hparams_become_const() -> None:
    cfg = load("mnist_pytorch_const.yaml").to_dict()
    assert cfg["hyperparameters"]["learning_rate"] == {"type": "const", "val": 1.0}
    assert cfg["hyperparameters"]["n_filters1"] == {"type": "const", "val": 32}
    assert cfg["searcher"]["name"] == "single"
    assert cfg["searcher"]["metric"] == "validation_loss"
    assert cfg["entrypoint"] == "python3 train.py"
    # no storage in the file: the cluster's
    assert cfg["checkpoint_storage"]["type"] == "shared_fs"
    assert cfg["checkpoint_storage"]["host_path"] == "/var/lib/det/checkpoints"


def test_mnist_adaptive_has_asha_defaults() -> None:
    s = load("mnist_pytorch_adaptive.yaml").to_dict()["searcher"]
    assert s["name"] == "adaptive_asha"
    assert (s["max_trials"], s["time_metric"], s["max_time"]) == (16, "batches", 937)
    assert (s["mode"], s["divisor"], s["max_rungs"], s["bracket_rungs"]) == ("standard", 4.0, 5, [])
    assert s["max_concurrent_trials"] == 16
    assert s["stop_once"] is False


def test_distributed_entrypoint_and_slots() -> None:
    cfg = load("mnist_pytorch_distributed.yaml")
    assert cfg.resources.slots_per_trial == 8
    assert cfg.entrypoint == "python3 -m determined.launch.torch_distributed python3 train.py"


def test_core_api_legacy_max_length_loads_with_a_deprecation_note() -> None:
    cfg = load("core_api_distributed.yaml")
    assert cfg.to_dict()["searcher"]["max_length"] == 100
    assert cfg.max_restarts == 0
    assert any("searcher.max_length is deprecated" in w for w in cfg.warnings)


def test_core_api_hpsearch() -> None:
    cfg = load("core_api_hpsearch.yaml").to_dict()
    assert cfg["hyperparameters"]["increment_by"] == {
        "type": "int",
        "minval": 1,
        "maxval": 8,
        "count": None,
    }
    assert cfg["searcher"]["smaller_is_better"] is False
    assert cfg["searcher"]["mode"] == "aggressive"


def test_grid_nested_hparams_keep_their_shape() -> None:
    cfg = load("grid_nested.yaml").to_dict()
    hps = cfg["hyperparameters"]
    assert hps["optimizer"] == {"type": "categorical", "vals": ["sgd", "adam"]}
    assert hps["learning_rate"]["count"] == 4
    assert hps["model"]["layers"]["type"] == "int"
    assert hps["model"]["dropout"] == {"type": "const", "val": 0.1}
    assert hps["model"]["widths"] == {"type": "const", "val": [128, 64]}
    assert cfg["entrypoint"] == ["python3", "train.py", "--fast"]
    storage = cfg["checkpoint_storage"]
    # the experiment's own storage wins over the cluster's (different host path)
    assert storage["host_path"] == "/mnt/checkpoints"
    assert storage["storage_path"] == "determined-checkpoint"
    assert (storage["save_experiment_best"], storage["save_trial_best"]) == (0, 2)


def test_s3_full_config_resolves_every_section() -> None:
    cfg = load("s3_full.yaml")
    d = cfg.to_dict()
    assert d["checkpoint_storage"] == {
        "type": "s3",
        "bucket": "my-checkpoints",
        "prefix": "imagenet/",
        "access_key": None,
        "secret_key": None,
        "endpoint_url": "https://s3.us-west-2.amazonaws.com",
        "save_experiment_best": 3,
        "save_trial_best": 1,
        "save_trial_latest": 1,
    }
    assert d["resources"]["shm_size"] == 16 * 1024**3
    assert d["resources"]["devices"] == [
        {"host_path": "/dev/infiniband", "container_path": "/dev/infiniband", "mode": "mrw"}
    ]
    assert (d["resources"]["resource_pool"], d["resources"]["priority"]) == ("gpu-a100", 10)
    assert d["environment"]["environment_variables"]["cuda"] == [
        "NCCL_DEBUG=INFO",
        "NCCL_SOCKET_IFNAME=ens",
    ]
    assert d["environment"]["registry_auth"]["serveraddress"] == "registry.example.com"
    assert d["environment"]["pod_spec"]["kind"] == "Pod"
    assert d["bind_mounts"][0]["read_only"] is True
    assert d["bind_mounts"][0]["propagation"] == "rprivate"
    assert d["reproducibility"]["experiment_seed"] == 42  # given, not generated
    assert d["min_validation_period"] == {"epochs": 1}
    assert d["checkpoint_policy"] == "all"
    assert d["log_policies"] == [{"name": "NCCL timeout", "pattern": ".*NCCL.*timeout.*"}]
    assert (d["workspace"], d["project"], d["preemption_timeout"]) == ("research", "imagenet", 120)
    assert d["profiling"]["end_after_batch"] == 100
    assert d["optimizations"]["aggregation_frequency"] == 2
    assert d["optimizations"]["average_training_metrics"] is True
