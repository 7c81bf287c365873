"""Every route with a body, and every list with query parameters, fed malformed input.

As an admin (the widest rights), as an agent and as a running task: wrong types, huge and
negative numbers, NaN, NUL, deep nesting, 1 MB strings, bidi and other unicode. No answer may be
a 5xx, and a refused request (4xx) may change nothing in the database. The master's app and
control loop run in the test's process (tests/integration/inproc.py), with a SimAgent.
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import requests
import typing_extensions
from flask import Flask

from det.master.api import BLUEPRINTS
from det.master.errors import MasterError
from det.master.schemas import validate
from tests.conftest import new_database
from tests.fakes.sim_agent import SimAgent, wait
from tests.integration.conftest import Master
from tests.integration.inproc import InProcessMaster, control_loop, in_process_master, routed
from tests.integration.ntsc_support import stop_launched

pytestmark = pytest.mark.integration

CONFIG = """
name: fuzz
entrypoint: x
searcher: {name: single, metric: loss, max_length: 10}
"""

# Keys the routes read, each given every bad value in turn.
KEYS = [
    "name",
    "config",
    "labels",
    "notes",
    "description",
    "username",
    "password",
    "user",
    "admin",
    "active",
    "displayName",
    "isHashed",
    "checkpoint",
    "uuid",
    "taskId",
    "allocationId",
    "metrics",
    "reports",
    "logs",
    "updates",
    "jobId",
    "priority",
    "weight",
    "resourcePool",
    "reason",
    "progress",
    "resources",
    "metadata",
    "checkpointUuid",
    "comment",
    "runId",
    "checkpoints",
    "activate",
    "modelDefinition",
    "validateOnly",
    "group",
    "slots",
    "containers",
    "version",
    "oldPassword",
    "newPassword",
    "archived",
    "state",
]
# Every bad value, all keys at once; then each key alone with the values most likely to slip.
BAD: list[Any] = [
    None,
    True,
    -1,
    0,
    2**63,
    -(2**63) - 1,
    1.5e308,
    "",
    "x" * 1_000_000,
    "\u202eabc",
    "\x00",
    # A lone surrogate (escaped by json.dumps): PostgreSQL text cannot hold it.
    "\ud800",
    [],
    [None],
    {},
    {"a": {"b": {"c": []}}},
    ["x", 1, None, {}],
]
BAD_PER_KEY: list[Any] = [None, 2**63, "x" * 100_000, [1], {"a": 1}]
BODIES: list[bytes] = [
    b"",
    b"null",
    b"[]",
    b"1",
    b'"s"',
    b"{",
    b'{"a": NaN}',
    b'{"a": Infinity}',
    b'{"a": 1e999}',
    b"[" * 3000 + b"]" * 3000,
    b'{"a": "\\u0000"}',
    b"\xff\xfe",
    # Lone surrogates: escaped, encoded as UTF-8 bytes, in a key, and after a NaN.
    b'{"a": "\\ud800"}',
    b'{"a": "\xed\xa0\x80"}',
    b'{"\\udfff": 1}',
    b'{"a": NaN, "b": "x\\udbff"}',
]


# Routes that end or remove what the others need (the running trial, the session); their
# refusals are covered by the ownership and lifecycle tests.
DESTRUCTIVE = ("/kill", "/cancel", "/auth/logout", "/disable", "/early_exit")


def _routes() -> list[tuple[str, str, str]]:
    """(method, rule, principal) for every route with a body, called as who it is for."""
    app = Flask("routes")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    out = []
    for rule in app.url_map.iter_rules():
        allowed = getattr(app.view_functions[rule.endpoint], "_det_allow", frozenset({"user"}))
        who = "user" if "user" in allowed or "public" in allowed else sorted(allowed)[0]
        for method in sorted(rule.methods & {"POST", "PATCH", "PUT", "DELETE"}):
            if method == "DELETE" or rule.rule.endswith(DESTRUCTIVE):
                continue
            out.append((method, rule.rule, who))
    return sorted(out)


def _fill(rule: str, ids: dict[str, str]) -> str:
    if rule.endswith("/heartbeat"):
        # Not the simulated agent's own id: its next heartbeat would undo what a fuzz body set.
        return rule.replace("<agent_id>", "fuzz-agent")
    path = rule
    for name, value in ids.items():
        path = path.replace(f"<int:{name}>", value).replace(f"<{name}>", value)
    while "<" in path:  # any other id (a token's, a model version's number, ...): the first one
        start, end = path.index("<"), path.index(">")
        path = path[:start] + "1" + path[end + 1 :]
    return path


_CONNECTIONS: dict[str, psycopg.Connection[Any]] = {}
_COUNTS: dict[str, dict[str, int]] = {}  # _fingerprint's counts so far, per database


def _connection(db_url: str) -> psycopg.Connection[Any]:
    """The fingerprints' connection to ``db_url``, kept open (autocommit: each statement sees
    what is committed): connecting for each of the module's ~20,000 checks cost more than the
    query."""
    conn = _CONNECTIONS.get(db_url)
    if conn is None or conn.closed:
        conn = _CONNECTIONS[db_url] = psycopg.connect(db_url, autocommit=True)
    return conn


# Tables a refusal may write: a failed login is counted, a task's logs are kept.
_UNWATCHED = ("login_failures", "task_logs", "schema_migrations")

# Every row change of a watched table appends a row naming the table to fuzz_writes, in the
# change's own transaction (so it is committed, or rolled back, with it). Appending takes no
# row lock: the master's transactions get no lock order they did not have. A rewrite to the
# same values is no change, and an agent's heartbeat time moves on its own.
_WATCH_SQL = """
CREATE TABLE fuzz_writes (tbl text NOT NULL);
CREATE FUNCTION fuzz_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE'
     AND to_jsonb(OLD) - 'last_heartbeat' = to_jsonb(NEW) - 'last_heartbeat' THEN
    RETURN NULL;
  END IF;
  INSERT INTO fuzz_writes VALUES (TG_TABLE_NAME);
  RETURN NULL;
