"""A private registry for task images: server and user in master.yaml, the password only in the
cluster secret (Pulumi mocks), then in the master's environment file (the boot step, run)."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pulumi
import pytest
import yaml
from conftest import AWS, GCP

from det.deploy import clouds
from det.deploy.aws import master as aws_master
from det.deploy.aws import program as aws_program
from det.deploy.common import automation, boot, dryrun, registry, release, tls, userdata
from det.deploy.common.errors import DeployError
from det.deploy.gcp import program as gcp_program
from tests.fakes.moto_server import REGION, MotoServer

PASSWORD = 'reg pw "$HOME" `id` \\ end'
AUTH = registry.RegistryAuth(server="registry.example.com:5000", username="ci-bot")
_SIG = dryrun._SIG_KEY
_SECRET = dryrun._SECRET_SIG


class RawMocks(dryrun.RecordingMocks):
    """Pulumi's mocks keeping each resource's inputs as the engine sends them (secrets still
    wrapped), so a test can see both the value and that it is marked secret."""

    def __init__(self, calls: Any) -> None:
        super().__init__(calls)
        self.raw: list[tuple[str, str, dict[str, Any]]] = []

    def new_resource(
        self, args: pulumi.runtime.MockResourceArgs
    ) -> tuple[str | None, dict[str, Any]]:
        self.raw.append((args.typ, args.name, dict(args.inputs)))
        return super().new_resource(args)


def _reveal(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(_SIG) == _SECRET:
            return _reveal(value.get("value"))
        return {k: _reveal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_reveal(v) for v in value]
    return value


def _render_raw(build: Any, calls: Any) -> tuple[RawMocks, dict[str, Any]]:
    from pulumi.runtime.stack import run_pulumi_func
    from pulumi.runtime.sync_await import _sync_await

    mocks = RawMocks(calls)
    pulumi.runtime.set_mocks(mocks, project="det", stack="t", preview=False)
    outputs: dict[str, Any] = {}

    def body() -> Any:
        return pulumi.Output.all(**build()).apply(outputs.update)

    _sync_await(run_pulumi_func(lambda: _sync_await(pulumi.Output.from_input(body()).future())))
    return mocks, outputs


def _one(mocks: RawMocks, type_: str) -> dict[str, Any]:
    (inputs,) = [i for t, _, i in mocks.raw if t == type_]
    return inputs


@pytest.mark.parametrize("cloud", ["aws", "gcp"])
def test_password_is_in_the_secret_only_and_marked_secret(cloud: str) -> None:
    if cloud == "aws":
        cfg: Any = dataclasses.replace(AWS, registry=AUTH)
        mocks, outputs = _render_raw(
            lambda: aws_program.build(cfg, None, PASSWORD), aws_program.MOCK_CALLS
        )
        version = _one(mocks, "aws:secretsmanager/secretVersion:SecretVersion")["secretString"]
        (boot_text,) = [i["userData"] for t, _, i in mocks.raw if t == "aws:ec2/instance:Instance"]
    else:
        cfg = dataclasses.replace(GCP, registry=AUTH)
        mocks, outputs = _render_raw(
            lambda: gcp_program.build(cfg, None, PASSWORD), gcp_program.MOCK_CALLS
        )
        version = _one(mocks, "gcp:secretmanager/secretVersion:SecretVersion")["secretData"]
        (boot_text,) = [
            i["metadataStartupScript"]
            for t, _, i in mocks.raw
            if t == "gcp:compute/instance:Instance"
        ]
    # Secret in the state: the engine receives the secret's value wrapped as a secret.
    assert isinstance(version, dict) and version.get(_SIG) == _SECRET
    assert json.loads(_reveal(version))[registry.SECRET_KEY] == PASSWORD
    # Nowhere else: not the boot script, master.yaml or any other resource's inputs.
    boot_text = _reveal(boot_text)
    assert PASSWORD not in boot_text + userdata.master_yaml_of(boot_text)
    master_yaml = yaml.safe_load(outputs["master_yaml"])
    assert master_yaml["task_container_defaults"]["registry_auth"] == {
        "serveraddress": "registry.example.com:5000",
        "username": "ci-bot",
    }
    others = [i for t, _, i in mocks.raw if "secretVersion" not in t]
    assert PASSWORD not in json.dumps(_reveal(others), default=str)
    assert PASSWORD not in json.dumps(outputs, default=str)


def test_no_registry_flags_leave_registry_auth_and_the_key_out() -> None:
    mocks, outputs = _render_raw(
        lambda: aws_program.build(AWS, None, "ignored"), aws_program.MOCK_CALLS
    )
    version = _one(mocks, "aws:secretsmanager/secretVersion:SecretVersion")["secretString"]
    assert registry.SECRET_KEY not in json.loads(_reveal(version))
    assert "registry_auth" not in yaml.safe_load(outputs["master_yaml"])["task_container_defaults"]


def test_boot_step_writes_the_password_into_the_env_file_quoted(tmp_path: Path) -> None:
    """The user data's secret step, run for real; the file is then read the way the test boot
    shim reads it (bash), whose double-quote escapes are the ones systemd's EnvironmentFile
    parser takes (backslash before \\ " $ `)."""
    cfg = dataclasses.replace(
        AWS,
        registry=AUTH,
        boot=boot.BootOptions(
            release=release.Release(
                filename="det_platform-0.1.0-py3-none-any.whl",
                sha256="ab" * 32,
                constraints="",
                path=None,
            )
        ),
    )
    text = aws_master.user_data(cfg, "port: 8443\n", "arn:x", "bkt", None)
    inner = userdata.boot_script_of(text)
    step = inner[inner.index("printf '%s' \"$SECRET_JSON\"") : inner.index("unset SECRET_JSON")]
    env_file = tmp_path / "master.env"
    step = (
        step.replace("/opt/det/bin/python3", sys.executable)
        .replace("/etc/det/master.env", str(env_file))
        .replace(tls.MASTER_CERT_PATH, str(tmp_path / "c"))
        .replace(tls.MASTER_KEY_PATH, str(tmp_path / "k"))
    )
    secret = {"db_password": "d", "initial_user_password": "u", registry.SECRET_KEY: PASSWORD}
    env = {**os.environ, "SECRET_JSON": json.dumps(secret), "DET_TLS": "no"}
    subprocess.run(["bash", "-c", step], check=True, env=env)
    assert env_file.stat().st_mode & 0o777 == 0o600
    read = subprocess.run(
        ["bash", "-c", f'set -a; . {env_file}; printf %s "${registry.PASSWORD_ENV}"'],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ["PATH"], "HOME": "/nonexistent"},
    )
    assert read.stdout == PASSWORD


