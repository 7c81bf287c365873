"""The GPU agent image: one Packer template, two sources on the images `det deploy` boots.

Packer is not run here (nor in CI): these tests parse the HCL and check what it builds on and
what the provisioning installs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from det.deploy.aws.config import DLAMI_SSM_PARAMETER
from det.deploy.common.masteryaml import DEFAULT_GPU_ENV_IMAGE
from det.deploy.gcp.config import GPU_IMAGE
from det.master.provisioner import bootstrap
from tests.unit.agent_ami.hcl_support import AMI_DIR, load, shell_lines, unquote, uploads

pytest.importorskip("hcl2")

TEMPLATE = "det-agent.pkr.hcl"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load(TEMPLATE)


def _source(template: dict[str, Any], kind: str) -> dict[str, Any]:
    [body] = [
        body
        for source in template["source"]
        for typ, named in source.items()
        if unquote(typ) == kind
        for body in named.values()
    ]
    return body


def _variables(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {unquote(name): body for v in template["variable"] for name, body in v.items()}


def _shell_env(template: dict[str, Any]) -> dict[str, str]:
    [build] = template["build"]
    env: dict[str, str] = {}
    for provisioner in build["provisioner"]:
        for name, body in provisioner.items():
            if unquote(name) == "shell":
                for item in body.get("environment_vars", []):
                    key, _, value = unquote(item).partition("=")
                    env[key] = value
    return env


def test_one_template_replaces_the_per_cloud_ones() -> None:
    assert sorted(p.name for p in AMI_DIR.glob("*.pkr.hcl")) == [TEMPLATE]


def test_the_build_runs_both_sources(template: dict[str, Any]) -> None:
    [build] = template["build"]
    assert sorted(unquote(s) for s in build["sources"]) == [
        "source.amazon-ebs.det-agent",
        "source.googlecompute.det-agent",
    ]
    declared = {
        f"source.{unquote(typ)}.{unquote(name)}"
        for source in template["source"]
        for typ, named in source.items()
        for name in named
        if name != "__is_block__"
    }
    assert declared == {unquote(s) for s in build["sources"]}
    plugins = template["packer"][0]["required_plugins"][0]
    assert {"amazon", "googlecompute"} <= set(plugins)


def test_aws_starts_from_the_dlami_deploy_uses(template: dict[str, Any]) -> None:
    [data] = template["data"]
    [parameter] = data['"amazon-parameterstore"'].values()
    assert unquote(parameter["name"]) == DLAMI_SSM_PARAMETER
    ebs = _source(template, "amazon-ebs")
    assert ebs["source_ami"] == "${data.amazon-parameterstore.dlami.value}"
    assert "source_ami_filter" not in ebs
    assert unquote(ebs["ssh_username"]) == "ubuntu"
    [metadata] = ebs["metadata_options"]
    assert unquote(metadata["http_tokens"]) == "required"


def test_gcp_starts_from_the_deep_learning_family_deploy_uses(template: dict[str, Any]) -> None:
    gce = _source(template, "googlecompute")
    family = unquote(gce["source_image_family"])
    [project] = [unquote(p) for p in gce["source_image_project_id"]]
    assert project == "deeplearning-platform-release"
    assert f"projects/{project}/global/images/family/{family}" == GPU_IMAGE
    # A GPU build VM: GPUs cannot live-migrate.
    assert "/acceleratorTypes/" in unquote(gce["accelerator_type"])
    assert gce["accelerator_count"] == 1
    assert unquote(gce["on_host_maintenance"]) == "TERMINATE"
    # GCE image names: lowercase letters, digits, dashes (no dots from the version).
    assert "local.version_key" in unquote(gce["image_name"])


def test_every_variable_used_is_declared(template: dict[str, Any]) -> None:
    text = (AMI_DIR / TEMPLATE).read_text()
    used = set(re.findall(r"var\.([a-z0-9_]+)", text))
    assert used <= set(_variables(template)), used - set(_variables(template))


def test_no_nvidia_driver_or_toolkit_install(template: dict[str, Any]) -> None:
    commands = shell_lines(template)
    installs = [
        line for line in commands if re.search(r"apt(-get)? .*install|ubuntu-drivers", line)
    ]
    for line in installs:
        assert not re.search(r"nvidia|cuda|docker", line, re.I), line
    assert not any("libnvidia-container" in line or "NVIDIA_DRIVER" in line for line in commands)
    # The base image must bring the stack: the build checks it is there instead.
    for tool in ("nvidia-smi", "nvidia-ctk", "docker"):
        assert f"command -v {tool}" in commands, tool
    assert "nvidia_driver" not in _variables(template)


def test_the_wheel_is_uploaded_and_hash_checked_before_pip(template: dict[str, Any]) -> None:
    variables = _variables(template)
    assert "default" not in variables["det_wheel"]
    assert "default" not in variables["det_wheel_sha256"]
    [validation] = variables["det_wheel_sha256"]["validation"]
    assert "{64}" in validation["condition"]
    assert "${var.det_wheel}" in uploads(template)
    env = _shell_env(template)
    assert env["DET_WHEEL_SHA256"] == "${var.det_wheel_sha256}"
    commands = shell_lines(template)
    check = next(i for i, line in enumerate(commands) if "sha256sum --check" in line)
    pip = next(i for i, line in enumerate(commands) if "pip install" in line)
    assert check < pip
    assert '"$DET_WHEEL[agent]"' in commands[pip]
    # Never det by name from an index.
    for line in commands:
        assert not re.search(r"pip install[^\n]*(\s|')det(\[|\s|'|$)", line), line


def test_the_default_task_image_is_pre_pulled(template: dict[str, Any]) -> None:
    variables = _variables(template)
    assert unquote(variables["default_task_image"]["default"]) == DEFAULT_GPU_ENV_IMAGE
    assert variables["extra_task_images"]["default"] == []
    images = unquote(template["locals"][0]["task_images"])
    assert "var.default_task_image" in images and "var.extra_task_images" in images
    assert _shell_env(template)["DET_TASK_IMAGES"] == "${local.task_images}"
    commands = shell_lines(template)
    assert any('docker pull "$image"' in line for line in commands)
    assert any("for image in $DET_TASK_IMAGES" in line for line in commands)


def test_install_script_hash_check_refuses_a_wrong_wheel(tmp_path: Path) -> None:
    """The hash-check line, run as the image build runs it, stops at a mismatch."""
    [line] = [line for line in shell_lines(load(TEMPLATE)) if "sha256sum --check" in line]
    wheel = tmp_path / "det_platform-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"wheel")
    import hashlib

    good = hashlib.sha256(b"wheel").hexdigest()
    for digest, ok in ((good, True), ("0" * 64, False)):
        result = subprocess.run(
            ["bash", "-euc", line],
            env={"DET_WHEEL": str(wheel), "DET_WHEEL_SHA256": digest, "PATH": "/usr/bin:/bin"},
            capture_output=True,
        )
        assert (result.returncode == 0) is ok, result.stderr


def test_uploads_the_shared_bootstrap_and_unit(template: dict[str, Any]) -> None:
    uploaded = uploads(template)
    for name in ("bootstrap.sh", "det-agent.service"):
        assert f"${{path.root}}/{name}" in uploaded
        assert (AMI_DIR / name).is_file()
    commands = "\n".join(shell_lines(template))
    for needle in ("/usr/local/bin/det-agent", "systemctl enable det-agent"):
        assert needle in commands, needle


def test_image_bootstrap_is_the_masters_script() -> None:
    assert (AMI_DIR / "bootstrap.sh").read_text() == bootstrap.script_text()
    subprocess.run(["bash", "-n", str(AMI_DIR / "bootstrap.sh")], check=True)


def test_unit_runs_what_the_bootstrap_runs() -> None:
    unit = (AMI_DIR / "det-agent.service").read_text()
    launch = bootstrap.agent_launch(
        "i-1", master_url="http://m:8080", agent_token="t", pool="p", cluster_id="c", cloud="aws"
    )
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = exec_start.removeprefix("ExecStart=").split()
    assert [Path(argv[0]).name, *argv[1:]] == launch.argv
    assert f"ConditionPathExists={launch.config_path}" in unit


def test_install_script_is_valid_bash() -> None:
    subprocess.run(["bash", "-n", str(AMI_DIR / "install-agent.sh")], check=True)


def test_the_documented_only_names_are_the_templates_builds(template: dict[str, Any]) -> None:
    docs = (AMI_DIR.parent / "docs" / "deploy.md").read_text() + (AMI_DIR / TEMPLATE).read_text()
    named = set(re.findall(r"-only=([a-z-]+\.[a-z-]+)", docs))
    [build] = template["build"]
    assert named == {unquote(s).removeprefix("source.") for s in build["sources"]}
