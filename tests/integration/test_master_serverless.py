"""The master's serverless side without Docker (the image's simulation is
tests/e2e/test_serverless_sim.py): migrations only by ``det-master migrate`` when
``migrate_on_start`` is false, the authenticated wake-up URL, long requests that end before
the platform's request time limit, and a launch backoff that the loop schedules as a wake-up
which the (fake) scheduler then calls."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests
import yaml

from det.master import wakeups
from tests.fakes.ec2_refusals import CapacityProxy
from tests.fakes.wakeup_scheduler import FakeWakeupScheduler
from tests.integration.autoscale_support import create_experiment, experiment_config
from tests.integration.conftest import ADMIN_PASSWORD, Master, free_port, wait_for

pytestmark = pytest.mark.integration


def det_master(config: dict[str, Any], tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    path = tmp / f"cfg-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DET_")}
    return subprocess.run(
        [sys.executable, "-m", "det.master", "--config-file", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def base_config(tmp: Path, pg_url: str) -> dict[str, Any]:
    return {
        "port": free_port(),
        "bind_address": "127.0.0.1",
        "data_dir": str(tmp / "data"),
        "db": {"url": pg_url},
        "security": {"initial_user_password": ADMIN_PASSWORD},
        "migrate_on_start": False,
    }


def migrations(pg_url: str) -> list[tuple[int, dt.datetime]]:
    with psycopg.connect(pg_url) as conn:
        return [
            (int(r[0]), r[1])
            for r in conn.execute(
                "SELECT version, applied_at FROM schema_migrations ORDER BY version"
            )
        ]


def test_the_service_refuses_an_unmigrated_database_and_the_job_migrates_once(
    tmp_path: Path, pg_url: str, master_factory: Any
) -> None:
    cfg = base_config(tmp_path, pg_url)
    refused = det_master(cfg, tmp_path)
    assert refused.returncode == 2
    line = refused.stderr.strip()
    assert "\n" not in line and "not migrated" in line and "det-master migrate" in line, line
    with psycopg.connect(pg_url) as conn:  # the refusal changed nothing
        assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone() == (None,)

    job = det_master(cfg, tmp_path, "migrate")
    assert job.returncode == 0, job.stderr
    applied = migrations(pg_url)
    assert applied and "applied migrations: [1," in job.stdout
    again = det_master(cfg, tmp_path, "migrate")
    assert "none (up to date)" in again.stdout

    master: Master = master_factory(extra={"migrate_on_start": False})
    assert migrations(pg_url) == applied  # the service applied nothing
    assert "applied migration" not in master.logs()


def test_the_wakeup_url_takes_only_the_clusters_token(master_factory: Any, pg_url: str) -> None:
    master: Master = master_factory()
    with psycopg.connect(pg_url) as conn:
        (secret,) = conn.execute("SELECT token_secret FROM cluster").fetchone()  # type: ignore[misc]
    url = master.url + wakeups.WAKEUP_PATH
    assert requests.post(url, timeout=10).status_code == 401
    wrong = {wakeups.TOKEN_HEADER: wakeups.token("another cluster")}
    assert requests.post(url, headers=wrong, timeout=10).status_code == 401
    # A user's session is not a wake-up token either.
    assert master.session().post(url, timeout=10).status_code == 401
    ok = requests.post(url, headers={wakeups.TOKEN_HEADER: wakeups.token(secret)}, timeout=10)
    assert ok.status_code == 200 and ok.json() == {"woken": True}


def test_a_log_follow_ends_cleanly_before_the_request_time_limit(master_factory: Any) -> None:
    master: Master = master_factory(extra={"request_time_limit_seconds": 6})
    session = master.session()  # logged in first: only the stream is timed
    start = time.monotonic()
    r = session.get(
        master.url + "/api/v1/master/logs", params={"follow": "true"}, timeout=60, stream=True
    )
    lines = [json.loads(raw) for raw in r.iter_lines() if raw]  # raises if the stream is cut
    took = time.monotonic() - start
    assert r.status_code == 200 and lines and all("logEntry" in x["result"] for x in lines)
    # With a 6 s limit the master ends the follow itself after 4 s (the budget is
    # long_request_seconds(), unit-tested); nothing here cuts it, so without the budget it
    # would follow until the client's 60 s timeout. The upper bound is that difference, not a
    # speed target: a loaded machine may take a little longer than 4 s to close it.
    assert 3.5 <= took < 30, took


def test_a_launch_backoff_is_scheduled_as_a_wakeup_which_wakes_the_master(
    master_factory: Any, aws_endpoint: str, tmp_path: Path, pg_url: str
) -> None:
    proxy = CapacityProxy(aws_endpoint, "m5.large")
    fake = FakeWakeupScheduler().start()
    try:
        provider = {
            "type": "aws",
            "region": "us-east-1",
            "image_id": "ami-12c6146b",
            "instance_type": "m5.large",
            "instance_slots": 1,
            "max_instances": 1,
            "endpoint_url": proxy.url,
        }
        master: Master = master_factory(
            extra={
                "resource_pools": [{"pool_name": "aws", "provider": provider}],
                "resource_manager": {
                    "default_compute_resource_pool": "aws",
                    "default_aux_resource_pool": "aws",
                },
                "wakeups": {"type": "http", "url": fake.url},
            }
        )
        create_experiment(master, experiment_config(trials=1, steps=1, pause=0.1, pool="aws"))
        wait_for(lambda: proxy.refused >= 1, 60, 0.2, "a refused launch")
        wait_for(lambda: fake.asked, 60, 0.2, "a wake-up to be asked for")
        asked = fake.asked[0]
        with psycopg.connect(pg_url) as conn:
            (refused_at,) = conn.execute("SELECT min(at) FROM launch_errors").fetchone()  # type: ignore[misc]
        # The capacity backoff's end (10 s after the refusal), rounded up to the second.
        assert (
            dt.timedelta(0)
            <= asked.at - (refused_at + dt.timedelta(seconds=10))
            <= dt.timedelta(seconds=1)
        )
        assert asked.url == master.url + wakeups.WAKEUP_PATH
        wait_for(lambda: fake.fired, 60, 0.2, "the wake-up to fire")
        assert fake.fired[0] == (asked.name, 200)
        # One wake-up per time, however many passes computed it.
        assert len({a.at for a in fake.asked}) == len(fake.asked)
    finally:
        fake.stop()
        proxy.stop()
