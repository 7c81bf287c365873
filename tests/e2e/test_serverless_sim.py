"""The serverless simulation (issue 24): the det-master image run as Cloud Run / Fargate would
run it, behind Debian's nginx terminating TLS, with a fake platform that starts instances on
demand (tests/e2e/serverless_support.py says what is simulated and how).

One module, shared parts: the image (built here once for this code, infra/build-images.sh
master), PostgreSQL, moto, nginx, the platform, the wake-up scheduler. The tests run in order:
the migration job and the service's refusal, two instances at once with one leading the loops,
a long request ended before the time limit, then scale to zero: a launch backoff that ends
while no instance runs comes back through the scheduled wake-up, whose request starts an
instance, which launches a fake-cloud machine whose agent registers through the proxy over TLS
and runs the trial to COMPLETED.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import yaml

from det.deploy.common import release
from det.master import wakeups
from tests.docker_support import docker_client
from tests.e2e.serverless_support import (
    Nginx,
    Platform,
    UnixToTcp,
    run_once,
    self_signed,
    tcp_db_url,
)
from tests.fakes.cloud_agents import CloudAgents, moto_lister
from tests.fakes.ec2_refusals import CapacityProxy
from tests.fakes.moto_server import aws_env
from tests.fakes.wakeup_scheduler import FakeWakeupScheduler
from tests.integration.autoscale_support import TASK_IMAGE, create_experiment, experiment_config
from tests.integration.conftest import ADMIN_PASSWORD, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

POOL = "aws"
TIME_LIMIT = 30  # seconds: CloudFront's default origin response timeout
REPO = Path(__file__).resolve().parents[2]


def master_image() -> tuple[str, bool]:
    """det-master for this code: the tag is the sha256 of the wheel `det deploy` would ship;
    built when missing. Returns the tag and whether this call built it (then the module drops
    the tag at its end: every code change makes a new one, and they piled up on the engine)."""
    docker_client(TASK_IMAGE)  # skips without an engine
    built = release.build()
    tag = f"det-master:{built.sha256[:12]}"
    have = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    if have.returncode == 0:
        return tag, False
    done = subprocess.run(
        ["bash", str(REPO / "infra/build-images.sh"), "master"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return tag, True


class Sim:
    def __init__(self, tmp: Path, image: str, pg_url: str, moto_endpoint: str) -> None:
        self.tmp = tmp
        self.pg_url = pg_url
        self.label = uuid.uuid4().hex[:8]
        self.image = image
        self.cert, self.key, self.bundle = self_signed(tmp)
        db_door = UnixToTcp(tcp_db_url(pg_url, 0)[1])
        self.db_door = db_door
        self.db_url = tcp_db_url(pg_url, db_door.port)[0]
        self.ec2 = CapacityProxy(moto_endpoint, "m5.large")
        self.moto = moto_endpoint
        self.scheduler = FakeWakeupScheduler(verify=str(self.bundle)).start()
        self.config_file = tmp / "master.yaml"
        # The platform listens first: nginx needs its port; the config needs nginx's.
        self.platform = Platform(
            self.image,
            self.config_file,
            self.label,
            time_limit=TIME_LIMIT,
            max_instances=2,
            env=aws_env(self.ec2.url),
        )
        self.nginx = Nginx(tmp / "nginx", self.cert, self.key, self.platform.port, TIME_LIMIT)
        self.write_config()

    def write_config(self) -> None:
        ckpt = self.tmp / "checkpoints"
        ckpt.mkdir(exist_ok=True)
        config = {
            "bind_address": "127.0.0.1",
            "db": {"url": self.db_url},
            # The platform relays nginx's connections from this machine: the only peer whose
            # X-Forwarded-For/-Proto the master believes.
            "security": {
                "initial_user_password": ADMIN_PASSWORD,
                "trusted_proxies": ["127.0.0.1"],
            },
            "master_url": self.nginx.url,
            "migrate_on_start": False,
            "request_time_limit_seconds": TIME_LIMIT,
            "wakeups": {"type": "http", "url": self.scheduler.url},
            "user_api_processes": 0,
            "api_threads": 32,
            "db_pool_size": 6,
            "tick_seconds": 0.5,
            "agent_timeout_seconds": 20,
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(ckpt)},
            # Task containers trust the front's certificate the way a cluster with a private
            # CA would: its bundle mounted and named for requests.
            "task_container_defaults": {
                "bind_mounts": [
                    {
                        "host_path": str(self.bundle),
                        "container_path": "/etc/det-sim/ca-bundle.pem",
                        "read_only": True,
                    }
                ],
                "environment_variables": [
                    "REQUESTS_CA_BUNDLE=/etc/det-sim/ca-bundle.pem",
                    "SSL_CERT_FILE=/etc/det-sim/ca-bundle.pem",
                ],
            },
            "resource_pools": [
                {
                    "pool_name": POOL,
                    "provider": {
                        "type": "aws",
                        "region": "us-east-1",
                        "image_id": "ami-12c6146b",
                        "instance_type": "m5.large",
                        "instance_slots": 1,
                        "max_instances": 1,
                        "max_idle_agent_period": "10m",
                        "max_agent_starting_period": "3m",
                        "endpoint_url": self.ec2.url,
                    },
                }
            ],
            "resource_manager": {
                "default_compute_resource_pool": POOL,
                "default_aux_resource_pool": POOL,
            },
        }
        self.config_file.write_text(yaml.safe_dump(config))
        self.config_file.chmod(0o644)

    def session(self) -> requests.Session:
        s = requests.Session()
        s.verify = str(self.bundle)
        r = s.post(
            f"{self.nginx.url}/api/v1/auth/login",
            json={"username": "admin", "password": ADMIN_PASSWORD},
            timeout=120,
        )
        assert r.status_code == 200, r.text
        s.headers["Authorization"] = f"Bearer {r.json()['token']}"
        return s

    def close(self) -> None:
        self.platform.close()
        self.nginx.close()
        self.scheduler.stop()
        self.ec2.stop()
        self.db_door.close()


@pytest.fixture(scope="module")
def sim_db(pg_server: str) -> Iterator[str]:
    """One database for the module (``pg_url`` is per test)."""
    name = f"det_sim_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, query = pg_server.partition("?")
    yield f"{head.rpartition('/')[0]}/{name}{sep}{query}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory, sim_db: str, moto_server: Any) -> Iterator[Sim]:
    image, built = master_image()  # before the environment below (the build uses the host's CAs)
    moto_server.reset()
    tmp = tmp_path_factory.mktemp("serverless")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in aws_env(moto_server.endpoint).items():
            mp.setenv(key, value)
        # The agents (and this test's clients) trust the front's certificate through the CA
        # bundle they are given, as the system store: no pinned certificate.
        mp.setenv("REQUESTS_CA_BUNDLE", str(tmp / "ca-bundle.pem"))
        mp.setenv("SSL_CERT_FILE", str(tmp / "ca-bundle.pem"))
        s = Sim(tmp, image, sim_db, moto_server.endpoint)
        try:
            yield s
        finally:
            s.close()
            if built:
                # The tag; the image goes with it unless det-master:latest still names it.
                subprocess.run(["docker", "image", "rm", image], capture_output=True)


def migrations(sim: Sim) -> list[tuple[int, dt.datetime]]:
    with psycopg.connect(sim.pg_url) as conn:
        return [
            (int(r[0]), r[1])
            for r in conn.execute("SELECT version, applied_at FROM schema_migrations ORDER BY 1")
        ]


def test_the_service_refuses_an_unmigrated_database_and_the_job_migrates(sim: Sim) -> None:
    refused = run_once(sim.image, sim.config_file, "run")
    assert refused.returncode == 2, refused.stderr
    line = refused.stderr.strip()
    assert "\n" not in line and "not migrated" in line and "det-master migrate" in line, line

    job = run_once(sim.image, sim.config_file, "migrate")
    assert job.returncode == 0, job.stderr
    assert "applied migrations: [1," in job.stdout
    assert migrations(sim)


def test_two_instances_serve_one_leads_the_loops_and_neither_migrates(sim: Sim) -> None:
    before = migrations(sim)
    sim.platform.ensure(2, "test")
    names = [i.name for i in sim.platform.instances]
    assert len(sim.platform.running()) == 2
    for name in names:
        inspect = json.loads(
            subprocess.run(["docker", "inspect", name], capture_output=True, check=True).stdout
        )[0]
        assert inspect["HostConfig"]["ReadonlyRootfs"] is True
        assert inspect["Config"]["User"] == "10001:10001"
        assert any(e.startswith("PORT=") for e in inspect["Config"]["Env"])
        touch = subprocess.run(
            ["docker", "exec", name, "touch", "/opt/det/x"], capture_output=True, text=True
        )
        assert touch.returncode != 0 and "Read-only file system" in touch.stderr
    # Requests through the front reach both instances.
    s = sim.session()
    for _ in range(4):
        assert s.get(f"{sim.nginx.url}/api/v1/master", timeout=60).json()["clusterId"]

    def leaders() -> list[str]:
        return [
            i.name
            for i in sim.platform.instances
            if "leads the control loops" in sim.platform.logs(i)
        ]

    wait_for(leaders, 60, 0.5, "an instance to lead the loops")
    time.sleep(2)
    assert len(leaders()) == 1
    assert migrations(sim) == before
    for inst in sim.platform.instances:
        assert "applied migration" not in sim.platform.logs(inst)


def test_a_log_follow_through_the_front_ends_before_the_time_limit(sim: Sim) -> None:
    s = sim.session()
    start = time.monotonic()
    r = s.get(
        f"{sim.nginx.url}/api/v1/master/logs",
        params={"follow": "true"},
        timeout=TIME_LIMIT * 3,
        stream=True,
    )
    lines = [json.loads(raw) for raw in r.iter_lines() if raw]  # each line whole
    took = time.monotonic() - start
    assert r.status_code == 200 and lines
    assert took < TIME_LIMIT, took  # ended by the master, not cut by the platform
    assert took >= TIME_LIMIT - 10 - 1, took


def test_scaled_to_zero_a_launch_backoff_wakes_the_master_which_runs_the_trial(
    sim: Sim, tmp_path: Path
) -> None:
    s = sim.session()
    config = experiment_config(trials=1, steps=2, pause=0.2, pool=POOL)
    master_like = _Client(sim.nginx.url, s)
    eid = create_experiment(master_like, config)  # type: ignore[arg-type]
    # The first launch is refused (capacity): the pool backs off 10 s and the loop asks for a
    # wake-up at the backoff's end.
    wait_for(lambda: sim.ec2.refused >= 1, 120, 0.2, "a refused launch")
    wait_for(lambda: sim.scheduler.asked, 60, 0.2, "a wake-up to be asked for")
    asked = sim.scheduler.asked[-1]
    assert asked.url == sim.nginx.url + wakeups.WAKEUP_PATH
    # Scale to zero before the backoff ends: nothing runs, nobody calls.
    sim.platform.stop_all()
    assert sim.platform.running() == []
    assert dt.datetime.now(dt.UTC) < asked.at, "the backoff ended before the scale-in"
    sim.ec2.refusing = False
    started = len(sim.platform.history)

    with CloudAgents(
        moto_lister(sim.moto, _cluster_id(sim)),
        cloud="aws",
        master_url=sim.nginx.url,
        agent_token=_agent_token(sim),
        cluster_id=_cluster_id(sim),
        pool=POOL,
        slots={"m5.large": 1},
        tmp=tmp_path / "machines",
    ) as machines:
        wait_for(lambda: sim.scheduler.fired, 120, 0.2, "the wake-up to fire")
        assert sim.scheduler.fired[0][1] == 200, sim.scheduler.fired
        # The wake-up's request is what started an instance (no test request in between).
        woken = sim.platform.history[started:]
        assert woken and woken[0].reason == "request"
        wait_for(lambda: machines.seen, 120, 0.5, "the woken loop to launch a machine")
        wait_for(
            lambda: _state(sim, eid) in ("STATE_COMPLETED", "STATE_ERROR"),
            300,
            1.0,
            "the experiment to end",
        )
        assert _state(sim, eid) == "STATE_COMPLETED"
        assert not machines.errors, machines.errors
    # The agent reached the master only through the front, over TLS.
    agent_log = (tmp_path / "machines" / machines.seen[0] / "agent.log").read_text()
    assert sim.nginx.url in (tmp_path / "machines" / machines.seen[0] / "agent.yaml").read_text()
    assert "CERTIFICATE_VERIFY_FAILED" not in agent_log
    assert "/api/v1/agents" in sim.nginx.access_log()
    # Scale to zero again: a user's request starts an instance, which answers from PostgreSQL.
    sim.platform.stop_all()
    assert _state(sim, eid) == "STATE_COMPLETED"
    assert sim.platform.history[-1].reason == "request"


class _Client:
    """What tests.integration.autoscale_support.create_experiment needs of a master."""

    def __init__(self, url: str, session: requests.Session) -> None:
        self.url = url
        self._s = session

    def post(self, path: str, body: Any = None) -> Any:
        r = self._s.post(self.url + path, json=body or {}, timeout=120)
        assert r.status_code == 200, (path, r.status_code, r.text)
        return r.json()


def _state(sim: Sim, eid: int) -> str:
    r = sim.session().get(f"{sim.nginx.url}/api/v1/experiments/{eid}", timeout=120)
    assert r.status_code == 200, r.text
    return str(r.json()["experiment"]["state"])


def _cluster_id(sim: Sim) -> str:
    with psycopg.connect(sim.pg_url) as conn:
        row = conn.execute("SELECT cluster_id FROM cluster").fetchone()
    assert row is not None
    return str(row[0])


def _agent_token(sim: Sim) -> str:
    with psycopg.connect(sim.pg_url) as conn:
        row = conn.execute("SELECT agent_token FROM cluster").fetchone()
    assert row is not None
    return str(row[0])
