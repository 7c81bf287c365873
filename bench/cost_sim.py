"""The cost and wall time of one hyperparameter search on a disturbed spot market: det against
Determined configured at its best (spot, a 2-minute ``max_idle_agent_period``) and Determined on
on-demand machines (issue 41 item 7). Seeded, deterministic, seconds to run.

What is det's own code, imported: the searcher (``new_searcher``: a 100-trial
``adaptive_asha``, curves from ``searcher.simulate.SyntheticCurve``), the scheduler
(``scheduler.schedule``, every pass, for all three systems) and det's scale decider
(``provisioner.decider.decide``: its ordered fallback list, the per-option capacity backoff,
idle terminations). What is a model: the market (:class:`SpotMarket`), the machines, the trials
(a unit of training a minute on a ``g5.xlarge``; a validation and a checkpoint every 4 units
and at every rung) and the bill (per second, from launch to end). docs/benchmarks.md lists the
assumptions and the current table.

Determined's provisioner is modelled from its source (0.38.1,
``master/internal/rm/agentrm/provisioner``): one instance type in one zone per pool (the subnet
its ``det deploy aws`` templates set), spot or not. On AWS a spot launch is a one-time spot
request; a request the market cannot fill stays open ("capacity-not-available"), counts as an
instance that is starting, is never timed out, and is filled whenever capacity returns
(:func:`determined_decide` ports ``scale_decider.go``'s counting). Its agent does not read the
spot interruption notice: a reclaimed machine's trials lose what they trained since their last
checkpoint. det's pool lists options across zones, types and markets; the decider takes the
first option not backing off after a capacity refusal (10 s doubling up to
``launch_error_timeout``, 5 minutes), and the notice makes a machine's trials checkpoint and
queue again.

``python bench/cost_sim.py [--seeds 8] [--levels none,refusals,outage,waves1,waves2] [--idle 120]``
"""

from __future__ import annotations

import argparse
import bisect
import dataclasses
import datetime as dt
import random
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

from det.master import scheduler as sched
from det.master.provisioner import decider
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market
from det.master.searcher import new_searcher
from det.master.searcher.actions import Action, CreateTrial, Shutdown, StopTrial
from det.master.searcher.simulate import SyntheticCurve, _rung_times

T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
UNIT = 60.0  # seconds of training per time unit (batches) on a machine of speed 1
JOB = "search"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
G5, G6 = "g5.xlarge", "g6.xlarge"


@dataclasses.dataclass(frozen=True)
class Kind:
    """An instance type: its on-demand price, its spot price per zone (USD/h) and how fast it
    trains (units per minute; the g5's A10G is 1)."""

    on_demand: float
    spot: Mapping[str, float]
    speed: float


# On-demand: AWS's us-east-1 list prices. Spot: about 70% below, differing by zone (assumed).
KINDS: dict[str, Kind] = {
    G5: Kind(1.006, {"us-east-1a": 0.302, "us-east-1b": 0.331, "us-east-1c": 0.387}, 1.0),
    G6: Kind(0.805, {"us-east-1a": 0.262, "us-east-1b": 0.279, "us-east-1c": 0.322}, 0.75),
}

HYPERPARAMETERS: dict[str, Any] = {
    "lr": {"type": "log", "base": 10, "minval": -4, "maxval": -1},
    "width": {"type": "int", "minval": 32, "maxval": 512},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "optimizer": {"type": "categorical", "vals": ["sgd", "adam", "adamw"]},
}
SEARCHER: dict[str, Any] = {
    "name": "adaptive_asha",
    "metric": "validation_loss",
    "max_trials": 100,
    "max_concurrent_trials": 16,
    "time_metric": "batches",
    "max_time": 64,
    "mode": "standard",
    "divisor": 4,
    "max_rungs": 4,
}


