"""deploy.common.tls.verified_get (``det deploy up`` waiting for the master): trusts the
cluster's certificate by its name, whatever CA bundle the environment names."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from det.deploy.common import tls
from tests.unit.harness.test_harness_tls import make_cert, serve


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    cert, key = make_cert(tmp_path_factory.mktemp("certs"), "det-master", "DNS:det-master")
    for url in serve(cert, key):
        yield url, cert


def test_trusts_the_cluster_cert_even_with_a_ca_bundle_in_the_environment(
    named: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, cert = named
    # requests lets these replace a session's `verify`; the cluster's cert must still be used.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("CURL_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    response = tls.verified_get(cert, tls.CERT_NAME)(f"{url}/info", timeout=5)
    assert response.status_code == 200 and response.text == "ok"


def test_refuses_a_certificate_issued_for_another_name(named: tuple[str, Path]) -> None:
    import requests

    url, cert = named
    with pytest.raises(requests.exceptions.SSLError):
        tls.verified_get(cert, "not-det-master")(f"{url}/info", timeout=5)
