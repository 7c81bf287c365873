"""A live master whose AWS pool (EC2 on moto) has prices, and a search that ran on it: each
instance the provisioner launches becomes a simulated agent with the instance's id (what a
booted machine's bootstrap would register), so the trials' allocations sit on priced machines.
Shared by the usage report tests (API, official CLI, det's CLI, WebUI)."""

from __future__ import annotations

import base64
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.fakes.cloud_agents import moto_lister
from tests.fakes.moto_server import MotoServer, aws_env
from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster, threaded_master

POOL = "aws"
PRICE = 0.096  # m5.large, USD per hour, on-demand

SEARCH = """
name: priced-search
entrypoint: python3 train.py
searcher: {name: random, metric: validation_loss, max_trials: 3, max_concurrent_trials: 3}
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 1.0}
resources: {slots_per_trial: 1, resource_pool: aws}
reproducibility: {experiment_seed: 5}
labels: [priced, asha-demo]
max_restarts: 0
"""


class SimCloud:
    """Turns every running moto instance of the cluster into a SimAgent (agent id = instance
    id) and stops it when the instance is gone."""

    def __init__(self, master: ThreadedMaster, endpoint: str, cluster_id: str) -> None:
        self.master = master
        self.running = moto_lister(endpoint, cluster_id)
        self.agents: dict[str, SimAgent] = {}
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="sim-cloud")

    def start(self) -> SimCloud:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for a in self.agents.values():
            a.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                live = {iid for iid, _ in self.running()}
            except Exception:  # moto busy: try again
                live = set(self.agents)
            for iid in sorted(live - set(self.agents)):
                self.seen.add(iid)
                self.agents[iid] = SimAgent(
                    self.master.url, self.master.agent_token, iid, slots=1, pool=POOL
                ).start()
            for iid in sorted(set(self.agents) - live):
                self.agents.pop(iid).stop()
            self._stop.wait(0.3)


@dataclass
class Priced:
    master: ThreadedMaster
    experiment_id: int
    trial_ids: list[int]
    instances: set[str] = field(default_factory=set)


def _database(pg_server: str) -> tuple[str, str]:
    name = f"det_usage_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, query = pg_server.partition("?")
    base, _, _ = head.rpartition("/")
    return name, f"{base}/{name}{sep}{query}"


def _create(m: ThreadedMaster, config: str) -> int:
    body = {
        "config": config,
        "modelDefinition": [
            {"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode()}
        ],
        "activate": True,
    }
    return int(m.post("/api/v1/experiments", body)["experiment"]["id"])


def _run_search(m: ThreadedMaster, cloud: SimCloud) -> Priced:
    eid = _create(m, SEARCH)

    def done() -> bool:
        st = m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
        assert st not in ("STATE_ERROR", "STATE_CANCELED"), st
        return bool(st == "STATE_COMPLETED")

    wait_for(done, 240, 0.5, f"experiment {eid} to complete")
    trials = [t["id"] for t in m.get(f"/api/v1/experiments/{eid}/trials")["trials"]]

    def all_ended() -> bool:
        inst = m.get(f"/api/v1/resource-pools/{POOL}/instances")["instances"]
        return bool(inst) and all(i["terminatedAt"] for i in inst)

    wait_for(all_ended, 120, 0.5, "the idle instances to end")
    return Priced(m, eid, trials, set(cloud.seen))


@pytest.fixture(scope="module")
def priced(
    pg_server: str, moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Priced]:
    """A master with a priced AWS pool (at most 3 m5.large of 1 slot, idle after 3 s) and a
    3-trial search that completed on it; every instance has ended when the tests start."""
    moto_server.reset()
    name, url = _database(pg_server)
    tmp = tmp_path_factory.mktemp("usage")
    provider = {
        "type": "aws",
        "region": "us-east-1",
        "image_id": "ami-12c6146b",
        "instance_type": "m5.large",
        "instance_slots": 1,
        "max_instances": 3,
        "max_idle_agent_period": "3s",
        "max_agent_starting_period": "2m",
        "endpoint_url": moto_server.endpoint,
        "cost": {"prices": {"m5.large": PRICE}},
    }
    extra: dict[str, Any] = {
        "resource_pools": [{"pool_name": POOL, "provider": provider}, {"pool_name": "default"}],
        "resource_manager": {
            "default_compute_resource_pool": POOL,
            "default_aux_resource_pool": POOL,
        },
    }
    with pytest.MonkeyPatch.context() as mp:
        # The master and this process's moto client both need the fake credentials.
        for k, v in aws_env(moto_server.endpoint).items():
            mp.setenv(k, v)
        with threaded_master(Path(tmp), url, extra, loop=True) as m:
            cloud = SimCloud(m, moto_server.endpoint, str(m.get("/api/v1/master")["clusterId"]))
            cloud.start()
            try:
                yield _run_search(m, cloud)
            finally:
                cloud.stop()
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
