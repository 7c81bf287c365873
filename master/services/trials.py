"""Trials: reads, metric reports (batched), progress, early exit, kill.

A validation report also becomes a searcher event (consumed exactly once by the searcher pass)
and updates the trial's searcher metric and summary.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter, methodcaller
from typing import Any, cast

from psycopg import pq
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from det.common.jsontypes import JSONObject, JSONValue
from det.common.metric_groups import TRAINING, VALIDATION
from det.master import db, fastjson, states
from det.master.db import Conn
from det.master.errors import InvalidArgument, NotFound
from det.master.expconf import stored
from det.master.expconf.searcher import _AshaBase
from det.master.expconf.stored import SMALLER_IS_BETTER_SQL
from det.master.handles import MasterState
from det.master.rows.trials import BestTrial, MetricRow, TrialDetail, TrialRow, VersionedTrial
from det.master.schemas import d
from det.master.schemas.trials import MetricsReportEntry
from det.master.services import jobs, metrics_superseded

# Determined's summary_metrics keys for the two built-in groups.
_SUMMARY_KEY = {TRAINING: "avg_metrics", VALIDATION: "validation_metrics"}


# The state of the trial's live allocation, if any: an ACTIVE trial is shown in Determined's
# substates (QUEUED, PULLING, STARTING, RUNNING).
_LIVE_STATE = (
    " (SELECT a.state FROM allocations a WHERE a.trial_id = t.id AND a.state <> 'TERMINATED'"
    " ORDER BY a.created_at DESC LIMIT 1) AS alloc_state"
)

_UTC = '\'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\''
# What Determined's trial message carries beside the row: the latest and the best validation
# (by the searcher metric, honouring smaller_is_better), the best checkpoint (the completed one
# whose validation at the same step is best) and the count and size of completed checkpoints.
# Both bests are key lookups: the ingest keeps the best validation's pointer (migration 0009),
# the database the best checkpoint's (migration 0010: a trigger on checkpoints, and the ingest).
# Each as the JSON text of its wire message (v1MetricsWorkload, v1CheckpointWorkload), passed
# through (see det.master.fastjson.fragment); the validations' values of the searcher metric
# beside them for sorting (``latest_value``, ``best_value``).
_VALIDATION_JSON = (
    "jsonb_build_object('totalBatches', m.total_batches, 'numInputs', 0,"
    f" 'endTime', to_char(m.reported_at AT TIME ZONE 'UTC', {_UTC}),"
    " 'metrics', jsonb_build_object('avgMetrics', CASE WHEN"
    " jsonb_typeof(m.metrics->'avg_metrics') = 'object' THEN m.metrics->'avg_metrics'"
    " ELSE '{}' END))::text AS j,"
    " det_validation_key(m.metrics, s.name, false) AS v"
)
_SUMMARY_COLUMNS = (
    ", lv.j AS latest_validation_json, lv.v AS latest_value"
    ", bv.j AS best_validation_json, bv.v AS best_value"
    # The best checkpoint by the pointer kept in the database (migration 0010); sizes are
    # int64s, strings on the wire.
    ", (SELECT jsonb_build_object('uuid', c.uuid::text, 'totalBatches', c.steps_completed,"
    " 'state', 'STATE_' || c.state, 'resources', (SELECT coalesce(jsonb_object_agg(r.key,"
    " r.value #>> '{}'), '{}') FROM jsonb_each(CASE WHEN jsonb_typeof(c.resources) = 'object'"
    " THEN c.resources ELSE '{}' END) r), 'metadata', CASE WHEN"
    " jsonb_typeof(c.metadata) = 'object' THEN c.metadata ELSE '{}' END,"
    f" 'endTime', to_char(c.report_time AT TIME ZONE 'UTC', {_UTC}))::text"
    " FROM checkpoints c WHERE c.uuid = t.best_checkpoint)"
    " AS best_checkpoint_json"
    ", ck.n AS checkpoint_count, ck.size::bigint AS checkpoint_size"
)
# The joins the summary columns read.
_SUMMARY_JOINS = (
    f" LEFT JOIN LATERAL (SELECT {_VALIDATION_JSON} FROM metrics m WHERE m.trial_id = t.id"
    " AND m.metric_group = 'validation' ORDER BY m.total_batches DESC, m.id DESC LIMIT 1) lv"
    " ON true"
    # The best validation by the pointer the ingest keeps (migration 0009).
    f" LEFT JOIN LATERAL (SELECT {_VALIDATION_JSON} FROM metrics m"
    " WHERE m.id = t.best_validation_id) bv ON true"
    " CROSS JOIN LATERAL (SELECT count(*) AS n, coalesce(sum(c.size), 0) AS size"
    " FROM checkpoints c WHERE c.trial_id = t.id AND c.state = 'COMPLETED') ck"
)


def _summary_from(experiments: str) -> tuple[str, str]:
    """The statement's head and its FROM for the summary columns of the trials of
    ``experiments`` (a condition on ``e``): each experiment's searcher metric and direction
    (``s``) are read from its config once, not per trial or per probed row: the config is
    compressed in its row, and each reference to it decompressed it (most of the list's time
    once the best validation was a key lookup)."""
    head = (
        "WITH s AS MATERIALIZED (SELECT e.id, e.config->'searcher'->>'metric' AS name,"
        f" det_larger_is_better(e.config) AS larger FROM experiments e WHERE {experiments}) "
    )
    return head, " FROM trials t JOIN s ON s.id = t.experiment_id" + _SUMMARY_JOINS


def get(conn: Conn, trial_id: int) -> TrialDetail:
    head, from_ = _summary_from("e.id = (SELECT experiment_id FROM trials WHERE id = %s)")
    row = db.fetch_row(
        conn,
        TrialDetail,
        head
        + "SELECT "
        + _LIST_COLUMNS
        + ", t.request_id, e.config,"
        + _LIVE_STATE
        + _SUMMARY_COLUMNS
        + from_
        + " JOIN experiments e ON e.id = t.experiment_id WHERE t.id = %s",
        (trial_id, trial_id),
    )
    if row is None:
        raise NotFound(f"trial {trial_id} not found")
    return row


# A trial's columns as GetExperimentTrials sends them (:class:`TrialRow`); the JSON ones as
# text, passed through (see det.master.fastjson.fragment).
_LIST_COLUMNS = (
    "t.id, t.experiment_id, t.state, t.restarts, t.created_at, t.ended_at,"
    " t.hparams::text AS hparams_json, t.steps_completed, t.searcher_metric,"
    " t.summary_metrics::text AS summary_metrics_json, t.task_id, t.latest_checkpoint"
)


def list_for_experiment(conn: Conn, experiment_id: int) -> list[TrialRow]:
    """The experiment's trials in id order; none when the experiment is deleted."""
    head, from_ = _summary_from("e.id = %s AND NOT e.deleted")
    return db.fetch_rows(
        conn,
        TrialRow,
        head
        + "SELECT "
        + _LIST_COLUMNS
        + ","
        + _LIVE_STATE
        + _SUMMARY_COLUMNS
        + from_
        + " WHERE t.experiment_id = %s ORDER BY t.id",
        (experiment_id, experiment_id),
    )


