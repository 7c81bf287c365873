"""security.tls: parsed as Determined's keys, and the files checked before the master starts."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from det.master.config import MasterConfigError, parse_config
from det.master.tls import server_context


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("tls")
    argv = [
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", str(tmp / "k.pem"), "-out", str(tmp / "c.pem"), "-subj", "/CN=m",
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)
    return tmp / "c.pem", tmp / "k.pem"


def test_tls_keys_from_file_and_env(pair: tuple[Path, Path]) -> None:
    cert, key = pair
    cfg = parse_config({"security": {"tls": {"cert": str(cert), "key": str(key)}}})
    assert cfg.security.tls.enabled and cfg.security.tls.cert == cert
    assert cfg.url() == f"https://127.0.0.1:{cfg.port}"
    env = {"DET_SECURITY_TLS_CERT": str(cert), "DET_SECURITY_TLS_KEY": str(key)}
    assert parse_config({}, env).security.tls.key == key
    plain = parse_config({})
    assert not plain.security.tls.enabled and plain.url().startswith("http://")


@pytest.mark.parametrize(
    "tls, message",
    [
        ({"cert": "/c.pem"}, "security.tls: cert and key go together: key is not set"),
        ({"key": "/k.pem"}, "security.tls: cert and key go together: cert is not set"),
        ({"cert": "/c", "key": "/k", "ca": "/x"}, "unknown key 'security.tls.ca'"),
    ],
)
def test_tls_keys_are_checked(tls: dict[str, str], message: str) -> None:
    with pytest.raises(MasterConfigError) as e:
        parse_config({"security": {"tls": tls}})
    assert message in str(e.value)


def test_an_encrypted_key_is_refused_without_a_prompt(
    pair: tuple[Path, Path], tmp_path: Path
) -> None:
    cert, key = pair
    encrypted = tmp_path / "enc.pem"
    subprocess.run(
        [
            "openssl",
            "pkey",
            "-in",
            str(key),
            "-aes256",
            "-passout",
            "pass:secret",
            "-out",
            str(encrypted),
        ],
        check=True,
        capture_output=True,
    )
    cfg = parse_config({"security": {"tls": {"cert": str(cert), "key": str(encrypted)}}})
    with pytest.raises(MasterConfigError, match="is encrypted with a passphrase"):
        server_context(cfg.security.tls)
    cfg = parse_config({"security": {"tls": {"cert": str(cert), "key": str(key)}}})
    ctx = server_context(cfg.security.tls)
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
