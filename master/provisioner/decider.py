"""The scale decider: one pool's snapshot in, launches and terminations out. Pure.

Determined's rules are the base (``scaledecider/scale_decider.go``):

* launch ``clamp(min - n, desired - starting, max - n)`` (never negative), where ``n`` counts
  live instances and ``starting`` those whose agent has not connected yet;
* terminate stopped instances, instances whose agent never connected within
  ``max_agent_starting_period``, instances whose agent has been disconnected longer than
  ``max_agent_disconnected_period``, agents idle past ``max_idle_agent_period`` (never below
  ``min_instances``), and anything above ``max_instances``.

Where we do better:

* ``desired`` packs the gang demand onto instances of the option about to be launched: a request
  of ``k`` slots needs one instance with ``k`` free slots, or ``k / s`` whole instances of ``s``
  slots. A request no option can ever host launches nothing and emits an event instead.
* Launch errors back off exponentially (``10 s · 2^n``, capped at ``launch_error_timeout``)
  instead of retrying every pass. An agent that does not register within
  ``max_agent_starting_period`` is a launch failure too, not churn (see "Never-registered agents"
  below). Capacity errors mark only the option that failed, and the
  decider moves down the pool's fallback list (instance types, subnets/zones, spot → on-demand);
  other errors (bad image, permissions) hold every option. Quota refusals
  (``provider.QUOTA_CODES``) mark their option too, but back off on their own, slower clock
  (``quota_backoff · 2^n`` up to ``max_quota_backoff``: a quota is raised by a request to the
  cloud, not by waiting seconds), and when every option waits the event is ``quota-exceeded``
  with the cloud's message (the quota, the region, where to ask), not ``no-capacity``.
* Every launch and termination carries a reason, and :class:`Event` messages explain why work
  is still pending.
* Cost control (``cost.py``): launches stay under the pool's ``max_hourly_cost`` and stop once
  this month's spend reaches its ``monthly_budget``; both say so in an event.

State that must outlive a pass (idle since, last heartbeat, the launch history) is an input, so
the master can restart at any time. Apply :func:`record_launch` after each launch attempt to keep
the history the next pass needs.

Never-registered agents
-----------------------

A launch the cloud accepted is undecided until its agent registers (a success: a record with
``code=None`` at the registration time) or ``max_agent_starting_period`` passes without it (a
failure: code :data:`AGENT_NOT_REGISTERED` at the time it is found). Such instances are still
terminated, but they also join the launch history, so a pool whose machines never come up (a
bad bootstrap, a master address the VMs cannot reach, a firewall) waits instead of paying for a
new machine every period.

One counter: the general streak is every non-capacity failure since the last success, launch
errors and never-registered agents alike, in time order; ``launch_error_retries`` tolerates
that many of them. The wait after the streak's last failure is :func:`backoff` of the streak's
length, with the base and cap of that last failure's kind: a launch error waits
``10 s · 2^(n-1)`` up to ``launch_error_timeout``; a never-registered agent took a whole starting
period to find out, so it waits ``max_agent_starting_period · 2^(n-1)`` up to
``max_no_agent_backoff`` (default 2 h), which keeps the time spent booting machines that never
come up under half of the pool's time, falling towards a seventh. Only a registered agent resets
the counter (an accepted launch proves nothing about the boot). The history is kept long enough
(:func:`history_horizon`) for a streak at the cap to stay there.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import math
from collections.abc import Iterable, Sequence

from det.master.provisioner.cost import CostPolicy, hourly_rate, next_month_start, usd
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, is_quota
from det.master.scheduler.model import DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT

BASE_BACKOFF = dt.timedelta(seconds=10)
# Launch records older than this are forgotten even without a success (at least: see
# ``history_horizon``).
HISTORY_HORIZON = dt.timedelta(hours=1)
# The failure code of an instance whose agent did not register within max_agent_starting_period.
AGENT_NOT_REGISTERED = "AgentNotRegistered"


@dataclasses.dataclass(frozen=True)
class AgentInfo:
    """A registered agent as the master sees it. ``id`` equals its instance's id."""

    id: str
    slots: int
    connected: bool
    last_heartbeat: dt.datetime
    idle_since: dt.datetime | None = None  # None while any container runs on it
    draining: bool = False


