"""A batch of training reports is written outside a transaction (no BEGIN, no COMMIT, no row
lock): the read of the trial, then one write that applies only if the trial's row is still the
version read. These tests hold what that must not lose: a report that lands between another's
read and write is counted in the summary once, the rows once, and a batch that needs the lock
(a validation of the searcher's metric) still takes it."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master import db
from det.master.services import trials
from tests.integration.conftest import MasterClient
from tests.integration.pg_trace import round_trips, traced_pool
from tests.integration.test_trial_best_pointer import _experiment, _post, _report, _trials

pytestmark = pytest.mark.integration


def _traced_post(
    m: MasterClient, trial: int, reports: list[dict[str, Any]], trace: Path, mp: pytest.MonkeyPatch
) -> str:
    """POSTs the batch; what the pooled connections sent and got meanwhile (libpq's trace)."""
    with traced_pool(m.state.pool, trace, mp):
        _post(m, trial, reports)
    return trace.read_text()


def test_training_reports_are_written_without_a_transaction_and_validations_in_one(
    api_master: MasterClient, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = api_master
    (tid,) = _trials(pg_url, _experiment(m, True), 1)
    # A run's first batch takes the lock (it may supersede an earlier run's rows); the next
    # ones of the run (the row then says nothing can move) do not.
    _post(m, tid, [_report("training", 2, {"loss": 1.0})])
    batch = [_report("training", 4, {"loss": 0.5}), _report("training", 8, {"loss": 0.25})]
    sent = _traced_post(m, tid, batch, tmp_path / "training", monkeypatch)
    assert "BEGIN" not in sent and "FOR NO KEY UPDATE" not in sent
    assert "xmin" in sent  # the write guarded by the row's version
    sent = _traced_post(
        m, tid, [_report("validation", 8, {"loss": 0.3})], tmp_path / "validation", monkeypatch
    )
    assert "BEGIN" in sent and "FOR NO KEY UPDATE" in sent and "COMMIT" in sent
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as c:
        row = c.execute("SELECT * FROM trials WHERE id = %s", (tid,)).fetchone()
        assert row is not None
        assert row["steps_completed"] == 8 and row["searcher_metric"] == 0.3
        loss = row["summary_metrics"]["avg_metrics"]["loss"]
        assert loss["count"] == 3 and loss["sum"] == 1.75 and loss["last"] == 0.25
        n = c.execute("SELECT count(*) AS n FROM metrics WHERE trial_id = %s", (tid,)).fetchone()
        assert n == {"n": 4}


class _Interloper(psycopg.Cursor[Any]):
    """A cursor that, just before the guarded write is sent, lets another connection report to
    the same trial (committed): the moment two reports of one trial race."""

    def execute(self, query: Any, *a: Any, **kw: Any) -> Any:
        report = getattr(self.connection, "interloper", None)
        if report is not None and "xmin = " in str(query):
            self.connection.interloper = None  # type: ignore[attr-defined]
            report()
        return super().execute(query, *a, **kw)


def test_a_report_between_anothers_read_and_write_is_counted_once(
    api_master: MasterClient, pg_url: str
) -> None:
    m = api_master
    (tid,) = _trials(pg_url, _experiment(m, True), 1)
    other = psycopg.connect(pg_url, autocommit=True, row_factory=dict_row)
    conn: Any = psycopg.connect(
        pg_url, autocommit=True, row_factory=dict_row, cursor_factory=_Interloper
    )
    with other, conn:
        trials.report_metrics(
            other, tid, [_report("training", 1, {"loss": 2.0})]
        )  # the run's first
        conn.interloper = lambda: trials.report_metrics(
            other, tid, [_report("training", 4, {"loss": 1.0})]
        )
        n = trials.report_metrics(conn, tid, [_report("training", 8, {"loss": 3.0})])
        assert n == 1 and conn.interloper is None  # the other report did land in between
        row = other.execute(
            "SELECT steps_completed, summary_metrics FROM trials WHERE id = %s", (tid,)
        ).fetchone()
        assert row is not None
        loss = row["summary_metrics"]["avg_metrics"]["loss"]
        # Every report in the summary once (the later one was folded again, in the lock).
        assert (loss["count"], loss["sum"], loss["min"], loss["max"]) == (3, 6.0, 1.0, 3.0)
        assert row["steps_completed"] == 8
        assert db.one_int(other, "SELECT count(*) FROM metrics WHERE trial_id = %s", (tid,)) == 3


def _summary_and_rows(pg_url: str, tid: int) -> tuple[dict[str, Any], int, int]:
    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as c:
        row = c.execute(
            "SELECT steps_completed, summary_metrics FROM trials WHERE id = %s", (tid,)
        ).fetchone()
        assert row is not None
        n = db.one_int(c, "SELECT count(*) FROM metrics WHERE trial_id = %s", (tid,))
        return row["summary_metrics"]["avg_metrics"]["loss"], row["steps_completed"], n


def _written_twice(m: MasterClient, pg_url: str) -> int:
    """A trial with two training batches (loss 4.0, then 3.0) through ``m``: the run's first in
    the lock, the second read and then written under its version; the trial's id."""
    (tid,) = _trials(pg_url, _experiment(m, True), 1)
    _post(m, tid, [_report("training", 1, {"loss": 4.0})])
    _post(m, tid, [_report("training", 2, {"loss": 3.0})])
    return tid


def test_a_trials_next_batch_from_the_process_that_wrote_its_last_is_the_write_alone(
    api_master: MasterClient, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = api_master
    tid = _written_twice(m, pg_url)
    sent = _traced_post(
        m, tid, [_report("training", 3, {"loss": 2.0})], tmp_path / "a", monkeypatch
    )
    assert "det_larger_is_better" not in sent  # the trial's read: not sent
    trips = round_trips(tmp_path / "a")
    trials._written._rows.clear()  # as a process that did not write the trial's last batch
    sent = _traced_post(
        m, tid, [_report("training", 4, {"loss": 1.0})], tmp_path / "b", monkeypatch
    )
    assert "det_larger_is_better" in sent
    assert round_trips(tmp_path / "b") == trips + 1
    loss, steps, n = _summary_and_rows(pg_url, tid)
    assert (loss["count"], loss["sum"], loss["min"], loss["max"], loss["last"]) == (
        4, 10.0, 1.0, 4.0, 1.0
    )  # fmt: skip
    assert (steps, n) == (4, 4)


def _another_process_reports(pg_url: str, tid: int, report: dict[str, Any]) -> None:
    """``report`` written as another process (another front, another master) writes it: this
    process's rows as they were before."""
    seen = dict(trials._written._rows)
    with psycopg.connect(pg_url, autocommit=True) as other:
        trials.report_metrics(other, tid, [report])
    trials._written._rows.clear()
    trials._written._rows.update(seen)


def test_a_row_changed_since_this_process_wrote_it_is_read_again_and_counted_once(
    api_master: MasterClient, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = api_master
    tid = _written_twice(m, pg_url)
    _another_process_reports(pg_url, tid, _report("training", 3, {"loss": 2.0}))
    sent = _traced_post(
        m, tid, [_report("training", 4, {"loss": 1.0})], tmp_path / "c", monkeypatch
    )
    assert "xmin" in sent and "det_larger_is_better" in sent  # the write found it changed: read
    loss, steps, n = _summary_and_rows(pg_url, tid)
    assert (loss["count"], loss["sum"], loss["min"], loss["max"], loss["last"]) == (
        4, 10.0, 1.0, 4.0, 1.0
    )  # fmt: skip
    assert (steps, n) == (4, 4)
    # Written by another process too: the next batch is read, then written (no failed write
    # first), however the other writes meanwhile.
    _another_process_reports(pg_url, tid, _report("training", 5, {"loss": 0.5}))
    _traced_post(m, tid, [_report("training", 6, {"loss": 0.5})], tmp_path / "d", monkeypatch)
    assert round_trips(tmp_path / "d") == round_trips(tmp_path / "c") - 1
    loss, steps, n = _summary_and_rows(pg_url, tid)
    assert (loss["count"], loss["sum"], loss["min"], steps, n) == (6, 11.0, 0.5, 6, 6)


def test_a_locked_batch_is_two_round_trips_and_all_or_nothing(
    api_master: MasterClient, pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch in the lock goes in a pipeline: BEGIN with the read, the rest with COMMIT. A
    statement that fails among the rest (here a trigger refusing the rows) leaves nothing of
    the batch (its searcher event neither) and the connection out of the transaction."""
    m = api_master
    tid = _written_twice(m, pg_url)
    validation = [_report("validation", 4, {"loss": 0.3})]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        # A training batch first, so that this process keeps the row as this connection's
        # database names it: the validation then goes to the lock without an unlocked read.
        trials.report_metrics(conn, tid, [_report("training", 3, {"loss": 2.0})])
        before = _round_trips_of(
            conn, tmp_path / "ok", lambda: trials.report_metrics(conn, tid, validation)
        )
        assert before == 2  # (BEGIN, the locked read), (events, write, refresh, NOTIFY, COMMIT)
        conn.execute(
            "CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            " IF NEW.metrics->'avg_metrics' ? 'boom' THEN RAISE EXCEPTION 'boom refused'; END IF;"
            " RETURN NEW; END $$"
        )
        conn.execute(
            "CREATE TRIGGER refuse_boom BEFORE INSERT ON metrics FOR EACH ROW"
            " EXECUTE FUNCTION refuse_boom()"
        )
        events = db.one_int(conn, "SELECT count(*) FROM searcher_events")
        loss, steps, n = _summary_and_rows(pg_url, tid)
        with pytest.raises(psycopg.errors.RaiseException, match="boom refused"):
            trials.report_metrics(conn, tid, [_report("validation", 5, {"loss": 0.1, "boom": 1})])
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert db.one_int(conn, "SELECT count(*) FROM searcher_events") == events
        assert _summary_and_rows(pg_url, tid) == (loss, steps, n)
        trials.report_metrics(conn, tid, [_report("validation", 5, {"loss": 0.1})])  # usable
        assert _summary_and_rows(pg_url, tid)[2] == n + 1


def _round_trips_of(conn: Any, trace: Path, call: Any) -> int:
    """``call()``'s round trips on ``conn`` (libpq's trace: its messages' exchanges)."""
    with trace.open("w") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            call()
        finally:
            conn.pgconn.untrace()
    # An exchange ends where the server's answers stop and the client sends again.
    directions = [line.split("\t")[0] for line in trace.read_text().splitlines() if line]
    answered = sum(1 for a, b in itertools.pairwise(directions) if (a, b) == ("B", "F"))
    return answered + (1 if directions and directions[-1] == "B" else 0)
