"""A trial's run lost after its last checkpoint leaves reports past it; the next run resumes
from the checkpoint and reports those periods again. Each period is listed once, with the
latest run's values; the earlier run's rows are kept in ``metrics_superseded`` (migration
0045, ``det.master.services.metrics_superseded``), and the trial's best validation, searcher
metric and summary count only what is listed."""

from __future__ import annotations

import json
import threading
from typing import Any

import psycopg
import pytest

from det.master.services import metrics_superseded
from tests.fakes.sim_agent import SimAgent, default_training, wait
from tests.integration.conftest import MasterClient
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: resumed
entrypoint: python3 train.py
searcher: {name: single, metric: loss, smaller_is_better: true}
hyperparameters: {lr: 0.1}
"""


def _trial(m: MasterClient, pg_url: str) -> int:
    eid = int(
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": False})["experiment"]["id"]
    )
    with psycopg.connect(pg_url, autocommit=True) as c:
        row = c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, 'r1', 'resumed-' || %s, '{\"lr\": 0.1}', 1, 'PAUSED') RETURNING id",
            (eid, eid),
        ).fetchone()
    assert row is not None
    return int(row[0])


def _report(m: MasterClient, tid: int, run: int, group: str, steps: int, loss: float) -> None:
    # One report per request, as the harness sends them.
    report = {"group": group, "trialRunId": run, "stepsCompleted": steps,
              "metrics": {"avgMetrics": {"loss": loss}}}  # fmt: skip
    m.post(f"/api/v1/trials/{tid}/metrics/batch", {"reports": [report]})


def _listed(m: MasterClient, tid: int, group: str) -> list[tuple[int, int, float]]:
    """(batches, run, loss) of each listed row of ``group``, in the API's order."""
    rows = m.get(f"/api/v1/trials/{tid}/metrics", params={"group": group})["metrics"]
    return [
        (int(r["totalBatches"]), int(r["trialRunId"]), r["metrics"]["avg_metrics"]["loss"])
        for r in rows
    ]


def _best(m: MasterClient, pg_url: str, tid: int) -> tuple[int | None, float | None, Any]:
    """The best validation's batches (by the pointer), the trial's searcher metric as the API
    answers it, and the summary of validations."""
    with psycopg.connect(pg_url, autocommit=True) as c:
        row = c.execute(
            "SELECT m.total_batches FROM trials t LEFT JOIN metrics m ON m.id = t.best_validation_id"
            " WHERE t.id = %s",
            (tid,),
        ).fetchone()
    assert row is not None
    trial = m.get(f"/api/v1/trials/{tid}")["trial"]
    summary = (trial.get("summaryMetrics") or {}).get("validation_metrics", {}).get("loss")
    return row[0], trial.get("searcherMetricValue"), summary


def test_a_resumed_run_replaces_the_lost_runs_reports_past_its_checkpoint(
    api_master: MasterClient, pg_url: str
) -> None:
    m = api_master
    tid = _trial(m, pg_url)
    # Run 1: training every 100 batches up to 500, validations at 200 and 400 (the best, 0.1);
    # it checkpointed at 200 and was lost after 500.
    for steps in range(100, 501, 100):
        _report(m, tid, 1, "training", steps, 1.0 + steps / 1000)
        if steps in (200, 400):
            _report(m, tid, 1, "validation", steps, {200: 0.5, 400: 0.1}[steps])
    assert [b for b, _, _ in _listed(m, tid, "training")] == [100, 200, 300, 400, 500]
    assert _best(m, pg_url, tid)[:2] == (400, 0.1)

    # Run 2 resumes from the checkpoint at 200. Its first report moves run 1's rows past 200:
    # the best validation (400) among them, so the best is the one at 200 again.
    _report(m, tid, 2, "training", 300, 2.3)
    assert _listed(m, tid, "training") == [(100, 1, 1.1), (200, 1, 1.2), (300, 2, 2.3)]
    assert _listed(m, tid, "validation") == [(200, 1, 0.5)]
    best_at, searcher_metric, summary = _best(m, pg_url, tid)
    assert (best_at, searcher_metric) == (200, 0.5)
    assert summary["count"] == 1 and summary["min"] == 0.5 and summary["last"] == 0.5

    for steps in range(400, 601, 100):
        _report(m, tid, 2, "training", steps, 2.0 + steps / 1000)
        if steps in (400, 600):
            _report(m, tid, 2, "validation", steps, {400: 0.3, 600: 0.2}[steps])

    # Each period once, the second run's values past the checkpoint.
    training = _listed(m, tid, "training")
    assert training == [(100, 1, 1.1), (200, 1, 1.2)] + [
        (s, 2, 2.0 + s / 1000) for s in range(300, 601, 100)
    ]
    assert _listed(m, tid, "validation") == [(200, 1, 0.5), (400, 2, 0.3), (600, 2, 0.2)]
    best_at, searcher_metric, summary = _best(m, pg_url, tid)
    assert (best_at, searcher_metric) == (600, 0.2)
    assert summary["count"] == 3 and summary["min"] == 0.2 and summary["max"] == 0.5
    trial = m.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["summaryMetrics"]["avg_metrics"]["loss"]["count"] == 6

    with psycopg.connect(pg_url, autocommit=True) as c:
        kept = c.execute(
            "SELECT metric_group, total_batches, trial_run_id, superseded_by_run,"
            " metrics->'avg_metrics'->'loss' FROM metrics_superseded WHERE trial_id = %s"
            " ORDER BY metric_group, total_batches",
            (tid,),
        ).fetchall()
        # Only run 2's first report looked: the trial's row says nothing earlier lies past 300.
        clean = c.execute(
            "SELECT metrics_clean_run, metrics_clean_from FROM trials WHERE id = %s", (tid,)
        ).fetchone()
    assert kept == [
        ("training", 300, 1, 2, 1.3),
        ("training", 400, 1, 2, 1.4),
        ("training", 500, 1, 2, 1.5),
        ("validation", 400, 1, 2, 0.1),
    ]
    assert clean == (2, 301)


