"""The GCP agent image template: parses, mirrors the AWS steps, builds on a GPU VM."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

hcl2 = pytest.importorskip("hcl2")

AMI_DIR = Path(__file__).resolve().parents[3] / "agent_ami"


def _unquote(value: Any) -> Any:
    return value.strip('"') if isinstance(value, str) else value


def _commands(body: dict[str, Any]) -> list[str]:
    """A shell provisioner's commands: its ``inline`` list, or the lines of its ``script``."""
    if "script" not in body:
        return list(body.get("inline", []))
    script = AMI_DIR / _unquote(body["script"]).removeprefix("${path.root}/")
    return [
        line
        for line in script.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def _load(name: str) -> dict[str, Any]:
    with open(AMI_DIR / name) as f:
        parsed: dict[str, Any] = hcl2.load(f)
    return parsed


def _shell_lines(template: dict[str, Any]) -> list[str]:
    [build] = template["build"]
    return [
        _unquote(line)
        for provisioner in build["provisioner"]
        for kind, body in provisioner.items()
        if _unquote(kind) == "shell"
        for line in _commands(body)
    ]


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return _load("gcp.pkr.hcl")


def test_builds_from_ubuntu_jammy_on_a_gpu_vm(template: dict[str, Any]) -> None:
    [source] = template["source"]
    gce = source['"googlecompute"']['"det-agent"']
    assert _unquote(gce["source_image_family"]) == "ubuntu-2204-lts"
    assert [_unquote(p) for p in gce["source_image_project_id"]] == ["ubuntu-os-cloud"]
    assert "/acceleratorTypes/" in _unquote(gce["accelerator_type"])
    assert gce["accelerator_count"] == 1
    assert _unquote(gce["on_host_maintenance"]) == "TERMINATE"
    # GCE image names: lowercase letters, digits, dashes (no dots from the version).
    assert "local.version_key" in _unquote(gce["image_name"])


def test_every_variable_used_is_declared(template: dict[str, Any]) -> None:
    declared = {_unquote(next(iter(v))) for v in template["variable"]}
    used = set(re.findall(r"var\.([a-z_]+)", (AMI_DIR / "gcp.pkr.hcl").read_text()))
    assert used <= declared, used - declared


def test_runs_the_same_install_steps_as_the_aws_image(template: dict[str, Any]) -> None:
    gcp_lines = _shell_lines(template)
    aws_lines = _shell_lines(_load("aws.pkr.hcl"))
    assert [line for line in aws_lines if line not in gcp_lines] == []
    assert any("computeMetadata/v1/instance/name" in line for line in gcp_lines)


def test_uploads_the_shared_bootstrap_and_unit(template: dict[str, Any]) -> None:
    [build] = template["build"]
    uploads = [
        _unquote(body["source"])
        for provisioner in build["provisioner"]
        for kind, body in provisioner.items()
        if _unquote(kind) == "file"
    ]
    for name in ("bootstrap.sh", "det-agent.service"):
        assert f"${{path.root}}/{name}" in uploads
        assert (AMI_DIR / name).is_file()
