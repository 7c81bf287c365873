"""`LogFollower`: one thread per container, reading its Docker log stream into the shipper."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Any

import requests
import urllib3

from det.agent.logs import Cursor, LogShipper, Timestamp, read_frames, task_log

logger = logging.getLogger(__name__)


#: Attempts at reading the rest of a stopped container's log whose stream could not be opened
#: or broke: a container that exits at once can end before its first read succeeds.
STOPPED_RETRIES = 5
#: How long after a stopped container's stream ended its log is read once more.
SWEEP_DELAY = 0.5
#: How long a follow stream may stay quiet before the follower asks whether the container still
#: runs: Docker does not always end the follow stream of a container that exits (under load,
#: one was seen to stay open with lines of the exited container never sent), so the stream of
#: a stopped container is never waited on for longer than this.
IDLE_SECONDS = 5.0

#: How far before the last line read a re-read of the log starts. Docker stamps a line when its
#: stdout or its stderr copier reads it, and the two copiers append to the log in whichever order
#: they take its lock, so a line can follow one stamped after it (issue 44, under load: a
#: container's last stderr line, stamped just before the stdout line written ahead of it, was
#: dropped as already read). A line of the window read before is known by stamp, stream and text.
REREAD_OVERLAP_NS = 2_000_000_000

_END, _IDLE, _BROKE = "end", "idle", "broke"
_Seen = tuple[Timestamp, str, int]


class LogFollower(threading.Thread):
    """Follows `docker logs --follow --timestamps` of one container until it stops.

    Resumes from the shipper's cursor for the container (agent restart) and, when the stream
    could not be opened or broke (Docker engine hiccup), from the last line read: forever while
    the container runs, ``STOPPED_RETRIES`` times once it has stopped. A stream quiet for
    ``IDLE_SECONDS`` is read again from the last line read: followed while the container runs,
    to its end (no follow) once it has stopped. It ends when a stream of a stopped container has
    been read to its end, and read once more ``SWEEP_DELAY`` later.
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
        #: The lines read within REREAD_OVERLAP_NS of the latest, in the order read.
        self._recent: collections.deque[_Seen] = collections.deque()
        self._recent_set: set[_Seen] = set()

    def _seen_before(self, ts: Timestamp, stdtype: str, line: str, latest: Cursor | None) -> bool:
        """Whether this follower read the line already; remembers it if not."""
        key = (ts, stdtype, hash(line))
        if key in self._recent_set:
            return True
        self._recent.append(key)
        self._recent_set.add(key)
        if latest is not None:
            oldest = max(ts, latest.ts).before(REREAD_OVERLAP_NS)
            while self._recent and self._recent[0][0] < oldest:
                self._recent_set.discard(self._recent.popleft())
        return False

    def _open(self, since: Timestamp | None, follow: bool) -> Any:
        api = self._docker.api
        params: dict[str, Any] = {
            "stdout": 1,
            "stderr": 1,
            "follow": 1 if follow else 0,
            "timestamps": 1,
            "tail": "all",
        }
        if since is not None:
            # Exact to the nanosecond: the SDK's own `since` takes whole or float seconds.
            params["since"] = since.docker_since()
        url = f"{api.base_url}/v{api.api_version}/containers/{self._docker_id}/logs"
        # A read quiet for IDLE_SECONDS ends the read (see run); a quiet training job that
        # prints nothing for hours is read again from the last line every IDLE_SECONDS.
        resp = api.get(url, params=params, stream=True, timeout=(60, IDLE_SECONDS))
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
        running = True
        try:
            while True:
                # A stopped container's log is read without following: the read cannot wait
                # on a stream Docker never ends.
                resume, outcome = self._follow(stream, resume, follow=running)
                running = self._running()
                if outcome == _IDLE:
                    continue
                if outcome == _END and not running:
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
            self._shipper.finished(stream)
            self.stopped.set()
            logger.debug("log follower for %s finished", self._key)

    def _follow(
        self, stream: Any, resume: Cursor | None, *, follow: bool
    ) -> tuple[Cursor | None, str]:
        """Ship lines after `resume` until the stream ends; returns the new resume point and
        how the read ended: ``end`` (read to its end), ``idle`` (quiet for IDLE_SECONDS) or
        ``broke`` (it could not be opened, or it broke)."""
        # A follower that has read nothing yet resumes from the shipper's saved cursor (an agent
        # restart): from its stamp, less the lines counted at it. Any other read starts
        # REREAD_OVERLAP_NS earlier and passes over the lines it read before.
        fresh = not self._recent
        start = resume
        skip = resume.count if resume is not None and fresh else 0
        since = None if start is None else start.ts if fresh else start.ts.before(REREAD_OVERLAP_NS)
        try:
            resp = self._open(since, follow)
        except Exception as e:
            logger.warning("cannot open logs of %s: %s", self._key, e)
            return resume, _BROKE
        outcome = _BROKE
        try:
            for stdtype, data in read_frames(resp.raw):
                text = data.decode("utf-8", errors="replace")
                ts_text, _, line = text.partition(" ")
                try:
                    ts = Timestamp.parse(ts_text)
                except ValueError:
                    logger.debug("log line without a timestamp: %r", text[:80])
                    continue
                if start is not None and ts == start.ts and skip > 0:
                    skip -= 1
                    continue
                # Not "ts < resume.ts": a line may follow one stamped after it.
                if self._seen_before(ts, stdtype, line, resume):
                    continue
                body = task_log(line, ts_text, stdtype, **self._meta)
                self._shipper.put(stream, ts, body)
                resume = resume.advance(ts) if resume else Cursor(ts, 1)
            outcome = _END
        except (urllib3.exceptions.ReadTimeoutError, requests.Timeout):
            outcome = _IDLE
        # urllib3's errors while reading a response (a dropped connection: ProtocolError) are
        # not OSErrors: without them here, a broken stream ended the follower for good.
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as e:
            logger.info("log stream of %s broke: %s", self._key, e)
        except Exception:
            # Read again from the last line like any broken read: an exception out of here
            # would end the follower, and its container would count as every line shipped.
            logger.exception("reading the log stream of %s failed", self._key)
        finally:
            resp.close()
        return resume, outcome
