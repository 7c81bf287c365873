"""The control plane at scale: simulated agents and trials at production rates against a real
``det-master`` process and PostgreSQL (``pgserver``) on this machine.

For each point N x M (``--points 100x200,200x400``; ``--quick``: one point of 20 x 40 measured
for 20 s, under a minute in all) the bench starts a master with the production defaults
(``agent_timeout_seconds: 30``, one API process, two user processes; ``--set KEY=YAML`` adds
master.yaml keys, e.g. the serverless shape's ``api_threads``/``db_pool_size``) on a fresh
database, creates experiments of up to 50 trials each (M trials in all) and runs, in this one
load-generator process (asyncio, a small keep-alive HTTP/1.1 client of its own, so thousands
of connections cost no threads):

- N agents speaking the heartbeat protocol as det-agent does (a pass every ``heartbeatSeconds``
  the master answers, 1 s; each agent's ``changes`` long-poll held; ``POST
  /api/v1/agents/<id>/heartbeat`` when its report changed, when the long-poll announced work,
  or a pass before the master's ``keepaliveSeconds``, 7.5 s, since its last answer: quiet
  heartbeats), ``ceil(M / N)`` slots each; every container the master asks for is reported
  RUNNING at once and becomes a simulated trial;
- M trials, each with the production schedule (phases spread at random, seeded): 10 training
  metrics every 10 s, a validation every 60 s, a checkpoint every 600 s, all through the real
  routes with the allocation token; each trial holds its preemption long-poll
  (``timeout_seconds=60``, as the harness asks) on a connection of its own;
- log lines: each trial prints ``LOG_LINES_PER_SECOND`` lines a second, which its agent ships
  as det-agent's shipper does (det.agent.logs): held until the first held line has waited
  ``QUIET_SECONDS``, then all in one ``POST /api/v1/task/logs``; at the next second when a
  held line is of an allocation the last heartbeat answer marked ``logsWatched`` (the
  followers' trial);
- ``--users`` users (3) each listing the experiments (20 a page) every 2 s and ``--followers``
  (2) following a trial's logs (``follow=true``).

Once every trial runs, the bench waits ``--warmup`` seconds and measures for ``--seconds``. It
prints, per point: the master's CPU (all its processes: cores used, CPU ms per agent-second,
per report and per heartbeat), PostgreSQL's and the load generator's own CPU (on 2 cores it
competes with the master: read the master's figures beside it), p50/p99 of reports (metrics,
validations, checkpoints) and heartbeats, heartbeats missed (a tick at which the previous
heartbeat was still unanswered, or an answer other than 200), the longest gap between an agent's
answered heartbeats, agents marked lost (the master's ``lost`` events), the database's growth
scaled to an hour, and the load average at the start and end of the window. The knee is the
first point where the p99 of reports or heartbeats crosses 250 ms.

    .venv/bin/python bench/scale.py [--quick] [--points 100x200,200x400] [--seconds 90]
        [--warmup 15] [--set KEY=YAML] [--master-cpus 1] [--profile DIR]

``--routes`` prints, per point, where the front processes' CPU went over the window: each
route's requests a second and the CPU its app call took (``bench/_routes/sitecustomize.py``
wraps the WSGI app the fronts serve; waitress's own work, its parsing, event loop and writing,
is the rest of the fronts' CPU, printed as "outside the app"), and the PostgreSQL CPU of the
statements each route sent (the server processes' run time while a request held their pooled
connections).

``--waits`` (with ``--routes``) prints, per point, each route's wall time in the app beside its
CPU time (p50 / p99) and how long the fronts' threads waited for a pooled database connection:
a report whose app call took 300 ms of wall and 2 ms of CPU waited, for a connection or for
the interpreter, and the pool's waits tell which. Around the app, per route: from the read of a
request's first bytes to its queueing for a worker thread, its wait in that queue and the
worker's whole service (the app and the writing of the answer); and the event loop's work
between two waits (a request whose bytes come meanwhile is read after it), its wall beside the
main thread's CPU (the rest is the loop waiting for the interpreter).

``--heap SECONDS`` (with ``--routes``) prints each front's census of its collector's objects that
long after it started: by generation, and the old generation (what a full collection scans)
by type.

``--profile DIR`` records a py-spy profile (``--gil``: where the interpreter's time goes) of
each master process over each point's window (``bench/profile_top.py DIR/NxM`` sums them up).

``--master-cpus 1`` pins the master's processes to one core, as one serverless instance of 1
vCPU (with ``--set db_pool_size=5 --set user_api_processes=1``, deploy/common/serverless.py's
connection budget); PostgreSQL and the load generator keep the other core.
``--master-cpu-quota 0.5`` limits them to half a core's time (a CFS quota, as an ECS task of
512 CPU units; needs root): with ``--master-cpus 1``, AWS's serverless task.

A master on a loaded shared machine measures the machine as much as itself: compare points of
one run, and read the load average beside each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import math
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from det.agent.logs import QUIET_SECONDS

TRAINING_SECONDS = 10.0  # 10 training metrics every 10 s
VALIDATION_SECONDS = 60.0
CHECKPOINT_SECONDS = 600.0
LOG_LINES_PER_SECOND = 1
METRICS = 10
KNEE_MS = 250.0
TRIALS_PER_EXPERIMENT = 50
LONG_POLL_SECONDS = 60  # what the harness asks (the master caps it at 30)

CONFIG = """
name: scale-{i}
entrypoint: python3 train.py
searcher: {{name: random, metric: validation_loss, max_trials: {n}, max_concurrent_trials: {n},
  max_length: 1000000}}
