"""The agent's side of the agent <-> master protocol (docs/internals.md), over the shared REST
client (:class:`det.common.api.Session`: URL joining, TLS, thread-local connection pools).

One attempt per call: the daemon owns the retry policy (heartbeats back off with
:func:`det.common.backoff.backoff`, capped at ``max_backoff_seconds``; log batches are retried by
the shipper). The exception is a sleeping serverless master: while its platform answers for it,
a call waits for it to wake (``DET_MASTER_WAKE_SECONDS``, 300 s by default;
:func:`det.common.api.wake_retry` says which answers and which requests), and the agent logs
"waking the master" once per wait instead of one outage per heartbeat. The shared client's errors are translated here, and only here, into the agent's
(:mod:`det.agent.errors`): no usable answer (network error, timeout, 5xx, TLS failure, malformed
JSON) is ``MasterUnavailable``, an outage; a 4xx is ``MasterRejected``, which is not.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import docker.types
import requests

from det.agent.errors import MasterRejected, MasterUnavailable
from det.common import api, tls
from det.common import errors as common
from det.common.agent_protocol import (
    ChangesParams,
    ChangesResponse,
    EnrollmentRequest,
    EnrollmentResponse,
    HeartbeatRequest,
    HeartbeatResponse,
)

logger = logging.getLogger(__name__)

# Where task containers find the master's certificate (a read-only bind mount of the agent's).
CONTAINER_CERT_PATH = "/run/det/master-cert.pem"

__all__ = ["CONTAINER_CERT_PATH", "MasterClient", "MasterRejected", "MasterUnavailable"]


def _log_waking(message: str) -> None:
    logger.info("%s", message)


class MasterClient:
    """Thread-safe (the shared client gives each thread its own connection pool)."""

    def __init__(
        self,
        master_url: str,
        token: str | None,
        timeout: float = 10.0,
        cert: tls.MasterCert | None = None,
        wake_seconds: float | None = None,
    ) -> None:
        self._api = api.Session(
            master_url,
            user_token=token,
            retry_seconds=0,
            cert=cert or tls.MasterCert(),
            cert_setting="master_cert_file",
            wake_seconds=wake_seconds,
            on_wake=_log_waking,
        )
        self.master_url = self._api.master_url
        self._timeout = timeout

    def _request(
        self, method: str, path: str, *, timeout: float | None = None, **kwargs: Any
    ) -> requests.Response:
        try:
            return self._api.request(method, path, timeout=timeout or self._timeout, **kwargs)
        except common.MasterStatusError as e:
            what = f"{method} {path}: {e.body[:200]}"
            if e.rejected:
                raise MasterRejected(e.status, what) from e
            raise MasterUnavailable(f"{method} {path}: {e.status} {e.body[:200]}") from e
        except common.MasterTLSError as e:
            # Retried like any outage (the master's certificate may be replaced), said plainly.
            raise MasterUnavailable(str(e)) from e
        except common.MasterUnreachable as e:
            raise MasterUnavailable(e.detail) from e
        except common.MasterCallError as e:
            raise MasterUnavailable(str(e)) from e

    def _json(self, resp: requests.Response) -> dict[str, Any]:
        try:
            body = resp.json()
        except ValueError as e:
            raise MasterUnavailable(f"{resp.url}: not JSON: {e}") from e
        if not isinstance(body, dict):
            raise MasterUnavailable(f"{resp.url}: expected a JSON object")
        return body

    def enroll(self, ticket: str, agent_id: str) -> str:
        """This agent's own token for the machine's one-time ticket (det-agent enroll)."""
        request: EnrollmentRequest = {"ticket": ticket, "agentId": agent_id}
        resp = self._request("POST", "/api/v1/agent_enrollments", json=request)
        token = cast(EnrollmentResponse, self._json(resp)).get("agentToken")
        if not isinstance(token, str) or not token:
            raise MasterUnavailable("enrollment answer: no agentToken")
        return token

    def heartbeat(self, agent_id: str, body: HeartbeatRequest) -> HeartbeatResponse:
        """The master's answer, checked here only as far as a JSON object whose ``containers``
        is a list: the daemon reads every other key defensively (``parse_desired``)."""
        resp = self._request(
            "POST", f"/api/v1/agents/{quote(agent_id, safe='')}/heartbeat", json=body
        )
        answer = self._json(resp)
        if not isinstance(answer.get("containers", []), list):
            raise MasterUnavailable("heartbeat answer: containers is not a list")
        return cast(HeartbeatResponse, answer)

    def wait_for_work(self, agent_id: str, seconds: float) -> bool:
        """Whether the master placed or is killing work on this agent within ``seconds`` (the
        master's ``changes`` long-poll; a 404 from a master without it is MasterRejected)."""
        params: ChangesParams = {"timeoutSeconds": seconds}
        resp = self._request(
            "GET",
            f"/api/v1/agents/{quote(agent_id, safe='')}/changes",
            params=params,
            timeout=seconds + self._timeout,
        )
        answer = cast(ChangesResponse, self._json(resp))
        return bool(answer.get("changed"))

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
        source = str(Path(cert.cert_file).resolve())
        create_args.setdefault("mounts", []).append(
            docker.types.Mount(
                target=CONTAINER_CERT_PATH, source=source, type="bind", read_only=True
            )
        )
        env[tls.CERT_FILE_ENV] = CONTAINER_CERT_PATH
    if cert.name:
        env[tls.CERT_NAME_ENV] = cert.name
