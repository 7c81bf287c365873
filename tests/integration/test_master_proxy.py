"""The task proxy on a real master over HTTPS (the front holds the TLS session, the proxy's
thread reads and answers on it): 401 without a token, 404 for no such task, 503 while a
notebook waits for an agent, and a shell's WebSocket without a token is let through to the
same 503 (SSH, which only its key opens, is what it would carry)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import requests

from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.test_master_tls import Cert, local_cert, tls_master_factory

pytestmark = pytest.mark.integration
__all__ = ["local_cert", "tls_master_factory"]


def test_proxy_answers_over_https(tls_master_factory: Any, local_cert: Cert) -> None:
    m = tls_master_factory(local_cert)
    verify = str(local_cert.cert)
    s = requests.Session()
    s.trust_env = False
    s.verify = verify
    token = s.post(
        m.url + "/api/v1/auth/login",
        json={"username": "admin", "password": ADMIN_PASSWORD},
        timeout=10,
    ).json()["token"]
    auth = {"Authorization": f"Bearer {token}"}

    nobody = s.get(f"{m.url}/proxy/{uuid.uuid4()}/lab", timeout=10)
    assert nobody.status_code == 401 and "session token" in nobody.json()["message"], nobody.text
    unknown = s.get(f"{m.url}/proxy/{uuid.uuid4()}/lab", headers=auth, timeout=10)
    assert unknown.status_code == 404

    nb = s.post(m.url + "/api/v1/notebooks", json={"config": {}}, headers=auth, timeout=10)
    nid = nb.json()["notebook"]["id"]
    waiting = s.get(f"{m.url}/proxy/{nid}/lab", headers=auth, timeout=10)
    assert waiting.status_code == 503 and "not ready" in waiting.json()["message"]
    assert s.get(f"{m.url}/proxy/{nid}/lab", timeout=10).status_code == 401

    sh = s.post(m.url + "/api/v1/shells", json={"config": {}}, headers=auth, timeout=10)
    sid = sh.json()["shell"]["id"]
    ws = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Key": "eA==",
          "Sec-WebSocket-Version": "13"}  # fmt: skip
    shell = s.get(f"{m.url}/proxy/{sid}/", headers=ws, timeout=10)
    assert shell.status_code == 503, shell.text
    # The API goes on being served on the same port.
    assert s.get(m.url + "/api/v1/notebooks", headers=auth, timeout=10).ok
    # This session's connection began with API requests: the proxy is reached all the same.
    again = s.get(f"{m.url}/proxy/{nid}/lab?a=1", headers=auth, timeout=10)
    assert again.status_code == 503, again.text
    assert [r.status_code for r in again.history] == [307]
