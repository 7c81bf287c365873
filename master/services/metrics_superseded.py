"""Metric rows a trial's later run reports again (migration 0045).

A run lost after its last checkpoint leaves rows past that checkpoint; the next run resumes
from the checkpoint and reports those periods again. A report of run R at ``total_batches`` X
supersedes the rows of the trial's earlier runs (``trial_run_id < R``) of its own group at or
past X and of the other groups past X (Determined's ``rollbackMetrics``): they move from
``metrics`` to ``metrics_superseded`` in the report's transaction
(:func:`det.master.services.trials.report_metrics`), so every reader of ``metrics`` sees each
period once, with the latest run's values.

**Cost.** The trial's row says what is known to be clean (``metrics_clean_run``,
``metrics_clean_from``: no row of a run before the first is at or past the second), read and
written with the row the ingest locks and updates anyway. Only a report that could find
something looks (:func:`plan`): a run's first report, or one that goes back before it; the
others cost nothing. A look is one index range scan of the trial's rows at or past X
(``metrics_trial_group``: trial, then ``total_batches`` checked in the index).
"""

from __future__ import annotations

from dataclasses import dataclass

from det.master import db, fastjson
from det.master.db import Conn


@dataclass(frozen=True, slots=True)
class Plan:
    """What a batch of reports does: whether it looks for rows to supersede, and what the
    trial's row knows to be clean after it."""

    look: bool
    clean_run: int
    clean_from: int


def plan(clean_run: int, clean_from: int, spans: dict[int, tuple[int, int]]) -> Plan:
    """``spans``: each run of the batch -> (fewest, most) ``total_batches`` among its reports.

    Exact: it skips a look only when the trial's row proves no row would move. The clean
    pair it returns holds after the batch's rows are written (run ids are never negative, so
    (0, 0) holds always).
    """
    if not spans:
        return Plan(False, clean_run, clean_from)
    if len(spans) > 1:
        # Several runs in one batch (no client sends that): look, and forget what was known.
        return Plan(True, 0, 0)
    ((run, (lo, hi)),) = spans.items()
    if run < clean_run:
        # A run older than one that already reported (a lost run's container still talking):
        # its rows may lie past what was clean for the newer run's sake.
        return Plan(lo < clean_from, clean_run, max(clean_from, hi + 1))
    if run == clean_run and lo >= clean_from:
        return Plan(False, clean_run, clean_from)
    # Every earlier run's row past ``lo`` moves (the same group's at ``lo`` too).
    return Plan(True, run, lo + 1)


# The rows of earlier runs that a batch's reports supersede, moved in one statement. The
# bound on total_batches alone lets the index (trial_id, metric_group, total_batches) find
# them; the per-report condition is Determined's (same group at or past, others past).
_SUPERSEDE = (
    "WITH r AS (SELECT * FROM jsonb_to_recordset(%(reports)s::text::jsonb)"
    " AS r(run int, grp text, total bigint)),"
    " moved AS (DELETE FROM metrics m WHERE m.trial_id = %(trial)s"
    " AND m.total_batches >= %(from)s AND EXISTS (SELECT 1 FROM r WHERE m.trial_run_id < r.run"
    " AND (m.total_batches > r.total OR (m.total_batches = r.total AND m.metric_group = r.grp)))"
    " RETURNING m.*),"
    " kept AS (INSERT INTO metrics_superseded (id, trial_id, trial_run_id, metric_group,"
    " total_batches, metrics, reported_at, superseded_by_run)"
    " SELECT id, trial_id, trial_run_id, metric_group, total_batches, metrics, reported_at,"
    " %(by)s FROM moved RETURNING id)"
    " SELECT count(*) FROM kept"
)


def supersede(conn: Conn, trial_id: int, firsts: dict[tuple[int, str], int]) -> int:
    """Moves the rows that reports of ``firsts`` ((run, group) -> fewest batches) supersede;
    returns how many. Rows written later in the transaction are not touched."""
    reports = [{"run": r, "grp": g, "total": t} for (r, g), t in firsts.items()]
    return db.one_int(
        conn,
        _SUPERSEDE,
        {
            "trial": trial_id,
            "reports": fastjson.dumps(reports, finite=True),
            "from": min(firsts.values()),
            "by": max(r for r, _ in firsts),
        },
    )