def best_trial(conn: Conn, experiment_id: int, config: JSONObject) -> BestTrial | None:
    smaller = stored.experiment_config(experiment_id, config).searcher.smaller_is_better
    order = "ASC" if smaller else "DESC"
    return (
        conn.cursor(row_factory=class_row(BestTrial))
        .execute(
            "SELECT id, searcher_metric FROM trials WHERE experiment_id = %s AND searcher_metric IS NOT NULL"
            f" ORDER BY searcher_metric {order} LIMIT 1",
            (experiment_id,),
        )
        .fetchone()
    )


def best_trial_of(conn: Conn, experiment_id: int) -> BestTrial | None:
    """:func:`best_trial` with the searcher's direction read from the experiment's config in the
    same statement."""
    return (
        conn.cursor(row_factory=class_row(BestTrial))
        .execute(
            "SELECT t.id, t.searcher_metric FROM experiments e CROSS JOIN LATERAL ("
            " SELECT id, searcher_metric FROM trials WHERE experiment_id = e.id"
            " AND searcher_metric IS NOT NULL ORDER BY CASE WHEN"
            f" coalesce((e.config->'searcher'->>'smaller_is_better')::boolean, {SMALLER_IS_BETTER_SQL})"
            " THEN searcher_metric ELSE -searcher_metric END LIMIT 1) t WHERE e.id = %s",
            (experiment_id,),
        )
        .fetchone()
    )


def job_summary(conn: Conn, st: MasterState, job_id: str) -> d.v1JobSummary:
    info = jobs.queue_info(conn, st).get(job_id)
    if info is None:
        return {"state": "STATE_UNSPECIFIED", "jobsAhead": 0}
    return {"state": cast("d.jobv1State", "STATE_" + info["state"]), "jobsAhead": info["jobsAhead"]}


# Determined's v1GetExperimentTrialsRequestSortBy values the official client sends in ``sortBy``.
TRIAL_SORTS = (
    "SORT_BY_UNSPECIFIED",
    "SORT_BY_ID",
    "SORT_BY_START_TIME",
    "SORT_BY_END_TIME",
    "SORT_BY_STATE",
    "SORT_BY_BEST_VALIDATION_METRIC",
    "SORT_BY_LATEST_VALIDATION_METRIC",
    "SORT_BY_BATCHES_PROCESSED",
    "SORT_BY_DURATION",
    "SORT_BY_RESTARTS",
    "SORT_BY_CHECKPOINT_SIZE",
    "SORT_BY_LOG_RETENTION_DAYS",
)


def sort_trials(
    trials: list[d.trialv1Trial],
    values: dict[int, tuple[float | None, float | None]],
    sort_by: str | None,
    order: str | None,
) -> list[d.trialv1Trial]:
    """Trials sorted as Determined's ``GetExperimentTrials`` does; the id breaks ties, and
    trials lacking the key (no end time, no validation) come last in either order. ``values``:
    by trial id, its best and its latest validation's value of the searcher metric (the rows'
    ``best_value`` and ``latest_value``; None without a number)."""
    sort_by = sort_by or "SORT_BY_UNSPECIFIED"
    if sort_by not in TRIAL_SORTS:
        raise InvalidArgument(
            f"sortBy: unknown value {sort_by!r} (one of {', '.join(TRIAL_SORTS)})"
        )
    if order not in (None, "", "ORDER_BY_UNSPECIFIED", "ORDER_BY_ASC", "ORDER_BY_DESC"):
        raise InvalidArgument(f"orderBy: unknown value {order!r} (ORDER_BY_ASC or ORDER_BY_DESC)")
    desc = order == "ORDER_BY_DESC"

    def duration(t: d.trialv1Trial) -> float | None:
        if not t.get("endTime") or not t.get("startTime"):
            return None
        start = dt.datetime.fromisoformat(t["startTime"].replace("Z", "+00:00"))
        end = dt.datetime.fromisoformat(str(t["endTime"]).replace("Z", "+00:00"))
        return (end - start).total_seconds()

    keys: dict[str, Callable[[d.trialv1Trial], Any]] = {
        "SORT_BY_START_TIME": lambda t: t.get("startTime"),
        "SORT_BY_END_TIME": lambda t: t.get("endTime"),
        "SORT_BY_STATE": lambda t: t["state"],
        "SORT_BY_BEST_VALIDATION_METRIC": lambda t: values.get(t["id"], (None, None))[0],
        "SORT_BY_LATEST_VALIDATION_METRIC": lambda t: values.get(t["id"], (None, None))[1],
        "SORT_BY_BATCHES_PROCESSED": lambda t: t["totalBatchesProcessed"],
        "SORT_BY_DURATION": duration,
        "SORT_BY_RESTARTS": lambda t: t["restarts"],
        "SORT_BY_CHECKPOINT_SIZE": lambda t: int(t.get("totalCheckpointSize") or 0),
    }

    def by_id(t: d.trialv1Trial) -> int:
        return t["id"]

    key: Callable[[d.trialv1Trial], Any] = keys.get(sort_by, by_id)
    have = [t for t in trials if key(t) is not None]
    lacking = [t for t in trials if key(t) is None]
    have.sort(key=lambda t: (key(t), t["id"]), reverse=desc)
    lacking.sort(key=lambda t: t["id"], reverse=desc)
    return have + lacking


