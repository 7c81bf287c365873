"""A priced on-prem pool (issue 41 item 4): ``resource_pools[].price`` on a pool of static agents
puts dollars in the usage reports of a master (its app and control loop in the test's
process, ``loop_master_factory``); per user, workspace and experiment they add
up to the pool's total; an unpriced pool's figures are null (never 0.0) in the API and ``-`` in
det's CLI, whose total row says it covers the priced pools only. The arithmetic by hand:
tests/integration/test_usage_reconcile.py."""

from __future__ import annotations

import base64
import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from det.cli.resources import usd
from tests.fakes.sim_agent import SimAgent
from tests.integration.cli_support import Det
from tests.integration.conftest import wait_for
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

RACK = "rack"
SLOT_HOUR, AGENT_HOUR = 1.2, 0.6
TODAY = dt.datetime.now(dt.UTC).date()
DAY0, DAY1 = str(TODAY - dt.timedelta(days=1)), str(TODAY + dt.timedelta(days=1))
PASSWORD = "Usage-pw-1"


def _experiment(m: InProcessMaster, token: str, pool: str, project: int) -> int:
    config = (
        "name: onprem\nentrypoint: python3 train.py\n"
        "searcher: {name: single, metric: loss, max_length: 1}\n"
        f"resources: {{slots_per_trial: 1, resource_pool: {pool}}}\nmax_restarts: 0\n"
    )
    body = {
        "config": config,
        "modelDefinition": [
            {"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode()}
        ],
        "projectId": project,
        "activate": True,
    }
    r = m.session(token).post(m.url + "/api/v1/experiments", json=body, timeout=30)
    assert r.status_code == 200, r.text
    return int(r.json()["experiment"]["id"])


def _user_with_workspace(m: InProcessMaster, name: str) -> tuple[str, int]:
    """A user, and a workspace of its own with one project: (token, project id)."""
    m.post("/api/v1/users", {"user": {"username": name}, "password": PASSWORD})
    token = m.login(name, PASSWORD)
    s = m.session(token)
    r = s.post(m.url + "/api/v1/workspaces", json={"name": f"{name}-ws"}, timeout=30)
    assert r.status_code == 200, r.text
    wid = r.json()["workspace"]["id"]
    r = s.post(
        m.url + f"/api/v1/workspaces/{wid}/projects",
        json={"name": f"{name}-p", "workspaceId": wid},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    return token, int(r.json()["project"]["id"])


def _done(m: InProcessMaster, eid: int) -> bool:
    st = m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]
    assert st not in ("STATE_ERROR", "STATE_CANCELED"), st
    return bool(st == "STATE_COMPLETED")


def test_a_priced_on_prem_pool_reports_dollars_that_add_up(
    loop_master_factory: Any, tmp_path: Path, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    m: InProcessMaster = loop_master_factory(
        extra={
            "resource_pools": [
                {"pool_name": RACK, "price": {"slot_hour": SLOT_HOUR, "agent_hour": AGENT_HOUR}},
                {"pool_name": "default"},
            ]
        }
    )
    agents = [
        SimAgent(m.url, m.agent_token, "rack-1", slots=2, pool=RACK).start(),
        SimAgent(m.url, m.agent_token, "free-1", slots=1, pool="default").start(),
    ]
    try:
        alice, alice_project = _user_with_workspace(m, "alice")
        bob, bob_project = _user_with_workspace(m, "bob")
        priced = [
            _experiment(m, alice, RACK, alice_project),
            _experiment(m, bob, RACK, bob_project),
        ]
        unpriced = _experiment(m, bob, "default", bob_project)
        for eid in [*priced, unpriced]:
            wait_for(lambda eid=eid: _done(m, eid), 240, 0.5, f"experiment {eid}")
    finally:
        for a in agents:
            a.stop()

    r = m.session().get(
        m.url + "/api/v1/resources/allocation/aggregated",
        params={
            "startDate": DAY0,
            "endDate": DAY1,
            "period": "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
        },
        timeout=60,
    )
    assert r.status_code == 200, r.text
    days = r.json()["resourceEntries"]
    (day,) = [e for e in days if e["seconds"] > 0]
    cost = day["cost"]
    total = cost["usd"]
    # Each slot-hour on the 2-slot agent costs $1.2 + $0.6 / 2.
    rack_seconds = day["byResourcePool"][RACK]
    assert total == pytest.approx(rack_seconds / 3600 * (SLOT_HOUR + AGENT_HOUR / 2), rel=1e-6)
    assert total > 0 and cost["idleUsd"] is None
    for by in ("byUsername", "byWorkspace", "byExperiment"):
        assert sum(d["usd"] for d in cost[by].values()) == pytest.approx(total, rel=1e-9), by
    assert set(cost["byUsername"]) == {"alice", "bob"}
    assert set(cost["byWorkspace"]) == {"alice-ws", "bob-ws"}
    assert set(cost["byExperiment"]) == {str(e) for e in priced}
    # The unpriced pool: slot-seconds, and no dollars (absent from the priced maps).
    assert day["byResourcePool"]["default"] > 0 and "default" not in cost["byResourcePool"]
    assert str(unpriced) in day["byExperiment"] and str(unpriced) not in cost["byExperiment"]
    # Days with nothing priced say null, not 0.0.
    for e in days:
        if e["seconds"] == 0:
            assert e["cost"]["usd"] is None and e["cost"]["onDemandUsd"] is None

    raw = m.session().get(
        m.url + "/api/v1/resources/allocation/raw",
        params={"timestampAfter": f"{DAY0}T00:00:00Z", "timestampBefore": f"{DAY1}T23:59:59Z"},
        timeout=60,
    )
    entries = raw.json()["resourceEntries"]
    by_exp = {e.get("experimentId"): e for e in entries if e["kind"] == "TRIAL"}
    assert by_exp[unpriced]["costUsd"] is None
    assert all(by_exp[e]["costUsd"] > 0 for e in priced)
    assert not [e for e in entries if e["kind"] == "instance"]  # static agents have no row

    det = Det(m, tmp_path / "home", capsys, monkeypatch)
    det.login()
    out = det.ok("resources", "aggregated", DAY0, DAY1, "--by", "experiment").out
    rows = {r[1]: r for r in (re.split(r"\s{2,}", ln.strip()) for ln in out.splitlines()[2:])}
    assert rows[f"experiment {unpriced}"][3:] == ["-", "-", "-"]
    assert rows[f"experiment {priced[0]}"][3] == usd(cost["byExperiment"][str(priced[0])]["usd"])
    assert rows["total (priced pools only)"][3] == usd(total)
