"""A configuration template merged under an experiment's config (Determined's templates)."""

from __future__ import annotations

from det.master.expconf import merge_template, parse_experiment_config

EXP = {
    "name": "mine",
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
    "hyperparameters": {"lr": {"type": "const", "val": 0.1}, "group": {"a": 1}},
    "bind_mounts": [{"host_path": "/exp", "container_path": "/data"}],
    "environment": {"environment_variables": ["A=exp"]},
}


def test_experiment_values_win_and_template_fills_the_rest() -> None:
    template = {
        "name": "from-template",
        "description": "shared",
        "max_restarts": 1,
        "hyperparameters": {"lr": {"type": "double", "minval": 0, "maxval": 1}, "group": {"b": 2}},
        "resources": {"slots_per_trial": 2},
    }
    out = merge_template(EXP, template)
    assert out["name"] == "mine"
    assert out["description"] == "shared" and out["max_restarts"] == 1
    assert out["resources"] == {"slots_per_trial": 2}
    # Another kind of hyperparameter: the experiment's alone, not a mix of both.
    assert out["hyperparameters"]["lr"] == {"type": "const", "val": 0.1}
    assert out["hyperparameters"]["group"] == {"a": 1, "b": 2}
    storage = {"checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp"}}
    parse_experiment_config({**out, **storage})  # the merged config is valid


def test_lists_combine_by_container_path_and_variable_name() -> None:
    template = {
        "bind_mounts": [
            {"host_path": "/tpl", "container_path": "/data"},
            {"host_path": "/shared", "container_path": "/shared"},
        ],
        "environment": {"environment_variables": ["A=tpl", "B=tpl"], "image": "tpl:1"},
        "labels": ["t"],
    }
    out = merge_template({**EXP, "labels": ["e"]}, template)
    assert out["bind_mounts"] == [
        {"host_path": "/shared", "container_path": "/shared"},
        {"host_path": "/exp", "container_path": "/data"},
    ]
    env = out["environment"]
    assert env["image"] == "tpl:1"
    assert sorted(env["environment_variables"]["cpu"]) == ["A=exp", "B=tpl"]
    assert out["labels"] == ["e"]


def test_storage_of_another_type_and_searcher_of_another_name_are_the_experiments() -> None:
    template = {
        "checkpoint_storage": {"type": "s3", "bucket": "b", "save_trial_best": 3},
        "searcher": {"name": "random", "max_trials": 5, "metric": "acc"},
    }
    exp = {**EXP, "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp"}}
    out = merge_template(exp, template)
    assert out["checkpoint_storage"] == {"type": "shared_fs", "host_path": "/tmp"}
    assert out["searcher"] == {"name": "single", "metric": "loss"}
    same = merge_template({**exp, "checkpoint_storage": {"type": "s3", "bucket": "mine"}}, template)
    assert same["checkpoint_storage"] == {"type": "s3", "bucket": "mine", "save_trial_best": 3}


def test_the_inputs_are_not_changed() -> None:
    template = {"hyperparameters": {"group": {"b": 2}}}
    before = repr(EXP), repr(template)
    merge_template(EXP, template)
    assert (repr(EXP), repr(template)) == before