hyperparameters: {{lr: {{type: double, minval: 0.001, maxval: 0.1}}}}
resources: {{slots_per_trial: 1}}
"""


# -- pure parts (tests/unit/bench/test_scale.py) -----------------------------------------------


@dataclasses.dataclass(frozen=True)
class Point:
    agents: int
    trials: int

    @staticmethod
    def parse(text: str) -> Point:
        """``"100x200"`` -> Point(100, 200); anything else is refused naming the text."""
        a, sep, t = text.strip().lower().partition("x")
        if not sep or not a.isdigit() or not t.isdigit() or int(a) < 1 or int(t) < 0:
            raise ValueError(
                f"a point is AGENTSxTRIALS with AGENTS >= 1 (e.g. 100x200), not {text!r}"
            )
        return Point(int(a), int(t))

    @property
    def slots_per_agent(self) -> int:
        return max(1, math.ceil(self.trials / self.agents))

    def __str__(self) -> str:
        return f"{self.agents}x{self.trials}"


def schedule(
    phases: dict[str, float], periods: dict[str, float], horizon: float
) -> list[tuple[float, str]]:
    """A trial's events in ``[0, horizon)``: each kind at ``phase + k * period``, in time order
    (kinds due at the same time in the order of ``periods``)."""
    order = {k: i for i, k in enumerate(periods)}
    out = []
    for kind, period in periods.items():
        t = phases[kind] % period
        while t < horizon:
            out.append((t, kind))
            t += period
    out.sort(key=lambda e: (e[0], order[e[1]]))
    return out


PERIODS = {
    "training": TRAINING_SECONDS,
    "validation": VALIDATION_SECONDS,
    "checkpoint": CHECKPOINT_SECONDS,
}


@dataclasses.dataclass
class AgentLink:
    """What a simulated agent knows of its master, as det.agent.daemon keeps it."""

    watching: bool = False
    must_send: bool = False
    keepalive: float = 0.0
    sent: Any = None
    answered_at: float = 0.0
    #: The allocations the last answer marked ``logsWatched`` (their lines go at once).
    logs_watched: frozenset[str] = frozenset()

    def quiet(self, body: Any, since_answer: float, interval: float) -> bool:
        """Whether this pass sends nothing (det.agent.daemon.Agent._quiet)."""
        return (
            self.watching
            and self.keepalive > 0
            and not self.must_send
            and body == self.sent
            and since_answer < self.keepalive - interval
        )


def random_phases(rng: random.Random, periods: dict[str, float] = PERIODS) -> dict[str, float]:
    """Each kind's first time, uniform over its period (a fleet's trials did not start together)."""
    return {k: rng.uniform(0, p) for k, p in periods.items()}


#: The master's keepaliveSeconds at the bench's agent timeout (det.master.services.agents).
KEEPALIVE_SECONDS = 7.5
#: How long an agent's wait for work asks (det-agent's, det.agent.daemon.WORK_WAIT_SECONDS).
WORK_WAIT_SECONDS = 25.0


def rate_per_second(points: Point, periods: dict[str, float] = PERIODS) -> dict[str, float]:
    """The requests a second the schedule asks of the master at ``points``."""
    rates = {k: points.trials / p for k, p in periods.items()}
    # An agent whose report did not change sends one a keepalive (7.5 s at the default agent
    # timeout, 30 s): at the first 1 s pass at least a pass before it is up, so every 7 s.
    rates["heartbeat"] = points.agents / (math.floor(KEEPALIVE_SECONDS - 1.0) + 1)
    rates["logs"] = float(points.agents) if points.trials else 0.0
    return rates


def percentile(values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile (0 < q <= 100); NaN of nothing."""
    if not 0 < q <= 100:
        raise ValueError(f"q: must be in (0, 100], not {q}")
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def knee(rows: Sequence[tuple[Point, float, float]], limit_ms: float = KNEE_MS) -> Point | None:
    """The first point (in load order: agents + trials) whose report or heartbeat p99 (ms)
    is over ``limit_ms``; None when none is. A NaN p99 (nothing answered) counts as over, but
    for the reports of a point without trials (none asked)."""
    for point, report_p99, heartbeat_p99 in sorted(rows, key=lambda r: r[0].agents + r[0].trials):
        asked = (report_p99, heartbeat_p99) if point.trials else (heartbeat_p99,)
        if any(math.isnan(v) or v > limit_ms for v in asked):
            return point
    return None


def per_hour(before: int, after: int, seconds: float) -> float:
    """A growth of ``after - before`` over ``seconds``, scaled to an hour."""
    if seconds <= 0:
        raise ValueError(f"seconds: must be > 0, not {seconds}")
    return (after - before) * 3600.0 / seconds


# -- a keep-alive HTTP/1.1 client on asyncio streams -------------------------------------------