_NUMBER_TYPES = frozenset((int, float))


def _finite_numbers(values: list[Any]) -> list[Any]:
    """The finite ints and floats of ``values`` (bools are not numbers here)."""
    # The ingest hot path: all finite floats is the common case, checked by C loops.
    try:
        if set(map(type, values)) <= _NUMBER_TYPES and all(map(math.isfinite, values)):
            return values
    except OverflowError:  # an int beyond a double's range: finite, and kept
        pass
    return [v for v in values if type(v) is int or (type(v) is float and math.isfinite(v))]


def _float_sum(numbers: list[Any]) -> float:
    """The sum as a double; +-inf (or NaN) when it leaves a double's range."""
    try:
        return math.fsum(numbers)
    except OverflowError:  # an int beyond a double, or an intermediate sum beyond it
        total = 0.0
        for v in numbers:
            try:
                total += float(v)
            except OverflowError:
                total += math.inf if v > 0 else -math.inf
        return total


def _object(value: JSONValue) -> JSONObject:
    """A copy of ``value`` if it is a JSON object, else a new empty one."""
    return dict(value) if isinstance(value, dict) else {}


def _columns(batch: list[JSONObject]) -> tuple[list[str], list[list[JSONValue]]]:
    """The metric names of a batch (in order of first appearance) and each one's values in
    report order (the reports without it skipped)."""
    if not batch:
        return [], []
    first = batch[0].keys()
    # The common case: every report carries the same metrics; then C loops transpose them.
    if all(m.keys() == first for m in batch):
        names = list(first)
        if len(names) == 1:
            return names, [[m[names[0]] for m in batch]]
        if not names:
            return [], []
        return names, [list(c) for c in zip(*map(itemgetter(*names), batch), strict=True)]
    seen: JSONObject = {}
    for m in batch:
        seen.update(m)
    names = list(seen)
    return names, [[m[n] for m in batch if n in m] for n in names]


def _numbers_and_sum(values: list[JSONValue]) -> tuple[list[Any], float]:
    """The finite numbers of ``values`` (:func:`_finite_numbers`) and their sum as a double."""
    if set(map(type, values)) <= _NUMBER_TYPES:
        # All ints and floats: a finite sum says every one is finite (a NaN or an infinity
        # makes the sum one), so the sum is also the check.
        try:
            total = math.fsum(cast("list[float]", values))
        except (OverflowError, ValueError):  # an int beyond a double, a sum beyond it, inf - inf
            pass
        else:
            if math.isfinite(total):
                return values, total
    numbers = _finite_numbers(values)
    return numbers, _float_sum(numbers)


def _update_summary(summary: JSONObject, group: str, batch: list[JSONObject]) -> JSONObject:
    """Folds a batch of one group's metric dicts (in report order) into the trial's summary
    (``trials.summary_metrics``: per group, per metric, ``type``, ``count``, ``sum``, ``min``,
    ``max`` and ``last``, as Determined keeps it)."""
    key = _SUMMARY_KEY.get(group, group)
    section = _object(summary.get(key))
    for name, values in zip(*_columns(batch), strict=True):
        entry = _object(section.get(name))
        numbers, batch_sum = _numbers_and_sum(values)
        if numbers:
            count, total = entry.get("count", 0), entry.get("sum", 0.0)
            entry["type"] = "number"
            entry["count"] = (int(count) if isinstance(count, int | float) else 0) + len(numbers)
            entry["sum"] = (float(total) if isinstance(total, int | float) else 0.0) + batch_sum
            lo, hi = min(numbers), max(numbers)
            old_lo, old_hi = entry.get("min"), entry.get("max")
            entry["min"] = min(old_lo, lo) if isinstance(old_lo, int | float) else lo
            entry["max"] = max(old_hi, hi) if isinstance(old_hi, int | float) else hi
        else:
            entry["type"] = "string" if isinstance(values[-1], str) else entry.get("type", "object")
        entry["last"] = fastjson.encodable_scalar(values[-1])
        section[name] = entry
    out = dict(summary)
    out[key] = section
    return out


# A whole batch and the trial's new summary in one statement: the rows travel as one JSON array
# that the server unpacks (one encoder call on the master; on the server it costs what COPY
# costs for the same rows), and the update rides in the same round trip.
_INSERT_ROWS = " INSERT INTO metrics (trial_id, trial_run_id, metric_group, total_batches, metrics)"
_BATCH_ROWS = (
    " jsonb_to_recordset(%(rows)s::text::jsonb) AS r(run int, grp text, total bigint, body jsonb)"
)
_SET_TRIAL = (
    " UPDATE trials SET summary_metrics = %(summary)s::text::jsonb, steps_completed = %(steps)s,"
    " searcher_metric = %(best)s, metrics_clean_run = %(clean_run)s,"
    " metrics_clean_from = %(clean_from)s"
)
_WRITE_BATCH = (
    "WITH written AS ("
    + _INSERT_ROWS
    + " SELECT %(trial)s, r.run, r.grp, r.total, r.body FROM"
    + _BATCH_ROWS
    + ")"
    + _SET_TRIAL
    + " WHERE id = %(trial)s"
)
# The same written outside a transaction, only if the trial's row is still the version the
# batch was folded from (its ``xmin``: any update makes a new version with another one). The
# update goes first and the rows are inserted only beside a row it changed; the version it
# returns (the new row's, none when nothing matched) says which. A concurrent update that
# commits first is seen by the update's re-check of its condition, so it matches nothing and
# nothing is written.
_WRITE_BATCH_IF_UNCHANGED = (
    "WITH t AS (" + _SET_TRIAL + " WHERE id = %(trial)s AND xmin = %(version)s::text::xid"
    " RETURNING id, xmin::text AS version), written AS ("
    + _INSERT_ROWS
    + " SELECT t.id, r.run, r.grp, r.total, r.body FROM t,"
    + _BATCH_ROWS
    + ")"
    " SELECT version FROM t"
)
# The same for a batch with validations of the searcher metric: the trial's best validation
# pointer (``best_validation_id``, migration 0009) becomes the best of the rows just written and
# the row it pointed to, by the order the read used to sort every validation in (the metric's
# value, negated when larger is better; then fewer batches; then the earlier row).
_WRITE_BATCH_VALIDATED = (
    "WITH written AS ("
    + _INSERT_ROWS
    + " SELECT %(trial)s, r.run, r.grp, r.total, r.body FROM"
    + _BATCH_ROWS
    + " RETURNING id, metric_group, total_batches, metrics)"
    + _SET_TRIAL
    + ", best_validation_id = (SELECT c.id FROM ("
    " SELECT w.id, w.total_batches, w.metrics FROM written w WHERE w.metric_group = 'validation'"
    " UNION ALL SELECT m.id, m.total_batches, m.metrics FROM metrics m"
    " WHERE m.id = trials.best_validation_id) c"
    " WHERE det_validation_key(c.metrics, %(metric)s, %(larger)s) IS NOT NULL"
    " ORDER BY det_validation_key(c.metrics, %(metric)s, %(larger)s), c.total_batches, c.id"
    " LIMIT 1) WHERE id = %(trial)s"
)


