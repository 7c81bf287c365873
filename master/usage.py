"""Usage and cost reports: who held which slots when, and what that cost. Pure.

An allocation holds its slots from its placement until it ended (``now`` while it lives). Its
dollars are, for each machine it was placed on, its share of that machine (the slots it held
there over the machine's slots) times the machine's hourly price, for the time both lived.
A machine is a cloud instance the provisioner launched (its agent id is the instance id), priced
by its pool (``provider.cost``: ``prices`` and ``spot_prices`` by instance type, spot and
on-demand apart; or the pool's ``price``), or a static (on-prem) agent of a pool with a
``price`` (``agent_hour`` plus ``slot_hour`` per slot, so a task pays ``slot_hour`` per
slot-hour held and its slots' share of ``agent_hour``). An agent of a pool without prices has
no price: its slot-seconds count and its dollars are not known (``priced`` stays False).

What a pool's instances cost in a window is what its tasks were charged plus what no task held
(``idle``): the two add up to the instances' own cost, as long as no slot is held twice. A
static agent's life is not recorded (it may come and go with no trace), so it has no idle
part: its pool's figures are what its tasks were charged.

Every figure is clipped to the window asked for, so windows that tile a range add up to the
range's figures.
"""

from __future__ import annotations

import bisect
import dataclasses
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence

from det.master.provisioner.provider import Market

# The dimensions of an aggregated report, as Determined's CSV names them (workspace and
# experiment are det's).
DIMENSIONS = ("experiment_label", "username", "resource_pool", "workspace", "experiment")


@dataclasses.dataclass(frozen=True)
class Machine:
    """A cloud instance as the master saw it, with the price its pool gives its type."""

    id: str
    pool: str
    instance_type: str
    market: Market
    launched_at: dt.datetime
    ended_at: dt.datetime | None
    slots: int
    hourly_usd: float | None
    # A static agent: charged to the tasks it ran only (no recorded life, so no idle part and
    # no row of its own in the raw report).
    static: bool = False


@dataclasses.dataclass(frozen=True)
class Hold:
    """One allocation: which slots of which agents it held, from when to when."""

    allocation_id: str
    task_id: str
    kind: str
    pool: str
    slots: int
    start: dt.datetime
    end: dt.datetime | None
    placement: Mapping[str, int]
    experiment_id: int | None = None
    trial_id: int | None = None
    user_id: int | None = None
    username: str = ""
    labels: tuple[str, ...] = ()
    workspace: str = ""


@dataclasses.dataclass
class Figures:
    """Slot-seconds and dollars (spot and on-demand apart) of some usage."""

    slot_seconds: float = 0.0
    spot_usd: float = 0.0
    on_demand_usd: float = 0.0
    priced: bool = False

    @property
    def usd(self) -> float:
        return self.spot_usd + self.on_demand_usd

    def add(self, other: Figures) -> None:
        self.slot_seconds += other.slot_seconds
        self.spot_usd += other.spot_usd
        self.on_demand_usd += other.on_demand_usd
        self.priced = self.priced or other.priced


@dataclasses.dataclass(frozen=True)
class Use:
    """A hold clipped to a window: its wall seconds, its figures, and its dollars per machine."""

    hold: Hold
    start: dt.datetime
    end: dt.datetime
    seconds: float
    figures: Figures
    by_machine: Mapping[str, float]


def _overlap(
    a: tuple[dt.datetime, dt.datetime], b: tuple[dt.datetime, dt.datetime]
) -> tuple[dt.datetime, dt.datetime] | None:
    start, end = max(a[0], b[0]), min(a[1], b[1])
    return (start, end) if end > start else None


def _secs(span: tuple[dt.datetime, dt.datetime]) -> float:
    return (span[1] - span[0]).total_seconds()


def use(
    hold: Hold,
    machines: Mapping[str, Machine],
    start: dt.datetime,
    end: dt.datetime,
    now: dt.datetime,
) -> Use | None:
    """``hold`` within ``[start, end)`` (None if it held nothing then)."""
    span = _overlap((hold.start, min(hold.end or now, now)), (start, end))
    if span is None:
        return None
    seconds = _secs(span)
    fig = Figures(slot_seconds=seconds * hold.slots)
    by_machine: dict[str, float] = {}
    for agent, n in sorted(hold.placement.items()):
        m = machines.get(agent)
        if m is None or m.hourly_usd is None:
            continue
        fig.priced = True
        if n <= 0:
            continue
        alive = _overlap(span, (m.launched_at, min(m.ended_at or now, now)))
        if alive is None:
            continue
        usd = m.hourly_usd * n / max(m.slots, n) * _secs(alive) / 3600
        by_machine[m.id] = by_machine.get(m.id, 0.0) + usd
        if m.market is Market.SPOT:
            fig.spot_usd += usd
        else:
            fig.on_demand_usd += usd
    return Use(hold, span[0], span[1], seconds, fig, by_machine)


