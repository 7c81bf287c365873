"""Autoscaling figures from an offline simulation of the scale decider (no cloud, no master).

Prints:

1. ``decide()`` latency (median of several runs) for pools of 10, 100 and 1,000 instances.
2. A capacity outage: the first option of the fallback list has no capacity for 10 minutes.
   Compared: our decider (backoff + fallback list) and a Determined-style policy (one option,
   retry every pass). Figures: launch calls made, time until all work is placed.

3. End to end with each fake cloud (FakeGce behind the real ``google-cloud-compute`` client;
   moto behind boto3), a real master on PostgreSQL and a simulated agent booted for each
   running instance: seconds from a
   trial's allocation becoming pending to the launch call, and from the last trial's end to the
   delete call beyond ``max_idle_agent_period``. Medians over ``--runs`` runs (after a warm-up).

Run: ``python bench/autoscale.py`` (``--runs N``; ``--e2e-only`` skips 1 and 2).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from det.master.provisioner.decider import (
    AgentInfo,
    LaunchRecord,
    PoolSnapshot,
    ScalePolicy,
    decide,
    record_launch,
)
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.fakes, for part 3

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SPOT = LaunchOption("p3.8xlarge", market=Market.SPOT, slots=4)
OTHER = LaunchOption("g5.12xlarge", market=Market.SPOT, slots=4)
ON_DEMAND = LaunchOption("p3.8xlarge", market=Market.ON_DEMAND, slots=4)


def latency() -> None:
    policy = ScalePolicy(options=(SPOT, OTHER, ON_DEMAND), max_instances=2000)
    for size in (10, 100, 1000):
        instances = tuple(
            Instance(f"i-{n}", InstanceState.RUNNING, T0 - dt.timedelta(hours=1), "p3.8xlarge")
            for n in range(size)
        )
        agents = tuple(
            AgentInfo(
                f"i-{n}",
                4,
                True,
                T0,
                idle_since=T0 - dt.timedelta(minutes=n % 30) if n % 3 == 0 else None,
            )
            for n in range(size)
        )
        snapshot = PoolSnapshot(
            "gpu", demand=(4, 8, 2, 1) * (size // 4), instances=instances, agents=agents
        )
        runs = []
        for _ in range(7):
            start = time.perf_counter()
            decide(snapshot, policy, T0)
            runs.append(time.perf_counter() - start)
        print(f"decide() with {size:5d} instances: median {statistics.median(runs) * 1000:8.2f} ms")


@dataclasses.dataclass
class Sim:
    policy: ScalePolicy
    outage: set[LaunchOption]
    outage_until: dt.datetime
    boot: dt.timedelta = dt.timedelta(seconds=90)
    instances: dict[str, Instance] = dataclasses.field(default_factory=dict)
    busy: set[str] = dataclasses.field(default_factory=set)
    history: tuple[LaunchRecord, ...] = ()
    launch_calls: int = 0
    capacity_errors: int = 0

    def run(self, jobs: list[int], tick: dt.timedelta, limit: dt.timedelta) -> dt.timedelta | None:
        queue = list(jobs)
        now = T0
        while now - T0 < limit:
            agents = tuple(
                AgentInfo(i.id, 4, True, now, idle_since=None if i.id in self.busy else now)
                for i in self.instances.values()
                if now - i.launched_at >= self.boot
            )
            # Schedule: one 4-slot job per idle agent.
            for agent in agents:
                if queue and agent.id not in self.busy:
                    queue.pop()
                    self.busy.add(agent.id)
            if not queue:
                return now - T0
            snapshot = PoolSnapshot(
                "gpu",
                demand=tuple(queue),
                instances=tuple(self.instances.values()),
                agents=agents,
                history=self.history,
            )
            for order in decide(snapshot, self.policy, now).launches:
                self.launch_calls += 1
                if order.option in self.outage and now < self.outage_until:
                    self.capacity_errors += 1
                    rec = LaunchRecord(now, order.option, "InsufficientInstanceCapacity", True)
                else:
                    for _ in range(order.count):
                        iid = f"i-{len(self.instances)}"
                        self.instances[iid] = Instance(
                            iid, InstanceState.RUNNING, now, order.option.instance_type
                        )
                    rec = LaunchRecord(now, order.option)
                self.history = record_launch(self.history, rec, now)
            now += tick
        return None


def outage() -> None:
    jobs = [4] * 8
    ours = ScalePolicy(options=(SPOT, OTHER, ON_DEMAND), max_instances=10)
    # Determined: one option, retried every pass (no backoff).
    naive = dataclasses.replace(ours, options=(SPOT,), base_backoff=dt.timedelta(0))
    until = T0 + dt.timedelta(minutes=10)
    for name, policy in (("fallback+backoff", ours), ("retry every pass", naive)):
        sim = Sim(policy, outage={SPOT}, outage_until=until)
        took = sim.run(jobs, tick=dt.timedelta(seconds=1), limit=dt.timedelta(minutes=30))
        placed = f"{took.total_seconds():6.0f} s" if took else "   never"
        print(
            f"{name:18s}: all 8 jobs placed after {placed}; launch calls {sim.launch_calls:4d}"
            f" ({sim.capacity_errors} capacity errors)"
        )


# -- 3. end to end -----------------------------------------------------------------------------

E2E_POOL = "bench"
E2E_IDLE = 1.0  # max_idle_agent_period, seconds
E2E_CONFIG = """
name: autoscale-bench
entrypoint: python3 train.py
searcher: {name: single, metric: validation_loss, max_length: {batches: 2}}
hyperparameters: {lr: 0.5}
resources: {slots_per_trial: 1}
"""


class _GceCloud:
    """FakeGce, timing every insert and delete call the master makes (wall clock)."""

    def __init__(self) -> None:
        from tests.fakes.gce import FakeGce

        calls: list[tuple[float, str]] = []
        self.calls = calls

        class Timed(FakeGce):
            def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> Any:
                answer = super().handle(method, path, query, body)
                kind = self.requests[-1].kind
                if kind in ("insert", "bulkInsert", "delete"):
                    calls.append((time.time(), "delete" if kind == "delete" else "launch"))
                return answer

        self.fake = Timed().start()
        self.env: dict[str, str] = {}
        self.provider = {
            "type": "gcp",
            "endpoint_url": self.fake.url,
            "project": "bench",
            "zone": "us-west1-a",
            "boot_disk_source_image": "projects/bench/global/images/agent",
            "instance_type": {"machine_type": "n1-standard-4", "gpu_type": "", "gpu_num": 0},
            "cpu_slots_allowed": True,
        }

    def running(self) -> set[str]:
        return {i["name"] for i in self.fake.running_instances()}

    def close(self) -> None:
        self.fake.stop()


class _Ec2Cloud:
    """moto in server mode behind a pass-through proxy that times RunInstances and
    TerminateInstances."""

    def __init__(self) -> None:
        import http.server
        import threading
        import urllib.request

        import boto3

        from tests.fakes.moto_server import MotoServer, aws_env

        self.moto = MotoServer().start()
        upstream = self.moto.endpoint
        calls: list[tuple[float, str]] = []
        self.calls = calls

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                req = urllib.request.Request(upstream + self.path, body, headers, method="POST")
                with urllib.request.urlopen(req, timeout=60) as resp:
                    status, data = resp.status, resp.read()
                    ctype = resp.headers["Content-Type"] or "text/xml"
                if b"Action=RunInstances" in body:
                    calls.append((time.time(), "launch"))
                elif b"Action=TerminateInstances" in body:
                    calls.append((time.time(), "delete"))
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.proxy.daemon_threads = True
        threading.Thread(target=self.proxy.serve_forever, daemon=True).start()
        self.env = aws_env(upstream)
        self.provider = {
            "type": "aws",
            "region": "us-east-1",
            "image_id": "ami-12c6146b",
            "instance_type": "m5.large",
            "instance_slots": 1,
            "endpoint_url": f"http://127.0.0.1:{self.proxy.server_address[1]}",
        }
        self.ec2 = boto3.client(
            "ec2",
            endpoint_url=upstream,
            region_name="us-east-1",
            **{"aws_access_key_id": "testing", "aws_secret_access_key": "testing"},
        )

    def running(self) -> set[str]:
        out = set()
        for res in self.ec2.describe_instances(
            Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}]
        )["Reservations"]:
            out.update(i["InstanceId"] for i in res["Instances"])
        return out

    def close(self) -> None:
        self.proxy.shutdown()
        self.proxy.server_close()
        self.moto.stop()


def end_to_end(runs: int, cloud_name: str) -> None:
    """A real master on PostgreSQL with one autoscaled pool on a fake cloud; each running
    instance gets a simulated agent. One single-trial experiment per run."""
    import os
    import tempfile
    import threading

    import psycopg
    import requests

    from bench._pg import bench_database
    from tests.fakes.sim_agent import SimAgent
    from tests.integration.conftest import start_master

    cloud: Any = _GceCloud() if cloud_name == "gcp" else _Ec2Cloud()
    saved = {k: os.environ.get(k) for k in cloud.env}
    os.environ.update(cloud.env)  # the master subprocess inherits them
    provider = {
        **cloud.provider,
        "max_instances": 2,
        "max_idle_agent_period": f"{E2E_IDLE}s",
    }
    extra = {
        "resource_pools": [{"pool_name": E2E_POOL, "provider": provider}],
        "resource_manager": {
            "default_compute_resource_pool": E2E_POOL,
            "default_aux_resource_pool": E2E_POOL,
        },
    }
    to_launch: list[float] = []
    to_delete: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        server, db_url = bench_database(Path(tmp))
        m = start_master(Path(tmp), db_url, extra=extra)
        agents: dict[str, SimAgent] = {}
        stop = threading.Event()

        def boot_agents() -> None:  # what a VM's bootstrap does, as simulated agents
            while not stop.is_set():
                running = cloud.running()
                for name in running - set(agents):
                    agents[name] = SimAgent(m.url, m.agent_token, name, pool=E2E_POOL).start()
                for name in set(agents) - running:
                    agents.pop(name).stop()
                stop.wait(0.1)

        poller = threading.Thread(target=boot_agents, daemon=True)
        poller.start()
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {m.login()}"
        try:
            for run in range(runs + 1):  # run 0 warms up (imports, first client)
                cloud.calls.clear()
                eid = s.post(
                    f"{m.url}/api/v1/experiments",
                    json={"config": E2E_CONFIG, "activate": True},
                    timeout=30,
                ).json()["experiment"]["id"]
                deadline = time.monotonic() + 120
                while not any(k == "delete" for _, k in cloud.calls) or cloud.running():
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"run {run}: no scale-in: {cloud.calls}")
                    time.sleep(0.05)
                with psycopg.connect(db_url) as c:
                    row = c.execute(
                        "SELECT min(a.created_at), max(a.ended_at) FROM allocations a"
                        " JOIN trials t ON t.id = a.trial_id WHERE t.experiment_id = %s",
                        (eid,),
                    ).fetchone()
                assert row is not None
                pending, ended = row[0].timestamp(), row[1].timestamp()
                launch = min(t for t, k in cloud.calls if k == "launch")
                delete = max(t for t, k in cloud.calls if k == "delete")
                if run > 0:
                    to_launch.append(launch - pending)
                    to_delete.append(delete - ended - E2E_IDLE)
        finally:
            stop.set()
            poller.join(timeout=5)
            for agent in agents.values():
                agent.stop()
            m.kill()
            server.cleanup()
            cloud.close()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    print(
        f"e2e ({cloud_name}, {runs} runs, tick 0.2 s): pending -> launch call median"
        f" {statistics.median(to_launch):.2f} s (max {max(to_launch):.2f});"
        f" last trial end -> terminate call beyond max_idle_agent_period={E2E_IDLE:.0f}s median"
        f" {statistics.median(to_delete):.2f} s (max {max(to_delete):.2f}); goal <= 2 s each"
    )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--e2e-only", action="store_true")
    args = parser.parse_args()
    if not args.e2e_only:
        latency()
        outage()
    for cloud_name in ("gcp", "aws"):
        end_to_end(args.runs, cloud_name)
