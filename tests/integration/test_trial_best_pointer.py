"""A trial's best validation and best checkpoint are pointers kept as the rows are written
(``trials.best_validation_id`` by the ingest, migration 0009; ``trials.best_checkpoint`` by a
trigger on checkpoints and the ingest, migration 0010) instead of sorts at each read. These
tests hold the pointers, and what the trial list answers, against the queries the read used to
run (kept here as the references): ties, larger-is-better searchers, rows without a number for
the metric, trials without validations, deleted checkpoints, a checkpoint before its
validation, the migrations' backfill and a change of the searcher's direction."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import psycopg
import pytest

from tests.integration.conftest import Master, MasterClient

pytestmark = pytest.mark.integration

CONFIG = """
name: best
entrypoint: python3 train.py
searcher: {{name: single, metric: loss, smaller_is_better: {smaller}}}
hyperparameters: {{lr: 0.1}}
"""

# The read's query before the pointer: every validation of the trial with a number for the
# searcher metric, sorted by it (negated when larger is better), then batches, then id.
_KEY = "(m.metrics->'avg_metrics'->>(e.config->'searcher'->>'metric'))::float8"
REFERENCE_BEST = (
    "SELECT m.id FROM metrics m JOIN trials t ON t.id = m.trial_id"
    " JOIN experiments e ON e.id = t.experiment_id"
    " WHERE m.trial_id = %s AND m.metric_group = 'validation'"
    " AND jsonb_typeof(m.metrics->'avg_metrics'->(e.config->'searcher'->>'metric')) = 'number'"
    " ORDER BY CASE WHEN (e.config->'searcher'->>'smaller_is_better') = 'false'"
    f" THEN -{_KEY} ELSE {_KEY} END, m.total_batches, m.id LIMIT 1"
)
REFERENCE_BEST_CHECKPOINT = (
    "SELECT c.uuid::text FROM checkpoints c JOIN trials t ON t.id = c.trial_id"
    " JOIN experiments e ON e.id = t.experiment_id JOIN metrics m ON m.trial_id = c.trial_id"
    " AND m.metric_group = 'validation' AND m.total_batches = c.steps_completed"
    " WHERE c.trial_id = %s AND c.state = 'COMPLETED'"
    " AND jsonb_typeof(m.metrics->'avg_metrics'->(e.config->'searcher'->>'metric')) = 'number'"
    " ORDER BY CASE WHEN (e.config->'searcher'->>'smaller_is_better') = 'false'"
    f" THEN -{_KEY} ELSE {_KEY} END, m.total_batches, m.id LIMIT 1"
)


def _experiment(m: MasterClient, smaller: bool) -> int:
    config = CONFIG.format(smaller=str(smaller).lower())
    out = m.post("/api/v1/experiments", {"config": config, "activate": False})
    return int(out["experiment"]["id"])


def _trials(pg_url: str, experiment_id: int, n: int) -> list[int]:
    with psycopg.connect(pg_url, autocommit=True) as c:
        return [
            r[0]
            for r in c.execute(
                "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
                " SELECT %s, 'r' || g, 'best-' || %s || '-' || g, '{\"lr\": 0.1}', g, 'PAUSED'"
                " FROM generate_series(1, %s) g RETURNING id",
                (experiment_id, experiment_id, n),
            )
        ]


def _post(m: Master, trial: int, reports: list[dict[str, Any]]) -> None:
    # json.dumps writes NaN and Infinity as the literals Determined's clients send.
    r = m.session().post(
        f"{m.url}/api/v1/trials/{trial}/metrics/batch",
        data=json.dumps({"reports": reports}),
        headers={"Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 200, r.text


def _report(group: str, steps: int, metrics: dict[str, Any]) -> dict[str, Any]:
    return {"group": group, "trialRunId": 1, "stepsCompleted": steps,
            "metrics": {"avgMetrics": metrics}}  # fmt: skip


def _pointer(c: psycopg.Connection[Any], trial: int) -> int | None:
    row = c.execute("SELECT best_validation_id FROM trials WHERE id = %s", (trial,)).fetchone()
    assert row is not None
    return row[0]


def _reference(c: psycopg.Connection[Any], trial: int) -> int | None:
    row = c.execute(REFERENCE_BEST, (trial,)).fetchone()
    return row[0] if row else None


def _ids(c: psycopg.Connection[Any], trial: int) -> list[int]:
    return [
        r[0] for r in c.execute("SELECT id FROM metrics WHERE trial_id = %s ORDER BY id", (trial,))
    ]


def test_ties_go_to_fewer_batches_then_the_earlier_row(
    api_master: MasterClient, pg_url: str
) -> None:
    m = api_master
    (tid,) = _trials(pg_url, _experiment(m, True), 1)
    with psycopg.connect(pg_url, autocommit=True) as c:
        _post(m, tid, [_report("validation", 4, {"loss": 0.5})])
        (first,) = _ids(c, tid)
        assert _pointer(c, tid) == first
        # The same value at more batches: the first stays.
        _post(m, tid, [_report("validation", 6, {"loss": 0.5})])
        assert _pointer(c, tid) == first
        # The same value at fewer batches (reported later, as after a restart): it wins.
        _post(m, tid, [_report("validation", 2, {"loss": 0.5})])
        fewer = _ids(c, tid)[-1]
        assert _pointer(c, tid) == fewer
        # The same value and batches again: the earlier row stays.
        _post(m, tid, [_report("validation", 2, {"loss": 0.5})])
        assert _pointer(c, tid) == fewer
        # Worse, not a number, another metric, training rows: nothing changes.
        _post(
            m,
            tid,
            [
                _report("validation", 1, {"loss": 0.7}),
                _report("validation", 1, {"loss": "NaN"}),
                _report("validation", 1, {"loss": True}),
                _report("validation", 1, {"accuracy": 0.01}),
                _report("training", 1, {"loss": 0.0}),
            ],
        )
        assert _pointer(c, tid) == fewer == _reference(c, tid)
        # Better, in the middle of a batch.
        _post(m, tid, [_report("validation", 9, {"loss": 0.9}),
                       _report("validation", 8, {"loss": -1}),
                       _report("validation", 7, {"loss": -1.0})])  # fmt: skip
        best = _ids(c, tid)[-1]  # -1.0 at 7 batches: the tie goes to fewer batches
        assert _pointer(c, tid) == best == _reference(c, tid)
    trial = m.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["bestValidation"]["totalBatches"] == 7
    assert trial["bestValidation"]["metrics"]["avgMetrics"] == {"loss": -1.0}


@pytest.mark.parametrize("smaller", [True, False])
def test_the_kept_pointer_is_what_sorting_every_validation_gives(
    api_master: MasterClient, pg_url: str, smaller: bool
) -> None:
    """Random batches (seeded) of few distinct values and batches, so ties are common; after
    every batch each trial's pointer is the reference query's row."""
    m = api_master
    eid = _experiment(m, smaller)
    trials = _trials(pg_url, eid, 4)
    rng = random.Random(14 + smaller)
    values: list[Any] = [0.5, 0.25, 1.0, 0.0, -0.0, 2, -3, float("nan"), float("inf"), True, "x"]
    with psycopg.connect(pg_url, autocommit=True) as c:
        for _ in range(30):
            # The last trial gets training rows only.
            tid = rng.choice(trials)
            reports = []
            for _ in range(rng.randint(1, 5)):
                group = "training" if tid == trials[-1] or rng.random() < 0.3 else "validation"
                metrics: dict[str, Any] = {"other": rng.random()}
                if rng.random() < 0.85:
                    metrics["loss"] = rng.choice(values)
                reports.append(_report(group, rng.randint(1, 6), metrics))
            _post(m, tid, reports)
            for t in trials:
                assert _pointer(c, t) == _reference(c, t), (t, smaller)
        assert all(_pointer(c, t) is not None for t in trials[:-1])
        assert _pointer(c, trials[-1]) is None
        expected = {}
        for t in trials:
            row = c.execute(
                "SELECT total_batches, metrics->'avg_metrics' FROM metrics WHERE id = %s",
                (_reference(c, t),),
            ).fetchone()
            expected[t] = {"totalBatches": row[0], "avgMetrics": row[1]} if row else None
    listed = m.get(f"/api/v1/experiments/{eid}/trials")["trials"]
    got = {
        t["id"]: (
            {"totalBatches": t["bestValidation"]["totalBatches"],
             "avgMetrics": t["bestValidation"]["metrics"]["avgMetrics"]}
            if t.get("bestValidation") else None
        )
        for t in listed
    }  # fmt: skip
    assert {t: got[t] for t in trials} == expected
    no_validation = next(t for t in listed if t["id"] == trials[-1])
    assert no_validation["bestValidation"] is None and no_validation["latestValidation"] is None


def _best_checkpoint(c: psycopg.Connection[Any], trial: int) -> tuple[Any, Any]:
    """(the kept pointer, the reference query's answer)."""
    row = c.execute("SELECT best_checkpoint::text FROM trials WHERE id = %s", (trial,)).fetchone()
    ref = c.execute(REFERENCE_BEST_CHECKPOINT, (trial,)).fetchone()
    return (row[0] if row else None), (ref[0] if ref else None)


def test_best_checkpoint_follows_checkpoints_validations_and_deletions(
    api_master: MasterClient, pg_url: str
) -> None:
    m = api_master
    eid = _experiment(m, False)
    (tid,) = _trials(pg_url, eid, 1)
    _post(m, tid, [_report("validation", s, {"loss": v})
                   for s, v in ((2, 0.1), (4, 0.9), (6, 0.9), (8, 0.5), (10, "NaN"))])  # fmt: skip
    ckpts = {s: str(uuid.uuid4()) for s in (2, 4, 6, 8, 10, 12)}

    def best() -> Any:
        return m.get(f"/api/v1/experiments/{eid}/trials")["trials"][0]["bestCheckpoint"]

    with psycopg.connect(pg_url, autocommit=True) as c:
        assert _best_checkpoint(c, tid) == (None, None)
        for s, u in ckpts.items():
            c.execute(
                "INSERT INTO checkpoints (uuid, trial_id, steps_completed, size, resources)"
                " VALUES (%s, %s, %s, 10, '{\"a\": 10}')",
                (u, tid, s),
            )
            kept, ref = _best_checkpoint(c, tid)
            assert kept == ref
        # Larger is better: 0.9 at 4 and at 6, the tie to fewer batches.
        assert best()["uuid"] == ckpts[4] == _best_checkpoint(c, tid)[0]
        assert best()["resources"] == {"a": "10"} and best()["state"] == "STATE_COMPLETED"
        c.execute("UPDATE checkpoints SET state = 'DELETED' WHERE uuid = %s", (ckpts[4],))
        assert best()["uuid"] == ckpts[6] == _best_checkpoint(c, tid)[1]
        c.execute("UPDATE checkpoints SET state = 'PARTIALLY_DELETED' WHERE uuid = %s", (ckpts[6],))
        assert best()["uuid"] == ckpts[8] == _best_checkpoint(c, tid)[1]
        # The checkpoint at 12 came before its validation: the validation makes it the best.
        _post(m, tid, [_report("validation", 12, {"loss": 0.95})])
        assert best()["uuid"] == ckpts[12] == _best_checkpoint(c, tid)[1]
        # A validation that is not better, at a checkpoint's step: nothing moves.
        _post(m, tid, [_report("validation", 2, {"loss": 0.2})])
        assert _best_checkpoint(c, tid) == (ckpts[12], ckpts[12])
        c.execute("UPDATE checkpoints SET state = 'DELETED' WHERE steps_completed <> 10")
        # The one left has no number for the metric: no best checkpoint.
        assert _best_checkpoint(c, tid) == (None, None)
    assert best() is None
    listed = m.get(f"/api/v1/experiments/{eid}/trials")["trials"][0]
    assert listed["checkpointCount"] == 1 and listed["bestValidation"]["totalBatches"] == 12


def test_migration_backfills_and_a_searcher_change_moves_the_pointers(pg_url: str) -> None:
    """Rows written before migrations 0009 and 0010 get their pointers from them; continuing
    an experiment with another direction (its config updated) recomputes its trials'
    pointers."""
    from det.master import db

    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(
            "CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, name, sql in db._migrations():
            if version >= 9:
                continue
            c.execute(sql.encode())
            c.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, name))
        c.execute("INSERT INTO users (username, password_hash) VALUES ('u', 'x')")
        eid = c.execute(
            "INSERT INTO experiments (name, config, original_config, state, owner_id)"
            " VALUES ('e', '{\"searcher\": {\"metric\": \"loss\"}}', '', 'PAUSED',"
            " (SELECT id FROM users)) RETURNING id"
        ).fetchone()[0]
    trials = _trials(pg_url, eid, 3)
    with psycopg.connect(pg_url, autocommit=True) as c:
        # Trial 1: values with ties; trial 2: no number for the metric; trial 3: no validation.
        c.execute(
            "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
            " SELECT %s, 'validation', s, jsonb_build_object('avg_metrics',"
            " jsonb_build_object('loss', (s * 7) %% 5)) FROM generate_series(1, 40) s",
            (trials[0],),
        )
        c.execute(
            "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics) VALUES"
            ' (%s, \'validation\', 1, \'{"avg_metrics": {"loss": "NaN"}}\'),'
            " (%s, 'training', 1, '{\"avg_metrics\": {\"loss\": 0}}')",
            (trials[1], trials[2]),
        )
        # A checkpoint at each of trial 1's steps 1-10 (values 2, 4, 1, 3, 0, 2, ...).
        c.execute(
            "INSERT INTO checkpoints (uuid, trial_id, steps_completed)"
            " SELECT gen_random_uuid(), %s, s FROM generate_series(1, 10) s",
            (trials[0],),
        )
    assert db.upgrade(pg_url) == [v for v, _, _ in db._migrations() if v >= 9]
    with psycopg.connect(pg_url, autocommit=True) as c:
        assert [_pointer(c, t) for t in trials] == [_reference(c, t) for t in trials]
        assert _pointer(c, trials[0]) is not None and _pointer(c, trials[1]) is None
        assert [_best_checkpoint(c, t) for t in trials] == [
            (_best_checkpoint(c, t)[1],) * 2 for t in trials
        ]
        before = _pointer(c, trials[0])
        ckpt_before = _best_checkpoint(c, trials[0])[0]
        assert ckpt_before is not None
        c.execute(
            "UPDATE experiments SET config = jsonb_set(config, '{searcher,smaller_is_better}',"
            " 'false') WHERE id = %s",
            (eid,),
        )
        assert _pointer(c, trials[0]) != before
        assert [_pointer(c, t) for t in trials] == [_reference(c, t) for t in trials]
        assert _best_checkpoint(c, trials[0])[0] not in (None, ckpt_before)
        assert [_best_checkpoint(c, t) for t in trials] == [
            (_best_checkpoint(c, t)[1],) * 2 for t in trials
        ]
        c.execute(
            "UPDATE experiments SET config = jsonb_set(config, '{searcher,metric}', '\"other\"')"
            " WHERE id = %s",
            (eid,),
        )
        assert [_pointer(c, t) for t in trials] == [None, None, None]


