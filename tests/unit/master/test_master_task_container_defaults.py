"""master.yaml's task_container_defaults: checked at start, per pool, secrets hidden."""

from __future__ import annotations

import os
from typing import Any

import pytest

from det.master.config import MasterConfigError, merge_task_container_defaults, parse_config
from det.master.expconf import parse_experiment_config

EXP: dict[str, Any] = {
    "entrypoint": "python3 train.py",
    "searcher": {"name": "single", "metric": "loss"},
    "checkpoint_storage": {"type": "shared_fs", "host_path": "/tmp"},
}

MASTER: dict[str, Any] = {
    "task_container_defaults": {
        "image": {"cpu": "reg.example/cpu:1", "cuda": "reg.example/cuda:1"},
        "registry_auth": {
            "username": "ci",
            "password": "cluster-pw",
            "serveraddress": "reg.example",
        },
        "environment_variables": ["HTTP_PROXY=http://proxy:3128", "LEVEL=cluster"],
        "shm_size_bytes": 2147483648,
        "network_mode": "host",
        "add_capabilities": ["SYS_PTRACE"],
        "bind_mounts": [{"host_path": "/datasets", "container_path": "/data", "read_only": True}],
        "force_pull_image": False,
    },
    "resource_pools": [
        {"pool_name": "default"},
        {
            "pool_name": "gpu",
            "task_container_defaults": {
                "image": {"cuda": "reg.example/cuda:2"},
                "environment_variables": ["LEVEL=pool"],
                "add_capabilities": ["IPC_LOCK"],
                "bind_mounts": [{"host_path": "/fast", "container_path": "/data"}],
                "network_mode": "bridge",
            },
        },
    ],
}


def test_the_deploy_shape_loads_and_applies() -> None:
    cfg = parse_config({"task_container_defaults": {"image": {"cpu": "a:1", "cuda": "b:1"}}})
    exp = parse_experiment_config(
        EXP, {"task_container_defaults": cfg.task_container_defaults_for("default")}
    ).to_dict()
    assert exp["environment"]["image"] == {"cpu": "a:1", "cuda": "b:1", "rocm": None}


def test_a_pool_without_its_own_defaults_gets_the_masters() -> None:
    cfg = parse_config(MASTER)
    assert cfg.task_container_defaults_for("default") == MASTER["task_container_defaults"]
    assert cfg.task_container_defaults_for("no-such-pool") == MASTER["task_container_defaults"]


def test_a_pools_defaults_win_key_by_key_as_in_determined() -> None:
    tcd = parse_config(MASTER).task_container_defaults_for("gpu")
    assert tcd["image"] == {"cpu": "reg.example/cpu:1", "cuda": "reg.example/cuda:2"}
    assert tcd["environment_variables"]["cuda"] == ["HTTP_PROXY=http://proxy:3128", "LEVEL=pool"]
    assert tcd["add_capabilities"] == ["IPC_LOCK", "SYS_PTRACE"]
    assert tcd["bind_mounts"] == [{"host_path": "/fast", "container_path": "/data"}]
    assert tcd["network_mode"] == "bridge"
    assert tcd["registry_auth"]["username"] == "ci"  # not set in the pool: the master's
    assert tcd["shm_size_bytes"] == 2147483648


def test_registry_auth_is_replaced_whole() -> None:
    merged = merge_task_container_defaults(
        {"registry_auth": {"username": "a", "password": "p", "email": "a@x"}},
        {"registry_auth": {"username": "b", "password": "q"}},
    )
    assert merged["registry_auth"] == {"username": "b", "password": "q"}


def test_the_experiment_still_wins_over_pool_defaults() -> None:
    tcd = parse_config(MASTER).task_container_defaults_for("gpu")
    exp = {
        **EXP,
        "environment": {
            "image": {"cuda": "mine/cuda:3"},
            "environment_variables": {"cuda": ["LEVEL=experiment"]},
        },
    }
    d = parse_experiment_config(exp, {"task_container_defaults": tcd}).to_dict()
    assert d["environment"]["image"]["cuda"] == "mine/cuda:3"
    assert d["environment"]["image"]["cpu"] == "reg.example/cpu:1"
    assert "LEVEL=experiment" in d["environment"]["environment_variables"]["cuda"]
    assert "LEVEL=pool" not in d["environment"]["environment_variables"]["cuda"]


