"""The cost of one hyperparameter search on a cloud pool, Determined's default policy against
det's, on a simulated clock (issue 27 item 10).

The search, the scheduling and the scaling are det's own code, imported: the searcher
(``new_searcher``: a 100-trial ``adaptive_asha``, learning curves from
``searcher.simulate.SyntheticCurve``), the scheduler (``scheduler.schedule``: each pass places
queued trials on free slots) and the scale decider (``provisioner.decider.decide``: launches,
idle terminations, the fallback list with its capacity backoff). What is simulated: the cloud
(a launch boots in ``--boot`` seconds; a spot launch is refused for capacity with probability
``--spot-refusals``; a running spot instance is interrupted at ``--interrupt-rate`` per
instance-hour, with AWS's two-minute notice), the trials (one time unit of training a minute on
one GPU, a validation and a checkpoint every ``--validate-every`` units and at every rung, a
container start of ``--startup`` seconds) and the bill (per second, from launch to termination).

Policies, one price table (``--on-demand`` and ``--spot`` USD per instance-hour):

* **Determined's default**: on-demand only, ``max_idle_agent_period`` 20 minutes, no notice
  handling (an interrupted trial loses what it trained since its last checkpoint).
* **det**: spot first with an on-demand fallback (the decider moves down the list when spot
  is refused, and back once the option's backoff ends), a notice preempts the trials on the
  machine gracefully (they checkpoint within ``--checkpoint`` seconds and are queued again
  without counting a restart), idle machines end after ``--idle`` seconds.
* **det without notice handling**: the same, but an interrupted trial loses its work since its
  last checkpoint (what the notice buys).

Printed per policy: dollars, wall time (submission to the search's end), instance-hours, work
redone after interruptions, interruptions, launches (spot / on-demand). Several seeds; the
ratios are of the medians. Seconds to run. ``python bench/cost_sim.py [--seeds 5] [--rates
0,0.05,0.2]``
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import math
import random
import statistics
import time
from typing import Any

from det.master import scheduler as sched
from det.master.provisioner import decider
from det.master.provisioner.cost import CostPolicy
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market
from det.master.searcher import new_searcher
from det.master.searcher.actions import Action, CreateTrial, Shutdown, StopTrial
from det.master.searcher.simulate import SyntheticCurve, _rung_times

T0 = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
ITYPE = "g5.xlarge"
UNIT = 60.0  # seconds of training per time unit (batches)
JOB = "search"

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


@dataclasses.dataclass(frozen=True)
class Policy:
    name: str
    options: tuple[LaunchOption, ...]
    idle: dt.timedelta
    notice: bool  # preempt gracefully on the interruption notice


@dataclasses.dataclass(frozen=True)
class Cloud:
    boot: dt.timedelta
    startup: dt.timedelta
    checkpoint: dt.timedelta
    notice: dt.timedelta
    interrupt_rate: float  # per spot instance-hour
    spot_refusals: float  # probability a spot launch is refused for capacity
    validate_every: float
    max_instances: int
    prices: CostPolicy


@dataclasses.dataclass
class Machine:
    id: str
    option: LaunchOption
    launched_at: dt.datetime
    ready_at: dt.datetime
    noticed_at: dt.datetime | None = None
    dies_at: dt.datetime | None = None
    ended_at: dt.datetime | None = None
    idle_since: dt.datetime | None = None


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
    policy: str
    usd: float
    wall: dt.timedelta
    instance_hours: float
    redone_units: float
    interruptions: int
    spot_launches: int
    on_demand_launches: int


def run(policy: Policy, cloud: Cloud, seed: int, dt_step: float = 10.0) -> Result:
    rng = random.Random(f"cloud:{seed}")
    curve = SyntheticCurve(HYPERPARAMETERS, seed=seed)
    searcher = new_searcher(SEARCHER, HYPERPARAMETERS, seed)
    scale = decider.ScalePolicy(
        options=policy.options,
        max_instances=cloud.max_instances,
        max_idle_agent_period=policy.idle,
        max_agent_starting_period=dt.timedelta(minutes=20),
        cost=cloud.prices,
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

    apply(searcher.initial_trials())
    while True:
        now += step
        # -- the cloud: boots, interruption notices and deaths ---------------------------
        for m in machines.values():
            if m.ended_at is not None:
                continue
            if m.option.market is Market.SPOT and m.noticed_at is None and now >= m.ready_at:
                p = 1 - math.exp(-cloud.interrupt_rate * dt_step / 3600)
                if rng.random() < p:
                    interruptions += 1
                    m.noticed_at, m.dies_at = now, now + cloud.notice
                    if policy.notice:
                        for t in trials.values():
                            if t.machine == m.id and t.release_at is None:
                                t.stop_reason = "notice"
                                t.release_at = now + cloud.checkpoint
            if m.dies_at is not None and now >= m.dies_at:
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
            # It trains from its container's start until a graceful stop's checkpoint.
            start = max(now - step, t.train_from)
            end = min(now, t.release_at) if t.release_at is not None else now
            if end > start:
                t.progress = min(t.progress + (end - start).total_seconds() / UNIT, t.length)
            while t.reports and t.progress >= t.reports[0] - 1e-9 and not t.done:
                at = t.reports.pop(0)
                t.saved = at  # a validation is also a checkpoint
                if at >= t.length:
                    t.done = True
                    free(t)
                    apply(searcher.trial_exited(t.create.request_id))
                    break
                metric = curve(t.create.hparams, at, t.create.seed)
                apply(searcher.validation_completed(t.create.request_id, metric, at))
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
        live = [m for m in machines.values() if m.ended_at is None]
        ready = [m for m in live if now >= m.ready_at]
        agents = tuple(
            sched.AgentState.with_slots(
                m.id, 1, draining=policy.notice and m.noticed_at is not None
            )
            for m in ready
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
            for t in trials.values()
            if not t.done
        )
        decision = sched.schedule(sched.PoolSnapshot(agents, requests, sched.Policy()))
        by_alloc = {t.alloc: t for t in trials.values() if not t.done}
        for aid, placement in decision.placements.items():
            t = by_alloc[aid]
            (agent,) = placement
            t.machine, t.placed_at, t.train_from = agent, now, now + cloud.startup
            machines[agent].idle_since = None
        # -- the provisioner -----------------------------------------------------------------
        instances = tuple(
            Instance(
                m.id,
                InstanceState.RUNNING if now >= m.ready_at else InstanceState.STARTING,
                m.launched_at,
                m.option.instance_type,
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
                idle_since=(m.idle_since or m.ready_at)
                if not any(t.machine == m.id for t in trials.values())
                else None,
                draining=policy.notice and m.noticed_at is not None,
            )
            for m in ready
        )
        snap = decider.PoolSnapshot(
            "gpu", demand=decision.demand(), instances=instances, agents=infos, history=history
        )
        d = decider.decide(snap, scale, now)
        for term in d.terminations:
            machines[term.instance_id].ended_at = now
        for order in d.launches:
            for _ in range(order.count):
                if order.option.market is Market.SPOT and rng.random() < cloud.spot_refusals:
                    rec = decider.LaunchRecord(
                        now, order.option, "InsufficientInstanceCapacity", capacity=True
                    )
                    history = decider.record_launch(history, rec, now, scale)
                    break
                mid = f"i-{len(machines):05d}"
                machines[mid] = Machine(mid, order.option, now, now + cloud.boot)
                launches[order.option.market] += 1
                rec = decider.LaunchRecord(now, order.option, instance_id=mid)
                history = decider.record_launch(history, rec, now, scale)
        if finished_at is not None and all(m.ended_at is not None for m in machines.values()):
            break
        if now - T0 > dt.timedelta(days=3):
            raise RuntimeError(f"{policy.name}: the search did not end in 3 simulated days")

    usd = hours = 0.0
    for m in machines.values():
        assert m.ended_at is not None
        h = (m.ended_at - m.launched_at).total_seconds() / 3600
        hours += h
        usd += h * cloud.prices.price(m.option.instance_type, m.option.market)
    assert finished_at is not None
    return Result(
        policy.name,
        usd,
        finished_at - T0,
        hours,
        redone,
        interruptions,
        launches[Market.SPOT],
        launches[Market.ON_DEMAND],
    )


def policies(idle: float) -> list[Policy]:
    spot = LaunchOption(ITYPE, market=Market.SPOT, slots=1)
    on_demand = LaunchOption(ITYPE, market=Market.ON_DEMAND, slots=1)
    return [
        Policy("Determined default", (on_demand,), dt.timedelta(minutes=20), notice=False),
        Policy("det", (spot, on_demand), dt.timedelta(seconds=idle), notice=True),
        Policy("det, no notice handling", (spot, on_demand), dt.timedelta(seconds=idle), False),
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rates", default="0,0.05,0.2,0.5", help="spot interruptions per hour")
    ap.add_argument("--on-demand", type=float, default=1.006, help="USD/h (g5.xlarge)")
    ap.add_argument("--spot", type=float, default=0.302, help="USD/h (70%% below on-demand)")
    ap.add_argument("--spot-refusals", type=float, default=0.1)
    ap.add_argument("--idle", type=float, default=120.0, help="det's idle period, seconds")
    ap.add_argument("--boot", type=float, default=180.0)
    ap.add_argument("--startup", type=float, default=60.0)
    ap.add_argument("--checkpoint", type=float, default=30.0)
    ap.add_argument("--validate-every", type=float, default=4.0)
    ap.add_argument("--max-instances", type=int, default=16)
    args = ap.parse_args(argv)
    prices = CostPolicy(prices={ITYPE: args.on_demand}, spot_prices={ITYPE: args.spot})
    started = time.perf_counter()
    print(
        f"100-trial adaptive ASHA (max_time 64 units of 1 min, divisor 4, 4 rungs, 16 at once);"
        f" {ITYPE} ${args.on_demand}/h on-demand, ${args.spot}/h spot; boot {args.boot:.0f} s,"
        f" spot refused {args.spot_refusals:.0%} of launches; {args.seeds} seeds (medians)"
    )
    for rate in (float(x) for x in args.rates.split(",")):
        cloud = Cloud(
            boot=dt.timedelta(seconds=args.boot),
            startup=dt.timedelta(seconds=args.startup),
            checkpoint=dt.timedelta(seconds=args.checkpoint),
            notice=dt.timedelta(minutes=2),
            interrupt_rate=rate,
            spot_refusals=args.spot_refusals,
            validate_every=args.validate_every,
            max_instances=args.max_instances,
            prices=prices,
        )
        print(f"\nspot interruptions: {rate:g} per instance-hour")
        print(
            f"  {'policy':26s} {'USD':>8s} {'wall':>8s} {'inst-h':>7s} {'redone':>7s}"
            f" {'interr.':>7s} {'spot/od launches':>17s} {'cost':>6s} {'wall':>6s}"
        )
        base: Result | None = None
        for p in policies(args.idle):
            results = [run(p, cloud, seed) for seed in range(args.seeds)]
            med = Result(
                p.name,
                statistics.median(r.usd for r in results),
                dt.timedelta(seconds=statistics.median(r.wall.total_seconds() for r in results)),
                statistics.median(r.instance_hours for r in results),
                statistics.median(r.redone_units for r in results),
                round(statistics.median(r.interruptions for r in results)),
                round(statistics.median(r.spot_launches for r in results)),
                round(statistics.median(r.on_demand_launches for r in results)),
            )
            base = base or med
            wall_min = med.wall.total_seconds() / 60
            print(
                f"  {p.name:26s} {med.usd:8.2f} {wall_min:6.1f} m {med.instance_hours:7.2f}"
                f" {med.redone_units:5.0f} u {med.interruptions:7d}"
                f" {med.spot_launches:8d}/{med.on_demand_launches:<8d}"
                f" {med.usd / base.usd:6.3f} {med.wall / base.wall:6.3f}"
            )
    print(f"\n(simulated in {time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