# The best checkpoint again, when a completed checkpoint is at one of the steps just validated.
_REFRESH_IF_CHECKPOINTED = (
    "SELECT det_refresh_best_checkpoint(%s) WHERE EXISTS (SELECT 1 FROM checkpoints"
    " WHERE trial_id = %s AND state = 'COMPLETED' AND steps_completed = ANY(%s::bigint[]))"
)


@dataclass(frozen=True, slots=True)
class _Reported:
    """The trial a metric report goes to, locked, with its searcher's config and the summary
    the reports fold into."""

    id: int
    experiment_id: int
    request_id: str
    summary_metrics: JSONObject | None
    steps_completed: int
    searcher_metric: float | None
    #: ``{"searcher": ...}``: the experiment config's searcher section alone.
    config: JSONObject
    metric_text: str | None
    larger: bool | None
    #: What the trial's row knows to have nothing to supersede (metrics_superseded.plan).
    metrics_clean_run: int
    metrics_clean_from: int
    #: The row's version as read (``xmin``), for the write outside a transaction.
    version: str


_READ_REPORTED = (
    "SELECT t.id, t.experiment_id, t.request_id, t.summary_metrics, t.steps_completed,"
    " t.searcher_metric, jsonb_build_object('searcher', e.config->'searcher') AS config,"
    " e.config->'searcher'->>'metric' AS metric_text, det_larger_is_better(e.config) AS larger,"
    " t.metrics_clean_run, t.metrics_clean_from, t.xmin::text AS version"
    " FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE t.id = %s"
)


def report_metrics(
    conn: Conn, trial_id: int, reports: list[MetricsReportEntry], *, finite: bool = False
) -> int:
    """Writes metric reports of one trial in one statement; returns how many rows.

    Each report: ``{"group", "trialRunId", "stepsCompleted", "metrics": {"avgMetrics": {…}}}``.
    ``finite=True`` says the reports hold no non-finite floats (:func:`fastjson.loads` found
    none), which allows the fast encoder.

    Called outside a transaction (``conn`` in autocommit, the API's way), a batch that neither
    validates the searcher's metric nor follows a restart of the trial (nearly every one: the
    training reports) is two statements, each on its own: the read of the trial and the write,
    which applies only if the trial's row is still the version read
    (:data:`_WRITE_BATCH_IF_UNCHANGED`); no ``BEGIN`` and ``COMMIT`` round trips. When this
    process wrote the trial's last batch, the read is the row as written (:class:`_Written`)
    and the write alone is sent; a row changed since costs that write, which then writes
    nothing, and the batch goes on as without it. Any other batch, or one whose trial changed
    in between, is done again whole in one transaction that locks the trial's row. Called
    inside a transaction: that transaction, the row locked.
    """
    if conn.autocommit and conn.info.transaction_status == pq.TransactionStatus.IDLE:
        known = _written.get(conn, trial_id)
        n = None
        if known is not None:  # the row as this process last wrote it: no read if unchanged
            n = _report_metrics(conn, trial_id, reports, finite, unlocked=True, known=known)
        if n is None:
            n = _report_metrics(conn, trial_id, reports, finite, unlocked=True)
        if n is not None and n != _NEEDS_LOCK:
            return n
        return _report_metrics_pipelined(conn, trial_id, reports, finite)
    else:
        n = _report_metrics(conn, trial_id, reports, finite, unlocked=False)
    assert n is not None  # the locked path always writes
    return n


def _report_metrics_pipelined(
    conn: Conn, trial_id: int, reports: list[MetricsReportEntry], finite: bool
) -> int:
    """:func:`_report_metrics` locked, in a transaction sent in a pipeline: ``BEGIN`` travels
    with the locked read (one round trip) and what follows the read (the searcher's events, the
    write, the best checkpoint's refresh, its wake-up) with the ``COMMIT`` (one more), where
    each was a round trip of its own. A statement's error comes at the end, and the transaction
    is rolled back whatever ends it early. ``conn``: in autocommit, outside a transaction."""
    try:
        with conn.pipeline():
            conn.execute("BEGIN")
            n = _report_metrics(conn, trial_id, reports, finite, unlocked=False)
            conn.execute("COMMIT")
    except BaseException:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.rollback()
        raise
    assert n is not None  # the locked path always writes
    return n


# (host, port, database, trial or experiment id)
_Key = tuple[str, str, str, int]
# A kept row: experiment, request, summary text, steps, searcher metric, metric, larger is
# better, clean run, clean from, version (_Reported's columns but id and config).
_Kept = tuple[int, str, str, int, float | None, str | None, bool | None, int, int, str]


