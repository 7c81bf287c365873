"""The egress policy (det.master.egress): the address table (each refused range, the IPv6 forms
that carry an IPv4 address, the host's own addresses), what an admin allows, and the guard at
connect time for requests and boto3 against a real local HTTP server (a restricted client
never reaches it; no request arrives)."""

from __future__ import annotations

import http.server
import ipaddress
import json
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from det.master import egress
from tests.fakes.local_http import TestHTTPServer

ip = ipaddress.ip_address

REFUSED = [
    ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"),
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.0.1", "private"),
    ("172.31.255.254", "private"),
    ("192.168.1.1", "private"),
    ("100.64.0.1", "CGNAT"),
    ("100.127.255.254", "CGNAT"),
    ("169.254.169.254", "link-local"),
    ("192.0.0.170", "IETF"),
    ("192.0.2.1", "TEST-NET-1"),
    ("198.51.100.7", "TEST-NET-2"),
    ("203.0.113.9", "TEST-NET-3"),
    ("198.18.0.1", "benchmarking"),
    ("198.19.255.254", "benchmarking"),
    ("224.0.0.251", "multicast"),
    ("239.255.255.250", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "reserved"),
    ("::", "unspecified"),
    ("::1", "loopback"),
    ("fe80::1", "link-local"),
    ("fc00::1", "unique local"),
    ("fd00:ec2::254", "unique local"),
    ("fec0::1", "site-local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("2001:2::1", "benchmarking"),
    ("100::1", "discard-only"),
    ("64:ff9b:1::1", "NAT64"),
    ("2002:808:808::1", "6to4"),  # even carrying a public address: the same on every Python
]

# IPv6 forms that carry a refused IPv4 address: (address, what, the address carried).
CARRIERS = [
    ("::ffff:127.0.0.1", "loopback", "127.0.0.1"),
    ("::ffff:169.254.169.254", "link-local", "169.254.169.254"),
    ("::ffff:10.1.2.3", "private", "10.1.2.3"),
    ("::ffff:100.64.0.1", "CGNAT", "100.64.0.1"),
    ("::127.0.0.1", "loopback", "127.0.0.1"),  # IPv4-compatible (deprecated)
    ("64:ff9b::a9fe:a9fe", "link-local", "169.254.169.254"),  # NAT64
    ("64:ff9b::7f00:1", "loopback", "127.0.0.1"),
    ("2002:7f00:1::1", "loopback", "127.0.0.1"),  # 6to4
    ("2002:c0a8:101::1", "private", "192.168.1.1"),
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private", "10.0.0.1"),  # Teredo (client)
]

PUBLIC = ["8.8.8.8", "1.1.1.1", "52.95.110.1", "2606:4700:4700::1111", "::ffff:8.8.8.8",
          "64:ff9b::808:808"]  # fmt: skip


@pytest.mark.parametrize(("address", "what"), REFUSED)
def test_each_refused_range(address: str, what: str) -> None:
    why = egress.classify(ip(address))
    assert why is not None and what in why, (address, why)


@pytest.mark.parametrize(("address", "what", "carried"), CARRIERS)
def test_ipv6_forms_carrying_a_refused_ipv4_address(address: str, what: str, carried: str) -> None:
    why = egress.classify(ip(address))
    assert why is not None and what in why and f"(carrying {carried})" in why, (address, why)


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert egress.classify(ip(address)) is None


def test_the_hosts_own_addresses_are_refused_even_when_public() -> None:
    own = frozenset({ip("52.95.110.1"), ip("2606:4700:4700::1111")})
    assert egress.classify(ip("52.95.110.1"), own) == "an address of the master's own host"
    why = egress.classify(ip("::ffff:52.95.110.1"), own)
    assert why == "an address of the master's own host (carrying 52.95.110.1)"
    assert egress.classify(ip("2606:4700:4700::1111"), own) is not None
    assert egress.classify(ip("52.95.110.2"), own) is None


def test_host_addresses_are_every_interface_address() -> None:
    found = egress.host_addresses()
    assert ip("127.0.0.1") in found
    try:
        links = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True,
                                          text=True, check=True).stdout)  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no ip command to compare with")
    listed = {ip(i["local"]) for link in links for i in link.get("addr_info", [])}
    assert listed and listed <= found, sorted(map(str, listed - found))
    # Each of them is refused to a restricted request, whatever its range (docker0's 172.17.0.1,
    # the machine's own interface address).
    policy = egress.Policy(restricted=True)
    for addr in listed:
        assert policy.refusal("h", addr) is not None, addr


