"""The agent's master_cert_file / master_cert_name: read like every other setting, checked at
start, and handed on to task containers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from det.agent.config import AgentConfigError, load_config
from det.agent.master_client import CONTAINER_CERT_PATH, task_container_cert
from det.common import tls

MASTER = ["--master-url", "https://10.0.0.5:8443"]


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cert")
    argv = [
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", str(tmp / "k.pem"), "-out", str(tmp / "c.pem"), "-subj", "/CN=det-master",
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)
    return tmp / "c.pem"


def test_cert_settings_come_from_file_env_and_flags(cert: Path, tmp_path: Path) -> None:
    f = tmp_path / "agent.yaml"
    f.write_text(f"master_cert_file: {cert}\nmaster_cert_name: from-file\n")
    cfg = load_config([*MASTER, "--config-file", str(f)], environ={})
    assert cfg.master_cert_file == str(cert) and cfg.master_cert_name == "from-file"
    env = {"DET_MASTER_CERT_FILE": "noverify", "DET_MASTER_CERT_NAME": "from-env"}
    cfg = load_config([*MASTER, "--config-file", str(f)], environ=env)
    assert cfg.master_cert().noverify and cfg.master_cert().name == "from-env"
    cfg = load_config([*MASTER, "--master-cert-name", "from-flag"], environ=env)
    assert cfg.master_cert_name == "from-flag"
    assert load_config(MASTER, environ={}).master_cert().verify is True


def test_an_unreadable_cert_file_stops_the_agent_naming_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(AgentConfigError) as e:
        load_config([*MASTER, "--master-cert-file", str(missing)], environ={})
    assert str(e.value) == (
        f"master_cert_file={missing}: cannot read the certificate: No such file or directory"
    )


def test_task_containers_get_the_certificate_read_only(cert: Path) -> None:
    args: dict[str, object] = {"environment": {"DET_TASK_ID": "1"}, "mounts": []}
    task_container_cert(args, tls.load(str(cert), "det-master"))
    env = args["environment"]
    assert isinstance(env, dict)
    assert env["DET_MASTER_CERT_FILE"] == CONTAINER_CERT_PATH
    assert env["DET_MASTER_CERT_NAME"] == "det-master"
    (mount,) = args["mounts"]  # type: ignore[misc]
    assert mount["Source"] == str(cert.resolve()) and mount["Target"] == CONTAINER_CERT_PATH
    assert mount["ReadOnly"] is True

    args = {"environment": {}}
    task_container_cert(args, tls.load("noverify", None))
    assert args["environment"] == {"DET_MASTER_CERT_FILE": "noverify"}
    assert "mounts" not in args

    args = {"environment": {}}
    task_container_cert(args, tls.load(None, None))
    assert args == {"environment": {}}