class _Written:
    """The trial rows this process last wrote a batch of training reports to, each as the
    read before the write would find it: the next batch of the trial folds into it and goes
    straight to the guarded write, which applies only if the row is still that version (the
    trial's read saved: one statement a batch, not two). A row changed meanwhile (another
    process's report, a validation, the trial's state) fails the guard, writes nothing, and the
    batch is read and written again as without it; the trial is then taken as written by others
    too (a client whose requests reach several fronts in turn) and not kept for
    :attr:`SECONDS`, so that its batches cost the read, not a failed write as well. Entries are
    by database (a process of the tests talks to several) and trial, live :attr:`SECONDS` (a
    row's ``xmin`` is a transaction id, which comes round again only after billions) and are at
    most :attr:`MOST` (then all forgotten at once)."""

    SECONDS = 60.0
    MOST = 20_000

    def __init__(self) -> None:
        # The row as written, its columns but the config as one tuple of strings and numbers
        # (the summary as the text written), which the collector stops tracking once it has
        # seen it: a kept row is replaced at every batch, and objects that live that long would
        # reach the old generation and bring its full collections sooner. None: written by
        # others too, not kept until the time is past. The configs, one by experiment, stay.
        self._rows: dict[_Key, tuple[float, _Kept | None]] = {}
        self._configs: dict[_Key, JSONObject] = {}

    @staticmethod
    def _key(conn: Conn, trial_id: int) -> _Key:
        info = conn.info
        return info.host, str(info.port), info.dbname, trial_id

    def _fresh(self, key: _Key) -> tuple[float, _Kept | None] | None:
        entry = self._rows.get(key)
        if entry is None or time.monotonic() - entry[0] > self.SECONDS:
            return None
        return entry

    def get(self, conn: Conn, trial_id: int) -> _Reported | None:
        key = self._key(conn, trial_id)
        entry = self._fresh(key)
        if entry is None or entry[1] is None:
            return None
        experiment, request, summary, steps, best, metric, larger, run, since, version = entry[1]
        config = self._configs.get((*key[:3], experiment))
        if config is None:
            return None
        return _Reported(
            id=trial_id,
            experiment_id=experiment,
            request_id=request,
            # As the trial's read would give it back (non-finite numbers as their strings).
            summary_metrics=cast("JSONObject", fastjson.loads(summary.encode())[0]),
            steps_completed=steps,
            searcher_metric=best,
            config=config,
            metric_text=metric,
            larger=larger,
            metrics_clean_run=run,
            metrics_clean_from=since,
            version=version,
        )

    def put(self, conn: Conn, trial: _Reported, summary: str) -> None:
        """``trial`` as written, its summary the JSON text ``summary``."""
        key = self._key(conn, trial.id)
        entry = self._fresh(key)
        if entry is not None and entry[1] is None:
            return  # written by others too: read it each time for now
        if len(self._rows) >= self.MOST:
            self._rows.clear()
            self._configs.clear()
        self._configs.setdefault((*key[:3], trial.experiment_id), trial.config)
        kept: _Kept = (
            trial.experiment_id,
            trial.request_id,
            summary,
            trial.steps_completed,
            trial.searcher_metric,
            trial.metric_text,
            trial.larger,
            trial.metrics_clean_run,
            trial.metrics_clean_from,
            trial.version,
        )
        self._rows[key] = (time.monotonic(), kept)

    def forget(self, conn: Conn, trial_id: int, *, shared: bool = False) -> None:
        """No row kept for the trial; ``shared``: a write found it changed by another, and
        none is kept for :attr:`SECONDS`."""
        key = self._key(conn, trial_id)
        if shared:
            self._rows[key] = (time.monotonic(), None)
        else:
            self._rows.pop(key, None)


_written = _Written()


@dataclass(slots=True)
class _Batch:
    """A batch of reports as the write needs it."""

    #: The rows for :data:`_BATCH_ROWS`, in report order.
    rows: list[JSONObject]
    #: Each group's averages, in report order.
    by_group: dict[str, list[JSONObject]]
    #: Each run's lowest and highest step; each run and group's lowest step.
    spans: dict[int, tuple[int, int]]
    firsts: dict[tuple[int, str], int]
    #: The highest step (None: no reports).
    top: int | None
    #: (value, time) of each validation with a finite searcher metric, in report order.
    validations: list[tuple[float, float]]


def _read_batch(
    reports: list[MetricsReportEntry], metric_name: str, time_metric: str | None
) -> _Batch:
    """The batch of ``reports``; bad input raises :class:`InvalidArgument` naming it."""
    batch = _Batch([], {}, {}, {}, None, [])
    spans, firsts = batch.spans, batch.firsts
    for i, r in enumerate(reports):
        if not isinstance(r, dict):
            raise InvalidArgument(f"metrics[{i}]: must be an object")
        group = r.get("group") or TRAINING
        m = r.get("metrics")
        if not isinstance(m, dict) or not isinstance(m.get("avgMetrics"), dict):
            raise InvalidArgument(f"metrics[{i}].metrics.avgMetrics: required object")
        if not isinstance(group, str):
            raise InvalidArgument(f"metrics[{i}].group: must be a string")
        avg = m["avgMetrics"]
        try:
            total = int(r.get("stepsCompleted") or 0)
            run_id = int(r.get("trialRunId") or 0)
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgument(
                f"metrics[{i}]: stepsCompleted and trialRunId must be integers"
            ) from None
        if run_id < 0:
            raise InvalidArgument(f"metrics[{i}].trialRunId: must be >= 0, got {run_id}")
        lo, hi = spans.get(run_id, (total, total))
        spans[run_id] = (min(lo, total), max(hi, total))
        firsts[run_id, group] = min(firsts.get((run_id, group), total), total)
        body: JSONObject = {"avg_metrics": avg}
        batch_metrics = m.get("batchMetrics")
        if batch_metrics:
            body["batch_metrics"] = [*batch_metrics]
        batch.rows.append({"run": run_id, "grp": group, "total": total, "body": body})
        batch.by_group.setdefault(group, []).append(avg)
        batch.top = total if batch.top is None else max(batch.top, total)
        if group == VALIDATION and metric_name in avg:
            value = avg[metric_name]
            if isinstance(value, (int, float)) and math.isfinite(value):
                t = avg.get(time_metric, total) if time_metric else total
                batch.validations.append((float(value), float(t)))
    return batch


_GROUP = methodcaller("get", "group")
_RUN = methodcaller("get", "trialRunId")
_STEPS = methodcaller("get", "stepsCompleted")
_METRICS = methodcaller("get", "metrics")
_AVG = methodcaller("get", "avgMetrics")
_BATCH = methodcaller("get", "batchMetrics")