END $$;
"""


def _watch(db_url: str) -> None:
    """Makes every table of ``db_url`` but :data:`_UNWATCHED` note its changes (_WATCH_SQL)."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
                " AND NOT tablename = ANY(%s) ORDER BY tablename",
                (list(_UNWATCHED),),
            )
        ]
        assert "experiments" in tables and "allocations" in tables, tables
        with conn.transaction():
            conn.execute(_WATCH_SQL)
            for t in tables:
                conn.execute(
                    f'CREATE TRIGGER fuzz_note AFTER INSERT OR UPDATE OR DELETE ON "{t}"'
                    " FOR EACH ROW EXECUTE FUNCTION fuzz_note()"
                )
                conn.execute(
                    f'CREATE TRIGGER fuzz_note_truncate AFTER TRUNCATE ON "{t}"'
                    " FOR EACH STATEMENT EXECUTE FUNCTION fuzz_note()"
                )


def _fingerprint(db_url: str) -> dict[str, int]:
    """How many changes each watched table has committed since ``_watch``. Each call takes the
    committed notes out of fuzz_writes and adds them to this process's counts, so a call reads
    only what was committed since the last one (counting the whole log each time grew with the
    module's ~20,000 checks); a note of a transaction still open is not visible, and is taken
    by the call after its commit. Two equal fingerprints: no watched table changed in between."""
    counts = _COUNTS.setdefault(db_url, {})
    for t, n in _connection(db_url).execute(
        "WITH taken AS (DELETE FROM fuzz_writes RETURNING tbl)"
        " SELECT tbl, count(*) FROM taken GROUP BY tbl"
    ):
        counts[str(t)] = counts.get(str(t), 0) + int(n)
    return dict(counts)


def _quiet(db_url: str, what: str, window: float = 1.0, limit: float = 120.0) -> dict[str, int]:
    """The fingerprint once the database has stood still for ``window`` seconds: what a valid
    request or the world's setup set in motion (a container's RUNNING report, its event, the
    trial's state) lands after the answer, and must not land under a refusal's check."""
    deadline = time.monotonic() + limit
    known = _fingerprint(db_url)
    still_since = time.monotonic()
    while time.monotonic() - still_since < window:
        assert time.monotonic() < deadline, f"the database still moves {limit:.0f} s after {what}"
        time.sleep(0.25)
        now = _fingerprint(db_url)
        if now != known:
            known, still_since = now, time.monotonic()
    return known