def _args(**kw: Any) -> argparse.Namespace:
    return argparse.Namespace(**kw)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"registry_server": "r.example.com"}, "go together"),
        ({"registry_username": "u"}, "go together"),
        ({"registry_password": "p"}, "needs --registry-server"),
        ({"registry_server": "https://r.example.com/x", "registry_username": "u"}, "registry host"),
    ],
)
def test_inconsistent_registry_flags_are_one_line_errors(flags: dict[str, str], message: str):
    with pytest.raises(DeployError, match=message):
        registry.from_args(_args(**flags))


def test_password_comes_from_the_flag_else_the_environment(monkeypatch: pytest.MonkeyPatch):
    auth = registry.from_args(_args(registry_server="r:5000", registry_username="u"))
    assert auth == registry.RegistryAuth("r:5000", "u")
    monkeypatch.delenv(registry.PASSWORD_FROM_ENV, raising=False)
    assert registry.password_from_args(_args(), auth) is None
    monkeypatch.setenv(registry.PASSWORD_FROM_ENV, "from-env")
    assert registry.password_from_args(_args(), auth) == "from-env"
    assert registry.password_from_args(_args(registry_password="flag"), auth) == "flag"
    assert registry.password_from_args(_args(registry_password="flag"), None) is None
    with pytest.raises(DeployError, match="line breaks"):
        registry.password_from_args(_args(registry_password="a\nb"), auth)


