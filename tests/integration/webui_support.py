"""Shared parts of the WebUI tests: Debian's Chromium under Playwright, logging in, screenshots
for the docs, and a live master with a finished adaptive ASHA search (simulated agents)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import (
    ADMIN_PASSWORD,
    Master,
    MasterClient,
    wait_for,
)
from tests.integration.threaded import ThreadedMaster, threaded_master

# A search over three kinds of hyperparameter (a number, an integer, a category), so the
# parallel coordinates, scatters and the heat map all have something to draw.
ASHA = """
name: asha-webui
entrypoint: python3 train.py
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_trials: 8
  max_time: 8
  time_metric: batches
  divisor: 2
  max_rungs: 3
  mode: aggressive
hyperparameters:
  lr: {type: double, minval: 0.01, maxval: 1.0}
  layers: {type: int, minval: 1, maxval: 4}
  optimizer: {type: categorical, vals: [sgd, adam]}
reproducibility: {experiment_seed: 3}
labels: [asha]
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1200, "height": 820}, accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(15_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    context.close()
    assert not errors, f"JavaScript errors on the page: {errors}"


def login(
    page: Any,
    m: MasterClient,
    path: str = "/det/",
    user: str = "admin",
    password: str = ADMIN_PASSWORD,
) -> None:
    page.goto(m.url + path)
    page.wait_for_url("**/det/login**")
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(m.url + path)


def screenshot(page: Any, name: str) -> None:
    """With DET_WEBUI_SCREENSHOTS set to a folder (docs/webui to refresh the docs' pictures),
    saves what the page's window shows there as NAME.jpg (JPEG, to keep them small)."""
    folder = os.environ.get("DET_WEBUI_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.jpg"), type="jpeg", quality=60)


def create(m: MasterClient, config: str, activate: bool = True) -> int:
    out = m.post("/api/v1/experiments", {"config": config, "activate": activate})
    return int(out["experiment"]["id"])


def post_logs(m: Master | ThreadedMaster, task_id: str, lines: list[dict[str, Any]]) -> None:
    r = requests.post(
        m.url + "/api/v1/task/logs",
        json={"logs": [{"taskId": task_id, **x} for x in lines]},
        headers={"Authorization": f"Bearer {m.agent_token}"},
        timeout=10,
    )
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def module_db(pg_server: str) -> Iterator[str]:
    import psycopg

    name = f"det_webui_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, q = pg_server.partition("?")
    yield f"{head.rpartition('/')[0]}/{name}{sep}{q}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="module")
def search(tmp_path_factory: Any, module_db: str) -> Iterator[tuple[ThreadedMaster, int]]:
    """A master served in this process (threaded_master, with its control loop) for the module,
    with a finished adaptive ASHA search of 8 trials."""
    with threaded_master(tmp_path_factory.mktemp("webui"), module_db, loop=True) as m:
        agents = [SimAgent(m.url, m.agent_token, f"sim-{i}", slots=2).start() for i in range(2)]
        try:
            eid = create(m, ASHA)
            wait_for(
                lambda: (
                    m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED"
                ),
                120,
                what="the ASHA search to complete",
            )
        finally:
            for a in agents:
                a.stop()
        yield m, eid
