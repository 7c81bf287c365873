"""The agent loop: heartbeat (the first one registers), then reconcile desired vs actual.

Each pass: fold Docker's view into the records -> send what *is* -> receive what *should be* ->
`reconcile.decide` -> start / kill / remove. A failed heartbeat leaves every container alone and
backs off exponentially (capped, jittered); the master never needs to reach the agent. Only an
agent that has heard nothing from the master for a little less than the master's agent timeout
stops its containers (fencing: `reconcile.fence`), since the master then runs their work again
elsewhere.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from typing import Any, cast
from urllib.parse import urlparse

import docker

from det.agent.config import AgentConfig
from det.agent.containers import DockerRuntime
from det.agent.devices import Slot, discover_slots
from det.agent.errors import AgentMasterError, MasterRejected
from det.agent.harness_bundle import HarnessBundle
from det.agent.logs import CursorStore, LogShipper
from det.agent.master_client import MasterClient
from det.agent.mount_guard import MountGuard, engine_sockets, own_installation
from det.agent.preemption import NoticePoller, load_notice_source
from det.agent.reconcile import (
    FENCE_GRACE_SECONDS,
    FENCED_ERROR,
    Actual,
    Desired,
    decide,
    fence,
    fence_after,
    reports,
)
from det.common.agent_protocol import HeartbeatRequest, HeartbeatResponse
from det.common.backoff import backoff
from det.common.container_spec import ContainerSpec
from det.common.distribution import installed_version

logger = logging.getLogger(__name__)


def _version() -> str:
    return installed_version()


def local_addresses(master_url: str) -> list[str]:
    """The address this machine uses to reach the master (no packet is sent)."""
    host = urlparse(master_url).hostname or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((host, 9))
            return [str(s.getsockname()[0])]
    except OSError:
        return []


def parse_desired(answer: HeartbeatResponse) -> tuple[list[Desired], dict[str, ContainerSpec]]:
    """The heartbeat answer's containers as `Desired` items, plus the RUN specs by allocation."""
    desired: list[Desired] = []
    specs: dict[str, ContainerSpec] = {}
    for item in answer.get("containers") or []:
        alloc, action = str(item.get("allocationId", "")), item.get("action")
        if not alloc or action not in ("RUN", "KILL"):
            logger.warning("ignoring malformed desired container %r", item)
            continue
        desired.append(Desired(alloc, action))
        if action == "RUN":
            specs[alloc] = cast(ContainerSpec, dict(item.get("spec") or {}))
    return desired, specs


def watched_logs(answer: HeartbeatResponse) -> frozenset[str]:
    """The allocations whose logs someone reads now (``logsWatched``): their lines are shipped
    at once, the others' in batches (det.agent.logs.LogShipper)."""
    return frozenset(
        str(item.get("allocationId"))
        for item in answer.get("containers") or []
        if isinstance(item, dict) and item.get("logsWatched") is True
    )