@dataclasses.dataclass(frozen=True)
class LaunchRecord:
    """One launch attempt's outcome; ``code`` is ``None`` when it succeeded.

    The master records a success when the instance's agent registers (``at`` is then the
    registration time) and :data:`AGENT_NOT_REGISTERED` when it never did; a simulator without
    agents may record a success at launch. ``instance_id`` names the instance an outcome is
    about, when there is one.
    """

    at: dt.datetime
    option: LaunchOption
    code: str | None = None
    capacity: bool = False
    instance_id: str | None = None
    message: str = ""

    @property
    def no_agent(self) -> bool:
        return self.code == AGENT_NOT_REGISTERED

    @property
    def quota(self) -> bool:
        return is_quota(self.code)


@dataclasses.dataclass(frozen=True)
class ScalePolicy:
    """The pool config as the decider needs it (built by ``ProvisionerConfig.scale_policy``)."""

    options: tuple[LaunchOption, ...]
    min_instances: int = 0
    max_instances: int = 5
    max_idle_agent_period: dt.timedelta = dt.timedelta(minutes=20)
    max_agent_starting_period: dt.timedelta = dt.timedelta(minutes=20)
    max_agent_disconnected_period: dt.timedelta = dt.timedelta(minutes=5)
    launch_error_timeout: dt.timedelta = dt.timedelta(minutes=5)
    launch_error_retries: int = 0
    # The cap of the wait after agents that never registered (see the module docstring).
    max_no_agent_backoff: dt.timedelta = dt.timedelta(hours=2)
    max_aux_per_instance: int = DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT
    base_backoff: dt.timedelta = BASE_BACKOFF
    # The wait after an option's quota refusals (see the module docstring).
    quota_backoff: dt.timedelta = dt.timedelta(minutes=10)
    max_quota_backoff: dt.timedelta = dt.timedelta(hours=1)
    cost: CostPolicy | None = None  # prices and caps (see ``cost.py``); None: no cost control


@dataclasses.dataclass(frozen=True)
class PoolSnapshot:
    """One pool at one instant.

    ``demand``: slot counts of the queued requests the scheduler could not place on connected
    agents this pass (0 for zero-slot tasks). ``instances``: what the provider lists.
    ``agents``: registered agents of this pool, connected or not.
    """

    pool: str
    demand: tuple[int, ...] = ()
    instances: tuple[Instance, ...] = ()
    agents: tuple[AgentInfo, ...] = ()
    history: tuple[LaunchRecord, ...] = ()
    spent: float = 0.0  # USD this pool's instances cost since the start of this month


class TerminateReason(enum.Enum):
    STOPPED = "instance stopped"
    NEVER_CONNECTED = "agent did not connect within max_agent_starting_period"
    DISCONNECTED = "agent disconnected longer than max_agent_disconnected_period"
    IDLE = "agent idle longer than max_idle_agent_period"
    ABOVE_MAX = "more instances than max_instances"


@dataclasses.dataclass(frozen=True)
class LaunchOrder:
    option: LaunchOption
    count: int
    reason: str


@dataclasses.dataclass(frozen=True)
class Termination:
    instance_id: str
    reason: TerminateReason


@dataclasses.dataclass(frozen=True)
class Event:
    """Something a user may want to know (``code`` is stable, ``message`` is for people)."""

    code: str
    message: str


@dataclasses.dataclass(frozen=True)
class Decision:
    launches: tuple[LaunchOrder, ...] = ()
    terminations: tuple[Termination, ...] = ()
    events: tuple[Event, ...] = ()