def _plain_batch(reports: list[MetricsReportEntry]) -> _Batch | None:
    """:func:`_read_batch` of a batch as the harness sends nearly every one (training reports
    of one run, each step an integer, averages alone, no batch metrics), read by C loops
    (``map``) where the general loop spends a few microseconds a report; None for any other
    batch."""
    if not reports or set(map(type, reports)) != {dict}:
        return None
    if set(map(_GROUP, reports)) != {TRAINING}:
        return None
    runs = set(map(_RUN, reports))
    if len(runs) != 1:
        return None
    (run,) = runs
    if type(run) is not int or run < 0:  # a bool is no run id
        return None
    steps = list(map(_STEPS, reports))
    if set(map(type, steps)) != {int}:
        return None
    metrics = list(map(_METRICS, reports))
    if set(map(type, metrics)) != {dict} or any(map(_BATCH, metrics)):
        return None
    averages = list(map(_AVG, metrics))
    if set(map(type, averages)) != {dict}:
        return None
    lo, hi = min(steps), max(steps)
    rows: list[JSONObject] = [
        {"run": run, "grp": TRAINING, "total": t, "body": {"avg_metrics": a}}
        for t, a in zip(steps, averages, strict=True)
    ]
    return _Batch(rows, {TRAINING: averages}, {run: (lo, hi)}, {(run, TRAINING): lo}, hi, [])


#: What the write outside a transaction answers for a batch that needs the trial's row locked.
_NEEDS_LOCK = -1


def _report_metrics(
    conn: Conn,
    trial_id: int,
    reports: list[MetricsReportEntry],
    finite: bool,
    *,
    unlocked: bool,
    known: _Reported | None = None,
) -> int | None:
    """:func:`report_metrics` with the trial's row locked, or ``unlocked``: then nothing
    written, and :data:`_NEEDS_LOCK` for a batch that needs the lock, None for a row that
    changed since it was read (or, with ``known``, since this process wrote it)."""
    if known is not None:
        trial = known
    else:
        lock = "" if unlocked else " FOR NO KEY UPDATE OF t"
        read = (
            conn.cursor(row_factory=class_row(_Reported))
            .execute(_READ_REPORTED + lock, (trial_id,))
            .fetchone()
        )
        if read is None:
            _written.forget(conn, trial_id)
            raise NotFound(f"trial {trial_id} not found")
        trial = read
    summary = trial.summary_metrics or {}
    searcher_cfg = stored.experiment_config(trial.experiment_id, trial.config).searcher
    metric_name = searcher_cfg.metric
    time_metric = searcher_cfg.time_metric if isinstance(searcher_cfg, _AshaBase) else None
    smaller = searcher_cfg.smaller_is_better
    batch = _plain_batch(reports) or _read_batch(reports, metric_name, time_metric)
    rows, by_group, spans, firsts = batch.rows, batch.by_group, batch.spans, batch.firsts
    steps = trial.steps_completed if batch.top is None else max(trial.steps_completed, batch.top)
    events = [
        (trial.experiment_id, trial.request_id, {"metric": value, "time": t})
        for value, t in batch.validations
    ]
    values = [value for value, _ in batch.validations]
    fate = metrics_superseded.plan(trial.metrics_clean_run, trial.metrics_clean_from, spans)
    metric_text = trial.metric_text
    validated = metric_text is not None and any(
        metric_text in avg for avg in by_group.get(VALIDATION, ())
    )
    if unlocked and (fate.look or events or validated):
        return _NEEDS_LOCK  # rows to supersede, a searcher event, a best validation
    best = trial.searcher_metric
    moved = fate.look and metrics_superseded.supersede(conn, trial_id, firsts) > 0
    if moved:
        # The summary and the searcher metric counted the moved rows: fold them again from the
        # rows left (once per resumed run); the best validation is picked again from them.
        summary, best = _refold(conn, trial_id, metric_name, smaller)
        conn.execute(
            "UPDATE trials SET best_validation_id = det_best_validation(id) WHERE id = %s",
            (trial_id,),
        )
    for value in values:
        if best is None or (value < best if smaller else value > best):
            best = value
    for group, averages in by_group.items():
        summary = _update_summary(summary, group, averages)
    for experiment_id, request_id, payload in events:
        conn.execute(
            "INSERT INTO searcher_events (experiment_id, kind, request_id, payload)"
            " VALUES (%s, 'validation', %s, %s)",
            (experiment_id, request_id, Jsonb(payload)),
        )
    summary_text = fastjson.dumps(summary, finite=False)
    params = {
        "trial": trial_id,
        "rows": fastjson.dumps(rows, finite=finite),
        "summary": summary_text,
        "steps": steps,
        "best": best,
        "metric": metric_text,
        "larger": trial.larger,
        "clean_run": fate.clean_run,
        "clean_from": fate.clean_from,
        "version": trial.version,
    }
    if unlocked:
        version = db.scalar(conn, str, _WRITE_BATCH_IF_UNCHANGED, params)
        if version is None:
            _written.forget(conn, trial_id, shared=True)
            return None
        _written.put(
            conn,
            dataclasses.replace(
                trial,
                steps_completed=steps,
                metrics_clean_run=fate.clean_run,
                metrics_clean_from=fate.clean_from,
                version=version,
            ),
            summary_text,
        )
        return len(rows)
    _written.forget(conn, trial_id)  # the row changes in this transaction
    conn.execute(_WRITE_BATCH_VALIDATED if validated else _WRITE_BATCH, params)
    if moved:
        # A moved validation can stop its checkpoint being the best (the rows just written are
        # visible to this statement, not to the one that wrote them).
        conn.execute("SELECT det_refresh_best_checkpoint(%s)", (trial_id,))
    elif validated:
        # A validation can make only a checkpoint at its own step the best; most come before
        # their step's checkpoint, or at a step that has none.
        steps_validated = [row["total"] for row in rows if row["grp"] == VALIDATION]
        conn.execute(_REFRESH_IF_CHECKPOINTED, (trial_id, trial_id, steps_validated))
    if events:
        # The searcher's pass at once; the rest of the loop's round only if the searcher acts.
        conn.execute("NOTIFY det_wakeup, 'searcher'")
    return len(rows)


@dataclass(frozen=True, slots=True)
class _Averages:
    metric_group: str
    avg: JSONObject


