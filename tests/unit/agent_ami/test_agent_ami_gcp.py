"""The GCP agent image template: parses, mirrors the AWS steps, builds on a GPU VM."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.unit.agent_ami.hcl_support import AMI_DIR, load, shell_lines, unquote, uploads

pytest.importorskip("hcl2")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load("gcp.pkr.hcl")


def test_builds_from_ubuntu_jammy_on_a_gpu_vm(template: dict[str, Any]) -> None:
    [source] = template["source"]
    gce = source['"googlecompute"']['"det-agent"']
    assert unquote(gce["source_image_family"]) == "ubuntu-2204-lts"
    assert [unquote(p) for p in gce["source_image_project_id"]] == ["ubuntu-os-cloud"]
    assert "/acceleratorTypes/" in unquote(gce["accelerator_type"])
    assert gce["accelerator_count"] == 1
    assert unquote(gce["on_host_maintenance"]) == "TERMINATE"
    # GCE image names: lowercase letters, digits, dashes (no dots from the version).
    assert "local.version_key" in unquote(gce["image_name"])


def test_every_variable_used_is_declared(template: dict[str, Any]) -> None:
    declared = {unquote(next(iter(v))) for v in template["variable"]}
    used = set(re.findall(r"var\.([a-z_]+)", (AMI_DIR / "gcp.pkr.hcl").read_text()))
    assert used <= declared, used - declared


def test_runs_the_same_install_steps_as_the_aws_image(template: dict[str, Any]) -> None:
    gcp_lines = shell_lines(template)
    aws_lines = shell_lines(load("aws.pkr.hcl"))
    assert [line for line in aws_lines if line not in gcp_lines] == []
    assert any("computeMetadata/v1/instance/name" in line for line in gcp_lines)


def test_uploads_the_shared_bootstrap_and_unit(template: dict[str, Any]) -> None:
    uploaded = uploads(template)
    for name in ("bootstrap.sh", "det-agent.service"):
        assert f"${{path.root}}/{name}" in uploaded
        assert (AMI_DIR / name).is_file()