def decide(snapshot: PoolSnapshot, policy: ScalePolicy, now: dt.datetime) -> Decision:
    """Decide one pass for one pool. Deterministic: same inputs, same decision."""
    events: list[Event] = []
    agents = {a.id: a for a in snapshot.agents}
    live = [
        i
        for i in snapshot.instances
        if i.state in (InstanceState.STARTING, InstanceState.RUNNING, InstanceState.STOPPING)
    ]
    stopped = [i for i in snapshot.instances if i.state is InstanceState.STOPPED]

    terminate: dict[str, TerminateReason] = {i.id: TerminateReason.STOPPED for i in stopped}
    starting: list[Instance] = []  # agent not connected yet, still within the starting period
    idle: list[tuple[dt.datetime, Instance]] = []
    busy: list[Instance] = []
    for inst in live:
        agent = agents.get(inst.id)
        if agent is None:
            if now - inst.launched_at > policy.max_agent_starting_period:
                terminate[inst.id] = TerminateReason.NEVER_CONNECTED
            else:
                starting.append(inst)
        elif not agent.connected:
            if now - agent.last_heartbeat > policy.max_agent_disconnected_period:
                terminate[inst.id] = TerminateReason.DISCONNECTED
            else:
                busy.append(inst)  # may come back: neither capacity nor idle
        elif agent.idle_since is not None:
            idle.append((agent.idle_since, inst))
        else:
            busy.append(inst)

    # Idle agents, longest idle first, never below min_instances.
    idle.sort(key=lambda pair: (pair[0], pair[1].id))
    remaining = len(live) - _count_live(terminate, live)
    for since, inst in idle:
        if now - since <= policy.max_idle_agent_period:
            continue
        if remaining <= policy.min_instances:
            events.append(Event("keep-min", f"keeping idle {inst.id}: pool is at min_instances"))
            break
        terminate[inst.id] = TerminateReason.IDLE
        remaining -= 1

    # Above max: not-yet-connected (newest first), idle (longest first), then newest busy.
    excess = len(live) - _count_live(terminate, live) - policy.max_instances
    if excess > 0:
        by_newest = sorted(starting, key=lambda i: (i.launched_at, i.id), reverse=True)
        order = by_newest + [inst for _, inst in idle]
        order += sorted(busy, key=lambda i: (i.launched_at, i.id), reverse=True)
        for inst in order:
            if excess <= 0:
                break
            if inst.id not in terminate:
                terminate[inst.id] = TerminateReason.ABOVE_MAX
                excess -= 1

    n = len(live) - _count_live(terminate, live)
    n_starting = sum(1 for i in starting if i.id not in terminate)
    staying = [i for i in live if i.id not in terminate]
    # Agents found missing in this pass are failures now, before the apply step records them:
    # otherwise this very pass would launch their replacements.
    known = {r.instance_id for r in snapshot.history if r.instance_id is not None}
    history = snapshot.history + tuple(
        LaunchRecord(
            at=now,
            option=option_of(inst, policy),
            code=AGENT_NOT_REGISTERED,
            instance_id=inst.id,
        )
        for inst in live
        if terminate.get(inst.id) is TerminateReason.NEVER_CONNECTED and inst.id not in known
    )
    launches = _launches(snapshot, history, policy, now, n, n_starting, staying, events)

    terminations = tuple(Termination(i, r) for i, r in sorted(terminate.items()))
    for term in terminations:
        events.append(Event("terminate", f"terminating {term.instance_id}: {term.reason.value}"))
    return Decision(launches=launches, terminations=terminations, events=tuple(events))


def _count_live(terminate: dict[str, TerminateReason], live: Sequence[Instance]) -> int:
    return sum(1 for i in live if i.id in terminate)


def option_of(inst: Instance, policy: ScalePolicy) -> LaunchOption:
    """The launch option an instance most likely came from (for its failure record)."""
    for option in policy.options:
        if (option.instance_type, option.market, option.zone) == (
            inst.instance_type,
            inst.market,
            inst.zone,
        ):
            return option
    for option in policy.options:
        if option.instance_type == inst.instance_type:
            return option
    return LaunchOption(inst.instance_type, zone=inst.zone, market=inst.market)