def test_the_fingerprint_sees_each_committed_change_and_nothing_else(
    pg_server: str, pg_template: str
) -> None:
    """What the refusals' check rests on: a committed insert, update or delete of a watched
    table changes the fingerprint (once: when its transaction commits); a rolled-back one, a
    rewrite to the same values, an agent's heartbeat time and an unwatched table do not."""
    with new_database(pg_server, "det_fuzz_watch", template=pg_template) as db_url:
        _watch(db_url)
        try:
            with psycopg.connect(db_url, autocommit=True) as conn:
                conn.execute("INSERT INTO agents (id, resource_pool) VALUES ('a', 'default')")
                first = _fingerprint(db_url)
                assert first == {"agents": 1}
                conn.execute("UPDATE agents SET last_heartbeat = now() + interval '1 s'")
                conn.execute("UPDATE agents SET enabled = enabled")
                conn.execute("INSERT INTO login_failures (username, address) VALUES ('u', 'x')")
                with pytest.raises(psycopg.errors.DivisionByZero), conn.transaction():
                    conn.execute("UPDATE agents SET draining = true")
                    conn.execute("SELECT 1 / 0")
                assert _fingerprint(db_url) == first
                conn.execute("UPDATE agents SET draining = true")
                assert _fingerprint(db_url) == {"agents": 2}
                conn.execute("DELETE FROM agents")
                conn.execute("INSERT INTO workspaces (name) VALUES ('w')")
                assert _fingerprint(db_url) == {"agents": 3, "workspaces": 1}
                # A change whose transaction is still open counts once it commits, not before.
                with psycopg.connect(db_url) as other:
                    other.execute("INSERT INTO agents (id, resource_pool) VALUES ('b', 'default')")
                    assert _fingerprint(db_url) == {"agents": 3, "workspaces": 1}
                    other.commit()
                assert _fingerprint(db_url) == {"agents": 4, "workspaces": 1}
                assert _fingerprint(db_url) == {"agents": 4, "workspaces": 1}
        finally:
            _COUNTS.pop(db_url, None)
            conn_ = _CONNECTIONS.pop(db_url, None)
            if conn_ is not None:
                conn_.close()


class World:
    def __init__(
        self, m: InProcessMaster | Master, db_url: str, env: dict[str, str], user_id: str
    ) -> None:
        self.m = m
        self.db_url = db_url
        self.env = env
        self.admin = m.session()
        self.agent = requests.Session()
        self.agent.headers["Authorization"] = f"Bearer {m.agent_token}"
        self.task = requests.Session()
        self.task.headers["Grpc-Metadata-x-allocation-token"] = f"Bearer {env['DET_SESSION_TOKEN']}"
        # Whether anything was accepted (or failed with a 5xx) since the database was last seen
        # standing still: only such an answer can set in motion a write that lands later.
        self.unsettled = False
        self.ids = {
            "experiment_id": env["DET_EXPERIMENT_ID"],
            "trial_id": env["DET_TRIAL_ID"],
            "allocation_id": env["DET_ALLOCATION_ID"],
            "agent_id": "sim-0",
            "slot_id": "0",
            "user_id": user_id,
            "name": "fuzz-model",
            "uid": "00000000-0000-0000-0000-000000000000",
            "workspace_id": "1",
            "project_id": "1",
            "number": "1",
            "key": "UNCAT",
            "label": "fuzz",
        }


# The world's agent must outlive the module: with the tests' usual 10 s, a heartbeat held up
# on a loaded machine (the master busy with 1 MB bodies) lost the agent, and the loss (its
# allocation ended, the trial restarted, events) landed under a refusal's check.
MASTER_EXTRA = {"agent_timeout_seconds": 600}


@contextlib.contextmanager
def fuzz_database(pg_server: str, pg_template: str) -> Iterator[str]:
    """A database of its own, watched: the body fuzzer and schemathesis may run at once on one
    server (DET_TEST_PG_URL)."""
    with new_database(pg_server, "det_fuzz", template=pg_template) as db_url:
        _watch(db_url)
        try:
            yield db_url
        finally:
            _COUNTS.pop(db_url, None)
            conn = _CONNECTIONS.pop(db_url, None)
            if conn is not None:
                conn.close()


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory, pg_server: str, pg_template: str
) -> Iterator[World]:
    # One master for the module (or for each part of it that tests/durations.json spreads over
    # the workers): it has to survive everything sent to it. Its app and control loop run in
    # this process; the SimAgent's calls reach the app.
    with (
        fuzz_database(pg_server, pg_template) as db_url,
        in_process_master(tmp_path_factory.mktemp("fuzz"), db_url, MASTER_EXTRA) as m,
        routed(m),
        control_loop(m),
    ):
        yield from make_world(m, db_url)


