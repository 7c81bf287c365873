"""Usage and cost reports: Determined's allocation reports (``/api/v1/resources/allocation/raw``
and ``aggregated``, and the CSVs its ``det resources`` commands fetch outside ``/api/v1``), with
dollars beside slot-hours where a pool has prices (``null``, never 0, where none has: a
total's dollars are its priced rows'), and det's cost of one experiment.

Any user may read them, as in Determined's open-source edition (they show what the experiment
list already shows to every user: owners, labels, pools); tasks and agents may not. Figures
are computed from the allocations at each request (Determined's daily aggregates waited for the
day to end): see :mod:`det.master.usage` for what is counted.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
from collections.abc import Iterable, Sequence

from flask import Blueprint, Response

from det.master import usage
from det.master.api._common import reads, state
from det.master.api._contract import contract
from det.master.errors import InvalidArgument, NotFound
from det.master.schemas import usage as wire
from det.master.services import usage as svc

bp = Blueprint("usage", __name__)

# A report covers at most this many periods (ten years of days).
MAX_PERIODS = 3700

DAILY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY"
MONTHLY = "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _timestamp(value: str | None, field: str) -> dt.datetime:
    if not value:
        raise InvalidArgument(f"{field}: required (an RFC 3339 time, e.g. 2025-01-31T00:00:00Z)")
    try:
        t = dt.datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        raise InvalidArgument(
            f"{field}: must be an RFC 3339 time (e.g. 2025-01-31T00:00:00Z), not {value[:40]!r}"
        ) from None
    return t.replace(tzinfo=dt.UTC) if t.tzinfo is None else t.astimezone(dt.UTC)


def _window(params: wire.RawParams) -> tuple[dt.datetime, dt.datetime]:
    start = _timestamp(
        params.get("timestampAfter") or params.get("timestamp_after"), "timestampAfter"
    )
    end = _timestamp(
        params.get("timestampBefore") or params.get("timestamp_before"), "timestampBefore"
    )
    if start > end:
        raise InvalidArgument("timestampBefore: must not be before timestampAfter")
    return start, end


def _date(value: str | None, field: str, monthly: bool) -> dt.date:
    shape = "YYYY-MM" if monthly else "YYYY-MM-DD"
    if not value:
        raise InvalidArgument(f"{field}: required ({shape})")
    try:
        if monthly:
            y, _, m = value.strip().partition("-")
            if len(y) != 4 or len(m) != 2:
                raise ValueError(value)
            return dt.date(int(y), int(m), 1)
        return dt.date.fromisoformat(value.strip())
    except ValueError:
        raise InvalidArgument(f"{field}: must be a date {shape}, not {value[:40]!r}") from None


def _periods(
    params: wire.AggregatedParams,
) -> tuple[bool, list[tuple[str, dt.datetime, dt.datetime]]]:
    period = params.get("period") or ""
    if period not in (DAILY, MONTHLY):
        raise InvalidArgument(f"period: must be {DAILY} or {MONTHLY}")
    monthly = period == MONTHLY
    first = _date(params.get("startDate") or params.get("start_date"), "startDate", monthly)
    last = _date(params.get("endDate") or params.get("end_date"), "endDate", monthly)
    if first > last:
        raise InvalidArgument("endDate: must not be before startDate")
    span = (
        (last.year - first.year) * 12 + last.month - first.month if monthly else (last - first).days
    )
    if span >= MAX_PERIODS:
        raise InvalidArgument(f"endDate: at most {MAX_PERIODS} periods after startDate")
    # Periods that have not begun are left out (Determined lists only days it has figures of).
    today = _now().date()
    last = min(last, today)
    if first > last:
        return monthly, []
    return monthly, usage.months(first, last) if monthly else usage.days(first, last)


def _aggregated(params: wire.AggregatedParams) -> tuple[bool, list[usage.Period]]:
    monthly, periods = _periods(params)
    if not periods:
        return monthly, []
    start, end = periods[0][1], periods[-1][2]
    with reads() as conn:
        first = svc.first_placement(conn)
        if first is None:
            return monthly, []
        # Determined's report starts at the first day it has figures for.
        periods = [p for p in periods if p[2] > first]
        holds = svc.holds(conn, start, end)
        machines = svc.machines(conn, state().config, start, end, holds)
    return monthly, usage.aggregate(holds, machines, periods, _now())


def _raw(start: dt.datetime, end: dt.datetime) -> list[wire.RawEntry]:
    now = _now()
    with reads() as conn:
        holds = svc.holds(conn, start, end)
        machines = svc.machines(conn, state().config, start, end, holds)
    out: list[wire.RawEntry] = []
    for h in holds:
        u = usage.use(h, machines, start, end, now)
        if u is not None:
            out.append(wire.raw_entry(u))
    for m in machines.values():
        if m.static:  # its life is not recorded: its dollars are its tasks'
            continue
        span_end = min(m.ended_at or now, now, end)
        span_start = max(m.launched_at, start)
        mu = usage.machine_use(m, start, end, now)
        if mu is not None:
            out.append(wire.machine_entry(m, span_start, span_end, mu[0], mu[1]))
    out.sort(key=lambda e: e.get("startTime") or "")
    return out


@bp.get("/api/v1/resources/allocation/raw")
@contract("ResourceAllocationRaw", params=wire.RawParams, response=wire.RawResponse)
def raw(params: wire.RawParams) -> wire.RawResponse:
    """Every allocation that held slots in the window (clipped to it), and every cloud
    instance that ran then, with their dollars where the pool has prices."""
    start, end = _window(params)
    return {"resourceEntries": _raw(start, end)}


@bp.get("/api/v1/resources/allocation/aggregated")
@contract(
    "ResourceAllocationAggregated", params=wire.AggregatedParams, response=wire.AggregatedResponse
)
def aggregated(params: wire.AggregatedParams) -> wire.AggregatedResponse:
    """Slot-seconds and dollars per day or month, by user, label, pool, workspace, experiment."""
    monthly, periods = _aggregated(params)
    return {"resourceEntries": [wire.aggregated_entry(p, monthly) for p in periods]}


# -- Determined's CSVs (outside /api/v1) -------------------------------------------------------

# A spreadsheet runs a cell that starts with one of these as a formula; names and labels are
# users' text, so such a cell is written with a leading apostrophe (OWASP's CSV injection rule).
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def _text(value: str) -> str:
    return "'" + value if value.startswith(_FORMULA) else value


def _usd(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _csv(header: Sequence[str], rows: Iterable[Sequence[object]], name: str) -> Response:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return Response(
        buf.getvalue(),
        mimetype="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )


def _label_cell(labels: Iterable[str]) -> str:
    # Determined's escaping of the labels joined in one cell.
    return ",".join(x.replace("\\", "\\\\").replace(",", "\\,") for x in labels)


@bp.get("/resources/allocation/raw")
@contract(params=wire.RawParams)
def raw_csv(params: wire.RawParams) -> Response:
    """``det resources raw`` (Determined's CSV): experiment_id, kind, username, labels, slots,
    start_time, end_time, seconds; det adds resource_pool and cost_usd."""
    start, end = _window(params)
    rows = [
        [
            e.get("experimentId") or 0,
            e.get("kind") or "",
            _text(e.get("username") or ""),
            _text(_label_cell(e.get("labels") or [])),
            e.get("slots") or 0,
            e.get("startTime") or "",
            e.get("endTime") or "",
            f"{e.get('seconds') or 0.0:f}",
            _text(e.get("resourcePool") or ""),
            _usd(e.get("costUsd")),
        ]
        for e in _raw(start, end)
    ]
    header = ["experiment_id", "kind", "username", "labels", "slots", "start_time", "end_time"]
    return _csv([*header, "seconds", "resource_pool", "cost_usd"], rows, "raw")


@bp.get("/resources/allocation/aggregated")
@contract(params=wire.AggregatedParams)
def aggregated_csv(params: wire.AggregatedParams) -> Response:
    """``det resources aggregated`` (Determined's CSV: aggregation_type, aggregation_key, date,
    seconds); det adds the workspace and experiment types and a cost_usd column."""
    _, periods = _aggregated(params)
    rows: list[list[object]] = []
    for p in periods:
        for dim in ("experiment_label", "username", "resource_pool", "workspace", "experiment"):
            for key, f in sorted(p.by[dim].items()):
                rows.append(
                    [
                        dim,
                        _text(key),
                        p.label,
                        f"{f.slot_seconds:f}",
                        _usd(f.usd if f.priced else None),
                    ]
                )
        total = p.total
        rows.append(
            [
                "total",
                "total",
                p.label,
                f"{total.slot_seconds:f}",
                _usd(total.usd if total.priced else None),
            ]
        )
    header = ["aggregation_type", "aggregation_key", "date", "seconds", "cost_usd"]
    return _csv(header, rows, "aggregated")


@bp.get("/resources/allocation/allocations-csv")
@contract(params=wire.RawParams)
def allocations_csv(params: wire.RawParams) -> Response:
    """``det resources allocations`` (Determined's allocation-level CSV); det leaves
    imagepulling_time empty (it does not time image pulls) and adds the dollars."""
    start, end = _window(params)
    now = _now()
    with reads() as conn:
        holds = svc.holds(conn, start, end)
        machines = svc.machines(conn, state().config, start, end, holds)
    rows = []
    for h in holds:
        u = usage.use(h, machines, start, end, now)
        if u is None:
            continue
        f = u.figures
        rows.append(
            [
                h.allocation_id,
                h.kind,
                _text(h.username),
                _text(h.workspace),
                h.experiment_id or "",
                h.slots,
                wire.wire_time(h.start),
                wire.wire_time(h.end) if h.end else "",
                "",
                f"{f.slot_seconds / 3600:f}",
                _text(h.pool),
                _usd(f.usd if f.priced else None),
                _usd(f.spot_usd if f.priced else None),
                _usd(f.on_demand_usd if f.priced else None),
            ]
        )
    header = [
        "allocation_id",
        "task_type",
        "username",
        "workspace_name",
        "experiment_id",
        "slots",
        "start_time",
        "end_time",
        "imagepulling_time",
        "slot_hours",
        "resource_pool",
    ]
    return _csv([*header, "cost_usd", "spot_usd", "on_demand_usd"], rows, "allocations")


# -- det's own ---------------------------------------------------------------------------------


@bp.get("/api/v1/experiments/<int:experiment_id>/cost")
@contract(response=wire.ExperimentCostResponse)
def experiment_cost(experiment_id: int) -> wire.ExperimentCostResponse:
    """What an experiment's trials and checkpoint GC held and cost over its whole life."""
    now = _now()
    start = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    with reads() as conn:
        if not svc.experiment_exists(conn, experiment_id):
            raise NotFound(f"experiment {experiment_id} not found")
        holds = svc.holds(conn, start, now, experiment_id=experiment_id)
        machines = svc.machines(conn, state().config, start, now, holds)
    total = usage.Figures()
    trials: dict[int, usage.Figures] = {}
    for h in holds:
        u = usage.use(h, machines, start, now, now)
        if u is None:
            continue
        total.add(u.figures)
        if h.trial_id is not None:
            trials.setdefault(h.trial_id, usage.Figures()).add(u.figures)

    def money(f: usage.Figures, value: float) -> float | None:
        return value if f.priced else None

    return {
        "experimentId": experiment_id,
        "currency": wire.CURRENCY,
        "slotHours": total.slot_seconds / 3600,
        "usd": money(total, total.usd),
        "spotUsd": money(total, total.spot_usd),
        "onDemandUsd": money(total, total.on_demand_usd),
        "trials": [
            {
                "trialId": tid,
                "slotHours": f.slot_seconds / 3600,
                "usd": money(f, f.usd),
                "spotUsd": money(f, f.spot_usd),
                "onDemandUsd": money(f, f.on_demand_usd),
            }
            for tid, f in sorted(trials.items())
        ],
    }