def test_admins_allow_names_their_subdomains_and_networks() -> None:
    config = egress.EgressConfig(allowed_hosts=["MinIO.corp.example.", "10.20.0.0/16", "fd00::7"])
    policy = egress.Policy.of(config, restricted=True)
    assert policy.refusal("minio.corp.example", ip("10.1.1.1")) is None
    assert policy.refusal("bucket.minio.corp.example", ip("10.1.1.1")) is None
    assert policy.refusal("other.example", ip("10.1.1.1")) is not None
    assert policy.refusal("other.example", ip("10.20.3.4")) is None
    assert policy.refusal("other.example", ip("::ffff:10.20.3.4")) is None
    assert policy.refusal("other.example", ip("fd00::7")) is None
    assert policy.refusal("other.example", ip("fd00::8")) is not None
    assert egress.Policy.of(config, restricted=False).refusal("x", ip("127.0.0.1")) is None
    with pytest.raises(ValueError, match="'not a host!' is not a host name"):
        egress.EgressConfig(allowed_hosts=["not a host!"])


def test_check_host_resolves_names() -> None:
    restricted = egress.Policy(restricted=True)
    assert egress.check_host("localhost", restricted) is not None
    why = egress.check_host("127.0.0.1", restricted)
    assert why == "host '127.0.0.1' is 127.0.0.1, a loopback address"
    assert egress.check_host("no-such-host.invalid", restricted) == (
        "host 'no-such-host.invalid' does not resolve"
    )
    assert egress.check_host("localhost", egress.UNRESTRICTED) is None


class _Recorder:
    def __init__(self) -> None:
        self.paths: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                outer.paths.append(self.path)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = b"secret of an internal service"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_HEAD = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = TestHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    r = _Recorder()
    yield r
    r.server.shutdown()
    r.server.server_close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_restricted_session_refuses_at_connect_time(recorder: _Recorder, host: str) -> None:
    # No check before: the connection itself is judged.
    with (
        egress.session(egress.Policy(restricted=True)) as s,
        pytest.raises(requests.ConnectionError) as info,
    ):
        s.post(f"http://{host}:{recorder.port}/x", data=b"{}", timeout=5)
    refused = egress.refusal_in(info.value)
    assert refused is not None and "127.0.0.1, a loopback address" in str(refused)
    assert recorder.paths == []


def test_an_allowed_host_and_an_unrestricted_session_connect(recorder: _Recorder) -> None:
    allowed = egress.Policy.of(egress.EgressConfig(allowed_hosts=["localhost"]), restricted=True)
    with egress.session(allowed) as s:
        assert s.get(f"http://localhost:{recorder.port}/a", timeout=5).status_code == 200
    with egress.session(egress.UNRESTRICTED) as s:
        assert s.get(f"http://127.0.0.1:{recorder.port}/b", timeout=5).status_code == 200
    assert recorder.paths == ["/a", "/b"]


def test_a_guarded_boto3_client_never_reaches_a_refused_endpoint(recorder: _Recorder) -> None:
    import boto3
    from botocore.config import Config

    def client() -> Any:
        return boto3.client(
            "s3", endpoint_url=f"http://localhost:{recorder.port}", region_name="us-east-1",
            aws_access_key_id="k", aws_secret_access_key="s",
            config=Config(retries={"max_attempts": 1}),
        )  # fmt: skip

    s3 = client()
    egress.guard_boto3_client(s3, egress.Policy(restricted=True))
    with pytest.raises(Exception) as info:
        s3.list_objects_v2(Bucket="b")
    refused = egress.refusal_in(info.value)
    assert refused is not None and "a loopback address" in str(refused), info.value
    assert recorder.paths == []
    # The same client allowed by name reaches it (the answer is no S3 XML: any error after).
    s3 = client()
    allowed = egress.Policy.of(egress.EgressConfig(allowed_hosts=["localhost"]), restricted=True)
    egress.guard_boto3_client(s3, allowed)
    with pytest.raises(Exception):  # noqa: B017 (the fake's body is no ListObjects answer)
        s3.list_objects_v2(Bucket="b")
    assert recorder.paths and recorder.paths[0].startswith("/b")