def make_world(m: InProcessMaster | Master, db_url: str) -> Iterator[World]:
    """The world on master ``m`` (in this process or not) over database ``db_url``."""
    specs: list[dict[str, Any]] = []
    release = threading.Event()

    def hold(master: str, spec: dict[str, Any], killed: threading.Event) -> int:
        if "DET_TRIAL_ID" not in spec["env"]:
            # An interactive task a valid body launched: it ends when killed (the trial is
            # held whatever the fuzzed routes ask, so that the world's ids stay valid).
            while not release.is_set() and not killed.is_set():
                release.wait(0.2)
            return 0
        specs.append(spec)
        # Held until the module ends, however long it takes (a 600 s limit ended the trial in
        # the middle of a slow run, and its end moved the database under a refusal's check).
        release.wait()
        return 0

    # Heartbeats every 0.25 s: a launched task that was placed ends at the agent's next beat
    # after its kill, and the launch routes accept and kill about 200 bodies each (notebooks
    # and shells: 50 s at one beat a second, 24 s at 0.2). Heartbeats change no watched row.
    agent = SimAgent(m.url, m.agent_token, "sim-0", slots=1, train=hold, interval=0.25).start()
    try:
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})
        wait(lambda: len(specs) == 1, 60, "a running task")
        m.post("/api/v1/models", {"name": "fuzz-model"})
        # Fuzz the user routes on another user: a password change would end the admin's session.
        victim = m.post(
            "/api/v1/users", {"user": {"username": "victim"}, "password": "Victim-pw-1"}
        )
        # The trial's container reports RUNNING in the agent's next heartbeat, after the
        # training already started: the first route's check ran into that write once.
        alloc = specs[0]["env"]["DET_ALLOCATION_ID"]
        with psycopg.connect(db_url, autocommit=True) as conn:
            wait(
                lambda: (
                    conn.execute("SELECT state FROM allocations WHERE id = %s", (alloc,)).fetchone()
                    == ("RUNNING",)
                ),
                60,
                "the trial's allocation RUNNING",
            )
        _quiet(db_url, "the world's setup", window=3.0)
        yield World(m, db_url, specs[0]["env"], str(victim["user"]["id"]))
    finally:
        release.set()
        agent.stop()


def _send(w: World, who: requests.Session, method: str, path: str, data: bytes) -> int:
    r = who.request(
        method,
        w.m.url + path,
        data=data,
        headers={"Content-Type": "application/json"},
        timeout=60,
    )
    if r.status_code < 300 or r.status_code >= 500:
        w.unsettled = True
    if r.status_code < 300:
        stop_launched(w.admin, w.m.url, f"{method} {path}", r)
    return r.status_code


@functools.cache
def _encoded() -> tuple[tuple[bytes, ...], dict[str, tuple[bytes, ...]]]:
    """The bodies every route gets (BODIES, then each BAD value under all KEYS at once) and each
    key's BAD_PER_KEY bodies, encoded once per process (47 MB a route: encoding them again for
    each route was a fifth of the module's work)."""
    every = (*BODIES, *(json.dumps({k: v for k in KEYS}).encode() for v in BAD))
    per_key = {k: tuple(json.dumps({k: v}).encode() for v in BAD_PER_KEY) for k in KEYS}
    return every, per_key


def _declared_keys(method: str, rule: str) -> frozenset[str] | None:
    """The top-level keys the route reads, by its contract (``det.master.api._contract``): none
    when it declares no body (nothing reads it: the view gets no ``body``), the TypedDict's keys
    when it checks the body as one whose keys are its wire names (validation drops any other
    key before the view runs: pydantic ignores a TypedDict's extra keys). None (every key may
    matter) for a route without a contract or with another body: a bare or list body, any JSON
    object, a TypedDict with an alias or a config of its own."""
    spec = _contract(method, rule)
    if spec is None:
        return None
    body = spec.body
    if body is None:
        return frozenset()
    if not typing_extensions.is_typeddict(body):
        return None
    if getattr(body, "__pydantic_config__", None):
        return None
    hints = typing_extensions.get_type_hints(body, include_extras=True)
    for hint in hints.values():
        for meta in getattr(hint, "__metadata__", ()):
            if getattr(meta, "alias", None) or getattr(meta, "validation_alias", None):
                return None
    return frozenset(hints)


def _bodies(method: str, rule: str) -> Iterator[bytes]:
    """Every route gets every body shape: BODIES, each BAD value under all KEYS at once, and each
    BAD_PER_KEY value under each key it reads (:func:`_declared_keys`) and under one key it does
    not (one stands for all: each is dropped or ignored alike, so the other 40-odd sent the
    route the same empty body 5 times over). A route whose reads are not known gets every key."""
    every, per_key = _encoded()
    yield from every
    declared = _declared_keys(method, rule)
    keys = [k for k in KEYS if declared is None or k in declared]
    keys += [k for k in KEYS if k not in keys][:1]
    for k in keys:
        yield from per_key[k]