def _refold(
    conn: Conn, trial_id: int, metric_name: str, smaller: bool
) -> tuple[JSONObject, float | None]:
    """The trial's summary and searcher metric from its rows in ``metrics`` alone."""
    by_group: dict[str, list[JSONObject]] = {}
    best: float | None = None
    for row in conn.cursor(row_factory=class_row(_Averages)).execute(
        "SELECT metric_group, metrics->'avg_metrics' AS avg FROM metrics WHERE trial_id = %s"
        " AND jsonb_typeof(metrics->'avg_metrics') = 'object' ORDER BY id",
        (trial_id,),
    ):
        by_group.setdefault(row.metric_group, []).append(row.avg)
        value = row.avg.get(metric_name) if row.metric_group == VALIDATION else None
        if (
            isinstance(value, (int, float))
            and math.isfinite(value)
            and (best is None or (value < best if smaller else value > best))
        ):
            best = float(value)
    summary: JSONObject = {}
    for group, batch in by_group.items():
        summary = _update_summary(summary, group, batch)
    return summary, best


def metrics_rows(conn: Conn, trial_id: int, group: str | None) -> list[MetricRow]:
    """A trial's ``metrics`` rows (one group's, or all) in training order."""
    params: list[Any] = [trial_id]
    clause = ""
    if group:
        clause = " AND metric_group = %s"
        params.append(group)
    return (
        conn.cursor(row_factory=class_row(MetricRow))
        .execute(
            "SELECT id, trial_id, trial_run_id, metric_group, total_batches, metrics, reported_at"
            " FROM metrics WHERE trial_id = %s" + clause + " ORDER BY total_batches, id",
            params,
        )
        .fetchall()
    )


# ``det.master.wire.ts`` in SQL: RFC 3339 in UTC, microseconds only when there are any.
def _ts_sql(column: str) -> str:
    utc = f"({column} AT TIME ZONE 'UTC')"
    return (
        f"to_char({utc}, 'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN"
        f" mod(date_part('microseconds', {utc})::int, 1000000) = 0 THEN ''"
        f" ELSE to_char({utc}, '.US') END || 'Z'"
    )


_REPORT_JSON = (
    "json_build_object('id', id, 'trialId', trial_id, 'trialRunId', trial_run_id,"
    f" 'totalBatches', total_batches, 'endTime', {_ts_sql('reported_at')}, 'metrics', metrics,"
    " 'group', metric_group, 'archived', false)"
)


def metrics_json(conn: Conn, trial_id: int, group: str | None) -> str:
    """:func:`metrics_rows` as the JSON text of a list of ``v1MetricsReport``
    (``det.master.schemas.trials.metrics_report``), built by PostgreSQL."""
    params: list[Any] = [trial_id]
    clause = ""
    if group:
        clause = " AND metric_group = %s"
        params.append(group)
    text = db.scalar(
        conn,
        str,
        f"SELECT coalesce(json_agg({_REPORT_JSON} ORDER BY total_batches, id), '[]')::text"
        " FROM metrics WHERE trial_id = %s" + clause,
        params,
    )
    return text if text is not None else "[]"


@dataclass(frozen=True, slots=True)
class _Series:
    """One trial's sampled points (:func:`sampled_series`), None without any."""

    trial_id: int
    data: str | None


@dataclass(frozen=True)
class SeriesFilter:
    """Determined's ``timeSeriesFilter`` (a ``PolymorphicFilter``): ``name`` is the column the
    integer and double ranges bound (``batches``, the default; ``epoch``; or a metric of the
    group); the time range bounds when the row was reported. Unset bounds do not bound."""

    name: str | None = None
    int_gt: int | None = None
    int_gte: int | None = None
    int_lt: int | None = None
    int_lte: int | None = None
    int_in: list[int] | None = None
    int_not_in: list[int] | None = None
    float_gt: float | None = None
    float_gte: float | None = None
    float_lt: float | None = None
    float_lte: float | None = None
    time_gt: str | None = None
    time_gte: str | None = None
    time_lt: str | None = None
    time_lte: str | None = None


def _filter_sql(f: SeriesFilter) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if f.name in (None, "", "batches"):
        column = "m.total_batches"
    else:
        # A number of the row's values (a row without it, or with a string, fails the bound).
        column = (
            "(CASE WHEN jsonb_typeof(m.metrics->'avg_metrics'->%s) = 'number'"
            " THEN (m.metrics->'avg_metrics'->>%s)::float8 END)"
        )
    bounds: list[tuple[str, Any]] = [
        (">", f.int_gt),
        (">=", f.int_gte),
        ("<", f.int_lt),
        ("<=", f.int_lte),
        (">", f.float_gt),
        (">=", f.float_gte),
        ("<", f.float_lt),
        ("<=", f.float_lte),
    ]
    for op, value in bounds:
        if value is not None:
            where.append(f"{column} {op} %s")
            params += ([] if column == "m.total_batches" else [f.name, f.name]) + [value]
    for negate, values in ((False, f.int_in), (True, f.int_not_in)):
        if values:
            where.append(("NOT " if negate else "") + f"({column} = ANY(%s))")
            params += ([] if column == "m.total_batches" else [f.name, f.name]) + [values]
    for op, value in (
        (">", f.time_gt),
        (">=", f.time_gte),
        ("<", f.time_lt),
        ("<=", f.time_lte),
    ):
        if value is not None:
            where.append(f"m.reported_at {op} %s::timestamptz")
            params.append(value)
    return where, params


