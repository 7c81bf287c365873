"""`LogFollower`: one thread per container, reading its Docker log stream into the shipper."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import requests

from det.agent.logs import Cursor, LogShipper, Timestamp, read_frames, task_log

logger = logging.getLogger(__name__)


#: Attempts at reading the rest of a stopped container's log whose stream could not be opened
#: or broke: a container that exits at once can end before its first read succeeds.
STOPPED_RETRIES = 5
#: How long after a stopped container's stream ended its log is read once more.
SWEEP_DELAY = 0.5


class LogFollower(threading.Thread):
    """Follows `docker logs --follow --timestamps` of one container until it stops.

    Resumes from the shipper's cursor for the container (agent restart) and, when the stream
    could not be opened or broke (Docker engine hiccup), from the last line read: forever while
    the container runs, ``STOPPED_RETRIES`` times once it has stopped. It ends when a stream of
    a stopped container has been read to its end, and read once more ``SWEEP_DELAY`` later.
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
        swept = False
        try:
            while True:
                resume, complete = self._follow(stream, resume)
                running = self._running()
                if complete and not running:
                    if swept:
                        return
                    # Docker can end the follow stream of a container that exits at once before
                    # its logger has written the last lines: read once more from the last line.
                    swept = True
                    time.sleep(SWEEP_DELAY)
                    continue
                failures += 1
                if not running and failures > STOPPED_RETRIES:
                    logger.warning(
                        "logs of %s: giving up after %d failed reads of the stopped container",
                        self._key,
                        failures,
                    )
                    return
                time.sleep(min(10.0, 0.5 * 2**failures))
        finally:
            with stream.lock:
                stream.reader_done = True
            self.stopped.set()
            logger.debug("log follower for %s finished", self._key)

    def _follow(self, stream: Any, resume: Cursor | None) -> tuple[Cursor | None, bool]:
        """Ship lines after `resume` until the stream ends; returns the new resume point and
        whether the stream was read to its end (not: it could not be opened, or it broke)."""
        skip = resume.count if resume else 0
        try:
            resp = self._open(resume.ts if resume else None)
        except Exception as e:
            logger.warning("cannot open logs of %s: %s", self._key, e)
            return resume, False
        complete = False
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
            complete = True
        except (requests.RequestException, OSError) as e:
            logger.info("log stream of %s broke: %s", self._key, e)
        finally:
            resp.close()
        return resume, complete