def _launches(
    snapshot: PoolSnapshot,
    history: Sequence[LaunchRecord],
    policy: ScalePolicy,
    now: dt.datetime,
    n: int,
    n_starting: int,
    staying: Sequence[Instance],
    events: list[Event],
) -> tuple[LaunchOrder, ...]:
    option, wait_event = _pick_option(snapshot.pool, history, policy, now)
    if option is None:
        if wait_event is not None and (snapshot.demand or n < policy.min_instances):
            events.append(wait_event)
        return ()

    fits, unfit = _split_fitting(snapshot.demand, policy, option)
    for slots in unfit:
        events.append(
            Event(
                "cannot-fit",
                f"a request for {slots} slots fits no instance of pool {snapshot.pool!r}"
                f" ({_describe_options(policy.options)}, max_instances={policy.max_instances});"
                " it waits until the pool config changes",
            )
        )
    desired = _instances_needed(fits, option.slots, policy.max_aux_per_instance)
    count = max(
        0,
        _clamp(policy.min_instances - n, desired - n_starting, policy.max_instances - n),
    )
    if desired - n_starting > policy.max_instances - n and desired > 0:
        events.append(
            Event(
                "at-max",
                f"pool {snapshot.pool!r} needs {desired - n_starting} more instances but is"
                f" capped by max_instances={policy.max_instances}",
            )
        )
    if policy.cost is not None and count > 0:
        count = _cost_cap(snapshot, policy.cost, option, count, staying, now, events)
    if count == 0:
        return ()
    if policy.min_instances - n >= count and desired - n_starting < count:
        reason = f"keep min_instances={policy.min_instances} (have {n})"
    else:
        reason = (
            f"{len(fits)} pending requests need {desired} instances of {option.instance_type}"
            f" ({option.slots} slots each); {n_starting} already starting"
        )
    if wait_event is not None:
        events.append(wait_event)
    return (LaunchOrder(option=option, count=count, reason=reason),)


def _cost_cap(
    snapshot: PoolSnapshot,
    cost: CostPolicy,
    option: LaunchOption,
    count: int,
    staying: Sequence[Instance],
    now: dt.datetime,
    events: list[Event],
) -> int:
    """How many of ``count`` launches the pool's budget and hourly cap allow."""
    if cost.monthly_budget is not None and snapshot.spent >= cost.monthly_budget:
        events.append(
            Event(
                "budget-spent",
                f"pool {snapshot.pool!r} has spent {usd(snapshot.spent)} of its monthly_budget"
                f" {usd(cost.monthly_budget)}; no launches until"
                f" {next_month_start(now).date().isoformat()}",
            )
        )
        return 0
    if cost.max_hourly_cost is None:
        return count
    rate = hourly_rate(((i.instance_type, i.market) for i in staying), cost)
    price = cost.price(option.instance_type, option.market)
    if price <= 0:
        return count
    # A hair of tolerance so that exactly reaching the cap is allowed despite float sums.
    allowed = max(0, min(count, math.floor((cost.max_hourly_cost - rate) / price + 1e-9)))
    if allowed < count:
        events.append(
            Event(
                "cost-cap",
                f"pool {snapshot.pool!r} needs {count} more {option.instance_type} instances"
                f" ({usd(price)}/h each) but max_hourly_cost={usd(cost.max_hourly_cost)}/h"
                f" allows {allowed} (running now: {usd(rate)}/h)",
            )
        )
    return allowed


def _clamp(low: int, value: int, high: int) -> int:
    return max(low, min(value, high))


