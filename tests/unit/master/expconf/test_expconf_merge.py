"""Cluster defaults under the experiment's values, and --config KEY=VALUE overrides."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.expconf import (
    ConfigError,
    apply_overrides,
    merge_cluster_defaults,
    parse_experiment_config,
)

EXP: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
}
CLUSTER_STORAGE = {"type": "s3", "bucket": "cluster-bucket", "prefix": "ckpt", "save_trial_best": 3}
TCD: dict[str, Any] = {
    "image": {"cpu": "cluster/cpu:1", "cuda": "cluster/cuda:1"},
    "environment_variables": ["HTTP_PROXY=http://proxy:3128", "SHARED=cluster"],
    "force_pull_image": True,
    "shm_size_bytes": 4294967296,
    "network_mode": "host",
    "bind_mounts": [
        {"host_path": "/datasets", "container_path": "/data", "read_only": True},
        {"host_path": "/scratch", "container_path": "/scratch"},
    ],
    "registry_auth": {"username": "cluster", "password": "p"},
}


def resolve(
    exp: dict[str, Any], tcd: dict[str, Any] | None = None, storage: dict[str, Any] | None = None
):
    return parse_experiment_config(
        exp,
        {"task_container_defaults": tcd if tcd is not None else TCD, "checkpoint_storage": storage},
    ).to_dict()


def test_cluster_values_fill_what_the_experiment_leaves_out() -> None:
    d = resolve(EXP, storage=CLUSTER_STORAGE)
    assert d["environment"]["image"] == {
        "cpu": "cluster/cpu:1",
        "cuda": "cluster/cuda:1",
        "rocm": None,
    }
    assert d["environment"]["environment_variables"]["cpu"] == [
        "HTTP_PROXY=http://proxy:3128",
        "SHARED=cluster",
    ]
    assert d["environment"]["force_pull_image"] is True
    assert d["environment"]["registry_auth"]["username"] == "cluster"
    assert d["resources"]["shm_size"] == 4294967296
    assert [m["container_path"] for m in d["bind_mounts"]] == ["/data", "/scratch"]
    assert d["checkpoint_storage"]["bucket"] == "cluster-bucket"
    assert d["checkpoint_storage"]["save_trial_best"] == 3


def test_experiment_values_win() -> None:
    exp = {
        **EXP,
        "environment": {
            "image": "mine:2",
            "environment_variables": ["SHARED=mine", "EXTRA=1"],
            "force_pull_image": False,
        },
        "resources": {"shm_size": "1G"},
        "bind_mounts": [{"host_path": "/my-data", "container_path": "/data"}],
        "checkpoint_storage": {"type": "gcs", "bucket": "mine"},
    }
    d = resolve(exp, storage=CLUSTER_STORAGE)
    assert d["environment"]["image"]["cpu"] == "mine:2"
    assert d["environment"]["image"]["cuda"] == "mine:2"
    # same variable name: the experiment's value replaces the cluster's, the rest are kept
    assert d["environment"]["environment_variables"]["cuda"] == [
        "HTTP_PROXY=http://proxy:3128",
        "SHARED=mine",
        "EXTRA=1",
    ]
    assert d["environment"]["force_pull_image"] is False
    assert d["resources"]["shm_size"] == 1024**3
    mounts = {m["container_path"]: m["host_path"] for m in d["bind_mounts"]}
    assert mounts == {"/data": "/my-data", "/scratch": "/scratch"}
    # a different storage type replaces the cluster's entirely
    assert d["checkpoint_storage"]["type"] == "gcs"
    assert d["checkpoint_storage"]["bucket"] == "mine"
    assert d["checkpoint_storage"]["save_trial_best"] == 1


def test_partial_image_map_is_completed_from_the_cluster() -> None:
    d = resolve({**EXP, "environment": {"image": {"cuda": "mine/cuda:3"}}}, storage=CLUSTER_STORAGE)
    assert d["environment"]["image"]["cpu"] == "cluster/cpu:1"
    assert d["environment"]["image"]["cuda"] == "mine/cuda:3"


def test_same_storage_type_is_merged_field_by_field() -> None:
    d = resolve(
        {**EXP, "checkpoint_storage": {"type": "s3", "prefix": "exp7"}}, storage=CLUSTER_STORAGE
    )
    s = d["checkpoint_storage"]
    assert (s["bucket"], s["prefix"], s["save_trial_best"]) == ("cluster-bucket", "exp7", 3)


def test_storage_without_a_type_is_merged_over_the_masters() -> None:
    """``checkpoint_storage: {save_trial_best: 2}`` (two of Determined's own example configs)
    keeps the master's storage and changes one policy; det refused it as missing ``type``."""
    d = resolve({**EXP, "checkpoint_storage": {"save_trial_best": 2}}, storage=CLUSTER_STORAGE)
    s = d["checkpoint_storage"]
    assert (s["type"], s["bucket"], s["save_trial_best"]) == ("s3", "cluster-bucket", 2)


def test_storage_without_a_type_and_no_masters_names_the_field() -> None:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config({**EXP, "checkpoint_storage": {"save_trial_best": 2}})
    assert info.value.field_path.startswith("checkpoint_storage")


def test_merge_does_not_modify_its_inputs() -> None:
    exp = {**EXP, "bind_mounts": [{"host_path": "/x", "container_path": "/x"}]}
    before = repr(exp), repr(TCD), repr(CLUSTER_STORAGE)
    merge_cluster_defaults(exp, TCD, CLUSTER_STORAGE)
    assert (repr(exp), repr(TCD), repr(CLUSTER_STORAGE)) == before


def test_agent_only_defaults_are_not_copied() -> None:
    out = merge_cluster_defaults(EXP, TCD, None)
    assert "network_mode" not in out and "network_mode" not in out.get("environment", {})


def test_cluster_defaults_errors_are_reported_at_the_experiment_path() -> None:
    with pytest.raises(ConfigError) as info:
        resolve(EXP, tcd={"shm_size_bytes": "lots"}, storage=CLUSTER_STORAGE)
    assert info.value.field_path == "resources.shm_size"


def test_no_cluster_defaults_at_all() -> None:
    d = parse_experiment_config(
        {**EXP, "checkpoint_storage": {"type": "gcs", "bucket": "b"}}
    ).to_dict()
    assert d["bind_mounts"] == []


def test_overrides_set_typed_values() -> None:
    cfg = {**EXP, "searcher": {"name": "random", "metric": "loss", "max_trials": 2}}
    out = apply_overrides(
        cfg,
        [
            "searcher.max_trials=4",
            "searcher.smaller_is_better=false",
            "resources.slots_per_trial=2",
            "description=hello world",
            "labels=[a, b]",
            "hyperparameters.lr=0.01",
            "name=",
        ],
    )
    assert out["searcher"]["max_trials"] == 4
    assert out["searcher"]["smaller_is_better"] is False
    assert out["resources"] == {"slots_per_trial": 2}
    assert out["description"] == "hello world"
    assert out["labels"] == ["a", "b"]
    assert out["hyperparameters"] == {"lr": 0.01}
    assert out["name"] == ""
    assert cfg["searcher"]["max_trials"] == 2  # input untouched
    d = parse_experiment_config(out, {"checkpoint_storage": CLUSTER_STORAGE}).to_dict()
    assert d["searcher"]["max_trials"] == 4


def test_override_into_a_list_item_and_null_clears() -> None:
    cfg = {**EXP, "bind_mounts": [{"host_path": "/a", "container_path": "/a"}], "max_restarts": 1}
    out = apply_overrides(cfg, ["bind_mounts.0.read_only=true", "max_restarts=null"])
    assert out["bind_mounts"][0]["read_only"] is True
    assert parse_experiment_config(out, {"checkpoint_storage": CLUSTER_STORAGE}).max_restarts == 5


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("searcher.max_trials", "expected KEY=VALUE"),
        ("=4", "expected KEY=VALUE"),
        ("a..b=1", "expected KEY=VALUE"),
        ("entrypoint.x=1", "entrypoint is not a mapping"),
        ("labels=[a, b", "not valid YAML"),
    ],
)
def test_bad_overrides(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides(EXP, [override])
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)