def machine_use(
    m: Machine, start: dt.datetime, end: dt.datetime, now: dt.datetime
) -> tuple[float, float] | None:
    """(seconds, dollars) machine ``m`` ran within ``[start, end)``; dollars 0 when unpriced."""
    span = _overlap((m.launched_at, min(m.ended_at or now, now)), (start, end))
    if span is None:
        return None
    secs = _secs(span)
    return secs, (m.hourly_usd or 0.0) * secs / 3600


@dataclasses.dataclass
class Period:
    """One period of an aggregated report."""

    label: str
    start: dt.datetime
    end: dt.datetime
    total: Figures = dataclasses.field(default_factory=Figures)
    by: dict[str, dict[str, Figures]] = dataclasses.field(
        default_factory=lambda: {d: defaultdict(Figures) for d in DIMENSIONS}
    )
    machines_usd: dict[str, float] = dataclasses.field(default_factory=lambda: defaultdict(float))
    charged_usd: dict[str, float] = dataclasses.field(default_factory=lambda: defaultdict(float))

    @property
    def idle_usd(self) -> dict[str, float]:
        """Per pool: what its machines cost that no task was charged."""
        return {p: v - self.charged_usd.get(p, 0.0) for p, v in sorted(self.machines_usd.items())}


def keys(hold: Hold, dimension: str) -> Sequence[str]:
    """The keys ``hold`` counts under in ``dimension`` (an experiment's every label; none for a
    task that has no such key)."""
    if dimension == "experiment_label":
        return hold.labels
    if dimension == "username":
        return (hold.username,) if hold.username else ()
    if dimension == "resource_pool":
        return (hold.pool,)
    if dimension == "workspace":
        return (hold.workspace,) if hold.workspace else ()
    if dimension == "experiment":
        return (str(hold.experiment_id),) if hold.experiment_id is not None else ()
    raise ValueError(dimension)


def aggregate(
    holds: Iterable[Hold],
    machines: Mapping[str, Machine],
    periods: Sequence[tuple[str, dt.datetime, dt.datetime]],
    now: dt.datetime,
) -> list[Period]:
    """The figures of each period, by every dimension, and what each pool's machines cost."""
    out = [Period(label, start, end) for label, start, end in periods]
    starts = [p.start for p in out]

    def overlapping(start: dt.datetime, end: dt.datetime | None) -> list[Period]:
        first = max(bisect.bisect_right(starts, start) - 1, 0)
        last = len(out) if end is None else bisect.bisect_left(starts, min(end, now))
        return out[first:last]

    for h in holds:
        for p in overlapping(h.start, h.end):
            u = use(h, machines, p.start, p.end, now)
            if u is None:
                continue
            p.total.add(u.figures)
            for dim in DIMENSIONS:
                for key in keys(h, dim):
                    p.by[dim][key].add(u.figures)
            for mid, usd in u.by_machine.items():
                if not machines[mid].static:
                    p.charged_usd[machines[mid].pool] += usd
    for m in machines.values():
        if m.hourly_usd is None or m.static:
            continue
        for p in overlapping(m.launched_at, m.ended_at):
            mu = machine_use(m, p.start, p.end, now)
            if mu is not None:
                p.machines_usd[m.pool] += mu[1]
    return out


def days(first: dt.date, last: dt.date) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """Every UTC day from ``first`` to ``last``, both included."""
    out = []
    d = first
    while d <= last:
        start = dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC)
        out.append((d.isoformat(), start, start + dt.timedelta(days=1)))
        d += dt.timedelta(days=1)
    return out


def months(first: dt.date, last: dt.date) -> list[tuple[str, dt.datetime, dt.datetime]]:
    """Every UTC calendar month from ``first``'s to ``last``'s, both included."""
    out = []
    y, mo = first.year, first.month
    while (y, mo) <= (last.year, last.month):
        start = dt.datetime(y, mo, 1, tzinfo=dt.UTC)
        y, mo = (y + 1, 1) if mo == 12 else (y, mo + 1)
        out.append(
            (f"{start.year:04d}-{start.month:02d}", start, dt.datetime(y, mo, 1, tzinfo=dt.UTC))
        )
    return out
