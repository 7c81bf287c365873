"""EC2 spot interruption notice, read from the instance metadata service (IMDSv2).

EC2 publishes ``/latest/meta-data/spot/instance-action`` about two minutes before it stops or
terminates a spot instance (404 until then). IMDSv2 needs a session token first: ``PUT
/latest/api/token`` with the TTL header, then every GET carries ``X-aws-ec2-metadata-token``.
The token is cached until shortly before it expires and fetched again after a 401.

``base_url`` is the agent's ``preemption_metadata_url`` (a fake server in tests).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from det.agent.errors import MetadataError as MetadataError

logger = logging.getLogger(__name__)

DEFAULT_BASE_URL = "http://169.254.169.254"
TOKEN_TTL_SECONDS = 21600
TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"


class AwsSpotNotice:
    """``check()`` → ``None`` or ``{"source": "aws-spot", "deadline": ISO-8601}``.

    Not thread-safe; one poller thread owns it.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        timeout: float = 2.0,
        token_ttl: int = TOKEN_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.token_ttl = token_ttl
        self._token: str | None = None
        self._token_expires = 0.0
        self._warned = False
        self._clock = clock

    def _open(self, request: urllib.request.Request) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            return int(exc.code), b""
        except (urllib.error.URLError, OSError) as exc:
            raise MetadataError(f"metadata service {self.base_url} unreachable: {exc}") from exc

    def _fetch_token(self) -> str:
        request = urllib.request.Request(
            self.base_url + TOKEN_PATH,
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(self.token_ttl)},
        )
        status, body = self._open(request)
        if status != 200 or not body:
            raise MetadataError(f"IMDSv2 token request answered {status}")
        self._token = body.decode().strip()
        # Renew a minute early so a token never expires between fetch and use.
        self._token_expires = self._clock() + max(self.token_ttl - 60, 1)
        return self._token

    def _get(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` with a valid token; one fresh token on 401."""
        for attempt in (1, 2):
            token = self._token
            if token is None or self._clock() >= self._token_expires:
                token = self._fetch_token()
            request = urllib.request.Request(
                self.base_url + path, headers={"X-aws-ec2-metadata-token": token}
            )
            status, body = self._open(request)
            if status == 401 and attempt == 1:
                self._token = None
                continue
            return status, body
        raise AssertionError("unreachable")  # pragma: no cover

    def metadata(self, key: str) -> str:
        """``/latest/meta-data/<key>`` (``instance-id``, ``local-ipv4``…); MetadataError if absent."""
        status, body = self._get(f"/latest/meta-data/{key}")
        if status != 200 or not body:
            raise MetadataError(f"meta-data/{key} answered {status}")
        return body.decode().strip()

    def instance_id(self) -> str:
        """This machine's EC2 instance id (the agent id of a provisioned agent)."""
        return self.metadata("instance-id")

    def check(self) -> dict[str, Any] | None:
        """The pending interruption, if any. Unreachable metadata counts as none (logged once)."""
        try:
            status, body = self._get(ACTION_PATH)
        except MetadataError as exc:
            if not self._warned:
                logger.warning("cannot read the spot notice: %s", exc)
                self._warned = True
            return None
        if status == 404:
            return None
        if status != 200:
            logger.debug("spot instance-action answered %s", status)
            return None
        return {"source": "aws-spot", "deadline": _deadline(body)}


def _deadline(body: bytes) -> str:
    """The ``time`` of ``{"action": "terminate", "time": "2026-01-01T00:02:00Z"}`` as ISO-8601.

    An unreadable body still means a notice: EC2 gives two minutes, so assume that.
    """
    try:
        data = json.loads(body)
        when = dt.datetime.fromisoformat(str(data["time"]).replace("Z", "+00:00"))
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.UTC)
    except (ValueError, KeyError, TypeError):
        logger.warning("unreadable spot instance-action %r; assuming two minutes", body[:200])
        when = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=2)
    return when.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")
