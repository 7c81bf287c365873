"""det.common.tls: Determined's DET_MASTER_CERT_FILE / DET_MASTER_CERT_NAME, against a real TLS
server in this process (Python's http.server wrapped in an SSLContext)."""

from __future__ import annotations

import http.server
import re
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from det.common import tls
from tests.fakes.local_http import TestHTTPServer


def make_cert(tmp: Path, name: str, san: str) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.crt", tmp / f"{name}.key"
    argv = [
        "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        "-keyout", str(key), "-out", str(cert), "-subj", f"/CN={name}",
        "-addext", f"subjectAltName={san}",
    ]  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True)
    return cert, key


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


def serve(cert: Path, key: Path) -> Iterator[str]:
    server = TestHTTPServer(("127.0.0.1", 0), _Hello)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    tmp = tmp_path_factory.mktemp("certs")
    return {
        "ip": make_cert(tmp, "local", "IP:127.0.0.1"),
        "named": make_cert(tmp, "det-master", "DNS:det-master"),
    }


@pytest.fixture(scope="module")
def ip_server(certs: dict[str, tuple[Path, Path]]) -> Iterator[str]:
    yield from serve(*certs["ip"])


@pytest.fixture(scope="module")
def named_server(certs: dict[str, tuple[Path, Path]]) -> Iterator[str]:
    yield from serve(*certs["named"])


def test_unset_or_empty_means_the_public_cas() -> None:
    for env in ({}, {"DET_MASTER_CERT_FILE": "", "DET_MASTER_CERT_NAME": ""}):
        cert = tls.from_env(env)
        assert cert.verify is True and cert.name is None and cert.cert_file is None


def test_noverify_in_any_case_turns_verification_off() -> None:
    for value in ("noverify", "NoVerify"):
        cert = tls.from_env({"DET_MASTER_CERT_FILE": value, "DET_MASTER_CERT_NAME": "m"})
        assert cert.noverify and cert.verify is False and cert.name == "m"


def test_an_unreadable_or_non_pem_file_is_one_line_naming_the_setting(tmp_path: Path) -> None:
    missing = tmp_path / "missing.crt"
    with pytest.raises(
        tls.CertError, match=re.escape(f"DET_MASTER_CERT_FILE={missing}: cannot read")
    ):
        tls.from_env({"DET_MASTER_CERT_FILE": str(missing)})
    junk = tmp_path / "junk.crt"
    junk.write_bytes(b"\x00\x01 not a certificate")
    with pytest.raises(tls.CertError, match=r"master_cert_file=.*not a PEM certificate"):
        tls.load(str(junk), None, setting="master_cert_file")


def test_the_certificate_is_trusted_besides_the_public_cas(
    certs: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    cert_file = certs["ip"][0]
    cert = tls.load(str(cert_file), None)
    assert isinstance(cert.verify, str) and cert.verify != str(cert_file)
    bundle = Path(cert.verify).read_text()
    assert bundle.endswith(cert_file.read_text())
    import certifi

    assert bundle.startswith(Path(certifi.where()).read_text()[:2000])
    assert tls.load(str(cert_file), None).verify == cert.verify  # made once per file version


def test_a_session_verifies_with_the_file_even_where_requests_ca_bundle_is_set(
    ip_server: str, certs: dict[str, tuple[Path, Path]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Plain requests would let REQUESTS_CA_BUNDLE replace the session's verify.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    assert tls.session(tls.load(str(certs["ip"][0]), None)).get(ip_server, timeout=5).ok
    from urllib3.exceptions import InsecureRequestWarning

    with pytest.warns(InsecureRequestWarning):
        assert tls.session(tls.load("noverify", None)).get(ip_server, timeout=5).ok
    with pytest.raises(requests.exceptions.SSLError) as e:
        tls.session(tls.load(None, None)).get(ip_server, timeout=5)
    line = tls.describe(e.value, ip_server)
    assert line == (
        f"cannot verify the master's TLS certificate at {ip_server}: self-signed certificate;"
        " set DET_MASTER_CERT_FILE to the master's certificate"
    )
    assert "master_cert_file" in tls.describe(e.value, ip_server, "master_cert_file")


def test_cert_name_checks_the_certificate_against_that_name(
    named_server: str, certs: dict[str, tuple[Path, Path]]
) -> None:
    cert_file = str(certs["named"][0])
    with pytest.raises(requests.exceptions.SSLError) as e:
        tls.session(tls.load(cert_file, None)).get(named_server, timeout=5)
    line = tls.describe(e.value, named_server)
    assert "127.0.0.1" in line and "set DET_MASTER_CERT_NAME" in line, line
    assert tls.session(tls.load(cert_file, "det-master")).get(named_server, timeout=5).ok
    with pytest.raises(requests.exceptions.SSLError) as e:
        tls.session(tls.load(cert_file, "not-det-master")).get(named_server, timeout=5)
    assert "DET_MASTER_CERT_NAME" in tls.describe(e.value, named_server)


def test_https_to_a_plain_http_server_says_so() -> None:
    server = TestHTTPServer(("127.0.0.1", 0), _Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(requests.exceptions.SSLError) as e:
            tls.session(tls.load("noverify", None)).get(url, timeout=5)
        line = tls.describe(e.value, url)
        assert line.startswith(f"TLS handshake with the master at {url} failed"), line
        assert "\n" not in line
    finally:
        server.shutdown()
        server.server_close()
