"""The interactive task config: Determined's command/notebook/shell/TensorBoard fields,
defaults per kind, the cluster's defaults under it, and refusals naming the field."""

from __future__ import annotations

import pytest

from det.master.expconf import ConfigError
from det.master.expconf.task import parse_duration, parse_task_config


def test_a_command_gets_one_slot_and_the_others_none() -> None:
    cmd = parse_task_config("COMMAND", {"entrypoint": ["python3", "-c", "1"]}, None)
    assert cmd["resources"]["slots"] == 1
    nb = parse_task_config("NOTEBOOK", {}, None)
    assert nb["resources"]["slots"] == 0
    assert nb["notebook_idle_type"] == "kernels_or_terminals"


def test_cluster_defaults_go_under_the_config() -> None:
    tcd = {"image": "img:cluster", "bind_mounts": [{"host_path": "/d", "container_path": "/d"}]}
    out = parse_task_config(
        "COMMAND",
        {"entrypoint": "echo hi", "bind_mounts": [{"host_path": "/x", "container_path": "/x"}]},
        tcd,
    )
    assert out["environment"]["image"]["cpu"] == "img:cluster"
    assert sorted(m["container_path"] for m in out["bind_mounts"]) == ["/d", "/x"]


@pytest.mark.parametrize(
    ("kind", "config", "field"),
    [
        ("COMMAND", {}, "entrypoint"),
        ("COMMAND", {"entrypoint": []}, "entrypoint"),
        ("COMMAND", {"entrypoint": "x", "resources": {"slots": -1}}, "resources.slots"),
        ("NOTEBOOK", {"idle_timeout": "soon"}, "idle_timeout"),
        ("NOTEBOOK", {"notebook_idle_type": "never"}, "notebook_idle_type"),
        ("SHELL", {"bind_mounts": [{"host_path": "rel", "container_path": "/r"}]}, "host_path"),
        ("SHELL", {"resourcez": {}}, "resourcez"),
    ],
)
def test_bad_configs_name_the_field(kind: str, config: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_task_config(kind, config, None)  # type: ignore[arg-type]
    assert field in str(e.value)


@pytest.mark.parametrize(
    ("value", "seconds"), [(90, 90.0), ("90s", 90.0), ("30m", 1800.0), ("1h", 3600.0)]
)
def test_durations(value: object, seconds: float) -> None:
    assert parse_duration(value) == seconds