def test_a_validation_moves_the_best_checkpoint_only_through_a_checkpoint_at_its_step(
    api_master: MasterClient, pg_url: str
) -> None:
    """The ingest asks for the best checkpoint again only when a completed checkpoint is at a
    step it just validated: the pointer is the reference query's after validations at steps
    without one, at a step whose checkpoint is not completed, and in a batch that mixes both."""
    m = api_master
    eid = _experiment(m, False)  # larger is better
    (tid,) = _trials(pg_url, eid, 1)
    ckpts = {s: str(uuid.uuid4()) for s in (4, 8, 12)}
    with psycopg.connect(pg_url, autocommit=True) as c:
        for s, u in ckpts.items():
            c.execute(
                "INSERT INTO checkpoints (uuid, trial_id, steps_completed, size, resources)"
                " VALUES (%s, %s, %s, 10, '{\"a\": 10}')",
                (u, tid, s),
            )
        c.execute("UPDATE checkpoints SET state = 'PARTIALLY_DELETED' WHERE uuid = %s", (ckpts[8],))
        steps: list[tuple[list[tuple[int, float]], str | None]] = [
            ([(2, 0.9)], None),  # no checkpoint at 2
            ([(4, 0.1)], ckpts[4]),
            ([(6, 0.99), (8, 0.99)], ckpts[4]),  # none at 6; 8's is not completed
            ([(10, 0.5), (12, 0.2)], ckpts[12]),  # a batch with one checkpointed step
            ([(14, 0.95)], ckpts[12]),
        ]
        for batch, want in steps:
            _post(m, tid, [_report("validation", s, {"loss": v}) for s, v in batch])
            assert _best_checkpoint(c, tid) == (want, want), batch
