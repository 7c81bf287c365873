"""`LogFollower`: one thread per container, reading its Docker log stream into the shipper."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import requests

from det.agent.logs import Cursor, LogShipper, Timestamp, read_frames, task_log

logger = logging.getLogger(__name__)


class LogFollower(threading.Thread):
    """Follows `docker logs --follow --timestamps` of one container until it stops.

    Resumes from the shipper's cursor for the container (agent restart) and, when the stream
    breaks while the container still runs (Docker engine hiccup), from the last line read.
    """

    def __init__(
        self,
        docker_client: Any,
        shipper: LogShipper,
        docker_id: str,
        key: str,
        meta: dict[str, str],
    ) -> None:
        super().__init__(name=f"logs-{key[:8]}", daemon=True)
        self._docker = docker_client
        self._shipper = shipper
        self._docker_id = docker_id
        self._key = key
        self._meta = meta
        self.stopped = threading.Event()

    def _open(self, since: Timestamp | None) -> Any:
        api = self._docker.api
        params: dict[str, Any] = {
            "stdout": 1,
            "stderr": 1,
            "follow": 1,
            "timestamps": 1,
            "tail": "all",
        }
        if since is not None:
            # Exact to the nanosecond: the SDK's own `since` takes whole or float seconds.
            params["since"] = since.docker_since()
        url = f"{api.base_url}/v{api.api_version}/containers/{self._docker_id}/logs"
        # timeout=None: a quiet training job may print nothing for hours.
        resp = api.get(url, params=params, stream=True, timeout=None)
        resp.raise_for_status()
        return resp

    def _running(self) -> bool:
        try:
            status: str = self._docker.containers.get(self._docker_id).status
        except Exception:
            return False
        return status in ("running", "restarting", "paused", "created")

    def run(self) -> None:
        stream = self._shipper.stream(self._key)
        resume: Cursor | None = stream.shipped
        failures = 0
        try:
            while True:
                resume = self._follow(stream, resume)
                if not self._running():
                    return
                failures += 1
                time.sleep(min(10.0, 0.5 * 2**failures))
        finally:
            with stream.lock:
                stream.reader_done = True
            self.stopped.set()
            logger.debug("log follower for %s finished", self._key)

    def _follow(self, stream: Any, resume: Cursor | None) -> Cursor | None:
        """Ship lines after `resume` until the stream ends; returns the new resume point."""
        skip = resume.count if resume else 0
        try:
            resp = self._open(resume.ts if resume else None)
        except Exception as e:
            logger.warning("cannot open logs of %s: %s", self._key, e)
            return resume
        try:
            for stdtype, data in read_frames(resp.raw):
                text = data.decode("utf-8", errors="replace")
                ts_text, _, line = text.partition(" ")
                try:
                    ts = Timestamp.parse(ts_text)
                except ValueError:
                    logger.debug("log line without a timestamp: %r", text[:80])
                    continue
                if resume is not None and ts == resume.ts and skip > 0:
                    skip -= 1
                    continue
                if resume is not None and ts < resume.ts:
                    continue
                body = task_log(line, ts_text, stdtype, **self._meta)
                self._shipper.put(stream, ts, body)
                resume = resume.advance(ts) if resume else Cursor(ts, 1)
        except (requests.RequestException, OSError) as e:
            logger.info("log stream of %s broke: %s", self._key, e)
        finally:
            resp.close()
        return resume
