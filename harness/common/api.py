"""A small HTTP session for talking to the master with Determined's v1 REST wire format.

Authentication mirrors the official harness: the allocation token goes in
``Grpc-Metadata-x-allocation-token: Bearer <token>``; a user token, when present, goes in
``Authorization: Bearer <token>``.

Retry policy: connection errors, timeouts and 502/503/504 answers are retried with capped
exponential backoff for up to ``retry_seconds`` (default 120 s), so a task survives a master
restart. Other errors are raised immediately as :class:`APIError` (4xx are never retried: they
would fail again).

TLS: the master's certificate is verified as ``DET_MASTER_CERT_FILE``/``DET_MASTER_CERT_NAME``
say (:mod:`det.common.tls`; the agent sets both in task containers). A certificate that cannot be
verified is never retried: it raises :class:`MasterTLSError`, one line naming the problem.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import requests

from det.common import tls

logger = logging.getLogger(__name__)

ALLOCATION_TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"
_RETRY_STATUSES = frozenset({502, 503, 504})


class APIError(Exception):
    """The master answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path} failed with HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class NotFoundError(APIError):
    """The master answered 404."""


class MasterTLSError(Exception):
    """The master's TLS certificate cannot be verified (or the TLS handshake failed)."""


class Session:
    """Thread-safe enough for our use: each call builds its own request on a pooled session."""

    def __init__(
        self,
        master_url: str,
        *,
        allocation_token: str | None = None,
        user_token: str | None = None,
        retry_seconds: float = 120.0,
        backoff_cap: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.master_url = canonicalize_master_url(master_url)
        self._retry_seconds = retry_seconds
        self._backoff_cap = backoff_cap
        self._sleep = sleep
        self._http = tls.session(tls.from_env())
        if allocation_token:
            self._http.headers[ALLOCATION_TOKEN_HEADER] = f"Bearer {allocation_token}"
        if user_token:
            self._http.headers["Authorization"] = f"Bearer {user_token}"

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        timeout: float = 60.0,
        retry: bool = True,
    ) -> requests.Response:
        url = f"{self.master_url}/{path.lstrip('/')}"
        deadline = time.monotonic() + self._retry_seconds
        delay = 0.1
        while True:
            try:
                resp = self._http.request(method, url, json=json, params=params, timeout=timeout)
            except requests.exceptions.SSLError as e:
                raise MasterTLSError(tls.describe(e, self.master_url)) from None
            except (requests.ConnectionError, requests.Timeout) as e:
                if not retry or time.monotonic() + delay > deadline:
                    raise
                logger.debug("%s %s: %s; retrying in %.1fs", method, path, e, delay)
            else:
                if resp.status_code < 400:
                    return resp
                if not retry or resp.status_code not in _RETRY_STATUSES:
                    cls = NotFoundError if resp.status_code == 404 else APIError
                    raise cls(method, path, resp.status_code, resp.text)
                if time.monotonic() + delay > deadline:
                    raise APIError(method, path, resp.status_code, resp.text)
                logger.debug(
                    "%s %s: HTTP %s; retrying in %.1fs", method, path, resp.status_code, delay
                )
            self._sleep(delay)
            delay = min(delay * 2, self._backoff_cap)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("PATCH", path, **kwargs)


def canonicalize_master_url(url: str) -> str:
    """``host:port`` → ``http://host:port``; no trailing slash."""
    if "://" not in url:
        url = f"http://{url}"
    return url.rstrip("/")