def test_a_lost_runs_late_report_is_replaced_when_the_new_run_gets_there(
    api_master: MasterClient, pg_url: str
) -> None:
    """A lost run's container may still report after the next run started (a machine cut off
    the network): its row is listed until the newer run reports that period, then replaced,
    though that newer run had looked before."""
    m = api_master
    tid = _trial(m, pg_url)
    for steps in (100, 200, 300):
        _report(m, tid, 1, "training", steps, steps / 100)
    _report(m, tid, 2, "training", 200, 20.0)
    _report(m, tid, 2, "training", 300, 30.0)
    _report(m, tid, 1, "training", 400, 4.0)  # the lost run, late
    assert _listed(m, tid, "training") == [(100, 1, 1.0), (200, 2, 20.0), (300, 2, 30.0),
                                           (400, 1, 4.0)]  # fmt: skip
    _report(m, tid, 2, "training", 400, 40.0)
    assert _listed(m, tid, "training") == [(100, 1, 1.0), (200, 2, 20.0), (300, 2, 30.0),
                                           (400, 2, 40.0)]  # fmt: skip
    with psycopg.connect(pg_url, autocommit=True) as c:
        kept = c.execute(
            "SELECT total_batches, trial_run_id FROM metrics_superseded WHERE trial_id = %s"
            " ORDER BY total_batches",
            (tid,),
        ).fetchall()
    assert kept == [(200, 1), (300, 1), (400, 1)]


def test_a_negative_trial_run_id_is_refused(api_master: MasterClient, pg_url: str) -> None:
    tid = _trial(api_master, pg_url)
    r = api_master.session().post(
        f"{api_master.url}/api/v1/trials/{tid}/metrics/batch",
        json={
            "reports": [
                {
                    "group": "training",
                    "trialRunId": -1,
                    "stepsCompleted": 1,
                    "metrics": {"avgMetrics": {"loss": 1.0}},
                }
            ]
        },
        timeout=30,
    )
    assert r.status_code == 400, r.text
    assert "trialRunId" in r.text


def test_the_look_is_an_index_range_scan(api_master: MasterClient, pg_url: str) -> None:
    """The statement that moves superseded rows finds them by the index on (trial_id,
    metric_group, total_batches), not by reading the table."""
    trials = [_trial(api_master, pg_url) for _ in range(20)]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO metrics (trial_id, trial_run_id, metric_group, total_batches, metrics)"
            ' SELECT t, 1, g, s * 100, \'{"avg_metrics": {"loss": 1}}\''
            " FROM unnest(%s::int[]) t, unnest(array['training', 'validation']) g,"
            " generate_series(1, 250) s",
            (trials,),
        )
        c.execute("ANALYZE metrics")
        params = {
            "trial": trials[3],
            "reports": json.dumps([{"run": 2, "grp": "training", "total": 20000}]),
            "from": 20000,
            "by": 2,
        }
        with psycopg.ClientCursor(c) as cur:
            text = "\n".join(
                r[0] for r in cur.execute("EXPLAIN " + metrics_superseded._SUPERSEDE, params)
            )
    assert "metrics_trial_group" in text, text
    assert "Seq Scan on metrics " not in text, text


def test_a_trial_restarted_after_its_container_died_lists_each_step_once(
    loop_master: InProcessMaster,
) -> None:
    """The master's own restart path with a simulated agent: run 1 trains steps 1-6 with a
    checkpoint at 4, then its container dies (exit 1); the master starts run 2 from that
    checkpoint, which trains 5-8."""
    m = loop_master

    def train(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        if spec["env"]["DET_TRIAL_RUN_ID"] == "1":
            default_training(master, spec, killed, steps=6, validate_every=4)
            return 1
        return default_training(master, spec, killed, steps=8, validate_every=4)

    with SimAgent(m.url, m.agent_token, "sim-superseded", train=train):
        config = CONFIG.replace("metric: loss", "metric: validation_loss")
        eid = int(
            m.post("/api/v1/experiments", {"config": config, "activate": True})["experiment"]["id"]
        )
        wait(
            lambda: m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED",
            120,
            "the experiment to complete",
        )
    trials = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    (trial,) = trials
    tid = int(trial["id"])
    assert trial["restarts"] == 1
    rows = m.get(f"/api/v1/trials/{tid}/metrics", params={"group": "training"})["metrics"]
    assert [(r["totalBatches"], r["trialRunId"]) for r in rows] == [
        (1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2), (7, 2), (8, 2)
    ]  # fmt: skip
    rows = m.get(f"/api/v1/trials/{tid}/metrics", params={"group": "validation"})["metrics"]
    assert [(r["totalBatches"], r["trialRunId"]) for r in rows] == [(4, 1), (8, 2)]