class HTTP:
    """One keep-alive connection; requests on it are sequential. Reconnects after an error."""

    def __init__(self, host: str, port: int, headers: dict[str, str]) -> None:
        self.host, self.port = host, port
        self.base = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.r: asyncio.StreamReader | None = None
        self.w: asyncio.StreamWriter | None = None

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.r is None or self.w is None:
            self.r, self.w = await asyncio.open_connection(self.host, self.port, limit=1 << 22)
        return self.r, self.w

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, bytes]:
        try:
            r, w = await self._open()
            data = orjson.dumps(body) if body is not None else b""
            head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.base}"
            if body is not None:
                head += "Content-Type: application/json\r\n"
            w.write(f"{head}Content-Length: {len(data)}\r\n\r\n".encode() + data)
            status, headers = await self._head(r)
            if headers.get("transfer-encoding") == "chunked":
                out = bytearray()
                while chunk := await self._chunk(r):
                    out += chunk
                payload = bytes(out)
            else:
                payload = await r.readexactly(int(headers.get("content-length", "0")))
            if headers.get("connection") == "close":
                self.close()
            return status, payload
        except (OSError, asyncio.IncompleteReadError, ValueError):
            self.close()
            return 0, b""

    async def stream(self, path: str, stop: asyncio.Event) -> int:
        """GETs a chunked stream and discards it until ``stop``; the bytes read."""
        n = 0
        try:
            r, w = await self._open()
            w.write(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.base}\r\n".encode())
            await self._head(r)
            while not stop.is_set():
                chunk = await self._chunk(r)
                if not chunk:
                    break
                n += len(chunk)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        self.close()
        return n

    @staticmethod
    async def _head(r: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
        status = int((await r.readuntil(b"\r\n")).split(b" ", 2)[1])
        headers = {}
        while (line := await r.readuntil(b"\r\n")) != b"\r\n":
            k, _, v = line.decode("latin-1").partition(":")
            headers[k.strip().lower()] = v.strip().lower()
        return status, headers

    @staticmethod
    async def _chunk(r: asyncio.StreamReader) -> bytes:
        size = int((await r.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await r.readexactly(size + 2)
        return data[:-2]


# -- the simulated fleet -----------------------------------------------------------------------


@dataclasses.dataclass
class Stats:
    window: tuple[float, float] = (math.inf, math.inf)
    latency: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    failed: dict[str, int] = dataclasses.field(default_factory=dict)
    missed: int = 0
    max_gap: float = 0.0
    started: int = 0

    def inside(self, t: float) -> bool:
        return self.window[0] <= t < self.window[1]

    def record(self, kind: str, t0: float, status: int) -> None:
        t1 = time.monotonic()
        if not self.inside(t0):
            return
        if status == 200:
            self.latency.setdefault(kind, []).append(1000 * (t1 - t0))
        else:
            self.failed[kind] = self.failed.get(kind, 0) + 1


class Fleet:
    def __init__(self, url: str, agent_token: str, point: Point, seed: int) -> None:
        parts = url.split("//", 1)[1].split(":")
        self.host, self.port = parts[0], int(parts[1])
        self.token = agent_token
        self.point = point
        self.rng = random.Random(seed)
        self.stats = Stats()
        self.stop = asyncio.Event()
        self.tasks: list[asyncio.Task[Any]] = []
        self.first_trial = 1  # the trial whose logs the followers follow

    def http(self, token_header: str | None = None, token: str | None = None) -> HTTP:
        header = token_header or "Authorization"
        return HTTP(self.host, self.port, {header: f"Bearer {token or self.token}"})

    def spawn(self, coro: Any) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    async def agent(self, i: int) -> None:
        """One agent as det-agent behaves: a pass a second; a heartbeat when its report changed,
        when its ``changes`` long-poll announced work, or a pass before the master's
        ``keepaliveSeconds`` since its last answer are up (quiet heartbeats, det.agent.daemon);
        at every pass without the long-poll held or a keepalive announced."""
        agent_id = f"scale-{i:05d}"
        hb, logs, wait = self.http(), self.http(), self.http()
        running: dict[str, dict[str, Any]] = {}
        slots = [
            {"id": str(s), "type": "cpu", "brand": "sim"} for s in range(self.point.slots_per_agent)
        ]
        link = AgentLink()
        self.spawn(self.changes(wait, agent_id, link))
        self.spawn(self.ship_logs(logs, agent_id, running, link))
        interval, last_ok = 1.0, time.monotonic()
        await asyncio.sleep(self.rng.uniform(0, interval))
        next_tick = time.monotonic()
        inflight: asyncio.Task[Any] | None = None
        while not self.stop.is_set():
            if inflight is not None and not inflight.done():
                if self.stats.inside(next_tick):
                    self.stats.missed += 1
            else:
                body = {
                    "resourcePool": "default",
                    "version": "sim",
                    "slots": slots,
                    "containers": [
                        {
                            "allocationId": a,
                            "containerId": f"sim-{a}",
                            "state": "RUNNING",
                            "exitCode": None,
                        }
                        for a in running
                    ],
                    "preemptionNotice": None,
                }
                if not link.quiet(body, time.monotonic() - link.answered_at, interval):
                    link.must_send = False
                    inflight = asyncio.get_running_loop().create_task(
                        self.heartbeat(hb, agent_id, body, running, link)
                    )
            next_tick += interval
            await asyncio.sleep(max(0.0, next_tick - time.monotonic()))
            if inflight is not None and inflight.done() and inflight.result():
                inflight = None
                now = time.monotonic()
                if self.stats.inside(now):
                    self.stats.max_gap = max(self.stats.max_gap, now - last_ok)
                last_ok = now

    async def heartbeat(
        self, hb: HTTP, agent_id: str, body: Any, running: dict[str, Any], link: AgentLink
    ) -> bool:
        t0 = time.monotonic()
        status, payload = await hb.request("POST", f"/api/v1/agents/{agent_id}/heartbeat", body)
        self.stats.record("heartbeat", t0, status)
        if status != 200:
            link.sent = None
            return False
        answer = orjson.loads(payload)
        link.sent, link.answered_at = body, time.monotonic()
        link.keepalive = float(answer.get("keepaliveSeconds") or 0.0)
        link.logs_watched = frozenset(
            c["allocationId"] for c in answer["containers"] if c.get("logsWatched")
        )
        for c in answer["containers"]:
            aid = c["allocationId"]
            if c["action"] == "RUN" and aid not in running:
                running[aid] = c["spec"]
                if c["spec"].get("taskType", "TRIAL") == "TRIAL":
                    self.stats.started += 1
                    self.spawn(self.trial(c["spec"]))
            elif c["action"] == "KILL":
                running.pop(aid, None)
        return True

    async def changes(self, wait: HTTP, agent_id: str, link: AgentLink) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            status, payload = await wait.request(
                "GET", f"/api/v1/agents/{agent_id}/changes?timeoutSeconds={WORK_WAIT_SECONDS:g}"
            )
            held = status == 200 and time.monotonic() - t0 >= 1.0
            changed = status == 200 and bool(orjson.loads(payload).get("changed"))
            link.watching = held or changed
            if changed:
                link.must_send = True
            if status != 200 or not (held or changed):
                await asyncio.sleep(1.0)  # answered at once: the agent waits its interval

    async def ship_logs(
        self, logs: HTTP, agent_id: str, running: dict[str, dict[str, Any]], link: AgentLink
    ) -> None:
        await asyncio.sleep(self.rng.uniform(0, 1))
        n = 0
        lines: list[dict[str, Any]] = []
        first = 0.0
        while not self.stop.is_set():
            await asyncio.sleep(1.0)
            if not lines:
                first = time.monotonic()
            for aid, spec in list(running.items()):
                for _ in range(LOG_LINES_PER_SECOND):
                    n += 1
                    lines.append(
                        {
                            "taskId": spec["env"]["DET_TASK_ID"],
                            "allocationId": aid,
                            "agentId": agent_id,
                            "log": f"step {n}: loss 0.{n % 997:03d}\n",
                            "stdtype": "stdout",
                            "source": "container",
                        }
                    )
            watched = any(line["allocationId"] in link.logs_watched for line in lines)
            if lines and (watched or time.monotonic() - first >= QUIET_SECONDS - 0.5):
                t0 = time.monotonic()
                status, _ = await logs.request("POST", "/api/v1/task/logs", {"logs": lines})
                self.stats.record("logs", t0, status)
                lines = []

    async def trial(self, spec: dict[str, Any]) -> None:
        env = spec["env"]
        header = "Grpc-Metadata-x-allocation-token"
        reports, poll = (
            self.http(header, env["DET_SESSION_TOKEN"]),
            self.http(header, env["DET_SESSION_TOKEN"]),
        )
        trial_id, run_id, alloc = (
            int(env["DET_TRIAL_ID"]),
            int(env["DET_TRIAL_RUN_ID"]),
            env["DET_ALLOCATION_ID"],
        )
        self.spawn(self.long_poll(poll, alloc))
        self.first_trial = min(self.first_trial, trial_id) if self.stats.started > 1 else trial_id
        start = time.monotonic()
        step = 0
        for at, kind in schedule(random_phases(self.rng), PERIODS, 86400.0):
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            if self.stop.is_set():
                return
            t0 = time.monotonic()
            if kind == "checkpoint":
                status, _ = await reports.request(
                    "POST",
                    "/api/v1/checkpoints",
                    {
                        "uuid": str(uuid.UUID(int=self.rng.getrandbits(128), version=4)),
                        "taskId": env["DET_TASK_ID"],
                        "allocationId": alloc,
                        "resources": {"model.pt": "1000"},
                        "metadata": {"steps_completed": step},
                        "state": "STATE_COMPLETED",
                        "training": {},
                    },
                )
            else:
                step += 100 if kind == "training" else 0
                names = (
                    [f"m{k}" for k in range(METRICS)] if kind == "training" else ["validation_loss"]
                )
                status, _ = await reports.request(
                    "POST",
                    f"/api/v1/trials/{trial_id}/metrics",
                    {
                        "group": kind,
                        "metrics": {
                            "trialId": trial_id,
                            "trialRunId": run_id,
                            "stepsCompleted": max(step, 1),
                            "metrics": {
                                "avgMetrics": {n: 1.0 / (1 + step) + k for k, n in enumerate(names)}
                            },
                        },
                    },
                )
            self.stats.record(kind, t0, status)

    async def long_poll(self, poll: HTTP, alloc: str) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            status, payload = await poll.request(
                "GET",
                f"/api/v1/allocations/{alloc}/signals/preemption?timeout_seconds={LONG_POLL_SECONDS}",
            )
            if status == 200 and orjson.loads(payload).get("preempt"):
                return
            if status != 200 or time.monotonic() - t0 < 1.0:
                await asyncio.sleep(1.0)

    async def user(self, token: str, lister: bool, trial_id: int) -> None:
        c = self.http(token=token)
        while not self.stop.is_set():
            if lister:
                t0 = time.monotonic()
                status, _ = await c.request("GET", "/api/v1/experiments?limit=20")
                self.stats.record("user list", t0, status)
                await asyncio.sleep(2.0)
            else:
                await c.stream(f"/api/v1/trials/{trial_id}/logs?follow=true", self.stop)
                await asyncio.sleep(1.0)


# -- one point ---------------------------------------------------------------------------------


def cpu_of(pid: int) -> float:
    from bench.api_reads import CPU  # psutil's tree walk, shared with the read bench

    return CPU(pid).read()


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def pin(pid: int, cpus: int) -> None:
    """The master's processes on the first ``cpus`` cores (a serverless instance's vCPUs)."""
    import psutil  # a test extra, as in the other benches

    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        p.cpu_affinity(list(range(cpus)))


#: cgroup v1's CPU controller (the machine's; the bench needs root for --master-cpu-quota).
CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")


def cap(pid: int, cores: float) -> Path:
    """The master's processes in a CPU cgroup of their own, limited to ``cores`` of CPU time
    (a CFS quota: an ECS task's share of a vCPU, e.g. 0.5). Returns the group (to remove)."""
    import psutil

    group = CPU_CGROUPS / f"det-bench-scale-{os.getpid()}"
    group.mkdir(exist_ok=True)
    period = 100_000
    (group / "cpu.cfs_period_us").write_text(str(period))
    (group / "cpu.cfs_quota_us").write_text(str(int(cores * period)))
    root = psutil.Process(pid)
    for p in [root, *root.children(recursive=True)]:
        (group / "cgroup.procs").write_text(str(p.pid))
    return group


def db_size(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute("SELECT pg_database_size(current_database())").fetchone()
        return int(row[0]) if row else 0


def analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("ANALYZE")


def table_reads(url: str) -> dict[str, tuple[int, ...]]:
    """Per table: sequential scans, rows they read, index scans, rows fetched by them, updates,
    HOT updates (PostgreSQL's cumulative statistics, flushed by each backend within a second)."""
    with psycopg.connect(url, autocommit=True) as c:
        return {
            str(r[0]): tuple(int(v or 0) for v in r[1:])
            for r in c.execute(
                "SELECT relname, seq_scan, seq_tup_read, idx_scan, idx_tup_fetch, n_tup_upd,"
                " n_tup_hot_upd FROM pg_stat_user_tables"
            ).fetchall()
        }


def read_plans(routes: Path | None) -> dict[str, str]:
    """The statements whose plan (explained once each, bench/_routes/sitecustomize.py) reads a
    table by a sequential scan: statement -> plan."""
    seen: dict[str, str] = {}
    for f in sorted(routes.glob("*.plans")) if routes is not None else ():
        for line in f.read_text().splitlines():
            entry = orjson.loads(line)
            seen.setdefault(entry["statement"], entry["plan"])
    return seen


def report_plans(seen: dict[str, str]) -> None:
    if seen:
        print("  statements planned with a sequential scan:")
    for statement, plan in seen.items():
        scans = sorted({ln.strip() for ln in plan.splitlines() if "Seq Scan" in ln})
        print(f"    {statement}\n      " + "\n      ".join(scans))


def report_tables(r: dict[str, Any]) -> None:
    """The tables read by sequential scans over the window, and how their rows were updated."""
    t0, t1, el = r["tables"][0], r["tables"][1], r["elapsed"]
    if not t1:
        return
    rows = []
    for name, v1 in t1.items():
        d = [b - a for a, b in zip(t0.get(name, (0,) * len(v1)), v1, strict=True)]
        if any(d):
            rows.append((name, d))
    print(
        f"  {r['point']}: tables a second (sequential scans, rows they read; index scans;"
        " updates, HOT):"
    )
    for name, (seq, seq_rows, idx, _fetched, upd, hot) in sorted(rows, key=lambda x: -x[1][1])[:10]:
        print(
            f"    {seq / el:8.1f} {seq_rows / el:10.0f}  {idx / el:8.1f}  {upd / el:7.1f}"
            f" {hot / el:7.1f}  {name}"
        )


def lost_agents(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM events WHERE entity = 'agent' AND kind = 'lost'"
        ).fetchone()
        return int(row[0]) if row else 0


def create_experiments(m: Any, trials: int) -> None:
    s = m.session()
    i = 0
    while trials > 0:
        n = min(TRIALS_PER_EXPERIMENT, trials)
        r = s.post(
            f"{m.url}/api/v1/experiments",
            json={"config": CONFIG.format(i=i, n=n), "activate": True},
            timeout=120,
        )
        r.raise_for_status()
        trials -= n
        i += 1


def run_point(point: Point, args: argparse.Namespace, extra: dict[str, Any]) -> dict[str, Any]:
    from bench._pg import bench_database
    from bench.api_reads import readers
    from tests.integration.conftest import start_master

    with tempfile.TemporaryDirectory() as tmp:
        server, db_url = bench_database(Path(tmp))
        # The master reads it at start (det.master.api._predispatch.ENV).
        os.environ["DET_PREDISPATCH"] = "1" if args.layer == "on" else "0"
        routes = Path(tmp) / "routes" if args.routes else None
        if routes is not None:
            os.environ["DET_BENCH_ROUTES"] = str(routes)
        m = start_master(Path(tmp), db_url, extra={"agent_timeout_seconds": 30, **extra})
        group: Path | None = None
        try:
            tokens = readers(m, args.users + args.followers) if args.users + args.followers else []
            create_experiments(m, point.trials)
            pids = {"master": m.proc.pid, "postgres": int(server.get_pid() or 0)}
            if args.master_cpus:
                pin(m.proc.pid, args.master_cpus)
            if args.master_cpu_quota:
                group = cap(m.proc.pid, args.master_cpu_quota)
            row = asyncio.run(drive(m, db_url, point, args, tokens, pids, routes))
            return {**row, "layer": args.layer}
        finally:
            m.kill()
            server.cleanup()
            if group is not None:
                m.proc.wait()
                for _ in range(50):  # its processes leave the group as they exit
                    try:
                        group.rmdir()
                        break
                    except OSError:
                        time.sleep(0.1)


async def drive(
    m: Any,
    db_url: str,
    point: Point,
    args: argparse.Namespace,
    tokens: list[str],
    pids: dict[str, int],
    routes: Path | None = None,
) -> dict[str, Any]:
    fleet = Fleet(m.url, m.agent_token, point, args.seed)
    t_setup = time.monotonic()
    for i in range(point.agents):
        fleet.spawn(fleet.agent(i))
    deadline = time.monotonic() + args.ramp
    while fleet.stats.started < point.trials and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    ramp = time.monotonic() - t_setup
    if fleet.stats.started < point.trials:
        print(
            f"  {point}: only {fleet.stats.started} of {point.trials} trials running after {ramp:.0f} s",
            file=sys.stderr,
        )
    # A cluster at this size has run for hours: autovacuum has analysed its tables. Right after
    # the ramp it has not (its first look comes a minute after the server starts), and plans
    # made on the tables' first rows (a sequential scan is the cheapest read of a small table)
    # stay cached in the pooled connections' prepared statements until it does: 90-150
    # sequential scans of allocations a second at 700 x 1,400 in the window without this.
    await asyncio.to_thread(analyze, db_url)
    for j, token in enumerate(tokens):
        fleet.spawn(fleet.user(token, j < args.users, fleet.first_trial))
    # The generator's own full collections scanned every agent's and trial's coroutine and
    # connection: 6 in a window, 145 ms each (median), every answer that came meanwhile timed
    # late. What lives now lives to the end: out of the collector's sight.
    gc.collect()
    gc.freeze()
    await asyncio.sleep(args.warmup)
    lost0 = await asyncio.to_thread(lost_agents, db_url)
    size0 = await asyncio.to_thread(db_size, db_url)
    cpu0 = {k: await asyncio.to_thread(cpu_of, pid) for k, pid in pids.items()}
    self0, load0 = self_cpu(), os.getloadavg()[0]
    routes0 = await route_cpu(routes)
    tables0 = await asyncio.to_thread(table_reads, db_url) if routes is not None else {}
    start, wall_start = time.monotonic(), time.time()
    fleet.stats.window = (start, start + args.seconds)
    lags: list[float] = []
    lag_probe = asyncio.ensure_future(loop_lag(lags, start + args.seconds))
    spies = []
    if args.profile is not None:
        from bench.user_flood import profile  # psutil and py-spy: only when asked for

        spies = profile(pids["master"], max(1.0, args.seconds - 1), args.profile / str(point))
    await asyncio.sleep(args.seconds)
    for spy in spies:
        await asyncio.to_thread(spy.wait)
    elapsed = time.monotonic() - start
    await lag_probe
    cpu1 = {k: await asyncio.to_thread(cpu_of, pid) for k, pid in pids.items()}
    self1, load1 = self_cpu(), os.getloadavg()[0]
    wall_end = time.time()
    routes1 = await route_cpu(routes)
    tables1 = await asyncio.to_thread(table_reads, db_url) if routes is not None else {}
    size1 = await asyncio.to_thread(db_size, db_url)
    lost1 = await asyncio.to_thread(lost_agents, db_url)
    fleet.stop.set()
    for t in fleet.tasks:
        t.cancel()
    await asyncio.gather(*fleet.tasks, return_exceptions=True)
    lat = fleet.stats.latency
    reports = [x for k in ("training", "validation", "checkpoint") for x in lat.get(k, [])]
    beats = lat.get("heartbeat", [])
    cores = {k: (cpu1[k] - cpu0[k]) / elapsed for k in cpu0}
    cores["generator"] = (self1 - self0) / elapsed
    return {
        "point": point,
        "ramp": ramp,
        "running": fleet.stats.started,
        "load": (load0, load1),
        "cores": cores,
        "reports": len(reports),
        "heartbeats": len(beats),
        "report_p50": percentile(reports, 50) if reports else float("nan"),
        "report_p99": percentile(reports, 99) if reports else float("nan"),
        "hb_p50": percentile(beats, 50) if beats else float("nan"),
        "hb_p99": percentile(beats, 99) if beats else float("nan"),
        "logs_p99": percentile(lat.get("logs", []), 99) if lat.get("logs") else float("nan"),
        "lag_p99": 1000 * percentile(lags, 99) if lags else float("nan"),
        "lag_max": 1000 * max(lags) if lags else float("nan"),
        "list_p99": percentile(lat.get("user list", []), 99)
        if lat.get("user list")
        else float("nan"),
        "missed": fleet.stats.missed + fleet.stats.failed.get("heartbeat", 0),
        "failed": dict(fleet.stats.failed),
        "max_gap": fleet.stats.max_gap,
        "lost": lost1 - lost0,
        "lost_total": lost1,
        "db_per_hour": per_hour(size0, size1, elapsed),
        "elapsed": elapsed,
        "routes": {
            k: tuple(a - b for a, b in zip(v, routes0.get(k, (0.0,) * len(v)), strict=True))
            for k, v in routes1.items()
        },
        "waits": read_waits(routes, wall_start, wall_end) if args.waits else None,
        "pauses": read_pauses(routes, wall_start, wall_end),
        "tables": (tables0, tables1),
        "plans": read_plans(routes),
        "heaps": read_heaps(routes),
    }


async def loop_lag(lags: list[float], until: float, every: float = 0.01) -> None:
    """How late this process's event loop wakes a task (seconds, each ``every``) until
    ``until``: an answer that came meanwhile was timed that much late too, so the latencies the
    bench prints are the master's only where this stays small."""
    while (now := time.monotonic()) < until:
        await asyncio.sleep(every)
        lags.append(max(0.0, time.monotonic() - now - every))


def read_pauses(routes: Path | None, start: float, end: float) -> list[tuple[int, float]]:
    """The fronts' garbage collections longer than 10 ms that ended in the window
    (bench/_routes/sitecustomize.py): (generation, wall seconds) each."""
    out = []
    for f in sorted(routes.glob("*.pauses")) if routes is not None else ():
        for line in f.read_text().splitlines():
            at, generation, wall = orjson.loads(line)
            if start <= at <= end:
                out.append((int(generation), float(wall)))
    return out


def read_heaps(routes: Path | None) -> list[dict[str, Any]]:
    """The fronts' censuses (``--heap``; bench/_routes/sitecustomize.py), one a front."""
    files = sorted(routes.glob("*.heap")) if routes is not None else []
    return [orjson.loads(f.read_bytes()) for f in files]


def report_heaps(r: dict[str, Any]) -> None:
    for heap in r.get("heaps") or ():
        sizes = ", ".join(f"{n:,}" for n in heap["generations"])
        print(
            f"  {r['point']}: a front's collector tracks {sizes} objects (generations 0, 1, 2),"
            f" {heap['frozen']:,} frozen; {heap['threads']} threads; the old generation's types:"
        )
        print("    " + ", ".join(f"{name} {n:,}" for name, n in heap["old"]))


def read_waits(routes: Path | None, start: float, end: float) -> dict[str, Any]:
    """The fronts' ``--waits`` lines (bench/_routes/sitecustomize.py) that ended in the window:
    ``calls``: route -> [(wall, CPU) seconds of each app call]; ``pool``: the waits for a pooled
    connection in seconds; ``served``: route -> [(read to queued, queued, service) seconds of
    each request]; ``turns``: the event loop's work between two waits, [(wall, CPU, events)]."""
    calls: dict[str, list[tuple[float, float]]] = {}
    served: dict[str, list[tuple[float, float, float]]] = {}
    pool: list[float] = []
    turns: list[tuple[float, float, int]] = []
    for f in sorted(routes.glob("*.waits")) if routes is not None else ():
        for line in f.read_text().splitlines():
            batch = orjson.loads(line)
            for t, route, wall, cpu in batch["calls"]:
                if start <= t <= end:
                    calls.setdefault(route, []).append((wall, cpu))
            pool.extend(w for t, w in batch["pool"] if start <= t <= end)
            for t, route, read, queue, service in batch.get("served", ()):
                if start <= t <= end:
                    served.setdefault(route, []).append((read, queue, service))
            turns.extend((w, c, n) for t, w, c, n in batch.get("turns", ()) if start <= t <= end)
    return {"calls": calls, "pool": pool, "served": served, "turns": turns}


def report_waits(r: dict[str, Any]) -> None:
    """Where a request's time in the app went when not on the CPU: its wall time beside its CPU
    time (a long-poll's wall is its wait), and how long threads waited for a pooled connection
    (the transactions that hold them are stretched by everything that runs meanwhile); then its
    way through the front around the app (from its first bytes read to its queueing, its wait
    for a worker, the worker's whole service) and the event loop's turns."""
    if not r.get("waits"):
        return
    waits = r["waits"]
    calls, pool = waits["calls"], waits["pool"]
    print(f"  {r['point']}: in the app, wall (CPU) ms a request, p50 / p99:")
    for route, xs in sorted(calls.items(), key=lambda kv: -len(kv[1]))[:8]:
        walls, cpus = [w * 1000 for w, _ in xs], [c * 1000 for _, c in xs]
        print(
            f"    {len(xs):7d} {percentile(walls, 50):8.1f} ({percentile(cpus, 50):.2f})"
            f" / {percentile(walls, 99):8.1f} ({percentile(cpus, 99):.2f})  {route}"
        )
    if pool:
        ms = [w * 1000 for w in pool]
        print(
            f"    waits for a pooled connection: {len(ms)}, p50 {percentile(ms, 50):.2f} ms,"
            f" p90 {percentile(ms, 90):.1f}, p99 {percentile(ms, 99):.1f}, max {max(ms):.1f}"
        )
    served = waits["served"]
    if served:
        print("  through the front, ms p50 / p99: read to queued, queued, service:")
        for route, xs in sorted(served.items(), key=lambda kv: -len(kv[1]))[:8]:
            cols = [[x[i] * 1000 for x in xs] for i in range(3)]
            print(
                f"    {len(xs):7d} "
                + "  ".join(f"{percentile(c, 50):6.1f} / {percentile(c, 99):7.1f}" for c in cols)
                + f"  {route}"
            )
    turns = waits["turns"]
    if turns:
        walls = [w * 1000 for w, _, _ in turns]
        events = [n for _, _, n in turns]
        cpu = sum(c for _, c, _ in turns)
        print(
            f"  event loop: {len(turns) / r['elapsed']:.0f} turns/s, work a turn p50"
            f" {percentile(walls, 50):.2f} ms, p99 {percentile(walls, 99):.1f}, max"
            f" {max(walls):.1f}; {sum(walls) / 1000 / r['elapsed']:.2f} s of work a second"
            f" ({cpu / r['elapsed']:.2f} CPU); events a turn p50 {percentile(events, 50):.0f},"
            f" p99 {percentile(events, 99):.0f}"
        )


async def route_cpu(routes: Path | None) -> dict[str, tuple[float, int]]:
    """The fronts' figures so far (bench/_routes/sitecustomize.py), summed over the processes:
    route -> (CPU seconds of its app calls, requests); "" -> (the fronts' process CPU, 0). The
    files are rewritten every second: read after a second (the fleet's loop runs meanwhile), so
    both ends of a window are at most a second old."""
    if routes is None:
        return {}
    await asyncio.sleep(1.1)
    total: dict[str, tuple[float, int]] = {}
    for f in routes.glob("*.json"):
        for k, v in orjson.loads(f.read_bytes()).items():
            had = total.get(k, (0.0,) * len(v))
            # "@": when the files were written (the latest), not a sum.
            total[k] = (
                (max(had[0], v[0]), 0)
                if k == "@"
                else tuple(a + b for a, b in zip(had, v, strict=True))
            )
    return total


def report_routes(r: dict[str, Any]) -> None:
    routes = dict(r["routes"])
    if not routes:
        return
    fronts, _ = routes.pop("", (0.0, 0))
    el, _ = routes.pop("@", (r["elapsed"], 0))  # the files' own window
    pg = {k[3:]: routes.pop(k) for k in [k for k in routes if k.startswith("pg ")]}
    sql = {k[4:]: routes.pop(k) for k in [k for k in routes if k.startswith("sql ")]}
    gcs = {k[3:]: routes.pop(k) for k in [k for k in routes if k.startswith("gc ")]}
    gccpu = {k[6:]: routes.pop(k) for k in [k for k in routes if k.startswith("gccpu ")]}
    usage = {k[3:]: routes.pop(k) for k in [k for k in routes if k.startswith("ru ")]}
    threads = {k[7:]: routes.pop(k) for k in [k for k in routes if k.startswith("thread ")]}
    in_app = sum(c for c, _ in routes.values())
    print(
        f"  {r['point']}: the fronts' CPU {fronts / el:.2f} cores, of it in the app"
        f" {in_app / el:.2f} and outside the app (waitress: parsing, event loop, writing;"
        f" threads' hand-offs) {(fronts - in_app) / el:.2f};"
        f" {1000 * (fronts - in_app) / max(1, sum(n for _, n in routes.values())):.2f} ms a request"
    )
    for route, (cpu, n) in sorted(routes.items(), key=lambda kv: -kv[1][0])[:8]:
        if n:
            db_cpu, _ = pg.pop(route, (0.0, 0))
            print(
                f"    {n / el:7.1f} req/s {1000 * cpu / n:6.2f} ms in the app"
                f" {cpu / el:5.2f} cores, PostgreSQL {1000 * db_cpu / n:5.2f} ms"
                f" {db_cpu / el:5.2f} cores  {route}"
            )
            if route in usage:
                user, m, system, vol, invol, _ = usage[route]
                print(
                    f"            user {1000 * user / m:.2f} ms, system {1000 * system / m:.2f} ms,"
                    f" context switches {vol / m:.1f} waiting + {invol / m:.1f} preempted a request"
                )
    if pg:
        rest = sum(c for c, _ in pg.values())
        print(
            "    PostgreSQL for the other routes and the pool's uses outside a request:"
            f" {rest / el:.2f} cores"
        )
    if gcs:
        print(
            f"  {r['point']}: the fronts' garbage collections (wall, in whichever thread ran"
            " them): "
            + ", ".join(
                f"generation {g} {n / el:.1f}/s {1000 * t / max(1, n):.2f} ms {t / el:.3f} cores"
                for g, (t, n) in sorted(gcs.items())
            )
            + "; CPU "
            + ", ".join(
                f"{1000 * t / max(1, n):.2f} ms {t / el:.3f} cores"
                for g, (t, n) in sorted(gccpu.items())
            )
        )
    if threads:
        print(
            f"  {r['point']}: the fronts' long-lived threads' CPU (cores): "
            + ", ".join(
                f"{name} {cpu / el:.3f}"
                for name, (cpu, _) in sorted(threads.items(), key=lambda kv: -kv[1][0])[:8]
            )
        )
    pauses = r.get("pauses") or []
    if pauses:
        walls = sorted(w for _, w in pauses)
        print(
            f"  {r['point']}: the fronts' collections over 10 ms: {len(walls)}"
            f" ({len(walls) / el:.2f}/s; generations {sorted({g for g, _ in pauses})}),"
            f" p50 {1000 * percentile(walls, 50):.0f} ms, max {1000 * walls[-1]:.0f} ms,"
            f" {1000 * sum(walls) / el:.1f} ms a second"
        )
    if sql:
        print(f"  {r['point']}: PostgreSQL's CPU by statement (the fronts' processes):")
        for text, (cpu, n) in sorted(sql.items(), key=lambda kv: -kv[1][0])[:12]:
            if n:
                print(f"    {n / el:7.1f}/s {1e6 * cpu / n:7.0f} us {cpu / el:5.2f} cores  {text}")


def report(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'N x M':>10} {'layer':>5} {'load':>9} {'master':>6} {'pg':>5} {'gen':>5} {'ms/agent-s':>10} {'ms/report':>9}"
        f" {'rep p50':>7} {'rep p99':>7} {'hb p50':>6} {'hb p99':>6} {'missed':>6} {'gap s':>5}"
        f" {'lost':>4} {'DB MB/h':>7}  other"
    )
    for r in rows:
        p: Point = r["point"]
        c = r["cores"]
        master_ms = 1000 * c["master"] * r["elapsed"]
        print(
            f"{p!s:>10} {r['layer']:>5} {r['load'][0]:4.1f}-{r['load'][1]:<4.1f} {c['master']:6.2f} {c['postgres']:5.2f}"
            f" {c['generator']:5.2f} {master_ms / (p.agents * r['elapsed']):10.2f}"
            f" {master_ms / max(1, r['reports']):9.1f} {r['report_p50']:7.1f} {r['report_p99']:7.1f}"
            f" {r['hb_p50']:6.1f} {r['hb_p99']:6.1f} {r['missed']:6d} {r['max_gap']:5.1f} {r['lost']:4d}"
            f" {r['db_per_hour'] / 1e6:7.0f}  logs p99 {r['logs_p99']:.0f} ms, list p99"
            f" {r['list_p99']:.0f} ms, {r['reports']} reports / {r['heartbeats']} heartbeats in"
            f" {r['elapsed']:.0f} s, {r['running']}/{p.trials} running after {r['ramp']:.0f} s"
            + (f", failed {r['failed']}" if r["failed"] else "")
            + f"; the generator's own loop late p99 {r['lag_p99']:.0f} ms, max {r['lag_max']:.0f}"
        )
    k = knee([(r["point"], r["report_p99"], r["hb_p99"]) for r in rows])
    print(
        f"knee (report or heartbeat p99 > {KNEE_MS:.0f} ms): {k or 'not reached at these points'}"
    )
    print(
        "cores: CPU-seconds a second of the master (all its processes), PostgreSQL and this load"
        " generator; ms/agent-s and ms/report: the master's whole CPU divided by each"
    )


def main() -> None:
    from bench._pg import master_settings

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one point, 20 x 40, 20 s")
    ap.add_argument("--points", default="100x200,200x400")
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warmup", type=float, default=15)
    ap.add_argument("--ramp", type=float, default=300, help="longest wait for every trial to run")
    ap.add_argument("--users", type=int, default=3)
    ap.add_argument("--followers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--master-cpus", type=int, default=0, help="pin the master to this many cores (0: not)"
    )
    ap.add_argument(
        "--master-cpu-quota",
        type=float,
        default=0,
        metavar="CORES",
        help="limit the master's processes to this much CPU time (a CFS quota: 0.5 as an ECS"
        " task of 512 CPU units; needs root)",
    )
    ap.add_argument("--set", action="append", default=[], metavar="KEY=YAML")
    ap.add_argument(
        "--predispatch",
        default="on",
        help="the pre-dispatch layer (det.master.api._predispatch) at each point: on, off or"
        " on,off (both, one after the other)",
    )
    ap.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="py-spy (--gil) of each master process over each point's window, into DIR/NxM;"
        " summarise with bench/profile_top.py",
    )
    ap.add_argument(
        "--routes",
        action="store_true",
        help="the fronts' CPU by route over each window (bench/_routes/sitecustomize.py)",
    )
    ap.add_argument(
        "--waits",
        action="store_true",
        help="with --routes: each route's wall time in the app beside its CPU, and the waits"
        " for a pooled connection, over each window",
    )
    ap.add_argument(
        "--no-pg-cpu",
        action="store_true",
        help="with --routes: leave out PostgreSQL's CPU by route and by statement (read from"
        " /proc around each statement: each read gives the interpreter's lock up, and the"
        " fronts' own CPU and context switches rise with them)",
    )
    ap.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --routes: the fronts' sys.setswitchinterval (Python's is 0.005)",
    )
    ap.add_argument(
        "--gc-threshold",
        default=None,
        metavar="A,B,C",
        help="with --routes: the fronts' gc.set_threshold (Python's is 700,10,10)",
    )
    ap.add_argument(
        "--heap",
        type=float,
        default=None,
        metavar="SECONDS",
        help="with --routes: each front's census of its collector's objects (by generation, the"
        " old one by type) that many seconds after it starts; printed after the point",
    )
    args = ap.parse_args()
    if args.heap is not None:
        args.routes = True
        os.environ["DET_BENCH_HEAP_AFTER"] = str(args.heap)
    if args.switch_interval is not None:
        args.routes = True
        os.environ["DET_BENCH_SWITCH_INTERVAL"] = str(args.switch_interval)
    if args.gc_threshold is not None:
        args.routes = True
        os.environ["DET_BENCH_GC_THRESHOLD"] = args.gc_threshold
    if args.no_pg_cpu:
        args.routes = True
        os.environ["DET_BENCH_NO_PG_CPU"] = "1"
    if args.waits:
        args.routes = True
        os.environ["DET_BENCH_WAITS"] = "1"
    if args.routes:
        # Before the first master (or its fork server) starts: their interpreters load it.
        here = str(Path(__file__).resolve().parent / "_routes")
        os.environ["PYTHONPATH"] = os.pathsep.join(
            x for x in (here, os.environ.get("PYTHONPATH")) if x
        )
    try:
        points = [Point(20, 40)] if args.quick else [Point.parse(p) for p in args.points.split(",")]
    except ValueError as e:
        ap.error(str(e))
    if args.quick:
        args.seconds, args.warmup = 20.0, 5.0
    extra = master_settings(args.set)
    layers = args.predispatch.split(",")
    if not layers or any(x not in ("on", "off") for x in layers):
        ap.error(f"--predispatch: on, off or on,off, not {args.predispatch!r}")
    rows = []
    for point in points:
        for args.layer in layers:
            rows.append(run_point(point, args, extra))
            report(rows[-1:])
            report_routes(rows[-1])
            report_tables(rows[-1])
            report_plans(rows[-1]["plans"])
            report_waits(rows[-1])
            report_heaps(rows[-1])
    pinned = f", pinned to {args.master_cpus} core(s)" if args.master_cpus else ""
    if args.master_cpu_quota:
        pinned += f", {args.master_cpu_quota:g} core(s) of CPU time"
    print(
        f"\nmaster config: {extra or 'defaults'} (agent_timeout_seconds 30){pinned}; window"
        f" {args.seconds:.0f} s after {args.warmup:.0f} s"
    )
    report(rows)


if __name__ == "__main__":
    main()
