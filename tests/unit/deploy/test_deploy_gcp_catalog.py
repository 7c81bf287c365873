"""GCP flags checked offline: one line naming the bad value, before anything reaches Google."""

from __future__ import annotations

import dataclasses

import pytest

from det.deploy.common.errors import DeployError
from det.deploy.gcp import catalog
from det.deploy.gcp.config import GcpConfig

BASE = GcpConfig(cluster_id="c1", project_id="p")


def _bad(message: str, **changes: object) -> None:
    with pytest.raises(DeployError) as info:
        dataclasses.replace(BASE, **changes).validate()  # type: ignore[arg-type]
    text = str(info.value)
    assert "\n" not in text
    assert message in text, text


def test_defaults_pass():
    BASE.validate()
    assert BASE.sql_edition == "ENTERPRISE"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"region": "mars-central-9"}, "--region 'mars-central-9' is not a GCP region"),
        ({"region": "us-west-1"}, "did you mean us-west1"),
        ({"zone": "us-east1-b"}, "--zone 'us-east1-b' is not in --region 'us-west1'"),
        (
            {"region": "us-east1", "zone": "us-east1-a"},
            "--zone 'us-east1-a' does not exist; us-east1 has us-east1-b, us-east1-c, us-east1-d",
        ),
        ({"master_instance_type": "n1-standrd-2"}, "--master-instance-type 'n1-standrd-2'"),
        ({"aux_agent_instance_type": "m5.large"}, "is not a GCE machine type"),
        ({"compute_agent_instance_type": "q9-standard-8"}, "unknown machine family 'q9'"),
        ({"gpu_type": "nvidia-tesla-t5"}, "did you mean nvidia-tesla-t4"),
        ({"gpu_type": "nvidia-l4"}, "--gpu-type nvidia-l4 needs a g2-* machine type"),
        ({"gpu_num": -1}, "--gpu-num must be >= 0"),
        ({"db_tier": "db-n1-standard-1x"}, "--db-tier 'db-n1-standard-1x' is not a Cloud SQL"),
        (
            {"db_edition": "ENTERPRISE_PLUS"},
            "--db-tier db-custom-1-3840 is a ENTERPRISE tier and cannot run as --db-edition "
            "ENTERPRISE_PLUS (use a db-perf-optimized-N-* tier)",
        ),
        (
            {"db_tier": "db-perf-optimized-N-4", "db_edition": "ENTERPRISE"},
            "is a ENTERPRISE_PLUS tier",
        ),
        ({"db_edition": "STANDARD"}, "--db-edition 'STANDARD' must be one of"),
    ],
)
def test_bad_flags_are_one_line_naming_the_value(changes: dict[str, object], message: str):
    _bad(message, **changes)


@pytest.mark.parametrize(
    "changes",
    [
        {"region": "europe-west4", "zone": "europe-west4-a"},
        {"region": "us-central1", "zone": "us-central1-f"},
        {"compute_agent_instance_type": "g2-standard-8", "gpu_type": "nvidia-l4", "gpu_num": 1},
        {"compute_agent_instance_type": "a2-highgpu-1g", "gpu_type": "nvidia-tesla-a100"},
        {"compute_agent_instance_type": "e2-standard-8", "gpu_num": 0},
        {"master_instance_type": "n2-custom-4-16384", "aux_agent_instance_type": "e2-medium"},
        {"db_tier": "db-perf-optimized-N-8"},
        {"db_tier": "db-g1-small", "db_edition": "ENTERPRISE"},
    ],
)
def test_good_flags_pass(changes: dict[str, object]):
    dataclasses.replace(BASE, **changes).validate()  # type: ignore[arg-type]


def test_every_region_has_its_default_zone():
    for region, suffixes in catalog.ZONES.items():
        assert "b" in suffixes, region
        catalog.check_zone(f"{region}-b", region)


def test_sql_edition_by_tier():
    assert catalog.sql_edition("db-custom-2-7680") == "ENTERPRISE"
    assert catalog.sql_edition("db-f1-micro") == "ENTERPRISE"
    assert catalog.sql_edition("db-perf-optimized-N-2") == "ENTERPRISE_PLUS"


def test_cli_refuses_an_unknown_region_with_one_line_before_anything_runs():
    import io

    from det.deploy import clouds

    out, err = io.StringIO(), io.StringIO()
    code = clouds.run(
        ["gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--region", "mars-central-9"],
        out,
        err,
    )
    assert code == 1
    line = err.getvalue()
    assert line.startswith("det deploy: error: --region 'mars-central-9' is not a GCP region")
    assert line.count("\n") == 1 and out.getvalue() == ""


def test_cli_db_edition_flag_reaches_the_check():
    import io

    from det.deploy import clouds

    err = io.StringIO()
    argv = ["gcp", "up", "--cluster-id", "c1", "--project-id", "p", "--dry-run"]
    assert clouds.run([*argv, "--db-edition", "ENTERPRISE_PLUS"], io.StringIO(), err) == 1
    assert "cannot run as --db-edition ENTERPRISE_PLUS" in err.getvalue()