@pytest.mark.parametrize(
    ("tcd", "message"),
    [
        ({"imge": "x"}, "unknown key 'task_container_defaults.imge'"),
        ({"force_pull_image": "sometimes"}, "task_container_defaults.force_pull_image"),
        ({"environment_variables": "A=1"}, "task_container_defaults.environment_variables"),
        ({"preemption_timeout": -1}, "task_container_defaults.preemption_timeout"),
    ],
)
def test_bad_defaults_are_refused_naming_the_key(tcd: dict[str, Any], message: str) -> None:
    with pytest.raises(MasterConfigError, match=message.replace(".", r"\.")):
        parse_config({"task_container_defaults": tcd})


def test_a_bad_pool_default_names_the_pool() -> None:
    with pytest.raises(
        MasterConfigError, match=r"resource_pools\.0\.task_container_defaults\.imge"
    ):
        parse_config(
            {"resource_pools": [{"pool_name": "a", "task_container_defaults": {"imge": 1}}]}
        )


def test_determineds_other_keys_are_accepted() -> None:
    tcd = {
        "dtrain_network_interface": "eth0",
        "nccl_port_range": "1000:2000",
        "gloo_port_range": "3000:4000",
        "cpu_pod_spec": {"spec": {}},
        "gpu_pod_spec": {"spec": {}},
        "checkpoint_gc_pod_spec": None,
        "devices": [{"host_path": "/dev/fuse", "container_path": "/dev/fuse"}, "/dev/a:/dev/b"],
        "drop_capabilities": ["CHOWN"],
        "log_policies": [],
        "preemption_timeout": 60,
        "work_dir": "/w",
        "startup_hook": "echo hi",
        "kubernetes": {"max_slots_per_pod": 4},
        "slurm": {},
        "pbs": {},
        "shm_size_bytes": "4G",
    }
    assert parse_config({"task_container_defaults": tcd}).task_container_defaults == tcd


def test_the_master_config_endpoint_hides_registry_passwords() -> None:
    out = parse_config(MASTER).redacted()
    assert out["task_container_defaults"]["registry_auth"] == {
        "username": "ci",
        "password": "********",
        "serveraddress": "reg.example",
    }
    assert "cluster-pw" not in repr(out)


def test_the_container_spec_carries_the_docker_settings_of_the_pool_and_experiment() -> None:
    from types import SimpleNamespace

    from det.master.services.containers import DEFAULT_SHM_SIZE, docker_options

    st: Any = SimpleNamespace(config=parse_config(MASTER))
    exp = {
        **EXP,
        "environment": {"drop_capabilities": ["CHOWN"]},
        "resources": {"devices": ["/dev/fuse:/dev/fuse"]},
    }
    tcd = st.config.task_container_defaults_for("gpu")
    config = parse_experiment_config(exp, {"task_container_defaults": tcd}).to_dict()
    # master.yaml's policy (the stored one, when an admin set one: test_task_container_policy_runtime)
    opts = docker_options(
        st, config, "gpu", admin=False, policy=st.config.task_container_policy_for("gpu")
    )
    assert opts["networkMode"] == "bridge"  # the pool's
    assert opts["registryAuth"] == {
        "username": "ci",
        "password": "cluster-pw",  # the agent needs it to pull; only the agent gets it
        "serveraddress": "reg.example",
    }
    assert opts["capAdd"] == ["IPC_LOCK", "SYS_PTRACE"]
    assert opts["capDrop"] == ["CHOWN"]
    assert opts["devices"] == [
        {"hostPath": "/dev/fuse", "containerPath": "/dev/fuse", "mode": "mrw"}
    ]
    assert opts["shmSize"] == 2147483648
    assert [m["containerPath"] for m in opts["bindMounts"]][:1] == ["/data"]

    # The agent gets the policy to judge the sources on its host: the cluster's mounts and
    # devices, the protected paths (the master's data directory among them), no allowed roots.
    policy = opts["hostPolicy"]
    assert policy is not None and policy["admin"] is False
    assert [r["hostPath"] for r in policy["clusterMounts"]] == [
        *(m["host_path"] for m in tcd["bind_mounts"]),
        st.config.checkpoint_storage["host_path"],  # shared_fs storage: a mount too
    ]
    assert policy["allowedRoots"] == []
    assert "/etc" in policy["protectedPaths"]
    assert os.path.abspath(st.config.data_dir) in policy["protectedPaths"]

    plain = parse_experiment_config(EXP).to_dict()
    bare: Any = SimpleNamespace(config=parse_config({}))
    opts = docker_options(
        bare, plain, "default", admin=True, policy=bare.config.task_container_policy
    )
    assert opts["hostPolicy"] is not None and opts["hostPolicy"]["admin"] is True
    assert opts["networkMode"] == "host"
    assert opts["shmSize"] == DEFAULT_SHM_SIZE  # Determined's 4 GiB
    assert opts["registryAuth"] is None
    assert (opts["capAdd"], opts["capDrop"], opts["devices"]) == ([], [], [])