def sampled_series(
    conn: Conn,
    trial_ids: list[int],
    group: str,
    names: list[str],
    *,
    max_points: int,
    start_batches: int = 0,
    end_batches: int | None = None,
    series_filter: SeriesFilter | None = None,
) -> dict[int, str]:
    """Per trial with any: the JSON text of its ``v1DataPoint`` list of ``group`` for the
    metrics ``names`` (each point: batches, time, epoch, values), sampled by PostgreSQL to at
    most ``max_points`` rows spread evenly over the batches, the first and the last always
    among them.

    A row *matches* when it carries one of ``names`` and passes the range and the filter. When
    at most ``max_points`` rows match, all of them. Otherwise the batches from the first
    matching row's ``lo`` to the last's ``hi`` are cut into ``max_points - 1`` buckets
    ``[lo + ceil((hi - lo) * i / (max_points - 1)), ...)`` and each bucket gives its first
    matching row (by batches; of rows with the same batches, the index's first), then the last
    row is added (``max_points`` 1: the first row alone). Each
    bucket is an index range scan that stops at its first match, so a long series costs about
    ``max_points`` index probes, not a pass over every row."""
    values = ", ".join("%s::text, p.metrics->'avg_metrics'->%s" for _ in names)
    vparams: list[Any] = [n for name in names for n in (name, name)]
    where, fparams = _filter_sql(series_filter or SeriesFilter())
    match = (
        "m.trial_id = t.id AND m.metric_group = %s AND m.total_batches >= %s"
        + (" AND m.total_batches <= %s" if end_batches is not None else "")
        # The function rather than its operator ?|: the planner assumes a third of the rows
        # pass it, not 1%, and so reads "the first max_points + 1" in index order instead of
        # reading all of them to sort.
        + " AND jsonb_exists_any(m.metrics->'avg_metrics', %s)"
        + "".join(" AND " + w for w in where)
    )
    mparams: list[Any] = [group, start_batches]
    mparams += [end_batches] if end_batches is not None else []
    mparams += [names, *fparams]
    rows_of = f"SELECT m.total_batches FROM metrics m WHERE {match} ORDER BY m.total_batches"
    tail = max_points >= 2
    buckets = max(max_points - 1, 1)
    # The buckets' upper end: the last row's batches (kept apart), or past it for one point.
    top = "t.hi" if tail else "t.hi + 1"

    def bound(i: str) -> str:
        return f"t.lo + ((({top}) - t.lo) * ({i}) + {buckets - 1}) / {buckets}"

    sql = (
        # Per trial, once: whether few rows match (an ordered scan that stops after
        # max_points + 1), and the batches of the first and the last.
        "WITH b AS MATERIALIZED (SELECT t.id, (SELECT count(*) FROM (SELECT 1 FROM metrics m"
        f" WHERE {match} ORDER BY m.total_batches LIMIT %s) x) <= %s AS few,"
        f" ({rows_of}, m.id LIMIT 1) AS lo, ({rows_of} DESC, m.id DESC LIMIT 1) AS hi"
        " FROM unnest(%s::int[]) AS t(id))"
        " SELECT t.id AS trial_id, (SELECT json_agg(json_build_object('batches', p.total_batches,"
        f" 'time', {_ts_sql('p.reported_at')}, 'epoch', CASE WHEN"
        " jsonb_typeof(p.metrics->'avg_metrics'->'epoch') = 'number'"
        " THEN p.metrics->'avg_metrics'->'epoch' END,"
        f" 'values', jsonb_strip_nulls(jsonb_build_object({values})))"
        " ORDER BY p.total_batches, p.id)::text FROM ("
        # At most max_points rows match: all of them.
        f" SELECT m.* FROM metrics m WHERE t.few AND {match}"
        # Otherwise each bucket's first match ...
        f" UNION ALL SELECT m.* FROM generate_series(0, {buckets - 1}) i, LATERAL ("
        f" SELECT m.* FROM metrics m WHERE {match} AND m.total_batches >= {bound('i')}"
        f" AND m.total_batches < {bound('i + 1')} ORDER BY m.total_batches LIMIT 1) m"
        " WHERE NOT t.few"
        # ... and the last.
        f" UNION ALL (SELECT m.* FROM metrics m WHERE NOT t.few AND {str(tail).lower()}"
        f" AND {match} ORDER BY m.total_batches DESC, m.id DESC LIMIT 1)"
        ") p) AS data FROM b AS t"
    )
    # Placeholders in the order they appear: match in the few, lo and hi subqueries (the first
    # with its limit and bound); the trials; the values; match in the three parts.
    params: list[Any] = [*mparams, max_points + 1, max_points, *mparams, *mparams, trial_ids]
    params += [*vparams, *mparams, *mparams, *mparams]
    rows = db.fetch_rows(conn, _Series, sql, params)
    return {r.trial_id: r.data for r in rows if r.data is not None}


def basic(conn: Conn, trial_ids: list[int]) -> dict[int, VersionedTrial]:
    """The trials' rows as :func:`list_for_experiment` reads them, by id, with their
    ``row_version``."""
    head, from_ = _summary_from("e.id IN (SELECT experiment_id FROM trials WHERE id = ANY(%s))")
    rows = db.fetch_rows(conn, VersionedTrial,
        head + "SELECT " + _LIST_COLUMNS + ", t.xmin::text::bigint AS row_version,"
        + _LIVE_STATE + _SUMMARY_COLUMNS + from_ + " WHERE t.id = ANY(%s)",
        (trial_ids, trial_ids),
    )  # fmt: skip
    return {r.id: r for r in rows}


def row_version(conn: Conn, trial_id: int) -> int:
    """The trial row's ``xmin`` (see :func:`basic`); NotFound unless the trial exists."""
    version = db.scalar(
        conn, int, "SELECT xmin::text::bigint FROM trials WHERE id = %s", (trial_id,)
    )
    if version is None:
        raise NotFound(f"trial {trial_id} not found")
    return version


def exists(conn: Conn, trial_id: int) -> None:
    """NotFound unless the trial exists."""
    if conn.execute("SELECT 1 FROM trials WHERE id = %s", (trial_id,)).fetchone() is None:
        raise NotFound(f"trial {trial_id} not found")


def report_early_exit(conn: Conn, trial_id: int, reason: str) -> None:
    trial = get(conn, trial_id)
    conn.execute(
        "INSERT INTO searcher_events (experiment_id, kind, request_id, payload) VALUES (%s, 'early_exit', %s, %s)",
        (trial.experiment_id, trial.request_id, json.dumps({"reason": reason})),
    )
    conn.execute("UPDATE trials SET exit_reason = %s WHERE id = %s", (reason, trial_id))


def kill(conn: Conn, trial_id: int) -> None:
    trial = get(conn, trial_id)
    if trial.state in states.TERMINAL:
        return
    # Lock order: allocations before trials (as when an allocation ends).
    conn.execute(
        "UPDATE allocations SET kill_requested = true WHERE trial_id = %s AND state <> 'TERMINATED'",
        (trial_id,),
    )
    conn.execute("UPDATE trials SET stop_reason = 'killed' WHERE id = %s", (trial_id,))
    states.transition(
        conn, "trial", trial_id, states.STOPPING_KILLED, "killed by user", strict=False
    )
    conn.execute("NOTIFY det_wakeup")
