"""Each class of bad input gets one readable line naming the field path and the reason."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.expconf import ConfigError, parse_experiment_config

GOOD: dict[str, Any] = {
    "name": "t",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"},
    "hyperparameters": {"lr": 0.1},
}


def with_(**changes: Any) -> dict[str, Any]:
    cfg = {**GOOD}
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    return cfg


def error_of(config: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(config)
    assert "\n" not in str(info.value)
    return info.value


def test_good_base_config_is_valid() -> None:
    parse_experiment_config(GOOD)


def test_malformed_yaml_names_line_and_column() -> None:
    text = "name: t\nsearcher:\n  name: single\n    metric: loss\n"
    e = error_of(text)
    assert str(e).startswith("invalid YAML at line 4, column 11: ")
    assert e.field_path == ""


def test_unclosed_bracket_names_its_line() -> None:
    e = error_of("name: t\nlabels: [a, b\nentrypoint: x\n")
    assert str(e).startswith("invalid YAML at line ")


def test_duplicate_yaml_key_is_refused() -> None:
    e = error_of("name: a\nentrypoint: x\nname: b\n")
    assert str(e) == "invalid YAML at line 3, column 1: duplicate key 'name'"


def test_document_that_is_not_a_mapping() -> None:
    assert "must be a mapping" in str(error_of("- a\n- b\n"))


def test_unknown_top_level_field() -> None:
    e = error_of(with_(foo=1))
    assert str(e) == "unknown field 'foo'"
    assert e.field_path == "foo"


def test_unknown_nested_field_names_its_parent() -> None:
    e = error_of(
        with_(hyperparameters={"lr": {"type": "double", "minval": 0, "maxval": 1, "foo": 1}})
    )
    assert str(e) == "unknown field 'foo' at hyperparameters.lr"


def test_misspelt_field_gets_a_suggestion() -> None:
    e = error_of(with_(resources={"slot_per_trial": 2}))
    assert str(e) == "unknown field 'slot_per_trial' at resources (did you mean 'slots_per_trial'?)"


def test_a_field_of_another_storage_type_is_named_once_with_the_type_it_is_not_of() -> None:
    # An explicit type with another type's key.
    e = error_of(with_(checkpoint_storage={"type": "gcs", "bucket": "b", "access_key": "k"}))
    assert str(e) == (
        "unknown field 'access_key' at checkpoint_storage: storage type 'gcs' has no such field"
    )
    assert e.field_path == "checkpoint_storage.access_key"


def test_a_partial_storage_merged_over_the_masters_says_which_type_it_took() -> None:
    # No type: the master's storage (shared_fs) is merged under it, and s3's keys do not fit.
    with pytest.raises(ConfigError) as info:
        parse_experiment_config(
            with_(checkpoint_storage={"bucket": "b", "access_key": "k"}),
            {"checkpoint_storage": {"type": "shared_fs", "host_path": "/ckpt"}},
        )
    text = str(info.value)
    assert "did you mean" not in text
    assert text.count("'access_key'") == 1 and text.count("'bucket'") == 1
    assert (
        "unknown field 'access_key' at checkpoint_storage: storage type 'shared_fs'"
        " (the master's, as the experiment names no type) has no such field"
    ) in text


def test_unknown_field_inside_a_searcher() -> None:
    e = error_of(
        with_(searcher={"name": "random", "metric": "loss", "max_trials": 2, "max_trails": 3})
    )
    assert str(e).startswith("unknown field 'max_trails' at searcher")
    assert e.field_path == "searcher.max_trails"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_restarts": "five"}, "max_restarts: expected an integer (got 'five')"),
        ({"debug": "yes"}, "debug: expected true or false (got 'yes')"),
        ({"labels": "a,b"}, "labels: expected a list (got 'a,b')"),
        ({"entrypoint": 5}, "entrypoint: expected a string or a list of strings (got 5)"),
        (
            {"resources": {"slots_per_trial": "2"}},
            "resources.slots_per_trial: expected an integer (got '2')",
        ),
        ({"resources": 4}, "resources: expected a mapping (got 4)"),
    ],
)
def test_wrong_type(changes: dict[str, Any], message: str) -> None:
    assert str(error_of(with_(**changes))) == message


@pytest.mark.parametrize(
    ("changes", "path", "message"),
    [
        (
            {"resources": {"slots_per_trial": -1}},
            "resources.slots_per_trial",
            "resources.slots_per_trial: must be >= 0 (got -1)",
        ),
        (
            {"resources": {"priority": 100}},
            "resources.priority",
            "resources.priority: must be <= 99 (got 100)",
        ),
        ({"max_restarts": -2}, "max_restarts", "max_restarts: must be >= 0 (got -2)"),
        (
            {"searcher": {"name": "random", "metric": "loss", "max_trials": 0}},
            "searcher.max_trials",
            "searcher.max_trials: must be >= 1 (got 0)",
        ),
        (
            {"checkpoint_policy": "some"},
            "checkpoint_policy",
            "checkpoint_policy: must be one of 'best', 'all' or 'none' (got 'some')",
        ),
    ],
)
def test_out_of_range(changes: dict[str, Any], path: str, message: str) -> None:
    e = error_of(with_(**changes))
    assert (e.field_path, str(e)) == (path, message)


def test_unknown_searcher_lists_the_known_ones() -> None:
    e = error_of(with_(searcher={"name": "foo", "metric": "loss"}))
    assert str(e) == (
        "searcher.name: unknown searcher 'foo' "
        "(expected one of: single, random, grid, adaptive_asha, async_halving)"
    )
    assert e.field_path == "searcher.name"


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("custom", "removed in 0.38"),
        ("pbt", "pbt searcher was removed"),
        ("sync_halving", "removed"),
    ],
)
def test_removed_searchers_say_what_to_use(name: str, fragment: str) -> None:
    e = error_of(with_(searcher={"name": name, "metric": "loss"}))
    assert fragment in str(e)
    assert "adaptive_asha" in str(e)
    assert e.field_path == "searcher.name"


def test_asha_with_max_length_says_to_use_max_time() -> None:
    searcher = {
        "name": "adaptive_asha",
        "metric": "loss",
        "max_trials": 4,
        "max_length": {"batches": 100},
    }
    e = error_of(with_(searcher=searcher))
    assert str(e) == (
        "searcher.max_length: removed in 0.38 for adaptive_asha: use searcher.max_time with "
        "searcher.time_metric and report the time metric with your validation metrics"
    )


def test_asha_without_time_fields() -> None:
    e = error_of(
        with_(searcher={"name": "async_halving", "metric": "loss", "max_trials": 4, "num_rungs": 3})
    )
    assert e.field_path == "searcher.time_metric"
    assert "searcher.max_time: required for async_halving" in str(e)


def test_missing_searcher_and_metric() -> None:
    assert error_of(with_(searcher=None)).field_path == "searcher"
    e = error_of(with_(searcher={"name": "single"}))
    assert str(e) == "searcher.metric: required field missing"


def test_missing_entrypoint() -> None:
    e = error_of(with_(entrypoint=None))
    assert e.field_path == "entrypoint"
    assert "required" in str(e)


@pytest.mark.parametrize(
    ("hparam", "path", "fragment"),
    [
        (
            {"type": "double", "minval": 1, "maxval": 0},
            "hyperparameters.x",
            "minval must be less than maxval",
        ),
        (
            {"type": "int", "minval": 3, "maxval": 3},
            "hyperparameters.x",
            "minval must be less than maxval",
        ),
        (
            {"type": "int", "minval": 1, "maxval": 3, "count": 0},
            "hyperparameters.x.count",
            "must be >= 1",
        ),
        (
            {"type": "log", "minval": -3, "maxval": -1, "base": 0},
            "hyperparameters.x.base",
            "must be > 0",
        ),
        ({"type": "categorical", "vals": []}, "hyperparameters.x.vals", "must not be empty"),
        ({"type": "double", "minval": 0}, "hyperparameters.x.maxval", "required field missing"),
        (
            {"type": "float", "minval": 0, "maxval": 1},
            "hyperparameters.x.type",
            "unknown hyperparameter type 'float'",
        ),
        (
            {"g": {"type": "double", "minval": 2, "maxval": 1}},
            "hyperparameters.x.g",
            "minval must be less",
        ),
    ],
)
def test_bad_hyperparameter_ranges(hparam: dict[str, Any], path: str, fragment: str) -> None:
    e = error_of(with_(hyperparameters={"x": hparam}))
    assert e.field_path == path
    assert str(e).startswith(path + ":")
    assert fragment in str(e)


def test_grid_needs_counts() -> None:
    e = error_of(
        with_(
            searcher={"name": "grid", "metric": "loss"},
            hyperparameters={"lr": {"type": "double", "minval": 0.1, "maxval": 1}},
        )
    )
    assert (
        str(e) == "hyperparameters.lr.count: required by the grid searcher (how many values to try)"
    )


def test_azure_storage_is_refused_clearly() -> None:
    e = error_of(
        with_(checkpoint_storage={"type": "azure", "container": "c", "connection_string": "x"})
    )
    assert e.field_path == "checkpoint_storage.type"
    assert "not supported" in str(e)


def test_unknown_storage_type_and_missing_bucket() -> None:
    e = error_of(with_(checkpoint_storage={"type": "ftp"}))
    assert str(e) == (
        "checkpoint_storage.type: unknown storage type 'ftp' (expected one of: shared_fs, directory, s3, gcs)"
    )
    e = error_of(with_(checkpoint_storage={"type": "s3"}))
    assert str(e) == "checkpoint_storage.bucket: required field missing"


def test_no_storage_anywhere() -> None:
    e = error_of(with_(checkpoint_storage=None))
    assert e.field_path == "checkpoint_storage"


def test_shared_fs_storage_path_outside_host_path() -> None:
    e = error_of(
        with_(checkpoint_storage={"type": "shared_fs", "host_path": "/a", "storage_path": "/b"})
    )
    assert e.field_path == "checkpoint_storage.storage_path"


def test_period_with_two_units() -> None:
    e = error_of(with_(min_validation_period={"batches": 1, "epochs": 1}))
    assert (
        str(e)
        == "min_validation_period: must give exactly one of batches, records or epochs (got batches, epochs)"
    )


def test_bad_environment_variable_and_shm_size() -> None:
    e = error_of(with_(environment={"environment_variables": ["A=1", "B"]}))
    assert str(e) == "environment.environment_variables[1]: expected NAME=VALUE (got 'B')"
    e = error_of(with_(resources={"shm_size": "4X"}))
    assert e.field_path == "resources.shm_size"


def test_bind_mount_needs_absolute_host_path() -> None:
    e = error_of(with_(bind_mounts=[{"host_path": "data", "container_path": "/data"}]))
    assert str(e) == "bind_mounts[0].host_path: must be an absolute path (got 'data')"


def test_every_error_is_listed_up_to_the_cap() -> None:
    e = error_of(with_(a=1, b=2, c=3, d=4, e=5))
    assert str(e) == (
        "unknown field 'a'; unknown field 'b'; unknown field 'c'; unknown field 'd'; "
        "unknown field 'e'"
    )
    many = error_of(with_(**{f"field{i}": i for i in range(25)}))
    assert str(many).count(";") == 19
    assert str(many).endswith("(and 5 more)")


def test_a_misspelt_required_field_is_named_with_its_suggestion() -> None:
    cfg = with_(searcher=None, serach=GOOD["searcher"])
    cfg["resources"] = {"slots_per_trail": 2}
    text = str(error_of(cfg))
    assert text.startswith("searcher: required field missing")
    assert "unknown field 'serach' (did you mean 'searcher'?)" in text
    assert "unknown field 'slots_per_trail' at resources (did you mean 'slots_per_trial'?)" in text
