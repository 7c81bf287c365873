"""The provisioner pass: for every pool with a ``provider``, load → decide → apply.

Load: the provider's instances (a cloud call, outside any transaction), the pool's agents with
their idle-since (derived from allocations: an agent is idle when no live allocation is placed on
it, since the later of its registration and the end of the last allocation placed there), the
scheduler's unplaced demand, and the launch history. Decide: the pure scale decider. Apply:
launches and terminations (cloud calls, again outside transactions), then short transactions
that record what happened.

Everything a restart must keep lives in the database, so the backoff survives a master restart:
launches the cloud refused are the ``launch_errors`` rows; a launch succeeded when its instance's
agent registered (the ``agents`` row with the instance's id, at its ``registered_at``) and failed
when the instance was terminated because its agent never did (the ``instances`` row's
``reason``, at its ``terminated_at``). Decision events go to ``events`` (entity ``pool``; the waiting-related ones also
on each queued job), written only when they change or after :data:`EVENT_REPEAT`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from psycopg.rows import class_row

from det.master import scheduler as sched
from det.master import states
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.provisioner import bootstrap, cost, decider, registry
from det.master.provisioner.config import ProvisionerConfig
from det.master.provisioner.provider import (
    Instance,
    InstanceState,
    LaunchError,
    Market,
    Provider,
)
from det.master.rows.pools import InstanceRow, PoolEventRow
from det.master.scheduler.model import DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT
from det.master.services import enrollment, scheduling

logger = logging.getLogger(__name__)

# The same event (same entity, code and message) is written again only after this long.
EVENT_REPEAT = dt.timedelta(minutes=5)
# Decider events that explain why queued work waits: also written on each queued job.
JOB_EVENT_CODES = frozenset(
    {
        "cannot-fit",
        "launch-backoff",
        "no-capacity",
        "quota-exceeded",
        "at-max",
        "fallback",
        "cost-cap",
        "budget-spent",
        "agent-not-registered",
    }
)

# A pass that would change nothing decides on a list up to this old; a pass about to launch or
# terminate always lists again first. Keeps the cloud's list API off the 0.5 s tick.
LIST_SECONDS = 5.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- building providers ------------------------------------------------------------------------


def _agent_install_env(st: MasterState, config: ProvisionerConfig) -> dict[str, str]:
    """New agents install the master's own det wheel and trust the master's certificate."""
    cert_pem = None
    cert_path = st.config.security.tls.cert
    if cert_path:
        try:
            cert_pem = Path(cert_path).read_text()
        except OSError as e:
            logger.warning("cannot read the master's certificate for agents: %s", e)
    return bootstrap.install_env(config.agent_install, cert_pem, config.master_cert_name)


def build_provider(st: MasterState, pool: str, config: ProvisionerConfig) -> Provider:
    """The pool's provider (``registry.build``), with the agent bootstrap pointing at this
    master."""
    lifespan = max(enrollment.TICKET_LIFESPAN, config.max_agent_starting_period)

    def enroll(count: int) -> str:
        # Its own short transaction, before the cloud call (never inside one).
        with st.pool.connection() as conn:
            return enrollment.issue(conn, pool, count, _now(), lifespan)

    common: registry.Common = {
        "cluster_id": st.cluster_id,
        "pool": pool,
        "master_url": st.config.url(),
        "agent_token": st.agent_token,
        "extra_env": _agent_install_env(st, config),
        # New machines get a one-time ticket in their user data, never the agent token.
        "enroll": enroll,
    }
    return registry.build(config, common)


ProviderFactory = Callable[[MasterState, str, ProvisionerConfig], Provider]


class Provisioner:
    """What the provisioner pass keeps in memory between passes, owned by the control loop
    that creates it (a new one is what a master restart gives): each pool's provider, built
    once by ``factory`` (tests pass a fake cloud's), the cloud's last list of each pool, and
    the events written lately (so an unchanged one is not written again within
    :data:`EVENT_REPEAT`). Everything a decision needs across restarts is in the database."""

    def __init__(self, factory: ProviderFactory = build_provider) -> None:
        self.factory = factory
        self._lock = threading.Lock()
        self._providers: dict[str, tuple[ProvisionerConfig, Provider]] = {}
        self._listed: dict[str, tuple[float, tuple[Instance, ...]]] = {}
        self._written: dict[tuple[str, str, str], tuple[str, dt.datetime]] = {}
        # Each pool's next_change after its last pass: when the loop must run again unasked.
        self.next_changes: dict[str, dt.datetime | None] = {}

    def next_change(self) -> dt.datetime | None:
        """The earliest of the pools' next changes (None: nothing is due)."""
        return min((t for t in self.next_changes.values() if t is not None), default=None)

    def provider(self, st: MasterState, pool: str, config: ProvisionerConfig) -> Provider:
        """Built once per pool (and rebuilt if the pool's config is another one)."""
        with self._lock:
            held = self._providers.get(pool)
            if held is None or held[0] != config:
                held = (config, self.factory(st, pool, config))
                self._providers[pool] = held
        return held[1]

    def instances(
        self, provider: Provider, pool: str, fresh: bool
    ) -> tuple[tuple[Instance, ...], bool]:
        """The pool's instances, from a recent list unless ``fresh``; and whether it is new."""
        cached = self._listed.get(pool)
        if not fresh and cached is not None and time.monotonic() - cached[0] < LIST_SECONDS:
            return cached[1], False
        instances = tuple(provider.list_instances())  # a cloud call: no transaction open
        self._listed[pool] = (time.monotonic(), instances)
        return instances, True

    def forget_list(self, pool: str) -> None:
        """The next pass lists the pool's instances again (after acting on them)."""
        self._listed.pop(pool, None)

    def write_event(
        self, conn: Conn, entity: str, entity_id: str, code: str, message: str, now: dt.datetime
    ) -> bool:
        """Record an event unless the same one was written less than :data:`EVENT_REPEAT`
        ago."""
        key = (entity, entity_id, code)
        last = self._written.get(key)
        if last is not None and last[0] == message and now - last[1] < EVENT_REPEAT:
            return False
        self._written[key] = (message, now)
        states.record_event(conn, entity, entity_id, code, message)
        return True

    def prune(self, now: dt.datetime) -> None:
        for key, (_, at) in list(self._written.items()):
            if now - at >= EVENT_REPEAT:
                del self._written[key]


# -- load ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PoolLoad:
    agents: tuple[decider.AgentInfo, ...]
    demand: tuple[int, ...]
    queued_jobs: tuple[str, ...]
    history: tuple[decider.LaunchRecord, ...]


@dataclasses.dataclass(frozen=True)
class _PoolAgent:
    id: str
    connected: bool
    draining: bool
    last_heartbeat: dt.datetime
    registered_at: dt.datetime
    slots: int
    busy: bool
    last_end: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class _LaunchError:
    option_index: int
    code: str
    capacity: bool
    message: str
    at: dt.datetime


@dataclasses.dataclass(frozen=True)
class _Launched:
    id: str
    option_index: int | None
    instance_type: str
    zone: str | None
    market: str
    launched_at: dt.datetime
    terminated_at: dt.datetime | None
    registered_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class _Used:
    id: str
    instance_type: str
    market: str
    launched_at: dt.datetime
    terminated_at: dt.datetime | None


def load_pool(
    conn: Conn, st: MasterState, pool: str, policy: decider.ScalePolicy, now: dt.datetime
) -> PoolLoad:
    # Allocations that ended before the idle period cannot change a decision: an agent whose
    # last work ended that long ago is idle past the period either way.
    cutoff = now - policy.max_idle_agent_period - dt.timedelta(minutes=1)
    rows = (
        conn.cursor(row_factory=class_row(_PoolAgent))
        .execute(
            "WITH used AS (SELECT k.agent_id, bool_or(x.state <> 'TERMINATED') AS busy,"
            " max(x.ended_at) AS last_end FROM allocations x"
            " CROSS JOIN LATERAL jsonb_object_keys(x.placement) AS k(agent_id)"
            " WHERE x.placement IS NOT NULL AND (x.state <> 'TERMINATED' OR x.ended_at > %s)"
            " GROUP BY k.agent_id)"
            " SELECT a.id, a.connected, a.draining, a.last_heartbeat, a.registered_at,"
            " (SELECT count(*) FROM slots s WHERE s.agent_id = a.id AND s.enabled) AS slots,"
            " coalesce(u.busy, false) AS busy, u.last_end"
            " FROM agents a LEFT JOIN used u ON u.agent_id = a.id"
            " WHERE a.resource_pool = %s ORDER BY a.id",
            (cutoff, pool),
        )
        .fetchall()
    )
    agents = []
    for r in rows:
        idle_since = None
        if not r.busy:
            idle_since = max(t for t in (r.registered_at, r.last_end) if t is not None)
        agents.append(
            decider.AgentInfo(
                id=r.id,
                slots=int(r.slots),
                connected=bool(r.connected),
                last_heartbeat=r.last_heartbeat,
                idle_since=idle_since,
                draining=bool(r.draining),
            )
        )
    decision = sched.schedule(scheduling.snapshot(conn, st, pool))
    queued = tuple(
        dict.fromkeys(e.job_id for e in decision.queue if e.state == sched.QueueState.QUEUED)
    )
    since = now - decider.history_horizon(policy)
    history: list[decider.LaunchRecord] = []
    for e in conn.cursor(row_factory=class_row(_LaunchError)).execute(
        "SELECT option_index, code, capacity, message, at FROM launch_errors"
        " WHERE resource_pool = %s AND at > %s ORDER BY at",
        (pool, since),
    ):
        if 0 <= e.option_index < len(policy.options):
            history.append(
                decider.LaunchRecord(
                    at=e.at,
                    option=policy.options[e.option_index],
                    code=e.code,
                    capacity=e.capacity,
                    message=e.message,
                )
            )
    history.extend(_agent_outcomes(conn, pool, policy, since))
    history.sort(key=lambda rec: rec.at)
    return PoolLoad(tuple(agents), decision.demand(), queued, tuple(history))


def _agent_outcomes(
    conn: Conn, pool: str, policy: decider.ScalePolicy, since: dt.datetime
) -> list[decider.LaunchRecord]:
    """Successes (an agent registered) and never-registered failures of the pool's instances."""
    out = []
    for r in conn.cursor(row_factory=class_row(_Launched)).execute(
        "SELECT i.id, i.option_index, i.instance_type, i.zone, i.market, i.launched_at,"
        " i.terminated_at, a.registered_at FROM instances i LEFT JOIN agents a ON a.id = i.id"
        " WHERE i.resource_pool = %s AND i.launched_at > %s"
        " AND (a.id IS NOT NULL OR (i.reason = %s AND i.terminated_at IS NOT NULL))",
        (
            pool,
            since - policy.max_agent_starting_period,
            decider.TerminateReason.NEVER_CONNECTED.value,
        ),
    ):
        index = r.option_index
        if index is not None and 0 <= index < len(policy.options):
            option = policy.options[index]
        else:
            option = decider.option_of(
                Instance(
                    r.id,
                    InstanceState.TERMINATED,
                    r.launched_at,
                    r.instance_type,
                    r.zone,
                    Market(r.market),
                ),
                policy,
            )
        if r.registered_at is not None:
            out.append(decider.LaunchRecord(r.registered_at, option, instance_id=r.id))
        else:
            assert r.terminated_at is not None  # no agent: the query took it for its terminated_at
            out.append(
                decider.LaunchRecord(
                    r.terminated_at,
                    option,
                    code=decider.AGENT_NOT_REGISTERED,
                    instance_id=r.id,
                )
            )
    return out


def pool_usage(conn: Conn, pool: str, since: dt.datetime) -> list[cost.Usage]:
    """The pool's instances that ran at some point after ``since``, as the master saw them."""
    return [
        cost.Usage(r.id, r.instance_type, Market(r.market), r.launched_at, r.terminated_at)
        for r in conn.cursor(row_factory=class_row(_Used)).execute(
            "SELECT id, instance_type, market, launched_at, terminated_at FROM instances"
            " WHERE resource_pool = %s AND (terminated_at IS NULL OR terminated_at > %s)"
            " ORDER BY launched_at, id",
            (pool, since),
        )
    ]


def month_spend(conn: Conn, pool: str, policy: cost.CostPolicy, now: dt.datetime) -> float:
    """USD the pool's instances cost since the start of ``now``'s month."""
    start = cost.month_start(now)
    return sum(c.cost for c in cost.costs(pool_usage(conn, pool, start), policy, start, now))


def pool_events(conn: Conn, pool: str, limit: int) -> list[PoolEventRow]:
    """The pool's newest ``limit`` events (launches, terminations, waits), oldest first."""
    rows = (
        conn.cursor(row_factory=class_row(PoolEventRow))
        .execute(
            "SELECT id, kind, message, created_at FROM events WHERE entity = 'pool' AND entity_id = %s"
            " ORDER BY id DESC LIMIT %s",
            (pool, limit),
        )
        .fetchall()
    )
    return list(reversed(rows))


def pool_instances(conn: Conn, pool: str) -> list[InstanceRow]:
    """Every instance the provisioner has seen in the pool, ended ones too, oldest first."""
    cur = conn.cursor(row_factory=class_row(InstanceRow))
    return cur.execute(
        "SELECT id, resource_pool, instance_type, zone, market, state, launched_at,"
        " terminated_at, reason, option_index FROM instances WHERE resource_pool = %s"
        " ORDER BY launched_at, id",
        (pool,),
    ).fetchall()


def sync_instances(conn: Conn, pool: str, instances: Iterable[Instance]) -> None:
    """Upsert what the cloud lists; what it no longer lists has ended."""
    states.instances_listed(conn, pool, instances)


# -- apply ---------------------------------------------------------------------------------


def _after_refusal(quota: bool, capacity: bool) -> str:
    if quota:
        return " (quota: this option waits, the next one is tried)"
    return " (capacity: trying the next option)" if capacity else ""


def _launch(
    st: MasterState,
    pool: str,
    provider: Provider,
    policy: decider.ScalePolicy,
    order: decider.LaunchOrder,
) -> None:
    index = policy.options.index(order.option)
    try:
        launched = provider.launch(order.option, order.count)
    except Exception as exc:  # every failure must land in the backoff history
        if isinstance(exc, LaunchError):
            code, message, capacity = exc.code, exc.message, exc.capacity
            quota = exc.quota
        else:
            code, message, capacity, quota = type(exc).__name__, str(exc), False, False
        logger.warning(
            "pool %s: launch of %d x %s failed: %s",
            pool,
            order.count,
            order.option.instance_type,
            exc,
        )
        with st.pool.connection() as conn:
            conn.execute(
                "INSERT INTO launch_errors (resource_pool, option_index, code, message, capacity)"
                " VALUES (%s, %s, %s, %s, %s)",
                (pool, index, code, message[:2000], capacity),
            )
            states.record_event(
                conn,
                "pool",
                pool,
                "launch-error",
                f"launching {order.count} x {order.option.instance_type}"
                f"{' in ' + order.option.zone if order.option.zone else ''} failed: {code}: {message}"
                f"{_after_refusal(quota, capacity)}",
            )
        return
    logger.info("pool %s: launched %s (%s)", pool, [i.id for i in launched], order.reason)
    with st.pool.connection() as conn:
        states.instances_launched(conn, pool, launched, index, order.reason)
        states.record_event(
            conn,
            "pool",
            pool,
            "launch",
            f"launched {', '.join(i.id for i in launched) or 'nothing'}"
            f" ({order.option.instance_type}, {order.option.market.value}): {order.reason}",
        )


def _terminate(
    st: MasterState, pool: str, provider: Provider, terms: tuple[decider.Termination, ...]
) -> None:
    ids: list[str] = []
    with st.pool.connection() as conn:
        for term in terms:
            if term.reason is decider.TerminateReason.IDLE:
                # Stop placing work there first; skip it if work landed since the snapshot.
                row = conn.execute(
                    "UPDATE agents SET draining = true WHERE id = %s AND NOT EXISTS"
                    " (SELECT 1 FROM allocations x WHERE x.placement ? %s AND x.state <> 'TERMINATED')"
                    " RETURNING id",
                    (term.instance_id, term.instance_id),
                ).fetchone()
                exists = conn.execute(
                    "SELECT 1 FROM agents WHERE id = %s", (term.instance_id,)
                ).fetchone()
                if exists and row is None:
                    continue
            ids.append(term.instance_id)
        if ids:
            # Nothing new lands on a machine that is going away.
            conn.execute("UPDATE agents SET draining = true WHERE id = ANY(%s)", (ids,))
    if not ids:
        return
    provider.terminate(ids)
    logger.info("pool %s: terminated %s", pool, ids)
    reasons = {t.instance_id: t.reason.value for t in terms}
    with st.pool.connection() as conn:
        states.instances_terminating(conn, {iid: reasons[iid] for iid in ids})


def run_pool(
    st: MasterState, prov: Provisioner, pool: str, config: ProvisionerConfig
) -> decider.Decision:
    """One provisioner pass over one pool."""
    provider = prov.provider(st, pool, config)
    pool_cfg = st.config.pool(pool)
    policy = config.scale_policy(
        max_aux_containers_per_agent=(
            pool_cfg.max_aux_containers_per_agent
            if pool_cfg
            else DEFAULT_MAX_AUX_CONTAINERS_PER_AGENT
        )
    )
    fresh = False
    while True:
        instances, fresh = prov.instances(provider, pool, fresh)
        now = _now()
        with st.pool.connection() as conn:
            if fresh:
                sync_instances(conn, pool, instances)
            load = load_pool(conn, st, pool, policy, now)
            spent = month_spend(conn, pool, policy.cost, now) if policy.cost else 0.0
        snapshot = decider.PoolSnapshot(
            pool=pool,
            demand=load.demand,
            instances=instances,
            agents=load.agents,
            history=load.history,
            spent=spent,
        )
        decision = decider.decide(snapshot, policy, now)
        prov.next_changes[pool] = decider.next_change(snapshot, policy, now)
        if fresh or not (decision.launches or decision.terminations):
            break
        fresh = True  # about to act: decide again on what the cloud says now
    # The decision's events say what is about to happen and why ("terminating i-...: idle"):
    # they are committed before the cloud calls, so whoever sees an instance go (or a call
    # hang or fail) can already read the reason.
    if decision.events:
        with st.pool.connection() as conn:
            for event in decision.events:
                prov.write_event(conn, "pool", pool, event.code, event.message, now)
                if event.code in JOB_EVENT_CODES:
                    for job_id in load.queued_jobs:
                        prov.write_event(conn, "job", job_id, event.code, event.message, now)
    if decision.terminations:
        prov.forget_list(pool)
        _terminate(st, pool, provider, decision.terminations)
    for order in decision.launches:
        prov.forget_list(pool)
        _launch(st, pool, provider, policy, order)
    prov.prune(now)
    return decision


def run_pass(st: MasterState, prov: Provisioner) -> None:
    """Every pool with a ``provider`` block; a failing pool does not hold up the others."""
    for p in st.config.resource_pools:
        config = p.provider_config
        if config is None:
            continue
        try:
            run_pool(st, prov, p.pool_name, config)
        except Exception:
            logger.exception("provisioner pass failed for pool %s", p.pool_name)
