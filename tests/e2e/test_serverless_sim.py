"""The serverless simulation (issues 24 and 37): the det-master image run as Cloud Run / Fargate
would run it, behind Debian's nginx terminating TLS (tests/e2e/serverless_support.py says what
is simulated and how).

One module, shared parts: the image (built here once for this code, infra/build-images.sh
master), PostgreSQL, moto, nginx, the platforms, the wake-up scheduler. The tests run in order:
the migration job and the service's refusal, two instances at once with one leading the loops,
a long request ended before the time limit, then scale to zero on a Cloud Run-like platform
(an instance starts on a request): a launch backoff that ends while no instance runs comes back
through the scheduled wake-up, whose request starts an instance, which launches a fake-cloud
machine whose agent registers through the proxy over TLS and runs the trial to COMPLETED. Last
the AWS case: an ALB with no target in front, the platform model built from the rendered Pulumi
graph deciding when the master runs (it wakes on the CLI's 503s through the rendered wake alarm
and on the master's own Application Auto Scaling action, and sleeps through the sleep alarm).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import psycopg
import pytest
import requests
import yaml

from det.deploy.aws import program as aws_program
from det.deploy.aws.config import AwsConfig
from det.deploy.common import dryrun, release
from det.master import wakeups
from tests.docker_support import docker_client
from tests.e2e.serverless_support import (
    AwsFront,
    Nginx,
    Platform,
    UnixToTcp,
    run_once,
    self_signed,
    tcp_db_url,
)
from tests.fakes import platform_model as pm
from tests.fakes.cloud_agents import CloudAgents, moto_lister
from tests.fakes.ec2_refusals import CapacityProxy
from tests.fakes.moto_server import aws_env
from tests.fakes.wakeup_scheduler import FakeWakeupScheduler
from tests.integration.autoscale_support import (
    TASK_IMAGE,
    TRAIN,
    create_experiment,
    experiment_config,
)
from tests.integration.conftest import ADMIN_PASSWORD, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

POOL = "aws"
TIME_LIMIT = 30  # seconds: CloudFront's default origin response timeout
# A refused launch's backoff (det's own launch_error_backoff), in wall time: the tests wait it
# out, and it must outlast what they do before its wake-up is due (scale to zero, put the
# model to sleep). 10 s ran out on a loaded machine (the AWS case's sleep came 0.27 s late);
# each test prints what was left of it.
LAUNCH_BACKOFF_S = 30
REPO = Path(__file__).resolve().parents[2]


def master_image(tmp: Path) -> tuple[str, bool]:
    """det-master for this code: the tag is the sha256 of the wheel `det deploy` would ship;
    built when missing. Returns the tag and whether this call built it (then the module drops
    the tag at its end: every code change makes a new one, and they piled up on the engine)."""
    docker_client(TASK_IMAGE)  # skips without an engine
    built = release.build(tmp)  # in the test's tmp tree (without one: a det-release-* dir)
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
        self.write_config(
            self.config_file, self.nginx.url, {"type": "http", "url": self.scheduler.url}
        )

    def write_config(
        self, path: Path, master_url: str, wakeups: dict[str, Any], time_limit: int = TIME_LIMIT
    ) -> None:
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
            "master_url": master_url,
            "migrate_on_start": False,
            "request_time_limit_seconds": time_limit,
            "wakeups": wakeups,
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
                        "launch_error_backoff": f"{LAUNCH_BACKOFF_S}s",
                        "endpoint_url": self.ec2.url,
                    },
                }
            ],
            "resource_manager": {
                "default_compute_resource_pool": POOL,
                "default_aux_resource_pool": POOL,
            },
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o644)

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
    # Before the environment below (the build uses the host's CAs).
    image, built = master_image(tmp_path_factory.mktemp("release"))
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
    # The first launch is refused (capacity): the pool backs off 60 s and the loop asks for a
    # wake-up at the backoff's end.
    wait_for(lambda: sim.ec2.refused >= 1, 120, 0.2, "a refused launch")
    wait_for(lambda: sim.scheduler.asked, 60, 0.2, "a wake-up to be asked for")
    asked = sim.scheduler.asked[-1]
    assert asked.url == sim.nginx.url + wakeups.WAKEUP_PATH
    # Scale to zero before the backoff ends: nothing runs, nobody calls.
    sim.platform.stop_all()
    assert sim.platform.running() == []
    left = (asked.at - dt.datetime.now(dt.UTC)).total_seconds()
    print(f"\nCloud Run-like sim: scaled to zero {left:.1f} wall s before the backoff's end "
          f"({LAUNCH_BACKOFF_S} s after the refused launch)")  # fmt: skip
    assert left > 0, "the backoff ended before the scale-in"
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
        print(f"\nCloud Run-like sim: the wake-up's request was held {woken[0].took:.1f} wall s "
              f"by the image's cold start on this machine (Cloud Run's own, with Direct VPC "
              f"egress, is assumed {pm.CLOUD_RUN_COLD_START_S} s in docs/deploy.md)")  # fmt: skip
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


# -- AWS: the wake path of an ALB with no target, decided by the platform model --------------

RATE = 10  # simulated seconds per wall second while a client, an agent or the master works
# The master's wake-up hold (the rendered DET_WAKEUPS_HOLD_SECONDS is 900): the master writes
# its actions in wall-clock time, so the sim takes the least the config allows.
HOLD_S = 60
SLEEP_S = 15 * 60  # the rendered sleep alarm's periods (checked below)


@pytest.fixture(scope="module")
def aws_graph() -> dryrun.Rendered:
    cfg = AwsConfig(
        cluster_id="c1", keypair="kp", inbound_cidr="198.51.100.0/24", master="serverless"
    )
    return dryrun.render(lambda: aws_program.build(cfg), aws_program.MOCK_CALLS)


def _experiment_state(sim: Sim, eid: int) -> str:
    """From PostgreSQL: a request through the front would count as one (and keep it awake)."""
    with psycopg.connect(sim.pg_url) as conn:
        row = conn.execute("SELECT state FROM experiments WHERE id = %s", (eid,)).fetchone()
    return str(row[0]) if row else ""


def test_aws_master_wakes_on_a_cli_request_and_on_a_scheduled_wakeup_through_the_rendered_alarms(
    sim: Sim, aws_graph: dryrun.Rendered, tmp_path: Path
) -> None:
    """The AWS case (issue 37): the front answers as an ALB with no registered target, the
    platform model (built from the rendered alarms, policies, scalable target and health check)
    decides when the master's container runs. A sleeping master wakes on `det experiment
    create` (its 503s, counted as HTTPCode_ELB_503_Count, put the rendered wake alarm in ALARM),
    its loop's capacity backoff becomes a scheduled action in moto's Application Auto Scaling,
    the model puts it to sleep before that, the action wakes it, the trial runs to COMPLETED,
    and with nobody calling the rendered sleep alarm stops it again."""
    # The Cloud Run-like front closes: neither its instances nor one its pending wake-ups would
    # start may lead this master's loops.
    sim.nginx.close()
    sim.platform.stop_all()
    job = run_once(sim.image, sim.config_file, "migrate")  # (done already unless run alone)
    assert job.returncode == 0, job.stderr
    env = pm.service_environment(aws_graph)
    (sleep_alarm,) = [a for a in aws_graph.of_type(pm.ALARM) if a.name.endswith("-sleep")]
    assert int(sleep_alarm.inputs["evaluationPeriods"]) * pm.PERIOD_S == SLEEP_S
    (wake_alarm,) = [a.name for a in aws_graph.of_type(pm.ALARM) if a.name.endswith("-wake")]
    region = env["DET_WAKEUPS_REGION"]

    def client(service: str) -> Any:
        return boto3.client(service, region_name=region, endpoint_url=sim.moto)

    target = pm.register_service(aws_graph, client)
    scaling = client("application-autoscaling")

    def list_actions() -> list[dict[str, Any]]:
        listed = scaling.describe_scheduled_actions(
            ServiceNamespace=target["serviceNamespace"], ResourceId=target["resourceId"]
        )["ScheduledActions"]
        return [{**a, "Schedule": str(a["Schedule"])} for a in listed]

    # The earlier test's machine must not serve this experiment: its launch is what is refused.
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=sim.moto)
    running = [
        i["InstanceId"]
        for r in ec2.describe_instances()["Reservations"]
        for i in r["Instances"]
        if i["State"]["Name"] in ("pending", "running")
    ]
    if running:
        ec2.terminate_instances(InstanceIds=running)

    config = sim.tmp / "master-aws.yaml"
    # The rendered limit (the ALB's idle timeout): a request that meets a task's start waits
    # for its container, which on a busy machine takes longer than CloudFront's 30 s.
    limit = int(env["DET_REQUEST_TIME_LIMIT_SECONDS"])
    platform = Platform(
        sim.image, config, f"{sim.label}-aws", time_limit=limit, env=aws_env(sim.ec2.url)
    )
    nginx = Nginx(sim.tmp / "nginx-aws", sim.cert, sim.key, platform.port, limit)
    wakeups_block = {
        "type": env["DET_WAKEUPS_TYPE"],
        "resource_id": env["DET_WAKEUPS_RESOURCE_ID"],
        "region": region,
        "hold_seconds": HOLD_S,
        "endpoint_url": sim.moto,
    }
    sim.write_config(config, nginx.url, wakeups_block, limit)
    front = AwsFront(platform, aws_graph, list_actions)
    try:
        # `up` created the service with one task; nobody called: the sleep alarm set 0.
        front.skip(lambda: front.model.desired == 0 and not front.model.active(), 10 * 60)
        assert platform.running() == []

        # 1. A CLI request wakes it: 503s from the "ALB", "waking the master" once, then done.
        ctx = tmp_path / "ctx"
        ctx.mkdir()
        (ctx / "train.py").write_text(TRAIN)
        exp = tmp_path / "experiment.yaml"
        exp.write_text(experiment_config(trials=1, steps=2, pause=0.2, pool=POOL))
        sim.ec2.refusing = True
        refused = sim.ec2.refused
        first = len(front.answers)
        cli = subprocess.Popen(
            [sys.executable, "-m", "det.cli", "experiment", "create", str(exp), str(ctx)],
            env={
                **os.environ,
                "HOME": str(tmp_path / "home"),
                "XDG_CONFIG_HOME": str(tmp_path / "home" / ".config"),
                "DET_MASTER": nginx.url,
                "DET_MASTER_CERT_FILE": str(sim.bundle),
                "DET_USER": "admin",
                "DET_PASS": ADMIN_PASSWORD,
            },
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        front.run(RATE, lambda: cli.poll() is not None, 400, "the CLI's call")
        out, err = cli.communicate()
        assert cli.returncode == 0, err
        assert err.count("waking the master") == 1, err
        found = re.search(r"Created experiment (\d+)", out)
        assert found, out
        eid = int(found.group(1))
        calls = front.answers[first:]
        t503 = min(t for t, s in calls if s == 503)
        t200 = min(t for t, s in calls if s == 200)
        (woke_at,) = front.started
        assert any(f"({wake_alarm} in ALARM)" in e.what for e in front.model.events), front.tail()
        print(f"\nAWS sim, a CLI request: the master's task registered {woke_at - t503:.0f} "
              f"simulated s after the ALB's first 503; the CLI's call answered after "
              f"{t200 - t503:.0f} s (its retries, every 1-10 wall s, are {RATE}x longer here); "
              f"docs/deploy.md: 185 s modelled (health check included), about 260 s worst "
              f"case; {pm.delays(front.model)}")  # fmt: skip
        bound = pm.PERIOD_S + pm.METRIC_DELAY_S + pm.ALARM_EVERY_S + pm.TASK_START_S
        assert 0 < woke_at - t503 <= bound

        # 2. Its loop meets a capacity refusal and asks to be woken at the backoff's end: the
        # master's own scheduler writes the actions to moto.
        def wake_actions() -> list[dict[str, Any]]:
            return [a for a in list_actions() if not a["ScheduledActionName"].endswith("-rest")]

        front.run(RATE, lambda: sim.ec2.refused > refused and bool(wake_actions()), 120,
                  "a refused launch and a wake-up in Application Auto Scaling")  # fmt: skip
        (wake,) = wake_actions()
        assert wake["ScalableTargetAction"]["MinCapacity"] == 1
        wake_wall = dt.datetime.fromisoformat(wake["Schedule"][3:-1]).replace(tzinfo=dt.UTC)
        # Nobody calls: the sleep alarm stops the task before the wake-up's time.
        assert dt.datetime.now(dt.UTC) < wake_wall, "the backoff ended before the sleep"
        front.skip(lambda: not front.model.active(), SLEEP_S + 10 * 60)
        assert platform.running() == [] and len(front.stopped) == 1
        left = (wake_wall - dt.datetime.now(dt.UTC)).total_seconds()
        print(f"AWS sim: asleep {left:.1f} wall s before the backoff's end ({LAUNCH_BACKOFF_S} s "
              f"after the refused launch)")  # fmt: skip
        assert left > 0, "the backoff ended before the sleep"
        asleep_calls = len(front.answers)
        sim.ec2.refusing = False

        # 3. The scheduled action wakes it; its loop launches a machine whose agent runs the
        # trial through the front.
        cluster_id = _cluster_id(sim)
        with CloudAgents(
            moto_lister(sim.moto, cluster_id),
            cloud="aws",
            master_url=nginx.url,
            agent_token=_agent_token(sim),
            cluster_id=cluster_id,
            pool=POOL,
            slots={"m5.large": 1},
            tmp=tmp_path / "machines",
        ) as machines:
            front.run(RATE, lambda: len(front.started) == 2, 180, "the scheduled wake-up")
            assert len(front.answers) == asleep_calls, "a request, not the action, woke it"
            due = front.due[(wake["ScheduledActionName"], wake["Schedule"][3:-1])]
            woke = front.started[1] - due
            print(f"AWS sim, a scheduled wake-up: the master's task registered {woke:.0f} "
                  f"simulated s after its action's time; docs/deploy.md: 60 s after the time "
                  f"(task start {pm.TASK_START_S} s assumed; scheduled actions run on the "
                  f"minute)")  # fmt: skip
            assert 0 <= woke <= pm.ALARM_EVERY_S + pm.TASK_START_S
            front.run(RATE, lambda: _experiment_state(sim, eid) in ("COMPLETED", "ERROR",
                      "CANCELED"), 420, "the experiment to end")  # fmt: skip
            assert _experiment_state(sim, eid) == "COMPLETED"
            assert not machines.errors, machines.errors
            assert machines.seen

        # 4. The wake-up's hold ends (its second action), nobody calls: asleep again.
        rest = wake["ScheduledActionName"] + "-rest"
        front.run(RATE, lambda: any(name == rest for name, _ in front.due), HOLD_S + 120,
                  "the wake-up's hold to end")  # fmt: skip
        last_call = front.answers[-1][0]
        front.skip(lambda: not front.model.active(), SLEEP_S + 10 * 60)
        slept = front.stopped[-1] - last_call
        print(f"AWS sim: asleep again {slept:.0f} simulated s after the last request "
              f"(the rendered sleep alarm: {SLEEP_S} s without a request)")  # fmt: skip
        assert SLEEP_S <= slept <= SLEEP_S + 4 * 60, slept
        assert platform.running() == []
        assert {a["ResourceId"] for a in list_actions()} == {target["resourceId"]}
    finally:
        platform.close()
        nginx.close()