# How long one wait for work may last (the master caps it at 30 s).
WORK_WAIT_SECONDS = 25.0


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        docker_client: Any = None,
        slots: list[Slot] | None = None,
        rng: random.Random | None = None,
    ) -> None:
        if docker_client is None:
            docker_client = docker.from_env()
        self.config = config
        self.slots = (
            slots
            if slots is not None
            else discover_slots(config.slot_type, config.artificial_slots)
        )
        self.master = MasterClient(config.master_url, config.token(), cert=config.master_cert())
        cursor_dir = config.state_dir / config.agent_id.replace("/", "_") / "log-cursors"
        self.shipper = LogShipper(self.master, CursorStore(cursor_dir))
        guard = MountGuard([*engine_sockets(os.environ), *config.own_paths(), *own_installation()])
        self.runtime = DockerRuntime(
            docker_client,
            self.master,
            self.shipper,
            config.agent_id,
            self.slots,
            config.container_network_mode,
            on_change=self.wake,
            harness=HarnessBundle(config.harness_dir or config.state_dir / "harness"),
            master_cert=config.master_cert(),
            mount_guard=guard,
            context_after_start=config.context_after_start,
        )
        self.notices: NoticePoller | None = None
        url = config.notice_url()
        if url is not None:
            source = load_notice_source(config.preemption_notice, url)
            self.notices = NoticePoller(source, config.preemption_poll_seconds)
        self._rng = rng or random.Random()
        self._interval = config.heartbeat_seconds
        self._failures = 0
        self._last_desired: list[Desired] | None = None
        self._addresses = local_addresses(config.master_url)
        #: When (monotonic) a heartbeat was last answered, and the agent timeout the master
        #: announced in it (fencing: ``_fence``).
        self._answered_at: float | None = None
        self._master_timeout: float | None = None
        self._clock = time.monotonic
        self.registered = threading.Event()
        self._wake = threading.Event()
        #: Quiet heartbeats: while the ``changes`` long-poll is held (``_watching``), a pass
        #: whose report equals the last one sent sends nothing until ``keepaliveSeconds`` (the
        #: master's) since the last answer; work the long-poll announces is sent for at once.
        self._keepalive = 0.0
        self._watching = False
        self._must_send = threading.Event()
        self._sent: HeartbeatRequest | None = None
        self._last_specs: dict[str, ContainerSpec] = {}

    def watch_for_work(self, stop: threading.Event) -> None:
        """Wakes the loop as soon as the master places work on this agent or asks it to kill
        some (its ``changes`` long-poll), so a task starts without waiting for the next
        heartbeat. A master without the long-poll (404), or one that is down, leaves the
        heartbeat as the only way, as before."""
        while not stop.is_set():
            if not self.registered.is_set():
                stop.wait(self._interval)
                continue
            asked = time.monotonic()
            try:
                changed = self.master.wait_for_work(self.config.agent_id, WORK_WAIT_SECONDS)
            except MasterRejected as e:
                self._watching = False
                if e.status == 404:
                    logger.info("the master has no work long-poll: heartbeats only")
                    return
                stop.wait(self._interval)
                continue
            except AgentMasterError:
                self._watching = False
                stop.wait(self._interval)
                continue
            if changed:
                logger.debug("the master has new work for this agent: heartbeat now")
                self._watching = True
                self._must_send.set()
                self.wake()
            elif time.monotonic() - asked < 1.0:
                # Answered at once (its waits are all taken): no word would come; every pass
                # sends, and no spin.
                self._watching = False
                stop.wait(self._interval)
            else:
                self._watching = True

    def wake(self) -> None:
        """Run the next pass now (a container changed state, or the agent is stopping)."""
        self._wake.set()

    def _body(self, actual: list[Actual]) -> HeartbeatRequest:
        return {
            "resourcePool": self.config.resource_pool,
            "version": _version(),
            "labels": dict(self.config.labels),
            "addresses": self._addresses,
            "slots": [s.to_wire() for s in self.slots],
            "containers": reports(self._last_desired, actual),
            "preemptionNotice": self.notices.current() if self.notices else None,
        }

    def _heartbeat_failed(self, e: AgentMasterError) -> float:
        """Keep every container running and try again later (0.25 jitter spreads a fleet's
        reconnects after a master restart). An outage is logged as a warning at the 1st and 10th
        failure in a row; a refusal (4xx: wrong token, unknown pool) is not an outage: an error,
        at the 1st and every 10th, naming the status, since only the operator can fix it."""
        self._failures += 1
        delay = backoff(
            self._failures,
            base=self._interval,
            cap=self.config.max_backoff_seconds,
            jitter=0.25 * self._rng.random(),
        )
        if isinstance(e, MasterRejected):
            log = logger.error if self._failures % 10 == 1 else logger.debug
            log(
                "heartbeat refused by the master (check the agent token and resource pool; "
                "%d in a row, next in %.1fs): %s",
                self._failures,
                delay,
                e,
            )
        else:
            log = logger.warning if self._failures in (1, 10) else logger.debug
            log("heartbeat failed (%d in a row, next in %.1fs): %s", self._failures, delay, e)
        return delay

    def tick(self) -> float:
        """One pass; returns how long to wait before the next one."""
        try:
            self.runtime.refresh()
        except Exception as e:  # Docker hiccup: report what we knew, try again next pass
            logger.warning("cannot list containers: %s", e)
        actual = self.runtime.actual()
        body = self._body(actual)
        if self._quiet(body):
            # Nothing to tell and nothing announced: act on the last answer (a container whose
            # logs are shipped now is removed) without asking the master.
            return self._apply(self._last_desired, self._last_specs, actual)
        self._must_send.clear()
        try:
            answer = self.master.heartbeat(self.config.agent_id, body)
        except AgentMasterError as e:
            self._sent = None
            return self._fence(actual, self._heartbeat_failed(e))
        self._sent = body
        if self._failures or not self.registered.is_set():
            logger.info("heartbeat ok: connected to %s", self.config.master_url)
        self._failures = 0
        self._answered_at = self._clock()
        self.registered.set()
        hb = answer.get("heartbeatSeconds")
        if isinstance(hb, int | float) and hb > 0:
            self._interval = float(hb)
        timeout = answer.get("agentTimeoutSeconds")
        self._master_timeout = float(timeout) if isinstance(timeout, int | float) else None
        keepalive = answer.get("keepaliveSeconds")
        self._keepalive = float(keepalive) if isinstance(keepalive, int | float) else 0.0
        self.runtime.fence_seconds = self.fence_after()
        cluster_id = answer.get("clusterId")
        if isinstance(cluster_id, str) and cluster_id and self.runtime.adopt(cluster_id):
            # The first answer named the cluster: what runs here is known only now.
            actual = self.runtime.actual()
        desired, specs = parse_desired(answer)
        self.shipper.watch(watched_logs(answer))
        self._last_desired, self._last_specs = desired, specs
        return self._apply(desired, specs, actual)

    def _quiet(self, body: HeartbeatRequest) -> bool:
        """Whether this pass may send nothing: the long-poll is held, it announced nothing,
        the report is the last one sent, and the master answered within its keepalive."""
        if not (self._watching and self._keepalive > 0 and self.registered.is_set()):
            return False
        if self._must_send.is_set() or self._answered_at is None or body != self._sent:
            return False
        # Sent a pass early, so the master hears from the agent within the keepalive.
        since: float = self._clock() - self._answered_at
        return since < self._keepalive - self._interval

    def _apply(
        self,
        desired: list[Desired] | None,
        specs: dict[str, ContainerSpec],
        actual: list[Actual],
    ) -> float:
        """Starts, kills and removes what ``desired`` asks of ``actual``; the next pass's wait."""
        plan = decide(desired, actual)
        for alloc in plan.start:
            self.runtime.start(alloc, specs[alloc])
        for alloc in plan.kill:
            self.runtime.kill(alloc)
        for alloc in plan.remove:
            self.runtime.remove(alloc)
        # Starts wake the loop themselves when they finish (`wake`); a kill changes what we
        # report within the grace period, so look again soon.
        return float(min(self._interval, 0.25) if plan.kill else self._interval)

    def fence_after(self) -> float | None:
        """Seconds without an answer after which this agent stops its containers (None: never)."""
        return fence_after(self._master_timeout, self.config.fence_seconds)

    def _fence(self, actual: list[Actual], delay: float) -> float:
        """After a failed heartbeat: stops every container once the master has not answered
        for :meth:`fence_after` seconds (it has given this agent up, or is about to, and runs
        the work elsewhere); returns how long to wait, never past that moment."""
        after = self.fence_after()
        if after is None or self._answered_at is None:
            return delay
        silent = self._clock() - self._answered_at
        stopping = fence(actual, silent, after)
        if stopping:
            logger.warning(
                "fencing: no answer from the master for %.0fs (its agent timeout is %s):"
                " stopping %d task container(s) %s, whose work the master runs again elsewhere",
                silent,
                f"{self._master_timeout:.0f}s" if self._master_timeout else "unknown",
                len(stopping),
                list(stopping),
            )
        for alloc in stopping:
            self.runtime.kill(alloc, grace=FENCE_GRACE_SECONDS, error=FENCED_ERROR)
        if silent < after:
            return max(0.05, min(delay, after - silent))
        # Fenced: look again soon while the stops are under way, then at the backoff's pace.
        return min(delay, 0.25) if stopping else delay

    def run(self, stop: threading.Event) -> None:
        """Run until `stop` is set (then call `wake`). Containers keep running when the agent
        exits."""
        logger.info(
            "agent %s: %d slot(s) %s, master %s",
            self.config.agent_id,
            len(self.slots),
            [s.type for s in self.slots],
            self.config.master_url,
        )
        # The containers of a previous agent process are adopted at the first heartbeat answer
        # (``DockerRuntime.adopt``): which are ours depends on the master's cluster id.
        self.shipper.start()
        if self.notices is not None:
            self.notices.start()
        if self.config.wait_for_work:
            threading.Thread(
                target=self.watch_for_work, args=(stop,), name="det-agent-work-wait", daemon=True
            ).start()
        try:
            while not stop.is_set():
                # Cleared before the pass, so a wake-up during it is not lost.
                self._wake.clear()
                try:
                    delay = self.tick()
                except Exception:  # a bug in one pass must not stop the agent (or its work)
                    logger.exception("agent pass failed")
                    delay = self._interval
                self._wake.wait(delay)
        finally:
            if self.notices is not None:
                self.notices.stop()
            self.shipper.stop()
