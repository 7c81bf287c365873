"""The order the searcher saw its events in is recorded (migration 0048): a pass reads the
unprocessed events by id, but an event whose transaction commits after a later id was
processed comes in a later pass, so a replay follows (pass, id), not id."""

from __future__ import annotations

import base64

import psycopg
import pytest

from det.master.services import searching
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: passes
entrypoint: python3 train.py
searcher: {name: random, metric: loss, max_trials: 2, max_length: 10}
hyperparameters: {lr: {type: double, minval: 0.01, maxval: 0.1}}
"""


def test_an_event_committed_late_is_processed_in_a_later_pass(
    api_master: InProcessMaster, pg_url: str
) -> None:
    body = {
        "config": CONFIG,
        "modelDefinition": [
            {"path": "train.py", "type": 48, "content": base64.b64encode(b"print(1)\n").decode()}
        ],
        "activate": True,
    }
    eid = int(api_master.post("/api/v1/experiments", body)["experiment"]["id"])

    def search_pass() -> None:
        with psycopg.connect(pg_url) as conn:
            searching.run_for_experiment(conn, eid)  # type: ignore[arg-type]

    search_pass()  # the searcher's first trials
    with (
        psycopg.connect(pg_url) as early,
        psycopg.connect(pg_url, autocommit=True) as late,
    ):
        rows = late.execute(
            "SELECT request_id FROM trials WHERE experiment_id = %s ORDER BY id", (eid,)
        ).fetchall()
        assert len(rows) == 2, rows
        (first,), (second,) = rows
        insert = (
            "INSERT INTO searcher_events (experiment_id, kind, request_id, payload)"
            " VALUES (%s, 'validation', %s, '{\"metric\": 1.0, \"time\": 10}') RETURNING id"
        )
        # The lower id's transaction is still open when the higher id commits and is processed.
        low = early.execute(insert, (eid, first)).fetchone()
        high = late.execute(insert, (eid, second)).fetchone()
        assert low is not None and high is not None and low[0] < high[0]
        search_pass()
        early.commit()
        search_pass()
        by_id = late.execute(
            "SELECT id FROM searcher_events WHERE experiment_id = %s AND processed ORDER BY id",
            (eid,),
        ).fetchall()
        seen = late.execute(
            "SELECT id FROM searcher_events WHERE experiment_id = %s AND processed"
            " ORDER BY processed_pass, id",
            (eid,),
        ).fetchall()
    assert [r[0] for r in by_id] == [low[0], high[0]]
    assert [r[0] for r in seen] == [high[0], low[0]]
