"""det's one REST client for the master (Determined's v1 wire format): the harness in task
containers, the ``det`` CLI (:mod:`det.cli.session`) and the agent
(:mod:`det.agent.master_client`) all send their requests through :class:`Session`.

What it owns, so nobody else writes it again:

* URL joining: ``master_url`` is canonicalized once (:func:`det.common.master_url.canonicalize`)
  and a call names only the path;
* authentication: the allocation token goes in ``Grpc-Metadata-x-allocation-token: Bearer
  <token>`` and a user or agent token in ``Authorization: Bearer <token>``, as the official
  harness does;
* TLS: the master is verified as ``DET_MASTER_CERT_FILE``/``DET_MASTER_CERT_NAME`` say
  (:mod:`det.common.tls`), or as the ``cert`` a caller passes (the agent's config);
* retries: connection errors, timeouts and 502/503/504 answers are retried with
  :func:`det.common.backoff.backoff` (0.1 s doubling to ``backoff_cap``) for up to
  ``retry_seconds`` (120 s by default, so a task survives a master restart; 0: one attempt,
  for callers with a retry policy of their own, such as the agent's heartbeat). Other answers
  are never retried;
* errors: every failure is a :class:`det.common.errors.MasterCallError` (the tree is drawn
  there): ``MasterUnreachable``, ``MasterTLSError`` (never retried) or ``MasterStatusError``
  with the status.

Thread-safe: each thread gets its own pooled ``requests.Session`` (they are not thread-safe).
Runs inside task containers on Python 3.8+.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Mapping

import requests

from det.common import master_url as _master_url
from det.common import tls
from det.common.backoff import backoff
from det.common.errors import (
    MasterCallError,
    MasterStatusError,
    MasterTLSError,
    MasterUnreachable,
    NotFoundError,
)

logger = logging.getLogger(__name__)

ALLOCATION_TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"
_RETRY_STATUSES = frozenset({502, 503, 504})

__all__ = [
    "ALLOCATION_TOKEN_HEADER",
    "MasterCallError",
    "MasterStatusError",
    "MasterTLSError",
    "MasterUnreachable",
    "NotFoundError",
    "Session",
    "canonicalize_master_url",
]


class Session:
    """Requests to one master; see the module docstring for what it does on failures."""

    def __init__(
        self,
        master_url: str,
        *,
        allocation_token: str | None = None,
        user_token: str | None = None,
        retry_seconds: float = 120.0,
        backoff_cap: float = 5.0,
        sleep: Callable[[float], None] = time.sleep,
        cert: tls.MasterCert | None = None,
        cert_setting: str = tls.CERT_FILE_ENV,
    ) -> None:
        """``cert``: how to verify the master (default: from ``DET_MASTER_CERT_FILE``/``NAME``,
        CertError when unusable); ``cert_setting`` names the setting in TLS error messages."""
        self.master_url = _master_url.canonicalize(master_url)
        self._retry_seconds = retry_seconds
        self._backoff_cap = backoff_cap
        self._sleep = sleep
        self._cert = cert if cert is not None else tls.from_env()
        self._cert_setting = cert_setting
        self.headers: dict[str, str] = {}
        if allocation_token:
            self.headers[ALLOCATION_TOKEN_HEADER] = f"Bearer {allocation_token}"
        if user_token:
            self.headers["Authorization"] = f"Bearer {user_token}"
        self._local = threading.local()
        self._all: list[requests.Session] = []
        self._lock = threading.Lock()

    @property
    def cert(self) -> tls.MasterCert:
        return self._cert

    def _http(self) -> requests.Session:
        http: requests.Session | None = getattr(self._local, "http", None)
        if http is None:
            http = tls.session(self._cert)
            http.headers.update(self.headers)
            self._local.http = http
            with self._lock:
                self._all.append(http)
        return http

    def close(self) -> None:
        with self._lock:
            sessions, self._all = self._all, []
        for http in sessions:
            http.close()
        self._local = threading.local()

    def url(self, path: str) -> str:
        """The master's URL for ``path`` (``/api/v1/...``)."""
        return f"{self.master_url}/{path.lstrip('/')}"

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        data: Any = None,
        headers: Mapping[str, str] | None = None,
        stream: bool = False,
        timeout: float | None = 60.0,
        retry: bool = True,
    ) -> requests.Response:
        """One call; raises :class:`MasterCallError` (see the module docstring)."""
        url = self.url(path)
        retry_seconds = self._retry_seconds if retry else 0.0
        deadline = time.monotonic() + retry_seconds
        attempt = 0
        while True:
            delay = backoff(attempt, base=0.1, cap=self._backoff_cap)
            can_retry = retry_seconds > 0 and time.monotonic() + delay <= deadline
            try:
                resp = self._http().request(
                    method,
                    url,
                    json=json,
                    params=params,
                    data=data,
                    headers=headers,
                    stream=stream,
                    timeout=timeout,
                )
            except requests.exceptions.SSLError as e:
                raise MasterTLSError(tls.describe(e, self.master_url, self._cert_setting)) from e
            except (requests.ConnectionError, requests.Timeout) as e:
                if not can_retry:
                    raise MasterUnreachable(self.master_url, f"{method} {path}: {e}") from e
                logger.debug("%s %s: %s; retrying in %.1fs", method, path, e, delay)
            except requests.RequestException as e:  # a malformed URL, too many redirects...
                raise MasterCallError(f"{method} {url}: {e}") from e
            else:
                if resp.status_code < 400:
                    return resp
                if resp.status_code not in _RETRY_STATUSES or not can_retry:
                    cls = NotFoundError if resp.status_code == 404 else MasterStatusError
                    raise cls(method, path, resp.status_code, resp.text)
                logger.debug(
                    "%s %s: HTTP %s; retrying in %.1fs", method, path, resp.status_code, delay
                )
                resp.close()
            self._sleep(delay)
            attempt += 1

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("PATCH", path, **kwargs)

    def put(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("DELETE", path, **kwargs)


def canonicalize_master_url(url: str) -> str:
    """``host:port`` → ``http://host:port``; no trailing slash (the official harness's name for
    :func:`det.common.master_url.canonicalize`)."""
    return _master_url.canonicalize(url)