# -- the market -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Disturbance:
    """How the spot market misbehaves (times in hours from the search's submission).

    * ``refused_share``: the long-run share of time each (zone, type) spot pool refuses
      launches, in episodes of ``refusal_hours`` on average (exponential lengths, the pools
      independent of each other);
    * ``outage_zone``: every spot launch in that zone, of any type, is refused from
      ``outage_start`` for ``outage_hours``;
    * ``waves_per_hour``: interruption waves (a Poisson process); each hits one zone, chosen
      uniformly, reclaims each spot machine running there with probability ``wave_share``
      (2-minute notice) and refuses spot launches in that zone for ``wave_refusal_minutes``.
    """

    name: str = "none"
    refused_share: float = 0.0
    refusal_hours: float = 2.0
    outage_zone: str | None = None
    outage_start: float = 0.0
    outage_hours: float = 0.0
    waves_per_hour: float = 0.0
    wave_share: float = 0.5
    wave_refusal_minutes: float = 30.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.refused_share < 1.0:
            raise ValueError(f"refused_share: {self.refused_share} is not in [0, 1)")
        if not 0.0 <= self.wave_share <= 1.0:
            raise ValueError(f"wave_share: {self.wave_share} is not in [0, 1]")
        if self.outage_zone is not None and self.outage_zone not in ZONES:
            raise ValueError(f"outage_zone: {self.outage_zone!r} is not one of {ZONES}")
        for name in ("refusal_hours", "outage_hours", "waves_per_hour", "wave_refusal_minutes"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: {getattr(self, name)} is negative")


LEVELS: dict[str, Disturbance] = {
    "none": Disturbance(),
    "refusals": Disturbance("refusals 50%, 2 h episodes", refused_share=0.5, refusal_hours=2.0),
    "outage": Disturbance(
        "zone outage 4 h (us-east-1a)", outage_zone=ZONES[0], outage_start=0.0, outage_hours=4.0
    ),
    "waves1": Disturbance("interruption waves 1/h", waves_per_hour=1.0),
    "waves2": Disturbance("interruption waves 2/h", waves_per_hour=2.0),
}


@dataclasses.dataclass(frozen=True)
class Wave:
    at: float  # seconds after T0
    zone: str
    index: int


class SpotMarket:
    """One seeded timeline of spot capacity and interruptions, the same whatever the systems
    do (so the systems are compared on the same market). Times are seconds after ``T0``;
    on-demand capacity is never refused."""

    def __init__(self, disturbance: Disturbance, seed: int, horizon_hours: float = 72.0) -> None:
        self.disturbance = disturbance
        self.seed = seed
        horizon = horizon_hours * 3600
        d = disturbance
        rng = random.Random(f"waves:{seed}")
        waves: list[Wave] = []
        t = 0.0
        while d.waves_per_hour > 0:
            t += rng.expovariate(d.waves_per_hour / 3600)
            if t >= horizon:
                break
            waves.append(Wave(t, rng.choice(ZONES), len(waves)))
        self.waves: tuple[Wave, ...] = tuple(waves)
        self._refused: dict[tuple[str, str], list[tuple[float, float]]] = {}
        for zone in ZONES:
            for itype in KINDS:
                spans = _episodes(d, random.Random(f"refusals:{seed}:{zone}:{itype}"), horizon)
                if d.outage_zone == zone and d.outage_hours > 0:
                    start = d.outage_start * 3600
                    spans.append((start, start + d.outage_hours * 3600))
                spans += [
                    (w.at, w.at + d.wave_refusal_minutes * 60) for w in waves if w.zone == zone
                ]
                self._refused[(zone, itype)] = _merge(spans)
        self._starts = {k: [s for s, _ in v] for k, v in self._refused.items()}

    def refused_spans(self, zone: str, itype: str) -> list[tuple[float, float]]:
        """The intervals ``[start, end)`` in which spot launches of ``itype`` in ``zone`` fail."""
        return list(self._refused[(zone, itype)])

    def refused(self, zone: str, itype: str, at: float) -> bool:
        spans = self._refused[(zone, itype)]
        i = bisect.bisect_right(self._starts[(zone, itype)], at) - 1
        return i >= 0 and at < spans[i][1]

    def waves_in(self, after: float, upto: float) -> list[Wave]:
        """The waves at times in ``(after, upto]``."""
        return [w for w in self.waves if after < w.at <= upto]

    def reclaims(self, wave: Wave, instance_id: str) -> bool:
        """Whether ``wave`` reclaims this machine (given that it runs spot in the wave's zone)."""
        draw = random.Random(f"reclaim:{self.seed}:{wave.index}:{instance_id}").random()
        return draw < self.disturbance.wave_share


def _episodes(d: Disturbance, rng: random.Random, horizon: float) -> list[tuple[float, float]]:
    """Alternating open and refused periods of one pool (exponential lengths), started in the
    stationary state: refused with probability ``refused_share``."""
    if d.refused_share <= 0 or d.refusal_hours <= 0:
        return []
    refused_mean = d.refusal_hours * 3600
    open_mean = refused_mean * (1 - d.refused_share) / d.refused_share
    out: list[tuple[float, float]] = []
    t, refused = 0.0, rng.random() < d.refused_share
    while t < horizon:
        length = rng.expovariate(1 / (refused_mean if refused else open_mean))
        if refused:
            out.append((t, t + length))
        t += length
        refused = not refused
    return out


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def price(option: LaunchOption) -> float:
    kind = KINDS[option.instance_type]
    if option.market is Market.SPOT:
        return kind.spot[option.zone or ZONES[0]]
    return kind.on_demand


# -- the systems ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class System:
    """``determined``: Determined's provisioner (one option; open spot requests wait for
    capacity) instead of det's decider over ``options``."""

    name: str
    options: tuple[LaunchOption, ...]
    idle: dt.timedelta
    notice: bool  # the notice preempts the machine's trials gracefully
    determined: bool


def _spot(itype: str, zone: str) -> LaunchOption:
    return LaunchOption(itype, zone=zone, market=Market.SPOT, slots=1)


def systems(idle: float = 120.0) -> list[System]:
    """Determined at its best, Determined on-demand, det (in this order)."""
    short = dt.timedelta(seconds=idle)
    on_demand = LaunchOption(G5, zone=ZONES[0], market=Market.ON_DEMAND, slots=1)
    det_options = (
        *(_spot(G5, z) for z in ZONES),
        *(_spot(G6, z) for z in ZONES),
        on_demand,
    )
    return [
        System("Determined at its best", (_spot(G5, ZONES[0]),), short, False, determined=True),
        System("Determined on-demand", (on_demand,), short, False, determined=True),
        System("det", det_options, short, True, determined=False),
    ]


@dataclasses.dataclass(frozen=True)
class Cloud:
    boot: dt.timedelta
    startup: dt.timedelta
    checkpoint: dt.timedelta
    notice: dt.timedelta
    validate_every: float
    max_instances: int


def default_cloud() -> Cloud:
    return Cloud(
        boot=dt.timedelta(minutes=3),
        startup=dt.timedelta(minutes=1),
        checkpoint=dt.timedelta(seconds=30),
        notice=dt.timedelta(minutes=2),
        validate_every=4.0,
        max_instances=16,
    )


@dataclasses.dataclass
class Machine:
    id: str
    option: LaunchOption
    requested_at: dt.datetime
    launched_at: dt.datetime | None = None  # None: an open spot request (Determined)
    ready_at: dt.datetime | None = None
    noticed_at: dt.datetime | None = None
    dies_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    idle_since: dt.datetime | None = None

    def ready(self, now: dt.datetime) -> bool:
        return self.ready_at is not None and now >= self.ready_at and self.ended_at is None


@dataclasses.dataclass
class Trial:
    create: CreateTrial
    order: int
    length: float
    reports: list[float]
    progress: float = 0.0
    saved: float = 0.0  # units in its latest checkpoint
    done: bool = False
    run: int = 0
    machine: str | None = None
    placed_at: dt.datetime | None = None
    train_from: dt.datetime | None = None
    release_at: dt.datetime | None = None  # a graceful stop: checkpoint, then free the slot
    stop_reason: str = ""

    @property
    def alloc(self) -> str:
        return f"{self.create.request_id}.{self.run}"


@dataclasses.dataclass
class Result:
    system: str
    usd: float
    wall: dt.timedelta
    instance_hours: float
    redone_units: float
    interruptions: int
    spot_launches: int
    on_demand_launches: int


def determined_decide(
    machines: list[Machine],
    busy: set[str],
    desired: int,
    now: dt.datetime,
    idle: dt.timedelta,
    max_instances: int,
    starting_period: dt.timedelta = dt.timedelta(minutes=20),
) -> tuple[int, list[str]]:
    """Determined's scale decider (``scale_decider.go``, ``min_instances`` 0) over the live
    machines and open requests: how many to launch, which idle machines to terminate.

    An open spot request counts as an instance and as recently launched (so it holds back a
    launch for the work it was made for) and is never timed out; an instance counts as
    recently launched until its agent connects or ``max_agent_starting_period`` passes."""
    live = [m for m in machines if m.ended_at is None]
    recent = 0
    terminate: list[str] = []
    for m in live:
        if m.launched_at is None:
            recent += 1
        elif not m.ready(now):
            if now < m.launched_at + starting_period:
                recent += 1
        elif m.id not in busy and m.idle_since is not None and now > m.idle_since + idle:
            terminate.append(m.id)
    count = max(0, min(desired - recent, max_instances - len(live)))
    return count, terminate


def run(
    system: System, cloud: Cloud, market: SpotMarket, seed: int, dt_step: float = 10.0
) -> Result:
    curve = SyntheticCurve(HYPERPARAMETERS, seed=seed)
    searcher = new_searcher(SEARCHER, HYPERPARAMETERS, seed)
    scale = decider.ScalePolicy(
        options=system.options,
        max_instances=cloud.max_instances,
        max_idle_agent_period=system.idle,
        max_agent_starting_period=dt.timedelta(minutes=20),
    )
    now = T0
    step = dt.timedelta(seconds=dt_step)
    machines: dict[str, Machine] = {}
    trials: dict[str, Trial] = {}
    history: tuple[decider.LaunchRecord, ...] = ()
    finished_at: dt.datetime | None = None
    redone = 0.0
    interruptions = 0
    launches = {Market.SPOT: 0, Market.ON_DEMAND: 0}
    shutdown = False
    last_signature: object = None
    last_decision: sched.Decision | None = None

    def at(t: dt.datetime) -> float:
        return (t - T0).total_seconds()

    def apply(actions: list[Action]) -> None:
        nonlocal shutdown
        for a in actions:
            if isinstance(a, CreateTrial):
                rid = a.request_id
                length = float(searcher.trial_target_length(rid) or SEARCHER["max_time"])
                every = cloud.validate_every
                points = {t for t in _rung_times(searcher, rid) if t < length}
                points |= {every * k for k in range(1, int(length / every) + 1)}
                trials[rid] = Trial(a, len(trials), length, sorted(points | {length}))
                apply(searcher.trial_created(rid))
            elif isinstance(a, StopTrial):
                t = trials[a.request_id]
                if not t.done and t.release_at is None:
                    t.stop_reason = "searcher"
                    t.release_at = now  # stops at the step boundary it reached: no loss
            elif isinstance(a, Shutdown):
                shutdown = True

    def free(t: Trial) -> None:
        m = machines.get(t.machine or "")
        if m is not None and m.ended_at is None:
            m.idle_since = now
        t.machine, t.placed_at, t.train_from, t.release_at = None, None, None, None
        t.run += 1

    def fulfil(m: Machine) -> None:
        m.launched_at, m.ready_at = now, now + cloud.boot
        launches[m.option.market] += 1

    def can_launch(option: LaunchOption) -> bool:
        if option.market is Market.ON_DEMAND:
            return True
        return not market.refused(option.zone or ZONES[0], option.instance_type, at(now))

    apply(searcher.initial_trials())
    while True:
        now += step
        # -- the market: open requests filled, waves' notices, deaths --------------------
        for m in machines.values():
            if m.launched_at is None and m.ended_at is None and can_launch(m.option):
                fulfil(m)
        for wave in market.waves_in(at(now - step), at(now)):
            for m in machines.values():
                if (
                    m.option.market is Market.SPOT
                    and m.option.zone == wave.zone
                    and m.launched_at is not None
                    and m.ended_at is None
                    and m.noticed_at is None
                    and market.reclaims(wave, m.id)
                ):
                    interruptions += 1
                    m.noticed_at, m.dies_at = now, now + cloud.notice
                    if system.notice:
                        for t in trials.values():
                            if t.machine == m.id and t.release_at is None:
                                t.stop_reason = "notice"
                                t.release_at = now + cloud.checkpoint
        for m in machines.values():
            if m.dies_at is not None and m.ended_at is None and now >= m.dies_at:
                m.ended_at = m.dies_at
                for t in trials.values():
                    if t.machine == m.id:  # lost with the machine: back to its checkpoint
                        redone += t.progress - t.saved
                        t.progress = t.saved
                        free(t)
        # -- training: progress, validations (checkpoints), graceful stops ---------------
        for t in sorted(trials.values(), key=lambda x: x.order):
            if t.done or t.machine is None:
                continue
            assert t.train_from is not None
            speed = KINDS[machines[t.machine].option.instance_type].speed
            # It trains from its container's start until a graceful stop's checkpoint.
            start = max(now - step, t.train_from)
            end = min(now, t.release_at) if t.release_at is not None else now
            if end > start:
                gained = (end - start).total_seconds() * speed / UNIT
                t.progress = min(t.progress + gained, t.length)
            while t.reports and t.progress >= t.reports[0] - 1e-9 and not t.done:
                point = t.reports.pop(0)
                t.saved = point  # a validation is also a checkpoint
                if point >= t.length:
                    t.done = True
                    free(t)
                    apply(searcher.trial_exited(t.create.request_id))
                    break
                metric = curve(t.create.hparams, point, t.create.seed)
                apply(searcher.validation_completed(t.create.request_id, metric, point))
            if t.release_at is not None and now >= t.release_at and not t.done:
                t.saved = t.progress  # checkpointed at the step boundary
                if t.stop_reason == "searcher":
                    t.done = True
                    free(t)
                    apply(searcher.trial_exited(t.create.request_id))
                else:
                    free(t)  # queued again, resumes from its checkpoint
        if shutdown and finished_at is None:
            finished_at = now
        # -- the scheduler -------------------------------------------------------------------
        ready = [m for m in machines.values() if m.ready(now)]
        draining = {m.id for m in ready if system.notice and m.noticed_at is not None}
        live_trials = [t for t in trials.values() if not t.done]
        # The scheduler is pure: with the inputs of a pass that placed nothing, it decides the
        # same again (a shortcut that keeps the bench under a minute on a busy machine).
        signature = (
            tuple((m.id, m.id in draining) for m in ready),
            tuple((t.alloc, t.machine) for t in live_trials),
        )
        if signature != last_signature or last_decision is None:
            agents = tuple(
                sched.AgentState.with_slots(m.id, 1, draining=m.id in draining) for m in ready
            )
            requests = tuple(
                sched.Request(
                    t.alloc,
                    JOB,
                    1,
                    order=float(t.order),
                    placement={t.machine: ("0",)} if t.machine else None,
                    started=(t.placed_at - T0).total_seconds() if t.placed_at else 0.0,
                )
                for t in live_trials
            )
            decision = sched.schedule(sched.PoolSnapshot(agents, requests, sched.Policy()))
            last_decision = None if decision.placements else decision
            last_signature = signature
        else:
            decision = last_decision
        by_alloc = {t.alloc: t for t in trials.values() if not t.done}
        for aid, placement in decision.placements.items():
            t = by_alloc[aid]
            (agent,) = placement
            t.machine, t.placed_at, t.train_from = agent, now, now + cloud.startup
            machines[agent].idle_since = None
        busy = {t.machine for t in trials.values() if t.machine is not None}
        for m in ready:
            if m.id not in busy and m.idle_since is None:
                m.idle_since = m.ready_at
        # -- the provisioner -----------------------------------------------------------------
        if system.determined:
            count, ends = determined_decide(
                list(machines.values()),
                busy,
                len(decision.demand()),
                now,
                system.idle,
                cloud.max_instances,
            )
            for mid in ends:
                machines[mid].ended_at = now
            (option,) = system.options
            for _ in range(count):
                m = Machine(f"i-{len(machines):05d}", option, now)
                machines[m.id] = m
                if can_launch(option):
                    fulfil(m)
        else:
            history = _det_pass(
                system,
                scale,
                machines,
                busy,
                draining,
                decision.demand(),
                history,
                now,
                can_launch,
                fulfil,
            )
        if finished_at is not None and all(m.ended_at is not None for m in machines.values()):
            break
        if now - T0 > dt.timedelta(days=3):
            raise RuntimeError(f"{system.name}: the search did not end in 3 simulated days")

    usd = hours = 0.0
    for m in machines.values():
        assert m.ended_at is not None
        if m.launched_at is None:
            continue  # a request never filled costs nothing
        h = (m.ended_at - m.launched_at).total_seconds() / 3600
        hours += h
        usd += h * price(m.option)
    assert finished_at is not None
    return Result(
        system.name,
        usd,
        finished_at - T0,
        hours,
        redone,
        interruptions,
        launches[Market.SPOT],
        launches[Market.ON_DEMAND],
    )


def _det_pass(
    system: System,
    scale: decider.ScalePolicy,
    machines: dict[str, Machine],
    busy: set[str],
    draining: set[str],
    demand: tuple[int, ...],
    history: tuple[decider.LaunchRecord, ...],
    now: dt.datetime,
    can_launch: Callable[[LaunchOption], bool],
    fulfil: Callable[[Machine], None],
) -> tuple[decider.LaunchRecord, ...]:
    """One pass of det's scale decider and its apply step; returns the launch history."""
    live = [m for m in machines.values() if m.ended_at is None]
    instances = tuple(
        Instance(
            m.id,
            InstanceState.RUNNING if m.ready(now) else InstanceState.STARTING,
            m.requested_at,
            m.option.instance_type,
            zone=m.option.zone,
            market=m.option.market,
        )
        for m in live
    )
    infos = tuple(
        decider.AgentInfo(
            m.id,
            1,
            True,
            now,
            idle_since=m.idle_since if m.id not in busy else None,
            draining=m.id in draining,
        )
        for m in live
        if m.ready(now)
    )
    snap = decider.PoolSnapshot(
        "gpu", demand=demand, instances=instances, agents=infos, history=history
    )
    d = decider.decide(snap, scale, now)
    for term in d.terminations:
        machines[term.instance_id].ended_at = now
    for order in d.launches:
        if not can_launch(order.option):  # the whole call is refused (binary capacity)
            rec = decider.LaunchRecord(
                now, order.option, "InsufficientInstanceCapacity", capacity=True
            )
            history = decider.record_launch(history, rec, now, scale)
            continue
        for _ in range(order.count):
            m = Machine(f"i-{len(machines):05d}", order.option, now)
            machines[m.id] = m
            fulfil(m)
            rec = decider.LaunchRecord(now, order.option, instance_id=m.id)
            history = decider.record_launch(history, rec, now, scale)
    return history


# -- the table ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Row:
    """One system at one level: medians over the seeds, and each seed's ratios to Determined
    on-demand undisturbed on the same seed (the same search), so the ratios are paired."""

    level: str
    median: Result
    cost_ratios: tuple[float, ...]
    wall_ratios: tuple[float, ...]

    @property
    def cost_ratio(self) -> float:
        return statistics.median(self.cost_ratios)

    @property
    def wall_ratio(self) -> float:
        return statistics.median(self.wall_ratios)


def _median(results: list[Result]) -> Result:
    return Result(
        results[0].system,
        statistics.median(r.usd for r in results),
        dt.timedelta(seconds=statistics.median(r.wall.total_seconds() for r in results)),
        statistics.median(r.instance_hours for r in results),
        statistics.median(r.redone_units for r in results),
        round(statistics.median(r.interruptions for r in results)),
        round(statistics.median(r.spot_launches for r in results)),
        round(statistics.median(r.on_demand_launches for r in results)),
    )


def table(levels: list[str], seeds: int, idle: float = 120.0) -> list[Row]:
    """A row per level and system. Determined on-demand does not touch the spot market, so it
    runs once per seed and stands in every level (and is the reference of the ratios)."""
    cloud = default_cloud()
    determined_spot, on_demand, det = systems(idle)
    quiet = [SpotMarket(LEVELS["none"], s) for s in range(seeds)]
    ref = [run(on_demand, cloud, quiet[s], s) for s in range(seeds)]
    rows: list[Row] = []
    for level in levels:
        markets = [SpotMarket(LEVELS[level], s) for s in range(seeds)]
        for system in (determined_spot, on_demand, det):
            if system is on_demand:
                per_seed = ref
            else:
                per_seed = [run(system, cloud, markets[s], s) for s in range(seeds)]
            rows.append(
                Row(
                    level,
                    _median(per_seed),
                    tuple(r.usd / o.usd for r, o in zip(per_seed, ref, strict=True)),
                    tuple(r.wall / o.wall for r, o in zip(per_seed, ref, strict=True)),
                )
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--levels", default=",".join(LEVELS), help=f"of {', '.join(LEVELS)}")
    ap.add_argument("--idle", type=float, default=120.0, help="max_idle_agent_period, seconds")
    args = ap.parse_args(argv)
    levels = [x.strip() for x in args.levels.split(",") if x.strip()]
    unknown = [x for x in levels if x not in LEVELS]
    if unknown:
        ap.error(f"--levels: unknown level {unknown[0]!r} (known: {', '.join(LEVELS)})")
    if args.seeds < 1:
        ap.error("--seeds: at least 1")
    started = time.perf_counter()
    rows = table(levels, args.seeds, args.idle)
    print(
        f"100-trial adaptive ASHA (max_time 64 units, 16 at once), {args.seeds} seeds; idle"
        f" {args.idle:.0f} s; x od: each seed's ratio to Determined on-demand undisturbed on"
        " that seed (median, and the worst seed)"
    )
    print(
        f"{'disturbance':28s} {'system':22s} {'USD':>6s} {'x od $':>6s} {'worst':>6s}"
        f" {'wall':>7s} {'x od wall':>9s} {'worst':>6s} {'redone':>6s} {'interr.':>7s}"
        f" {'spot/od':>7s}"
    )
    for row in rows:
        med = row.median
        print(
            f"{LEVELS[row.level].name:28s} {med.system:22s} {med.usd:6.2f} {row.cost_ratio:6.3f}"
            f" {max(row.cost_ratios):6.3f} {med.wall.total_seconds() / 60:5.0f} m"
            f" {row.wall_ratio:9.3f} {max(row.wall_ratios):6.3f} {med.redone_units:4.0f} u"
            f" {med.interruptions:7d} {med.spot_launches:3d}/{med.on_demand_launches:<3d}"
        )
    for row in rows:
        if row.level == "outage" and row.median.system == "det":
            ok = row.wall_ratio <= 1.10 and row.cost_ratio <= 0.5
            print(
                f"\ngoal under the zone outage (det <= 1.10 x wall, <= 0.5 x on-demand $):"
                f" {row.wall_ratio:.3f} x, {row.cost_ratio:.3f} x (medians):"
                f" {'met' if ok else 'NOT met'}"
            )
    print(f"(simulated in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