def _fits(slots: int, option: LaunchOption, max_instances: int) -> bool:
    if slots == 0:
        return True
    if option.slots <= 0:
        return False
    if slots <= option.slots:
        return True
    # A gang wider than one instance must use whole instances.
    return bool(slots % option.slots == 0 and slots // option.slots <= max_instances)


def _split_fitting(
    demand: Iterable[int], policy: ScalePolicy, option: LaunchOption
) -> tuple[list[int], list[int]]:
    fits: list[int] = []
    unfit: list[int] = []
    for slots in demand:
        if _fits(slots, option, policy.max_instances):
            fits.append(slots)
        elif not any(_fits(slots, o, policy.max_instances) for o in policy.options):
            unfit.append(slots)
        # else: only another option hosts it; it waits until that option is the active one.
    return fits, unfit


def _instances_needed(demand: Sequence[int], per_instance: int, aux_per_instance: int) -> int:
    """Instances of ``per_instance`` slots that host all of ``demand`` (first-fit decreasing)."""
    whole = 0
    bins: list[int] = []  # free slots of each partially used instance (full ones dropped)
    for slots in sorted((s for s in demand if s > 0), reverse=True):
        if slots >= per_instance:
            whole += slots // per_instance
            continue
        for i, free in enumerate(bins):
            if free >= slots:
                bins[i] = free - slots
                if bins[i] == 0:
                    whole += 1
                    del bins[i]
                break
        else:
            bins.append(per_instance - slots)
    aux = sum(1 for s in demand if s == 0)
    return max(whole + len(bins), math.ceil(aux / aux_per_instance))


def _describe_options(options: Sequence[LaunchOption]) -> str:
    return ", ".join(f"{o.instance_type}: {max(o.slots, 0)} slots" for o in options) or "no options"


def backoff(streak: int, policy: ScalePolicy, *, no_agent: bool = False) -> dt.timedelta:
    """Wait after ``streak`` consecutive failures: ``base · 2^(streak-1)``, capped.

    Launch errors: base ``base_backoff``, cap ``launch_error_timeout``. When the last failure
    was an agent that never registered (``no_agent``): base ``max_agent_starting_period``, cap
    ``max_no_agent_backoff``.
    """
    if streak <= 0:
        return dt.timedelta(0)
    base, cap = _base_and_cap(policy, no_agent)
    return min(base * (1 << min(streak - 1, 30)), cap)


def _base_and_cap(policy: ScalePolicy, no_agent: bool) -> tuple[dt.timedelta, dt.timedelta]:
    if no_agent:
        base = policy.max_agent_starting_period
        return base, max(policy.max_no_agent_backoff, base)
    return policy.base_backoff, max(policy.launch_error_timeout, policy.base_backoff)


def history_horizon(policy: ScalePolicy) -> dt.timedelta:
    """How far back launch records matter: at least :data:`HISTORY_HORIZON`, and long enough
    to hold a never-registered streak that reached its cap (failures then come one starting
    period plus the cap apart), so such a pool stays at the cap instead of forgetting."""
    base, cap = _base_and_cap(policy, True)
    if base <= dt.timedelta(0):
        return HISTORY_HORIZON
    to_cap = max(1, math.ceil(math.log2(max(cap / base, 1.0))) + 1)
    return max(HISTORY_HORIZON, (to_cap + 1) * (base + cap))


def _streak(records: Sequence[LaunchRecord]) -> list[LaunchRecord]:
    """The failures since the last success, oldest first (``records`` sorted by time)."""
    out: list[LaunchRecord] = []
    for rec in records:
        if rec.code is None:
            out = []
        else:
            out.append(rec)
    return out


def _pick_option(
    pool: str, history: Sequence[LaunchRecord], policy: ScalePolicy, now: dt.datetime
) -> tuple[LaunchOption | None, Event | None]:
    """The first option not backing off, and an event if any option is being skipped."""
    horizon = history_horizon(policy)
    records = sorted((r for r in history if now - r.at <= horizon), key=lambda r: r.at)
    # Non-capacity errors (bad image, permissions…) and agents that never registered hold every
    # option: one counter, reset only by a success.
    general = [r for r in _streak(records) if not r.capacity]
    retries = policy.launch_error_retries
    if len(general) > retries:
        last = general[-1]
        until = last.at + backoff(len(general) - retries, policy, no_agent=last.no_agent)
        if now < until:
            if last.no_agent:
                return None, _no_agent_event(pool, general, policy, until, now)
            return None, Event(
                "launch-backoff",
                f"launches paused until {until.isoformat()} after {len(general)} failures"
                f" (last: {last.code})",
            )
    skipped: list[str] = []
    quotas: list[str] = []
    for option in policy.options:
        mine = _streak([r for r in records if r.option == option])
        capacity = [r for r in mine if r.capacity or r.quota]
        if capacity:
            last = capacity[-1]
            until = last.at + _option_backoff(capacity, policy)
            if now < until:
                if last.quota:
                    quotas.append(
                        f"{_label(option)}: {last.code}: {last.message or 'quota exceeded'}"
                        f" (retry after {until.isoformat(timespec='seconds')})"
                    )
                    skipped.append(f"{_label(option)} (quota {last.code})")
                else:
                    skipped.append(
                        f"{_label(option)} ({last.code}, retry after {until.isoformat()})"
                    )
                continue
        event = None
        if skipped:
            event = Event("fallback", f"using {_label(option)}; skipped: {'; '.join(skipped)}")
        return option, event
    if not policy.options:
        return None, Event("no-options", "the pool has no launch options")
    if quotas:
        return None, Event(
            "quota-exceeded",
            f"launches in pool {pool!r} wait for quota, not capacity: {'; '.join(quotas)}",
        )
    return None, Event("no-capacity", f"every launch option lacks capacity: {'; '.join(skipped)}")


def _option_backoff(failures: Sequence[LaunchRecord], policy: ScalePolicy) -> dt.timedelta:
    """The wait of one option after its streak of capacity and quota refusals: the last one's
    kind sets the clock (quota: ``quota_backoff``, capped at ``max_quota_backoff``)."""
    if not failures[-1].quota:
        return backoff(len(failures), policy)
    n = sum(1 for r in failures if r.quota)
    cap = max(policy.max_quota_backoff, policy.quota_backoff)
    return min(policy.quota_backoff * (1 << min(n - 1, 30)), cap)


def _no_agent_event(
    pool: str,
    general: Sequence[LaunchRecord],
    policy: ScalePolicy,
    until: dt.datetime,
    now: dt.datetime,
) -> Event:
    missing = [r for r in general if r.no_agent]
    last = missing[-1]
    which = f" (last: {last.instance_id})" if last.instance_id else ""
    return Event(
        "agent-not-registered",
        f"agents launched in pool {pool!r} did not register within"
        f" {_span(policy.max_agent_starting_period)} ({len(missing)} of the last"
        f" {len(general)} launch failures){which}; next launch in {_span(until - now)}"
        f" (at {until.isoformat(timespec='seconds')}); see the instance's boot log",
    )


def _span(delta: dt.timedelta) -> str:
    """A short duration for people: ``45s``, ``20m``, ``1h30m`` (rounded up to the unit)."""
    seconds = math.ceil(delta.total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)}s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, rest = divmod(minutes, 60)
    return f"{hours}h{rest}m" if rest else f"{hours}h"


