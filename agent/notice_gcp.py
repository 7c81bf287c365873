"""GCE preemption notice, read from the metadata server.

``GET /computeMetadata/v1/instance/preempted`` (header ``Metadata-Flavor: Google``) answers
``FALSE`` until GCE decides to take a Spot or preemptible VM away, then ``TRUE``; the VM gets
about 30 seconds before it is powered off. Two ways to read it:

* :meth:`GcpPreemptionNotice.check` is one GET, for the agent's notice poller;
* :meth:`GcpPreemptionNotice.watch` blocks on ``?wait_for_change=true&last_etag=…`` so the
  notice arrives the moment it is published; on 503 (the server's way of saying "not now") or
  an unreachable server it waits a second and asks again.

``base_url`` is the agent's ``preemption_metadata_url`` (a fake server in tests).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from det.agent.errors import MetadataError as MetadataError

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://metadata.google.internal"
PREEMPTED_PATH = "/computeMetadata/v1/instance/preempted"
NAME_PATH = "/computeMetadata/v1/instance/name"
HEADERS = {"Metadata-Flavor": "Google"}
# What GCE documents between the preemption notice and the power-off.
NOTICE_SECONDS = 30
RETRY_SECONDS = 1.0


class GcpPreemptionNotice:
    """``check()`` / ``watch()`` → ``None`` or ``{"source": "gcp-preemption", "deadline": ISO}``.

    Not thread-safe; one poller thread owns it (``watch`` may be stopped from another thread
    through its ``stop`` event).
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 2.0,
        now: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._now = now
        self._sleep = sleep
        self._warned = False

    def _get(
        self, path: str, params: dict[str, str] | None = None, timeout: float | None = None
    ) -> tuple[int, str, str | None]:
        """(status, body, ETag) of a metadata GET."""
        url = self.base_url + path
        if params:
            url += "?" + urllib.parse.urlencode(params)
        request = urllib.request.Request(url, headers=HEADERS)
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:
                body = response.read().decode().strip()
                return int(response.status), body, response.headers.get("ETag")
        except urllib.error.HTTPError as exc:
            return int(exc.code), "", None
        except (urllib.error.URLError, OSError) as exc:
            raise MetadataError(f"metadata server {self.base_url} unreachable: {exc}") from exc

    def instance_name(self) -> str:
        """This VM's name: the agent id of a provisioned agent."""
        status, body, _ = self._get(NAME_PATH)
        if status != 200 or not body:
            raise MetadataError(f"instance/name answered {status}")
        return body

    def _notice(self) -> dict[str, Any]:
        deadline = self._now() + dt.timedelta(seconds=NOTICE_SECONDS)
        return {
            "source": "gcp-preemption",
            "deadline": deadline.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        }

    def _warn_once(self, exc: Exception) -> None:
        if not self._warned:
            logger.warning("cannot read the preemption notice: %s", exc)
            self._warned = True

    def check(self) -> dict[str, Any] | None:
        """The preemption notice, if published. Unreachable metadata counts as none (logged once)."""
        try:
            status, body, _ = self._get(PREEMPTED_PATH)
        except MetadataError as exc:
            self._warn_once(exc)
            return None
        if status != 200:
            logger.debug("instance/preempted answered %s", status)
            return None
        return self._notice() if body.upper() == "TRUE" else None

    def watch(
        self,
        *,
        timeout_sec: int = 60,
        stop: threading.Event | None = None,
        max_seconds: float | None = None,
    ) -> dict[str, Any] | None:
        """Block until the notice is published; None once ``stop`` is set or after
        ``max_seconds``. Each hanging GET lasts at most ``timeout_sec`` (server side)."""
        give_up = None if max_seconds is None else time.monotonic() + max_seconds
        etag: str | None = None
        while not (stop is not None and stop.is_set()):
            if give_up is not None and time.monotonic() >= give_up:
                return None
            params = {}
            if etag is not None:  # the first read returns at once and gives us the ETag
                params = {
                    "wait_for_change": "true",
                    "last_etag": etag,
                    "timeout_sec": str(timeout_sec),
                }
            try:
                status, body, new_etag = self._get(
                    PREEMPTED_PATH, params, timeout=timeout_sec + self.timeout
                )
            except MetadataError as exc:
                self._warn_once(exc)
                self._sleep(RETRY_SECONDS)
                continue
            if status != 200:
                # 503: the documented answer to retry after a second; others: same, logged.
                logger.debug("instance/preempted (wait) answered %s", status)
                self._sleep(RETRY_SECONDS)
                continue
            if body.upper() == "TRUE":
                return self._notice()
            if new_etag is None:  # cannot hang without an ETag: poll instead
                self._sleep(RETRY_SECONDS)
            etag = new_etag or etag
        return None
