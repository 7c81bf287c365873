"""The agent image: the Packer template parses and installs what the bootstrap expects."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from det.master.provisioner import bootstrap
from tests.unit.agent_ami.hcl_support import AMI_DIR, load, shell_lines, unquote, uploads

pytest.importorskip("hcl2")


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    return load("aws.pkr.hcl")


def test_builds_from_ubuntu_jammy_by_canonical(template: dict[str, Any]) -> None:
    [source] = template["source"]
    ebs = source['"amazon-ebs"']['"det-agent"']
    [ami_filter] = ebs["source_ami_filter"]
    assert "ubuntu-jammy-22.04-amd64" in unquote(ami_filter["filters"]["name"])
    assert unquote(ami_filter["owners"][0]) == "099720109477"
    [metadata] = ebs["metadata_options"]
    assert unquote(metadata["http_tokens"]) == "required"


def test_every_variable_used_is_declared(template: dict[str, Any]) -> None:
    declared = {unquote(next(iter(v))) for v in template["variable"]}
    text = (AMI_DIR / "aws.pkr.hcl").read_text()
    used = set(re.findall(r"var\.([a-z_]+)", text))
    assert used <= declared, used - declared


def test_installs_docker_nvidia_and_the_agent(template: dict[str, Any]) -> None:
    commands = "\n".join(shell_lines(template))
    for needle in (
        "docker.io",
        "nvidia-driver-",
        "nvidia-container-toolkit",
        "nvidia-ctk runtime configure",
        "[agent]",
        "/usr/local/bin/det-agent",
        "systemctl enable det-agent",
    ):
        assert needle in commands, needle
    uploaded = uploads(template)
    for name in ("bootstrap.sh", "det-agent.service"):
        assert any(u.endswith(name) for u in uploaded), name
        assert (AMI_DIR / name).is_file()


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
