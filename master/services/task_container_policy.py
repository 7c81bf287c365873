"""The cluster's task container policy as admins set it at run time (issue 41): stored in
PostgreSQL, audited, applied to the next container spec without a restart.

Where the value comes from: master.yaml's ``task_container_policy`` until an admin stores one
(``PUT /api/v1/master/task-container-policy``, ``det master policy set``); from then on the
stored value, whatever master.yaml says (a master whose master.yaml differs logs it once, see
:func:`cluster_policy`). Pools' own ``task_container_policy`` in master.yaml override the
cluster's key by key (:func:`policy_for`).

Every change appends a row to ``task_container_policy_changes`` (who, when, the value before
and after; the table refuses updates and deletes), in the transaction that stores the value.

Several master processes on one database agree within :data:`CACHE_SECONDS`: each process
keeps the value it last read for at most that long (:func:`cluster_policy`), and the process
that takes a change forgets its copy at once. The value is read on a connection of its own, not
the master's pool, one read at a time per process (the others that asked wait for it), at most
once per :data:`CACHE_SECONDS`: the spec builders and the create-time checks are called with the
state only, while their request holds a pooled connection, and with every pooled connection held
by such a request, a second one from the pool waited for the pool's timeout (30 s: 100 agents'
heartbeats building 200 trials' specs lost the agents; bench/scale.py).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from psycopg.rows import class_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from det.common.jsontypes import JSONObject
from det.master import db
from det.master.container_policy import ContainerPolicy
from det.master.db import Conn
from det.master.handles import MasterState
from det.master.rows.policies import Change, Current

logger = logging.getLogger(__name__)

#: How long a master process may apply a value it read after another process stored a new one.
CACHE_SECONDS = 2.0


@dataclass(frozen=True, slots=True)
class _Stored:
    policy: JSONObject
    changed_at: dt.datetime
    username: str


def _stored(conn: Conn) -> _Stored | None:
    cur = conn.cursor(row_factory=class_row(_Stored))
    return cur.execute(
        "SELECT p.policy, c.changed_at, c.username FROM task_container_policy p"
        " JOIN task_container_policy_changes c ON c.id = p.change_id"
    ).fetchone()


def wire(policy: ContainerPolicy) -> JSONObject:
    """The policy as stored and answered: every key, JSON types."""
    return policy.model_dump(mode="json")


def current(conn: Conn, initial: ContainerPolicy) -> Current:
    """The cluster's policy now: the stored one, else ``initial`` (master.yaml's)."""
    found = _stored(conn)
    if found is None:
        return Current(initial, "master.yaml", None, None)
    return Current(
        ContainerPolicy.model_validate(found.policy), "database", found.changed_at, found.username
    )


@dataclass(frozen=True, slots=True)
class _Appended:
    """A change just appended to the audit (:func:`put`)."""

    id: int
    changed_at: dt.datetime


def put(
    conn: Conn, policy: ContainerPolicy, user_id: int, username: str, initial: ContainerPolicy
) -> Current:
    """Stores ``policy`` as the cluster's and appends the change to the audit (``initial``:
    master.yaml's, the value before when none was stored). Two admins' changes at once are
    taken one after the other, each recording the other's as its value before."""
    # Writers wait for each other; readers of the current value do not wait.
    conn.execute("LOCK TABLE task_container_policy IN EXCLUSIVE MODE")
    before = current(conn, initial)
    change = db.fetch_row(
        conn,
        _Appended,
        "INSERT INTO task_container_policy_changes"
        " (user_id, username, source_before, policy_before, policy_after)"
        " VALUES (%s, %s, %s, %s, %s) RETURNING id, changed_at",
        (user_id, username, before.source, Jsonb(wire(before.policy)), Jsonb(wire(policy))),
    )
    assert change is not None
    conn.execute(
        "INSERT INTO task_container_policy (one, policy, change_id) VALUES (true, %s, %s)"
        " ON CONFLICT (one) DO UPDATE SET policy = EXCLUDED.policy,"
        " change_id = EXCLUDED.change_id",
        (Jsonb(wire(policy)), change.id),
    )
    logger.info(
        "task container policy changed by %s (change %d): %s", username, change.id, wire(policy)
    )
    return Current(policy, "database", change.changed_at, username)


def history(conn: Conn) -> list[Change]:
    """Every change, newest first."""
    cur = conn.cursor(row_factory=class_row(Change))
    return cur.execute(
        "SELECT id, changed_at, user_id, username, source_before, policy_before, policy_after"
        " FROM task_container_policy_changes ORDER BY id DESC"
    ).fetchall()


# Per master state's pool (a test process may run masters on several databases): when this
# process read the value, and the value; whether it said that master.yaml's does not apply.
_cache: weakref.WeakKeyDictionary[ConnectionPool[Conn], tuple[float, ContainerPolicy]] = (
    weakref.WeakKeyDictionary()
)
_warned: weakref.WeakSet[ConnectionPool[Conn]] = weakref.WeakSet()
_lock = threading.Lock()
_reading = threading.Lock()  # one read of the stored value at a time in a process


def cluster_policy(st: MasterState, clock: Callable[[], float] = time.monotonic) -> ContainerPolicy:
    """The cluster's policy for this process's next spec or check: the stored one (else
    master.yaml's) as read at most :data:`CACHE_SECONDS` ago. The age counts from before the
    read, so no value older than the bound is applied. A stored value that differs from this
    master's master.yaml is logged once per process (a WARNING: master.yaml's does not apply)."""
    asked = clock()
    with _lock:
        hit = _cache.get(st.pool)
    if hit is not None and asked - hit[0] < CACHE_SECONDS:
        return hit[1]
    with _reading:
        with _lock:
            hit = _cache.get(st.pool)
        if hit is not None and hit[0] >= asked:  # read by another caller since this one asked
            return hit[1]
        started = clock()
        found = _read(st)
    differs = wire(found.policy) != wire(st.config.task_container_policy)
    with _lock:
        _cache[st.pool] = (started, found.policy)
        warn = found.source == "database" and differs and st.pool not in _warned
        if warn:
            _warned.add(st.pool)
    if warn:
        logger.warning(
            "task_container_policy: the value %s stored at %s holds; this master's master.yaml"
            " gives another, which does not apply (det master policy set FILE stores a file's)",
            found.updated_by,
            found.updated_at,
        )
    return found.policy


def _read(st: MasterState) -> Current:
    """The stored value, on a connection outside the pool (the caller may hold the last one)."""
    with db.connect(str(st.pool.conninfo)) as conn:
        return current(conn, st.config.task_container_policy)


def forget(st: MasterState) -> None:
    """Drops this process's copy: the next spec or check reads the stored value."""
    with _lock:
        _cache.pop(st.pool, None)


def policy_for(st: MasterState, pool_name: str) -> ContainerPolicy:
    """The policy that applies in a pool: the pool's own keys (master.yaml) over the
    cluster's (:func:`cluster_policy`), as ``MasterConfig.task_container_policy_for`` lays
    them over master.yaml's."""
    cluster = cluster_policy(st)
    pool = st.config.pool(pool_name)
    if pool is None or pool.task_container_policy is None:
        return cluster
    return pool.task_container_policy.over(cluster)
