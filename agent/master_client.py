"""HTTP client for the agent side of the agent <-> master protocol (docs/internals.md).

Every call raises `MasterUnavailable` for anything that is not a successful answer (connection
errors, timeouts, 5xx, malformed JSON): the daemon treats all of them the same way, by keeping
its containers running and retrying with backoff. 4xx answers raise `MasterRejected`.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import requests

from det.common import tls

logger = logging.getLogger(__name__)

# Where task containers find the master's certificate (a read-only bind mount of the agent's).
CONTAINER_CERT_PATH = "/run/det/master-cert.pem"


class MasterUnavailable(Exception):
    """No usable answer from the master (network error, timeout, 5xx, bad body)."""


class MasterRejected(MasterUnavailable):
    """The master answered 4xx (bad token, unknown resource pool, ...)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"master answered {status}: {message}")
        self.status = status


class MasterClient:
    """Thread-safe: each thread gets its own `requests.Session` (sessions are not)."""

    def __init__(
        self,
        master_url: str,
        token: str | None,
        timeout: float = 10.0,
        cert: tls.MasterCert | None = None,
    ) -> None:
        self.master_url = master_url.rstrip("/")
        self._token = token
        self._timeout = timeout
        self._cert = cert or tls.MasterCert()
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = tls.session(self._cert)
            if self._token:
                session.headers["Authorization"] = f"Bearer {self._token}"
            self._local.session = session
        return session

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.master_url}{path}"
        try:
            resp = self._session().request(method, url, timeout=self._timeout, **kwargs)
        except requests.exceptions.SSLError as e:
            # Retried like any outage (the master's certificate may be replaced), but said plainly.
            raise MasterUnavailable(tls.describe(e, self.master_url, "master_cert_file")) from e
        except requests.RequestException as e:
            raise MasterUnavailable(f"{method} {path}: {e}") from e
        if resp.status_code >= 500:
            raise MasterUnavailable(f"{method} {path}: {resp.status_code} {resp.text[:200]}")
        if resp.status_code >= 400:
            raise MasterRejected(resp.status_code, f"{method} {path}: {resp.text[:200]}")
        return resp

    def _json(self, resp: requests.Response) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError as e:
            raise MasterUnavailable(f"{resp.url}: not JSON: {e}") from e
        if not isinstance(body, dict):
            raise MasterUnavailable(f"{resp.url}: expected a JSON object")
        return body

    def heartbeat(self, agent_id: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = self._request(
            "POST", f"/api/v1/agents/{quote(agent_id, safe='')}/heartbeat", json=body
        )
        answer = self._json(resp)
        if not isinstance(answer.get("containers", []), list):
            raise MasterUnavailable("heartbeat answer: containers is not a list")
        return answer

    def context(self, context_path: str) -> bytes:
        """The task's context as gzip tar bytes (b'' when the task has none)."""
        body = self._json(self._request("GET", context_path))
        b64 = body.get("b64Tgz") or ""
        try:
            return base64.b64decode(b64, validate=True)
        except ValueError as e:
            raise MasterUnavailable(f"GET {context_path}: b64Tgz is not base64: {e}") from e

    def post_logs(self, logs: Sequence[dict[str, Any]]) -> None:
        self._request("POST", "/api/v1/task/logs", json={"logs": list(logs)})


def task_container_cert(create_args: dict[str, Any], cert: tls.MasterCert) -> None:
    """Lets the harness in a task container verify the master as this agent does: the agent's
    certificate file bind-mounted read-only, ``DET_MASTER_CERT_FILE``/``_NAME`` pointing at it."""
    env = create_args.setdefault("environment", {})
    if cert.noverify:
        env[tls.CERT_FILE_ENV] = tls.NOVERIFY
    elif cert.cert_file:
        import docker.types

        source = str(Path(cert.cert_file).resolve())
        create_args.setdefault("mounts", []).append(
            docker.types.Mount(
                target=CONTAINER_CERT_PATH, source=source, type="bind", read_only=True
            )
        )
        env[tls.CERT_FILE_ENV] = CONTAINER_CERT_PATH
    if cert.name:
        env[tls.CERT_NAME_ENV] = cert.name
