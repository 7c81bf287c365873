"""``task_container_defaults.checkpoint_gc_image``: checked at start, per pool, and pulled with
the credentials of its own registry only (det.master.services.checkpoint_gc)."""

from __future__ import annotations

from typing import Any

import pytest

from det.master.config import MasterConfigError, parse_config
from det.master.services.checkpoint_gc import gc_image_pull

GC = "det-checkpoint-gc:py3.11"
ECR = "123456789012.dkr.ecr.us-west-2.amazonaws.com/det-c1/library/det-checkpoint-gc:py3.11"


@pytest.mark.parametrize(
    "image",
    [
        GC,
        ECR,
        "us-central1-docker.pkg.dev/p/det-c1-mirror/library/det-checkpoint-gc:py3.11",
        "localhost:5000/gc@sha256:" + "0" * 64,
        "team/gc",
    ],
)
def test_an_image_reference_is_accepted(image: str) -> None:
    cfg = parse_config({"task_container_defaults": {"checkpoint_gc_image": image}}, env={})
    assert cfg.task_container_defaults_for("default")["checkpoint_gc_image"] == image


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        (
            "top",
            "Det GC",
            r"^invalid master config: task_container_defaults.checkpoint_gc_image: must be a"
            r" Docker image reference .*'Det GC'$",
        ),
        ("top", "", r"checkpoint_gc_image: must be a Docker image reference"),
        ("top", "gc:", r"checkpoint_gc_image: must be a Docker image reference"),
        ("top", 7, r"checkpoint_gc_image: Input should be a valid string"),
        (
            "pool",
            "gc image",
            r"^invalid master config: resource_pools.0.task_container_defaults"
            r".checkpoint_gc_image: must be",
        ),
    ],
)
def test_a_bad_gc_image_is_one_line_naming_the_field(where: str, value: Any, message: str) -> None:
    tcd = {"checkpoint_gc_image": value}
    raw: dict[str, Any] = (
        {"task_container_defaults": tcd}
        if where == "top"
        else {"resource_pools": [{"pool_name": "default", "task_container_defaults": tcd}]}
    )
    with pytest.raises(MasterConfigError, match=message) as err:
        parse_config(raw, env={})
    assert "\n" not in str(err.value)


def test_a_pool_names_its_own_gc_image_over_the_masters() -> None:
    cfg = parse_config(
        {
            "task_container_defaults": {"checkpoint_gc_image": GC},
            "resource_pools": [
                {"pool_name": "cpu"},
                {"pool_name": "gpu", "task_container_defaults": {"checkpoint_gc_image": ECR}},
            ],
        },
        env={},
    )
    assert cfg.task_container_defaults_for("cpu")["checkpoint_gc_image"] == GC
    assert cfg.task_container_defaults_for("gpu")["checkpoint_gc_image"] == ECR
    # Unset anywhere: no key, and the GC task keeps the experiment's image.
    assert "checkpoint_gc_image" not in parse_config({}, env={}).task_container_defaults_for("x")


def test_the_gc_image_is_pulled_with_the_clusters_credentials_for_its_registry_only() -> None:
    auth = {"username": "u", "password": "p", "serveraddress": "https://r.example.com/v2/"}
    cfg = parse_config(
        {"task_container_defaults": {"registry_auth": auth, "force_pull_image": True}}, env={}
    )
    assert gc_image_pull(cfg, "default", "r.example.com/ops/gc:1") == {
        "forcePull": True,
        "registryAuth": auth,
    }
    # Another registry (the cluster's mirror, Docker Hub) gets no credentials of this one:
    # an agent on a cloud then pulls from its cloud's registry with its role.
    assert gc_image_pull(cfg, "default", ECR)["registryAuth"] is None
    assert gc_image_pull(cfg, "default", GC)["registryAuth"] is None
    hub = parse_config(
        {"task_container_defaults": {"registry_auth": {"username": "u", "password": "p"}}},
        env={},
    )
    assert gc_image_pull(hub, "default", "team/gc:1")["registryAuth"] == {
        "username": "u",
        "password": "p",
    }
    assert gc_image_pull(hub, "default", ECR) == {"forcePull": False, "registryAuth": None}