def _label(option: LaunchOption) -> str:
    where = f" in {option.zone}" if option.zone else ""
    return f"{option.instance_type}{where} ({option.market.value})"


def record_launch(
    history: Sequence[LaunchRecord],
    record: LaunchRecord,
    now: dt.datetime,
    policy: ScalePolicy | None = None,
) -> tuple[LaunchRecord, ...]:
    """The history to store after a launch outcome: append and drop expired records (those
    older than ``history_horizon(policy)``, or :data:`HISTORY_HORIZON` without a policy)."""
    horizon = history_horizon(policy) if policy is not None else HISTORY_HORIZON
    kept = [r for r in history if now - r.at <= horizon]
    return (*kept, record)


def next_change(
    snapshot: PoolSnapshot, policy: ScalePolicy, now: dt.datetime
) -> dt.datetime | None:
    """The earliest time after ``now`` at which :func:`decide` could decide otherwise with no
    new input (no request, heartbeat or cloud change): a launch backoff ends while work waits,
    a starting agent's or a disconnected agent's period runs out, an idle agent's period ends,
    a spent monthly budget renews while work waits. None: nothing is due. What a serverless
    master schedules as a wake-up (det.master.wakeups)."""
    times: list[dt.datetime] = []
    agents = {a.id: a for a in snapshot.agents}
    live = [
        i
        for i in snapshot.instances
        if i.state in (InstanceState.STARTING, InstanceState.RUNNING, InstanceState.STOPPING)
    ]
    for inst in live:
        agent = agents.get(inst.id)
        if agent is None:
            times.append(inst.launched_at + policy.max_agent_starting_period)
        elif not agent.connected:
            times.append(agent.last_heartbeat + policy.max_agent_disconnected_period)
        elif agent.idle_since is not None and len(live) > policy.min_instances:
            times.append(agent.idle_since + policy.max_idle_agent_period)
    waiting = bool(snapshot.demand) or len(live) < policy.min_instances
    if waiting:
        horizon = history_horizon(policy)
        records = sorted((r for r in snapshot.history if now - r.at <= horizon), key=lambda r: r.at)
        general = [r for r in _streak(records) if not r.capacity]
        if len(general) > policy.launch_error_retries:
            last = general[-1]
            streak = len(general) - policy.launch_error_retries
            times.append(last.at + backoff(streak, policy, no_agent=last.no_agent))
        for option in policy.options:
            capacity = [
                r for r in _streak([r for r in records if r.option == option]) if r.capacity
            ]
            if capacity:
                times.append(capacity[-1].at + backoff(len(capacity), policy))
        cost = policy.cost
        if (
            cost is not None
            and cost.monthly_budget is not None
            and snapshot.spent >= cost.monthly_budget
        ):
            times.append(next_month_start(now))
    # A hair past the boundary: the decider's comparisons are strict.
    due = [
        t + dt.timedelta(microseconds=1) for t in times if t + dt.timedelta(microseconds=1) > now
    ]
    return min(due, default=None)