@pytest.mark.integration
def test_up_stores_the_password_as_secret_stack_config(
    aws_moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`up` hands the password to Pulumi as secret config, and the program it runs reads it back
    into the cluster secret. AWS is moto in server mode; the Automation API (it needs the Pulumi
    CLI) is replaced by a recorder that runs the program under mocks with that config."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text("#!/bin/sh\necho v3.200.0\n")
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    boto3.client("ec2", region_name=REGION).create_key_pair(KeyName="kp")
    seen = _up_with_recorded_pulumi(monkeypatch)
    assert seen["config"][f"det:{registry.STACK_CONFIG_KEY}"] == (PASSWORD, True)
    version = _one(seen["mocks"], "aws:secretsmanager/secretVersion:SecretVersion")
    assert json.loads(_reveal(version["secretString"]))[registry.SECRET_KEY] == PASSWORD
    assert PASSWORD not in seen["printed"]


@pytest.mark.integration
def test_a_later_up_without_registry_flags_keeps_the_registry(
    aws_moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The registry's server and user (plain) and password (secret) stay in the stack config:
    a second ``up`` without ``--registry-*`` renders the same registry_auth and secret."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text("#!/bin/sh\necho v3.200.0\n")
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    stored: dict[str, tuple[str, bool]] = {}
    boto3.client("ec2", region_name=REGION).create_key_pair(KeyName="kp")
    first = _up_with_recorded_pulumi(monkeypatch, stored)
    second = _up_with_recorded_pulumi(monkeypatch, stored, registry_flags=False)
    assert stored[f"det:{registry.SERVER_CONFIG_KEY}"] == (AUTH.server, False)
    assert stored[f"det:{registry.USERNAME_CONFIG_KEY}"] == (AUTH.username, False)
    assert f"det:{registry.STACK_CONFIG_KEY}" not in second["config"]  # not given: kept
    for seen in (first, second):
        version = _one(seen["mocks"], "aws:secretsmanager/secretVersion:SecretVersion")
        assert json.loads(_reveal(version["secretString"]))[registry.SECRET_KEY] == PASSWORD
        raw = _reveal(_one(seen["mocks"], "aws:ec2/instance:Instance")["userData"])
        user_data = raw + userdata.master_yaml_of(raw)
        assert f"serveraddress: {AUTH.server}" in user_data, user_data[-3000:]
        assert f"username: {AUTH.username}" in user_data


@pytest.mark.integration
def test_no_registry_removes_the_registry_a_previous_up_set(
    aws_moto: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "pulumi").write_text("#!/bin/sh\necho v3.200.0\n")
    (bin_dir / "pulumi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    stored: dict[str, tuple[str, bool]] = {}
    boto3.client("ec2", region_name=REGION).create_key_pair(KeyName="kp")
    _up_with_recorded_pulumi(monkeypatch, stored)
    removed = _up_with_recorded_pulumi(
        monkeypatch, stored, registry_flags=False, extra=("--no-registry",)
    )
    after = _up_with_recorded_pulumi(monkeypatch, stored, registry_flags=False)
    assert not any("registry" in key for key in stored)
    for seen in (removed, after):
        version = _one(seen["mocks"], "aws:secretsmanager/secretVersion:SecretVersion")
        assert registry.SECRET_KEY not in json.loads(_reveal(version["secretString"]))
        raw = _reveal(_one(seen["mocks"], "aws:ec2/instance:Instance")["userData"])
        user_data = raw + userdata.master_yaml_of(raw)
        assert "registry_auth" not in user_data and AUTH.server not in user_data


def test_no_registry_with_registry_flags_is_refused() -> None:
    with pytest.raises(DeployError, match="--no-registry cannot be combined"):
        registry.from_args(_args(no_registry=True, registry_server="r:5000"))
    assert registry.removed_keys(_args(no_registry=True)) == (
        "det:registryServer",
        "det:registryUsername",
        "det:registryPassword",
    )
    assert registry.removed_keys(_args()) == ()


def _up_with_recorded_pulumi(
    monkeypatch: pytest.MonkeyPatch,
    stored: dict[str, tuple[str, bool]] | None = None,
    registry_flags: bool = True,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """One ``det deploy aws up``; ``stored`` is the stack's config, kept across calls."""
    seen: dict[str, Any] = {}
    stored = {} if stored is None else stored

    def fake_up(
        project: str, cluster_id: str, program: Any, config: Any, on_output: Any, remove: Any = ()
    ) -> Any:
        seen["config"] = dict(config)
        # The stack keeps its config between runs; this run's removals and set_config calls
        # update it.
        for key in remove:
            stored.pop(key, None)
        stored.update(config)
        mocks = RawMocks(aws_program.MOCK_CALLS)
        pulumi.runtime.set_mocks(mocks, project=project, stack=cluster_id, preview=False)
        pulumi.runtime.set_all_config(
            {k: v for k, (v, _) in stored.items()}, [k for k, (_, sec) in stored.items() if sec]
        )
        seen["mocks"] = mocks
        from pulumi.runtime.stack import run_pulumi_func
        from pulumi.runtime.sync_await import _sync_await

        try:
            _sync_await(run_pulumi_func(program))
        finally:
            pulumi.runtime.set_all_config({}, [])
        return {"master_url": "https://203.0.113.10:8443"}

    monkeypatch.setattr(automation, "up", fake_up)
    argv = [
        "aws", "up", "--master", "vm", "--cluster-id", "c1", "--keypair", "kp", "--yes",
        "--no-wait-for-master",
        "--region", REGION, "--no-preflight-checks",
        "--master-image-id", "ami-0aaaaaaaaaaaaaaaa", "--agent-image-id", "ami-0bbbbbbbbbbbbbbbb",
        "--det-wheel-url", "https://packages.example.com/det_platform-0.1.0-py3-none-any.whl",
    ]  # fmt: skip
    if registry_flags:
        argv += ["--registry-server", AUTH.server, "--registry-username", AUTH.username]
        monkeypatch.setenv(registry.PASSWORD_FROM_ENV, PASSWORD)
    else:
        monkeypatch.delenv(registry.PASSWORD_FROM_ENV, raising=False)
    argv += extra
    out, err = io.StringIO(), io.StringIO()
    assert clouds.run(argv, out, err) == 0, err.getvalue()
    seen["printed"] = out.getvalue() + err.getvalue()
    return seen
