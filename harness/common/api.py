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
* a sleeping master (a serverless master scaled to zero, :data:`WAKE_SECONDS_ENV`): while the
  platform answers for it, the call waits for it to wake, up to ``wake_seconds`` (300 s by
  default, above the documented worst cases in docs/deploy.md, "Waking the master"), asking
  every few seconds (:data:`WAKE_BACKOFF_CAP`: an ALB's wake alarm counts a 503 per minute),
  and says so once through ``on_wake`` (the CLI: one line on stderr) or the log. Which
  answers mean "sleeping", and which requests may be sent again, is :func:`wake_retry`;
* errors: every failure is a :class:`det.common.errors.MasterCallError` (the tree is drawn
  there): ``MasterUnreachable``, ``MasterTLSError`` (never retried) or ``MasterStatusError``
  with the status.

Thread-safe: each thread gets its own pooled ``requests.Session`` (they are not thread-safe).
Runs inside task containers on Python 3.8+.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, List, Mapping, Union

import requests
import urllib3

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

#: A query string's value as requests encodes it (a list repeats its key; None leaves it out).
QueryValue = Union[str, int, float, List[str], List[int], None]

ALLOCATION_TOKEN_HEADER = "Grpc-Metadata-x-allocation-token"
_RETRY_STATUSES = frozenset({502, 503, 504})
# How long a call waits for a sleeping master (seconds; 0: not at all).
WAKE_SECONDS_ENV = "DET_MASTER_WAKE_SECONDS"
DEFAULT_WAKE_SECONDS = 300.0
WAKE_BACKOFF_BASE = 1.0
WAKE_BACKOFF_CAP = 10.0
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
WAKING = "waking the master at {url} (it sleeps when idle; waiting up to {seconds:.0f} s)"


def wake_seconds_from_env(default: float = DEFAULT_WAKE_SECONDS) -> float:
    """:data:`WAKE_SECONDS_ENV` as seconds; ``default`` when unset. ValueError names it."""
    text = os.environ.get(WAKE_SECONDS_ENV, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{WAKE_SECONDS_ENV} must be a number of seconds, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{WAKE_SECONDS_ENV} must be 0 or more, not {text!r}")
    return value


def wake_delays(total: float) -> list[float]:
    """The waits between a call's tries while its master wakes, ``total`` seconds at most."""
    delays: list[float] = []
    while True:
        delay = backoff(len(delays), base=WAKE_BACKOFF_BASE, cap=WAKE_BACKOFF_CAP)
        if sum(delays) + delay > total:
            return delays
        delays.append(delay)


def platform_answer(resp: requests.Response) -> bool:
    """An error answer that does not come from the master: det's master answers every error
    as JSON; a platform in front of it (an ALB with no target, CloudFront, Cloud Run's front
    end, nginx) answers with a page of its own."""
    kind = resp.headers.get("Content-Type", "").lower()
    return resp.status_code in _RETRY_STATUSES and "json" not in kind


def _not_connected(e: requests.ConnectionError) -> bool:
    """No connection was made, so no byte of the request was sent: refused or a connect
    timeout (not a name that does not resolve: that is a wrong URL, not a sleeping master)."""
    if isinstance(e, requests.exceptions.ConnectTimeout):
        return True
    reason = getattr(e.args[0], "reason", None) if e.args else None
    resolve = getattr(urllib3.exceptions, "NameResolutionError", ())
    if resolve and isinstance(reason, resolve):
        return False
    return isinstance(reason, urllib3.exceptions.NewConnectionError)


def wake_retry(method: str, resp: requests.Response | None, error: Exception | None) -> str:
    """Whether a failed try waits for a waking master: ``"wake"`` (it is asleep or waking:
    wait, whatever the method), ``"idempotent"`` (wait only if sending the request again is
    harmless) or ``""`` (not a sleeping master's answer).

    * The platform's 503 (:func:`platform_answer`): no master got the request (an ALB answers
      so only when it has no target to choose; Cloud Run when it has no instance): ``wake``.
    * The platform's 502/504 (a task registered but not yet listening, a proxy timing out):
      the request may have reached a master: ``idempotent``.
    * The master's own 503 (JSON; its database resuming, for one): ``idempotent``.
    * No connection made (refused while an instance starts): ``wake``; but only once the
      platform has said the master is waking (the caller's business: a refused connection
      alone is what a stopped VM master looks like, and is said at once).
    """
    if error is not None:
        if isinstance(error, requests.ConnectionError) and _not_connected(error):
            return "wake"
        return ""
    if resp is None:
        return ""
    if resp.status_code == 503 and platform_answer(resp):
        return "wake"
    if resp.status_code in _RETRY_STATUSES:
        return "idempotent"
    return ""


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
        wake_seconds: float | None = None,
        on_wake: Callable[[str], None] | None = None,
    ) -> None:
        """``cert``: how to verify the master (default: from ``DET_MASTER_CERT_FILE``/``NAME``,
        CertError when unusable); ``cert_setting`` names the setting in TLS error messages.
        ``wake_seconds``: how long a call waits for a sleeping master (default:
        :data:`WAKE_SECONDS_ENV`, else 300 s); ``on_wake(message)``: told once when a wait
        begins (default: the log, at WARNING); told again only after the master answered."""
        self.master_url = _master_url.canonicalize(master_url)
        self._wake_seconds = wake_seconds if wake_seconds is not None else wake_seconds_from_env()
        self._on_wake = on_wake
        self._waking = False
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
        params: Mapping[str, QueryValue] | None = None,
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
        wake_attempt = 0
        waited = 0.0  # seconds slept waiting for a sleeping master
        while True:
            delay = backoff(attempt, base=0.1, cap=self._backoff_cap)
            can_retry = retry_seconds > 0 and time.monotonic() + delay <= deadline
            resp: requests.Response | None = None
            failure: Exception | None = None
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
                failure = e
            except requests.RequestException as e:  # a malformed URL, too many redirects...
                raise MasterCallError(f"{method} {url}: {e}") from e
            if resp is not None and resp.status_code < 400:
                self._waking = False
                return resp
            slept = self._wait_for_wake(method, resp, failure, wake_attempt, waited)
            if slept is not None:
                wake_attempt += 1
                waited += slept
                continue
            if failure is not None:
                if not can_retry:
                    raise MasterUnreachable(
                        self.master_url, f"{method} {path}: {failure}"
                    ) from failure
                logger.debug("%s %s: %s; retrying in %.1fs", method, path, failure, delay)
            else:
                assert resp is not None
                if resp.status_code not in _RETRY_STATUSES or not can_retry:
                    cls = NotFoundError if resp.status_code == 404 else MasterStatusError
                    raise cls(method, path, resp.status_code, resp.text)
                logger.debug(
                    "%s %s: HTTP %s; retrying in %.1fs", method, path, resp.status_code, delay
                )
                resp.close()
            self._sleep(delay)
            attempt += 1

    def _wait_for_wake(
        self,
        method: str,
        resp: requests.Response | None,
        failure: Exception | None,
        attempt: int,
        waited: float,
    ) -> float | None:
        """Sleep before the next try when this failure is a sleeping master's and the call may
        wait for it (:func:`wake_retry`), and say so once; the seconds slept, or None when it is
        not a sleeping master's failure or the call has waited ``wake_seconds`` already."""
        verdict = wake_retry(method, resp, failure)
        if not verdict or (verdict == "idempotent" and method.upper() not in _IDEMPOTENT):
            return None
        if failure is not None and not self._waking:
            return None  # refused before any platform said the master is waking
        if verdict == "idempotent" and not self._waking:
            return None  # the usual retries (retry_seconds) decide
        delay = backoff(attempt, base=WAKE_BACKOFF_BASE, cap=WAKE_BACKOFF_CAP)
        if waited + delay > self._wake_seconds:
            return None
        if not self._waking:
            self._waking = True
            message = WAKING.format(url=self.master_url, seconds=self._wake_seconds)
            if self._on_wake is not None:
                self._on_wake(message)
            else:
                logger.warning("%s", message)
        if resp is not None:
            resp.close()
        self._sleep(delay)
        return delay

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
