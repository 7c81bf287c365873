"""Usage and cost reports against a live master (issue 27 item 1): Determined's allocation
reports as the official ``determined==0.38.1`` CLI and bindings read them, the dollars of a
search that ran on a priced AWS pool (moto, simulated agents on its instances), the experiment's
own cost, det's CLI, and bad input."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.compat.official import ensure_official_venv
from tests.integration.cli_support import Det
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.test_official_client_answers import Official
from tests.integration.usage_support import POOL, PRICE, Priced, priced  # noqa: F401
from tests.integration.webui_support import browser, login, page, screenshot  # noqa: F401

pytestmark = pytest.mark.integration

TODAY = dt.datetime.now(dt.UTC).date()
# The whole day (and a day either side: a run near midnight UTC).
AFTER = f"{TODAY - dt.timedelta(days=1)}T00:00:00Z"
BEFORE = f"{TODAY + dt.timedelta(days=1)}T23:59:59Z"
DAY0, DAY1 = str(TODAY - dt.timedelta(days=1)), str(TODAY + dt.timedelta(days=1))


def _dollars(text: str) -> list[float]:
    """The dollar amounts in ``text`` as the WebUI writes them ($1.25, $0.00026)."""
    return [float(x) for x in re.findall(r"\$(\d+(?:\.\d+)?(?:e-?\d+)?)", text)]


def _get(p: Priced, path: str, **params: Any) -> requests.Response:
    return p.master.session().get(p.master.url + path, params=params, timeout=60)


def _raw(p: Priced) -> list[dict[str, Any]]:
    r = _get(p, "/api/v1/resources/allocation/raw", timestampAfter=AFTER, timestampBefore=BEFORE)
    assert r.status_code == 200, r.text
    return list(r.json()["resourceEntries"])


def test_raw_report_lists_the_trials_and_instances_with_their_dollars(priced: Priced) -> None:  # noqa: F811
    entries = _raw(priced)
    trials = [e for e in entries if e["kind"] == "TRIAL"]
    assert sorted({e["trialId"] for e in trials}) == sorted(priced.trial_ids)
    assert all(e["experimentId"] == priced.experiment_id for e in trials)
    assert all(e["username"] == "admin" and e["labels"] == ["priced", "asha-demo"] for e in trials)
    assert all(e["resourcePool"] == POOL and e["workspace"] == "Uncategorized" for e in trials)
    # Each trial held its machine's only slot: its dollars are its seconds at the full price.
    for e in trials:
        assert e["slots"] == 1 and e["seconds"] > 0
        assert e["costUsd"] == pytest.approx(e["seconds"] / 3600 * PRICE, rel=1e-6)
        assert e["onDemandUsd"] == e["costUsd"] and e["spotUsd"] == 0
    machines = [e for e in entries if e["kind"] == "instance"]
    assert {e["username"] for e in machines} == priced.instances
    # The machines cost at least what the tasks on them were charged (the rest was idle).
    charged = sum(e["costUsd"] for e in entries if e["kind"] != "instance")
    assert sum(e["costUsd"] for e in machines) >= charged > 0


def test_aggregated_reconciles_the_experiment_with_its_pool(priced: Priced) -> None:  # noqa: F811
    r = _get(
        priced,
        "/api/v1/resources/allocation/aggregated",
        startDate=DAY0,
        endDate=DAY1,
        period="RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
    )
    assert r.status_code == 200, r.text
    (day,) = [e for e in r.json()["resourceEntries"] if e["seconds"] > 0]
    exp = str(priced.experiment_id)
    cost = day["cost"]
    assert cost["byExperiment"][exp]["usd"] == pytest.approx(cost["byResourcePool"][POOL]["usd"])
    assert cost["byUsername"]["admin"]["usd"] == pytest.approx(cost["usd"])
    assert cost["byExperimentLabel"]["priced"]["usd"] == pytest.approx(cost["usd"])
    assert day["byExperiment"][exp] == pytest.approx(day["byResourcePool"][POOL])
    assert cost["idleUsd"] >= 0 and cost["idleByResourcePool"][POOL] == cost["idleUsd"]
    # The raw report's charged dollars of the same day add up to the same total.
    raw_total = sum(e["costUsd"] for e in _raw(priced) if e["kind"] != "instance")
    assert cost["usd"] == pytest.approx(raw_total, rel=1e-6)
    # The experiment's own cost (det's route) is the same money, trial by trial.
    own = _get(priced, f"/api/v1/experiments/{priced.experiment_id}/cost").json()
    assert own["usd"] == pytest.approx(cost["byExperiment"][exp]["usd"], rel=1e-6)
    assert sorted(t["trialId"] for t in own["trials"]) == sorted(priced.trial_ids)
    assert sum(t["usd"] for t in own["trials"]) == pytest.approx(own["usd"])


def test_official_cli_resources_raw_aggregated_and_allocations(
    priced: Priced,  # noqa: F811
    tmp_path: Path,
) -> None:
    o = Official(ensure_official_venv(), priced.master, tmp_path)
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    # The CSVs Determined's master serves outside /api/v1.
    raw = list(csv.DictReader(io.StringIO(o("resources", "raw", AFTER, BEFORE))))
    mine = [r for r in raw if r["experiment_id"] == str(priced.experiment_id)]
    trial_rows = [r for r in mine if r["kind"] == "TRIAL"]
    assert len(trial_rows) == 3 and {r["kind"] for r in mine} <= {"TRIAL", "CHECKPOINT_GC"}
    assert all(float(r["cost_usd"]) > 0 and r["labels"] == "priced,asha-demo" for r in trial_rows)
    agg = list(csv.DictReader(io.StringIO(o("resources", "aggregated", DAY0, DAY1))))
    total = [r for r in agg if r["aggregation_type"] == "total" and float(r["seconds"]) > 0]
    assert len(total) == 1 and float(total[0]["cost_usd"]) > 0
    pools = {r["aggregation_key"] for r in agg if r["aggregation_type"] == "resource_pool"}
    assert pools == {POOL}
    allocs = list(csv.DictReader(io.StringIO(o("resources", "allocations", AFTER, BEFORE))))
    assert {r["task_type"] for r in allocs} >= {"TRIAL"}
    assert all(r["workspace_name"] == "Uncategorized" for r in allocs)
    # --json: the /api/v1 answers.
    as_json = json.loads(o("resources", "raw", AFTER, BEFORE, "--json"))
    kinds = {e["kind"] for e in as_json["resourceEntries"]}
    assert {"TRIAL", "instance"} <= kinds
    monthly = json.loads(o("resources", "aggregated", DAY0[:7], DAY1[:7], "--monthly", "--json"))[
        "resourceEntries"
    ]
    assert sum(e["seconds"] for e in monthly) == pytest.approx(
        total[0] and float(total[0]["seconds"])
    )
    # The official bindings parse both answers (the SDK's own calls).
    parsed = o.python(
        "r = bindings.get_ResourceAllocationRaw(session, timestampAfter="
        f"{AFTER!r}, timestampBefore={BEFORE!r})\n"
        "a = bindings.get_ResourceAllocationAggregated(session, startDate="
        f"{DAY0!r}, endDate={DAY1!r}, "
        "period=bindings.v1ResourceAllocationAggregationPeriod.DAILY)\n"
        "print(json.dumps([len(r.resourceEntries), sum(e.seconds for e in a.resourceEntries)]))"
    )
    assert parsed[0] == len(as_json["resourceEntries"]) and parsed[1] > 0


def test_det_cli_resources_and_describe_show_the_dollars(
    priced: Priced,  # noqa: F811
    tmp_path: Path,
    capsys: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    det = Det(priced.master, tmp_path / "home", capsys, monkeypatch)
    det.login()
    out = det.ok("resources", "aggregated", DAY0, DAY1, "--by", "experiment").out
    assert f"experiment {priced.experiment_id}" in out and "$" in out
    raw = det.ok("resources", "raw", AFTER, BEFORE).out
    assert "TRIAL" in raw and "instance" in raw
    described = det.ok("experiment", "describe", str(priced.experiment_id)).out
    cost = _get(priced, f"/api/v1/experiments/{priced.experiment_id}/cost").json()
    assert "Cost:" in described and f"{cost['slotHours']:.3f} slot-hours" in described


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        (
            "/api/v1/resources/allocation/raw",
            {"timestampBefore": BEFORE},
            "timestampAfter: required",
        ),
        (
            "/api/v1/resources/allocation/raw",
            {"timestampAfter": "yesterday", "timestampBefore": BEFORE},
            "timestampAfter: must be an RFC 3339 time",
        ),
        (
            "/api/v1/resources/allocation/raw",
            {"timestampAfter": BEFORE, "timestampBefore": AFTER},
            "timestampBefore: must not be before timestampAfter",
        ),
        (
            "/api/v1/resources/allocation/aggregated",
            {"startDate": DAY0, "endDate": DAY1, "period": "WEEKLY"},
            "period: must be RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
        ),
        (
            "/api/v1/resources/allocation/aggregated",
            {
                "startDate": "2025-13-01",
                "endDate": DAY1,
                "period": "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
            },
            "startDate: must be a date YYYY-MM-DD",
        ),
        (
            "/api/v1/resources/allocation/aggregated",
            {
                "startDate": "1900-01-01",
                "endDate": DAY1,
                "period": "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
            },
            "endDate: at most 3700 periods after startDate",
        ),
        (
            "/resources/allocation/allocations-csv",
            {"timestamp_after": AFTER},
            "timestampBefore: required",
        ),
    ],
)
def test_bad_report_input_is_one_line_naming_the_field(
    priced: Priced,  # noqa: F811
    path: str,
    params: dict[str, str],
    message: str,
) -> None:
    r = _get(priced, path, **params)
    assert r.status_code == 400, r.text
    assert message in r.json()["message"]


def test_reports_need_a_user_not_a_task_nor_anonymity(priced: Priced) -> None:  # noqa: F811
    m = priced.master
    params = {"timestampAfter": AFTER, "timestampBefore": BEFORE}
    anon = requests.get(m.url + "/api/v1/resources/allocation/raw", params=params, timeout=30)
    assert anon.status_code == 401
    csv_anon = requests.get(m.url + "/resources/allocation/raw", params=params, timeout=30)
    assert csv_anon.status_code == 401
    agent = requests.get(
        m.url + "/api/v1/resources/allocation/raw",
        params=params,
        headers={"Authorization": f"Bearer {m.agent_token}"},
        timeout=30,
    )
    assert agent.status_code == 401
    # Another user reads them too (as in Determined's open-source edition).
    r = m.session().post(
        m.url + "/api/v1/users",
        json={"user": {"username": "usage-reader"}, "password": "Pw-1234567"},
        timeout=30,
    )
    assert r.status_code in (200, 409), r.text
    token = m.login("usage-reader", "Pw-1234567")
    got = m.session(token).get(
        m.url + "/api/v1/resources/allocation/raw", params=params, timeout=30
    )
    assert got.status_code == 200 and got.json()["resourceEntries"]


def test_a_label_that_looks_like_a_formula_is_text_in_the_csv(priced: Priced) -> None:  # noqa: F811
    m = priced.master
    label = f"{priced.master.url}/api/v1/experiments/{priced.experiment_id}/labels/=HYPERLINK(1)"
    assert m.session().put(label, timeout=30).status_code == 200
    try:
        agg = _get(
            priced,
            "/resources/allocation/aggregated",
            start_date=DAY0,
            end_date=DAY1,
            period="RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
        ).text
        keys = [r["aggregation_key"] for r in csv.DictReader(io.StringIO(agg))]
        assert "'=HYPERLINK(1)" in keys and "=HYPERLINK(1)" not in keys
    finally:
        m.session().delete(label, timeout=30)


@pytest.mark.browser
def test_webui_usage_page_and_experiment_page_show_the_search_cost(
    priced: Priced,  # noqa: F811
    page: Any,  # noqa: F811
) -> None:
    m, eid = priced.master, priced.experiment_id
    own = _get(priced, f"/api/v1/experiments/{eid}/cost").json()
    # The page rounds to cents, or to two significant digits under a cent.
    near = pytest.approx(own["usd"], rel=0.05, abs=0.005 if own["usd"] >= 0.01 else 0)
    login(page, m, f"/det/usage?from={DAY0}&to={DAY1}&by=experiment")
    row = page.locator(".usage-breakdown tr", has_text=f"experiment {eid}")
    row.wait_for(timeout=30_000)
    cells = row.locator("td").all_inner_texts()
    assert cells[0] == f"experiment {eid}" and _dollars(cells[2]) == [near], cells
    assert page.locator("svg.usage-chart rect.bar").count() >= 1
    screenshot(page, "usage")
    # The experiment's page carries the same figure.
    page.goto(f"{m.url}/det/experiments/{eid}")
    cost = page.locator(".experiment-cost")
    cost.wait_for(timeout=30_000)
    total, spot, on_demand = _dollars(cost.inner_text())
    assert total == near and spot == 0 and on_demand == near, cost.inner_text()
