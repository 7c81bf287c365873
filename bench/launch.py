"""Launch latency on a warm local cluster: experiment creation -> first task container running
-> first training metric in the master's API.

By default starts its own cluster: a ``det-master`` with its default settings (tick 0.5 s) on a
private PostgreSQL (``pgserver``, or ``--pg-url``) and one ``det-agent`` with CPU slots, on the
machine's Docker engine with the ``det-task:py3.11-cpu-torch`` image (infra/build-images.sh).
``--master URL --password PW`` measures an already running cluster instead (e.g. one from
``det deploy local up``). One unmeasured warm-up experiment runs first (image in the page
cache, master and agent code paths loaded); then ``--runs`` single-trial experiments, one at a
time. Prints each run and the medians.

"Container running" is Docker's own ``start`` event for a container of the cluster's agents
(its nanosecond timestamp); "first metric" is when a poll (every 50 ms) first sees a training
metric of the trial in ``GET /api/v1/trials/{id}/metrics``.

The start-up profile: the trials run with ``DET_STARTUP_PROFILE=1``, so the harness writes a
``det-startup <time> <pid> <cpu> <step>`` line to the task's log at each step (``det.common.startup``):
the wrapper ``det.exec.run`` (process start from ``/proc``, its imports, the entrypoint
started) and the training process (process start, ``import det`` begun and done, which shows
the user's own imports before it, ``core.init``, ``runs/start`` answered, the context started,
the first report queued, sent and acknowledged). Each step is printed as seconds after Docker's
``start`` event (median over the runs) and the time since the step before, with Docker's
``create`` event before it and the first poll that saw the metric after it; beside it, the CPU
seconds its process had used at that step (median) and since its own process's step before: on
this shared machine the wall clock mostly says how long a step waited for a core.

    .venv/bin/python bench/launch.py [--runs 5] [--master URL --password PW]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import docker  # noqa: E402

EXAMPLE = ROOT / "examples" / "core_api"
GOAL_CONTAINER_SECONDS = 3.0
# Issue 29's goals: create -> container running, create -> first training metric.
GOAL_29_CONTAINER_SECONDS = 0.5
GOAL_29_METRIC_SECONDS = 2.0
CONFIG = {
    "name": "bench-launch",
    "entrypoint": "python3 train.py",
    "hyperparameters": {
        "learning_rate": 0.05,
        "hidden_size": 16,
        "report_every": 1,
        "validate_every": 5,
        "checkpoint_every": 5,
    },
    "searcher": {
        "name": "single",
        "metric": "validation_loss",
        "smaller_is_better": True,
        "max_length": {"batches": 5},
    },
    "max_restarts": 0,
    "environment": {"environment_variables": ["DET_STARTUP_PROFILE=1"]},
}
MARK = "det-startup "


class Api:
    def __init__(self, url: str, password: str) -> None:
        self.url = url.rstrip("/")
        r = requests.post(
            f"{self.url}/api/v1/auth/login",
            json={"username": "admin", "password": password},
            timeout=10,
        )
        r.raise_for_status()
        self.s = requests.Session()
        self.s.headers["Authorization"] = f"Bearer {r.json()['token']}"

    def get(self, path: str, **kw: Any) -> Any:
        r = self.s.get(self.url + path, timeout=30, **kw)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: Any) -> Any:
        r = self.s.post(self.url + path, json=body, timeout=30)
        r.raise_for_status()
        return r.json()

    def agent_ids(self) -> list[str]:
        return [str(a["id"]) for a in self.get("/api/v1/agents")["agents"] or []]


def container_events(client: Any, stop: threading.Event) -> queue.Queue[tuple[str, float]]:
    """Docker ``create`` and ``start`` events of det task containers (the event, wall-clock
    seconds), as they happen."""
    out: queue.Queue[tuple[str, float]] = queue.Queue()
    events = client.events(
        decode=True,
        filters={"type": "container", "event": ["create", "start"], "label": "ai.det.agent-id"},
    )

    def pump() -> None:
        for e in events:
            out.put((str(e.get("status") or e.get("Action")), int(e["timeNano"]) / 1e9))
            if stop.is_set():
                break

    threading.Thread(target=pump, daemon=True).start()
    stop_hook = threading.Thread(target=lambda: (stop.wait(), events.close()), daemon=True)
    stop_hook.start()
    return out


def startup_marks(api: Api, tid: int) -> list[tuple[float, int, float, str]]:
    """The trial's ``det-startup`` lines as (time, pid, process CPU seconds, step), in time
    order."""
    marks: list[tuple[float, int, float, str]] = []
    deadline = time.time() + 15
    while time.time() < deadline:
        r = api.s.get(f"{api.url}/api/v1/trials/{tid}/logs", timeout=30)
        r.raise_for_status()
        marks = []
        for line in r.text.splitlines():
            msg = str((json.loads(line).get("result") or {}).get("message") or "")
            for part in msg.splitlines():
                if part.startswith(MARK):
                    when, pid, cpu, step = part[len(MARK) :].split(" ", 3)
                    marks.append((float(when), int(pid), float(cpu), step.strip()))
        if any(s == "first report acknowledged" for _, _, _, s in marks):
            break
        time.sleep(0.2)
    return sorted(marks)


def placed_at(pg_url: str | None, tid: int) -> float | None:
    """When the scheduler placed the trial's first allocation (own cluster only: read from
    its database)."""
    if not pg_url:
        return None
    import psycopg

    with psycopg.connect(pg_url) as c:
        row = c.execute(
            "SELECT extract(epoch FROM min(placed_at)) FROM allocations WHERE trial_id = %s",
            (tid,),
        ).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def profile_of(
    marks: list[tuple[float, int, float, str]],
    events: dict[str, float],
    first_metric: float,
    placed: float | None = None,
    created: float | None = None,
) -> dict[str, tuple[float, float | None]]:
    """Step name -> (seconds after Docker's start event, CPU seconds its process had used, None
    for steps outside the container); steps of the wrapper (the process that says 'entrypoint
    started') are named 'det.exec.run: ...', the training process's 'entrypoint: ...'."""
    start = events["start"]
    wrapper = {pid for _, pid, _, step in marks if step == "entrypoint started"}
    out: dict[str, tuple[float, float | None]] = {
        "docker: create": (events.get("create", start) - start, None),
        "docker: start": (0.0, None),
    }
    if placed is not None:
        out["master: allocation placed"] = (placed - start, None)
    if created is not None:
        out["API: create request sent"] = (created - start, None)
    for when, pid, cpu, step in marks:
        name = f"{'det.exec.run' if pid in wrapper else 'entrypoint'}: {step}"
        out.setdefault(name, (when - start, cpu))
    out["API: first metric seen"] = (first_metric - start, None)
    return out


def one_run(
    api: Api, events: queue.Queue[tuple[str, float]], pg_url: str | None = None
) -> tuple[float, float, dict[str, tuple[float, float | None]]]:
    """Seconds from the create request to (container start, first training metric), and the
    start-up profile (:func:`profile_of`)."""
    files = [
        {
            "path": name,
            "type": 48,
            "content": base64.b64encode((EXAMPLE / name).read_bytes()).decode(),
            "mode": 0o644,
        }
        for name in ("train.py", "model.py")
    ]
    body = {"config": yaml.safe_dump(CONFIG), "modelDefinition": files, "activate": True}
    while not events.empty():
        events.get_nowait()
    t0 = time.time()
    eid = int(api.post("/api/v1/experiments", body)["experiment"]["id"])
    seen: dict[str, float] = {}
    while "start" not in seen:
        kind, when = events.get(timeout=120)
        seen.setdefault(kind, when)
    started = seen["start"] - t0
    tid = None
    while True:
        if tid is None:
            trials = api.get(f"/api/v1/experiments/{eid}/trials")["trials"] or []
            tid = trials[0]["id"] if trials else None
        if tid is not None:
            m = api.get(f"/api/v1/trials/{tid}/metrics", params={"group": "training"})
            if m["metrics"]:
                seen_at = time.time()
                first_metric = seen_at - t0
                break
        if time.time() - t0 > 300:
            raise TimeoutError(f"experiment {eid}: no training metric after 300 s")
        time.sleep(0.05)
    while api.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] not in (
        "STATE_COMPLETED",
        "STATE_ERROR",
        "STATE_CANCELED",
    ):
        time.sleep(0.2)
    placed = placed_at(pg_url, tid)
    profile = profile_of(startup_marks(api, tid), seen, seen_at, placed, t0)
    return started, first_metric, profile


def docker_alone(client: Any, image: str, runs: int) -> float:
    """The reference of the same run: median seconds for docker-py to create and start a bare
    container of ``image`` (host network, ``true``), what Docker itself costs a task."""
    times = []
    for i in range(runs):
        t0 = time.time()
        c = client.containers.create(
            image, "true", network_mode="host", labels={"ai.det.bench": "launch"},
            name=f"det-bench-launch-ref-{os.getpid()}-{i}",
        )  # fmt: skip
        try:
            c.start()
            times.append(time.time() - t0)
            c.wait(timeout=120)
        finally:
            c.remove(force=True)
    return statistics.median(times)


@contextlib.contextmanager
def local_cluster(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    """A master (default settings but the tick) and one agent; yields (url, admin password)."""
    from tests.integration.conftest import ADMIN_PASSWORD, start_master

    with tempfile.TemporaryDirectory(prefix="det-bench-launch-") as tmp_s:
        tmp = Path(tmp_s)
        with contextlib.ExitStack() as stack:
            pg_url = args.pg_url
            if not pg_url:
                import pgserver

                from det.master.db.embedded import ensure_server_user

                ensure_server_user()  # under the machine's lock
                get_server = pgserver.get_server  # type: ignore[attr-defined]
                server = get_server(str(tmp / "pg"), cleanup_mode="stop")
                stack.callback(server.cleanup)
                pg_url = server.get_uri()
            ckpt = tmp / "checkpoints"
            ckpt.mkdir()
            extra = {
                "tick_seconds": args.tick_seconds,
                "task_container_defaults": {"image": {"cpu": args.image, "cuda": args.image}},
                "checkpoint_storage": {"type": "shared_fs", "host_path": str(ckpt)},
            }
            master = start_master(tmp, pg_url, extra=extra, name="master")
            stack.callback(master.kill, signal.SIGTERM)
            argv = [
                sys.executable, "-m", "det.agent",
                "--master-url", master.url,
                "--agent-id", f"bench-launch-{os.getpid()}",
                f"--agent-token={master.agent_token}",
                "--slot-type", "cpu", "--artificial-slots", "1",
                "--state-dir", str(tmp / "agent"),
                *args.agent_arg,
            ]  # fmt: skip
            with open(tmp / "agent.log", "ab") as log:
                agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            stack.callback(agent.wait, 30)
            stack.callback(agent.send_signal, signal.SIGTERM)
            args.own_pg_url = pg_url
            yield master.url, ADMIN_PASSWORD


def print_profile(profiles: list[dict[str, tuple[float, float | None]]]) -> None:
    """Each step's median time after Docker's start event, in the order they happen, and the
    median CPU time its process had used (and since that process's step before)."""
    steps: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}
    for prof in profiles:
        for name, (at, cpu) in prof.items():
            steps.setdefault(name, []).append(at)
            if cpu is not None:
                cpus.setdefault(name, []).append(cpu)
    medians = sorted((statistics.median(v), name, len(v)) for name, v in steps.items())
    print(
        f"start-up profile (median of {len(profiles)} runs; seconds after Docker's start event;"
        " cpu: the process's CPU seconds at the step, +since its step before)"
    )
    before = medians[0][0] if medians else 0.0
    cpu_before: dict[str, float] = {}
    for at, name, n in medians:
        runs = "" if n == len(profiles) else f"  ({n} runs)"
        cpu_text = " " * 22
        if name in cpus:
            cpu = statistics.median(cpus[name])
            proc = name.split(":", 1)[0]
            cpu_text = f"cpu {cpu:6.3f} (+{cpu - cpu_before.get(proc, 0.0):5.3f})"
            cpu_before[proc] = cpu
        print(f"  {at:+7.3f}  (+{at - before:5.3f})  {cpu_text}  {name}{runs}")
        before = at


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--master", help="measure this running cluster instead of starting one")
    p.add_argument("--password", help="admin password of --master")
    p.add_argument("--pg-url", help="PostgreSQL server for the own cluster (default: pgserver)")
    p.add_argument("--tick-seconds", type=float, default=0.5, help="own master's tick (default)")
    p.add_argument("--image", default="det-task:py3.11-cpu-torch")
    p.add_argument(
        "--agent-arg",
        action="append",
        default=[],
        help="an argument for the own agent (e.g. --agent-arg=--no-wait-for-work)",
    )
    args = p.parse_args()

    client = docker.from_env()
    client.images.get(args.image)
    with contextlib.ExitStack() as stack:
        if args.master:
            url, password = args.master, args.password or os.environ.get("DET_PASS", "")
        else:
            url, password = stack.enter_context(local_cluster(args))
        api = Api(url, password)
        deadline = time.time() + 60
        while not api.agent_ids():
            if time.time() > deadline:
                raise SystemExit("no agent registered within 60 s")
            time.sleep(0.2)
        stop = threading.Event()
        stack.callback(stop.set)
        events = container_events(client, stop)
        print(f"cluster {url}: agents {api.agent_ids()}; warm-up run...", flush=True)
        one_run(api, events)
        to_container: list[float] = []
        to_metric: list[float] = []
        profiles: list[dict[str, tuple[float, float | None]]] = []
        for i in range(args.runs):
            c, m, prof = one_run(api, events, getattr(args, "own_pg_url", None))
            to_container.append(c)
            to_metric.append(m)
            profiles.append(prof)
            print(f"run {i + 1}: container running {c:6.2f} s, first metric {m:6.2f} s")
        print_profile(profiles)
        ref = docker_alone(client, args.image, args.runs)
        mc, mm = statistics.median(to_container), statistics.median(to_metric)
        verdict = "meets" if mc <= GOAL_CONTAINER_SECONDS else "misses"
        print(f"median of {args.runs}: container running {mc:.2f} s, first metric {mm:.2f} s")
        print(f"first container {verdict} the goal of {GOAL_CONTAINER_SECONDS:.0f} s")
        print(
            f"reference, same run: Docker alone creates and starts a bare container of"
            f" {args.image} in {ref:.2f} s (median of {args.runs})"
        )
        for what, got, goal in (
            ("container running", mc, GOAL_29_CONTAINER_SECONDS),
            ("first metric", mm, GOAL_29_METRIC_SECONDS),
        ):
            met = "met" if got <= goal else "not met"
            print(f"issue 29: {what} {got:.2f} s, goal <= {goal:.1f} s: {met}")


if __name__ == "__main__":
    main()