def test_a_key_a_route_does_not_declare_reaches_its_view_as_no_key() -> None:
    """What sending one undeclared key in place of all rests on: for each route whose body is a
    TypedDict, every other key of KEYS, with each BAD_PER_KEY value, validates as ``{}`` does
    (the same body or the same refusal)."""
    checked = 0
    for method, rule, _ in _routes():
        declared = _declared_keys(method, rule)
        if not declared:
            continue
        body = _contract(method, rule).body

        def checked_as(value: dict[str, Any], body: Any = body) -> tuple[Any, ...]:
            try:
                return ("valid", validate(body, value))
            except MasterError as e:
                return ("refused", type(e).__name__, str(e))

        empty = checked_as({})
        for k in KEYS:
            if k not in declared:
                for v in BAD_PER_KEY:
                    assert checked_as({k: v}) == empty, (method, rule, k, repr(v)[:40])
                    checked += 1
    assert checked > 10_000, checked


@functools.cache
def _app() -> Flask:
    app = Flask("routes")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    return app


def _contract(method: str, rule: str) -> Any:
    """The route's ``@contract`` declaration (det.master.api._contract), or None."""
    app = _app()
    (endpoint,) = {
        r.endpoint
        for r in app.url_map.iter_rules()
        if r.rule == rule and method in (r.methods or ())
    }
    return getattr(app.view_functions[endpoint], "_det_contract", None)


@pytest.mark.parametrize(("method", "rule", "who"), _routes())
def test_no_body_makes_a_5xx_and_refusals_change_nothing(
    world: World, method: str, rule: str, who: str
) -> None:
    w = world
    path = _fill(rule, w.ids)
    session = {"user": w.admin, "agent": w.agent, "task": w.task}[who]
    failures: list[str] = []
    # The settling window only after a route that had something accepted: after refusals alone
    # nothing of ours can still be on its way (setup ends on a quiet database).
    known = _quiet(w.db_url, "the previous route") if w.unsettled else _fingerprint(w.db_url)
    w.unsettled = False
    for data in _bodies(method, rule):
        status = _send(w, session, method, path, data)
        if status >= 500:
            failures.append(f"{method} {path} {data[:80]!r} -> {status}")
            known = _quiet(w.db_url, f"{method} {path} {data[:80]!r} -> {status}")
            w.unsettled = False
        elif status >= 400:
            now = _fingerprint(w.db_url)
            if now != known:
                changed = sorted(t for t in now if now[t] != known.get(t))
                failures.append(f"{method} {path} {data[:80]!r} -> {status} changed {changed}")
            known = now
        else:
            # No settling window here: some routes accept most of the 243 bodies, and a window
            # after each made the module run for over half an hour. A launched task is stopped
            # and settled in _send; the late write CI met (the trial's RUNNING report) is
            # waited for at setup, and each route starts on a quiet database.
            known = _fingerprint(w.db_url)
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} in all)"


QUERIES = [
    {"offset": "-1"},
    {"offset": str(2**63)},
    {"limit": str(2**63)},
    {"limit": "-5"},
    {"limit": "x"},
    {"orderBy": "garbage", "sortBy": "\u202e"},
    {"trialIds": "x"},
    {"trialIds": "1,2,x"},
    {"name": "%_\\"},
    {"states": "STATE_BOGUS"},
    {"follow": "maybe", "timeout_seconds": "nan"},
    {"timeout_seconds": "inf"},
    {"group": "\x00"},
    {"archived": "maybe"},
    {"resourcePool": "x" * 10_000},
]


def _get_routes() -> list[str]:
    app = Flask("routes")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    out = []
    for rule in app.url_map.iter_rules():
        allowed = getattr(app.view_functions[rule.endpoint], "_det_allow", frozenset({"user"}))
        for_users = "user" in allowed or "public" in allowed
        if "GET" in rule.methods and for_users and rule.rule.startswith("/api/"):
            out.append(rule.rule)
    return sorted(out)


@pytest.mark.parametrize("rule", _get_routes())
def test_no_query_makes_a_5xx(world: World, rule: str) -> None:
    w = world
    path = _fill(rule, w.ids)
    failures = []
    w.unsettled = True  # a read is not checked for writes; the next route settles after it
    for q in QUERIES:
        r = w.admin.get(w.m.url + path, params=q, timeout=60, stream=True)
        r.close()  # a follow stream need not be read to its end
        if r.status_code >= 500:
            failures.append(f"GET {path} {q} -> {r.status_code}")
    assert not failures, "\n".join(failures)
