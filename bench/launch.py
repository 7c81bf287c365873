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

    .venv/bin/python bench/launch.py [--runs 5] [--master URL --password PW]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
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
}


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


def container_starts(client: Any, stop: threading.Event) -> queue.Queue[float]:
    """Docker ``start`` events of det task containers (wall-clock seconds), as they happen."""
    out: queue.Queue[float] = queue.Queue()
    events = client.events(
        decode=True, filters={"type": "container", "event": "start", "label": "ai.det.agent-id"}
    )

    def pump() -> None:
        for e in events:
            out.put(int(e["timeNano"]) / 1e9)
            if stop.is_set():
                break

    threading.Thread(target=pump, daemon=True).start()
    stop_hook = threading.Thread(target=lambda: (stop.wait(), events.close()), daemon=True)
    stop_hook.start()
    return out


def one_run(api: Api, starts: queue.Queue[float]) -> tuple[float, float]:
    """Seconds from the create request to (container start, first training metric)."""
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
    while not starts.empty():
        starts.get_nowait()
    t0 = time.time()
    eid = int(api.post("/api/v1/experiments", body)["experiment"]["id"])
    started = starts.get(timeout=120) - t0
    tid = None
    while True:
        if tid is None:
            trials = api.get(f"/api/v1/experiments/{eid}/trials")["trials"] or []
            tid = trials[0]["id"] if trials else None
        if tid is not None:
            m = api.get(f"/api/v1/trials/{tid}/metrics", params={"group": "training"})
            if m["metrics"]:
                first_metric = time.time() - t0
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
    return started, first_metric


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
            ]  # fmt: skip
            with open(tmp / "agent.log", "ab") as log:
                agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            stack.callback(agent.wait, 30)
            stack.callback(agent.send_signal, signal.SIGTERM)
            yield master.url, ADMIN_PASSWORD


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--master", help="measure this running cluster instead of starting one")
    p.add_argument("--password", help="admin password of --master")
    p.add_argument("--pg-url", help="PostgreSQL server for the own cluster (default: pgserver)")
    p.add_argument("--tick-seconds", type=float, default=0.5, help="own master's tick (default)")
    p.add_argument("--image", default="det-task:py3.11-cpu-torch")
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
        starts = container_starts(client, stop)
        print(f"cluster {url}: agents {api.agent_ids()}; warm-up run...", flush=True)
        one_run(api, starts)
        to_container: list[float] = []
        to_metric: list[float] = []
        for i in range(args.runs):
            c, m = one_run(api, starts)
            to_container.append(c)
            to_metric.append(m)
            print(f"run {i + 1}: container running {c:6.2f} s, first metric {m:6.2f} s")
        mc, mm = statistics.median(to_container), statistics.median(to_metric)
        verdict = "meets" if mc <= GOAL_CONTAINER_SECONDS else "misses"
        print(f"median of {args.runs}: container running {mc:.2f} s, first metric {mm:.2f} s")
        print(f"first container {verdict} the goal of {GOAL_CONTAINER_SECONDS:.0f} s")


if __name__ == "__main__":
    main()
