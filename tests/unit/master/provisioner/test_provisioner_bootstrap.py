"""The agent bootstrap: the renderer, and the shell script itself run against a fake IMDS."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from det.common import master_url
from det.master.provisioner import bootstrap
from tests.fakes.imds import FakeImds
from tests.host_paths import bootstrap_env

pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="bootstrap.sh needs curl")

ARGS = {
    "master_url": "http://10.0.0.2:8080/",
    "agent_token": "s3cr'et $(rm -rf /)",
    "pool": "gpu",
    "cluster_id": "c-1",
}


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    with FakeImds(instance_id="i-0123abcd", instance_name="det-gpu-abc") as fake:
        yield fake


def render(
    cloud: bootstrap.Cloud = "aws", extra_env: dict[str, str] | None = None, **kw: str
) -> str:
    return bootstrap.render_user_data(
        ARGS["master_url"],
        ARGS["agent_token"],
        ARGS["pool"],
        ARGS["cluster_id"],
        cloud,
        extra_env,
        **kw,
    )


def test_rendered_script_is_valid_bash_and_small(tmp_path: Path) -> None:
    script = tmp_path / "user-data.sh"
    script.write_text(render(startup_script="echo 'hello'\n"))
    subprocess.run(["bash", "-n", str(script)], check=True)
    assert len(script.read_bytes()) < bootstrap.MAX_USER_DATA_BYTES
    assert script.read_text().startswith("#!/bin/bash\n")


def test_values_are_shell_quoted(tmp_path: Path) -> None:
    script = tmp_path / "s.sh"
    script.write_text(
        render(
            extra_env={
                "DET_AGENT_PIP_SPEC": "det-platform[agent] @ http://m/det_platform-0.1.0-py3-none-any.whl"
            }
        )
    )
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'source {script}; printf "%s\\n" "$DET_AGENT_TOKEN" "$DET_MASTER_URL" "$DET_RESOURCE_POOL" "$DET_CLUSTER_ID" "$DET_CLOUD" "$DET_AGENT_PIP_SPEC"',
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out == [
        ARGS["agent_token"],
        "http://10.0.0.2:8080",
        "gpu",
        "c-1",
        "aws",
        "det-platform[agent] @ http://m/det_platform-0.1.0-py3-none-any.whl",
    ]


def test_startup_script_is_embedded_base64() -> None:
    text = render(startup_script="docker login x\n")
    encoded = base64.b64encode(b"docker login x\n").decode()
    assert f"DET_STARTUP_SCRIPT_B64={encoded}" in text


def test_bad_extra_env_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="extra_env"):
        render(extra_env={"BAD NAME": "x"})


def test_oversized_user_data_is_rejected() -> None:
    with pytest.raises(ValueError, match="16 KiB"):
        render(startup_script="x" * 20000)


def test_gce_startup_scripts_have_gces_larger_limit() -> None:
    # A GCE metadata value may hold 256 KiB; EC2's user data only 16 KiB.
    assert len(render("gcp", startup_script="x" * 20000).encode()) > 16 * 1024
    with pytest.raises(ValueError, match="256 KiB"):
        render("gcp", startup_script="x" * 200_000)


def discover(cloud: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = bootstrap.script_text()
    return subprocess.run(
        ["bash", "-c", f"source /dev/stdin <<'EOF'\n{script}\nEOF\ndiscover_agent_id {cloud}"],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=30,
    )


def test_discovers_the_aws_instance_id_with_the_imdsv2_handshake(imds: FakeImds) -> None:
    result = discover("aws", {"DET_IMDS_URL": imds.url})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "i-0123abcd"
    assert imds.token_requests == 1


def test_discovers_the_gcp_instance_name(imds: FakeImds) -> None:
    result = discover("gcp", {"DET_GCE_METADATA_URL": imds.url})
    assert result.returncode == 0, result.stderr
    assert result.stdout == "det-gpu-abc"


def test_aws_discovery_fails_without_metadata() -> None:
    result = discover("aws", {"DET_IMDS_URL": "http://127.0.0.1:9"})
    assert result.returncode != 0


def test_full_run_matches_agent_launch(imds: FakeImds, tmp_path: Path) -> None:
    """Run the rendered user data end to end with stand-ins for docker and det-agent."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    record = tmp_path / "argv"
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "det-agent").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$0" "$@" > {record}\nenv > {record}.env\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    config_path = tmp_path / "etc" / "agent.yaml"
    extra = {"DET_IMDS_URL": imds.url, "DET_AGENT_CONFIG": str(config_path), "DET_SYSTEMD": "no"}
    script = tmp_path / "user-data.sh"
    script.write_text(render("aws", extra, startup_script=f"touch {tmp_path}/startup-ran\n"))
    env = {
        **os.environ,
        **bootstrap_env(tmp_path / "root"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "startup-ran").exists()

    expected = bootstrap.agent_launch(
        "i-0123abcd",
        master_url=ARGS["master_url"],
        agent_token=ARGS["agent_token"],
        pool="gpu",
        cluster_id="c-1",
        cloud="aws",
        extra_env=extra,
        config_path=str(config_path),
    )
    argv = record.read_text().splitlines()
    assert [Path(argv[0]).name, *argv[1:]] == expected.argv
    assert yaml.safe_load(config_path.read_text()) == expected.config
    assert expected.config == {
        "master_url": "http://10.0.0.2:8080",
        "agent_id": "i-0123abcd",
        "agent_token": ARGS["agent_token"],
        "resource_pool": "gpu",
        "preemption_notice": "aws",
        "preemption_metadata_url": imds.url,
    }
    assert config_path.stat().st_mode & 0o077 == 0  # the token is not world-readable
    seen_env = dict(
        line.split("=", 1) for line in Path(f"{record}.env").read_text().splitlines() if "=" in line
    )
    for key, value in expected.env.items():
        assert seen_env.get(key) == value, key


def test_a_ticket_is_spent_before_the_agent_starts_and_no_token_is_written(
    imds: FakeImds, tmp_path: Path
) -> None:
    """With DET_ENROLL_TICKET the user data holds no token: agent.yaml names a token file,
    ``det-agent enroll`` runs first with only PATH and the ticket, and the daemon's
    environment no longer has the ticket."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "det-agent").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\nenv | sort > {calls}.$1.env\n'
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    config_path = tmp_path / "etc" / "agent.yaml"
    token_file = tmp_path / "etc" / "agent_token"
    extra = bootstrap.enroll_env(
        {
            "DET_IMDS_URL": imds.url,
            "DET_AGENT_CONFIG": str(config_path),
            "DET_AGENT_TOKEN_FILE": str(token_file),
            "DET_SYSTEMD": "no",
        },
        "detenroll1.the-ticket",
    )
    script = tmp_path / "user-data.sh"
    user_data = bootstrap.render_user_data(ARGS["master_url"], "", "gpu", "c-1", "aws", extra)
    assert ARGS["agent_token"] not in user_data
    script.write_text(user_data)
    env = {
        **os.environ,
        **bootstrap_env(tmp_path / "root"),
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
    }
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert calls.read_text().splitlines() == [
        f"enroll --config-file {config_path}",
        f"--config-file {config_path}",
    ]
    enroll_env = dict(
        line.split("=", 1)
        for line in Path(f"{calls}.enroll.env").read_text().split("\n")
        if "=" in line
    )
    assert enroll_env.pop("DET_ENROLL_TICKET") == "detenroll1.the-ticket"
    assert set(enroll_env) <= {"PATH", "PWD", "SHLVL", "_", "OLDPWD"}
    assert "DET_ENROLL_TICKET" not in Path(f"{calls}.--config-file.env").read_text()
    config = yaml.safe_load(config_path.read_text())
    assert config["agent_token_file"] == str(token_file) and "agent_token" not in config


def test_agent_config_is_accepted_by_the_agent(tmp_path: Path) -> None:
    from det.agent.config import load_config

    launch = bootstrap.agent_launch(
        "det-gpu-abc",
        master_url="http://m:8080",
        agent_token="t",
        pool="gpu",
        cluster_id="c",
        cloud="gcp",
        config_path=str(tmp_path / "agent.yaml"),
    )
    Path(launch.config_path).write_text(yaml.safe_dump(launch.config))
    config = load_config(launch.argv[1:], environ={})
    assert (config.agent_id, config.resource_pool, config.preemption_notice) == (
        "det-gpu-abc",
        "gpu",
        "gcp",
    )
    assert config.token() == "t"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://local-ipv4:8080", "http://10.1.2.3:8080"),
        ("https://public-ipv4", "https://54.1.2.3:8080"),
        ("local-ipv4:9000", "http://10.1.2.3:9000"),
        ("http://master.internal:8443", "http://master.internal:8443"),
    ],
)
def test_resolve_master_url_placeholders(url: str, expected: str) -> None:
    values = {"local-ipv4": "10.1.2.3", "public-ipv4": "54.1.2.3"}
    resolved = master_url.resolve(url, bootstrap.EC2_ADDRESS_PLACEHOLDERS, values.__getitem__)
    assert resolved == expected


def test_resolve_master_url_reads_the_masters_own_imds(imds: FakeImds) -> None:
    imds.metadata["local-ipv4"] = "10.9.8.7"
    lookup = bootstrap.ec2_metadata_lookup(imds.url)
    url = master_url.resolve("http://local-ipv4:8080", bootstrap.EC2_ADDRESS_PLACEHOLDERS, lookup)
    assert url == "http://10.9.8.7:8080"


def test_a_failed_install_writes_one_line_to_the_serial_console(tmp_path: Path) -> None:
    # pip cannot reach its index (the likeliest real failure): the console (get-console-output,
    # the serial port) gets one line naming the step and pip's own last words.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "docker").chmod(0o755)
    console = tmp_path / "console"
    extra = {
        "DET_SYSTEMD": "no",
        "DET_CONSOLE": str(console),
        "DET_BOOT_LOG": str(tmp_path / "boot.log"),
        "DET_LIB_DIR": str(tmp_path / "lib"),
        "DET_AGENT_VENV": str(tmp_path / "venv"),
        "DET_AGENT_PIP_SPEC": "det-platform[agent]",
        "DET_AGENT_PACKAGE_INDEX": "http://127.0.0.1:9/simple",
        "DET_RETRY_ATTEMPTS": "1",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "5",
    }
    script = tmp_path / "user-data.sh"
    script.write_text(render("aws", extra))
    env = {
        **os.environ,
        **bootstrap_env(tmp_path / "root"),
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
    }
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode != 0
    lines = console.read_text().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("det-bootstrap FAILED (exit 1): giving up: ")
    assert "pip install" in lines[0] and "det-platform[agent]" in lines[0]
    assert "No matching distribution found for det-platform" in lines[0]
    assert (tmp_path / "lib" / "logship.py").exists()  # unpacked before anything ran


def test_the_agent_ships_its_logs_before_installing_anything() -> None:
    script = bootstrap.unpacked_bootstrap(render("aws", {"DET_LOG_TARGET": "/det/c-1"}))
    main = script[script.index("main() {") :]
    assert main.index("start_logship") < main.index("ensure_docker") < main.index("ensure_agent")
    assert "StandardOutput=append:$DET_AGENT_LOG" in script
