"""The experiment list's rendered pages, kept per API process under the list's version
(det.master.listcache, migration 0013): every committed change to what the list shows moves the
version at its commit, so the very next read of any process of any master on the database sees
it; changes the list does not show (the ingest's, a searcher's state) leave it alone."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import requests

from det.master import db
from tests.integration.conftest import Master, wait_for

pytestmark = pytest.mark.integration

CONFIG = """
name: cached
entrypoint: python3 train.py
searcher: {name: single, metric: loss, max_length: 10}
hyperparameters: {lr: 0.1}
"""
PAGE = "/api/v1/experiments?limit=100"
# Requests on fresh connections, enough that every user process serves (and caches) some.
SPREAD = 12


# --- the version itself, in PostgreSQL ------------------------------------------------------


@pytest.fixture
def conn(pg_url: str) -> Iterator[psycopg.Connection[Any]]:
    db.upgrade(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(
            "INSERT INTO users (username, password_hash, admin) VALUES ('owner', 'x', true),"
            " ('other', 'x', false)"
        )
        yield c


def _version(c: psycopg.Connection[Any]) -> str:
    row = c.execute("SELECT version::text FROM list_versions WHERE name = 'experiments'").fetchone()
    assert row is not None
    return str(row[0])


def _new_experiment(c: psycopg.Connection[Any], name: str = "e") -> int:
    with c.transaction():
        row = c.execute(
            "INSERT INTO experiments (name, config, original_config, state, owner_id)"
            " VALUES (%s, '{\"searcher\": {\"name\": \"single\"}}', '', 'PAUSED', 1) RETURNING id",
            (name,),
        ).fetchone()
        assert row is not None
        c.execute(
            "INSERT INTO jobs (id, experiment_id, owner_id, resource_pool, priority, queue_key)"
            " VALUES (%s, %s, 1, 'default', 42, 1)",
            (f"job-{row[0]}", row[0]),
        )
    return int(row[0])


def test_every_change_the_list_shows_moves_the_version(conn: psycopg.Connection[Any]) -> None:
    c = conn
    eid = _new_experiment(c)
    c.execute(
        "INSERT INTO projects (workspace_id, name, key) VALUES (1, 'p2', 'P2'), (1, 'p3', 'P3')"
    )
    changes = [
        ("an experiment created", None),
        ("name", "UPDATE experiments SET name = 'renamed' WHERE id = %(e)s"),
        ("description", "UPDATE experiments SET description = 'd' WHERE id = %(e)s"),
        ("notes", "UPDATE experiments SET notes = 'n' WHERE id = %(e)s"),
        ("labels", "UPDATE experiments SET labels = '[\"x\"]' WHERE id = %(e)s"),
        ("state", "UPDATE experiments SET state = 'ACTIVE' WHERE id = %(e)s"),
        ("archived", "UPDATE experiments SET archived = true WHERE id = %(e)s"),
        ("progress", "UPDATE experiments SET progress = 0.5 WHERE id = %(e)s"),
        ("ended", "UPDATE experiments SET ended_at = now() WHERE id = %(e)s"),
        ("config", "UPDATE experiments SET config = config || '{\"x\": 1}' WHERE id = %(e)s"),
        ("owner", "UPDATE experiments SET owner_id = 2 WHERE id = %(e)s"),
        ("moved", "UPDATE experiments SET project_id = (SELECT max(id) FROM projects)"
         " WHERE id = %(e)s"),
        ("a trial added", "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed,"
         " state) VALUES (%(e)s, 'r1', 't1', '{}', 1, 'PAUSED')"),
        ("a trial removed", "DELETE FROM trials WHERE experiment_id = %(e)s"),
        ("resource pool", "UPDATE jobs SET resource_pool = 'other' WHERE experiment_id = %(e)s"),
        ("owner renamed", "UPDATE users SET username = 'owner2' WHERE id = 2"),
        ("project renamed", "UPDATE projects SET name = 'p4' WHERE key = 'P3'"),
        ("project archived", "UPDATE projects SET archived = true WHERE key = 'P3'"),
        ("project owner", "UPDATE projects SET owner_id = 2 WHERE key = 'P3'"),
        ("a project added", "INSERT INTO projects (workspace_id, name, key) VALUES (1, 'p5', 'P5')"),
        ("workspace renamed", "UPDATE workspaces SET name = 'W' WHERE id = 1"),
        ("workspace archived", "UPDATE workspaces SET archived = true WHERE id = 1"),
        ("deleted", "UPDATE experiments SET deleted = true WHERE id = %(e)s"),
        ("removed", "DELETE FROM experiments WHERE id = %(e)s"),
    ]  # fmt: skip
    seen = {_version(c)}
    for what, sql in changes:
        before = _version(c)
        if sql is None:
            eid2 = _new_experiment(c, "second")
        else:
            c.execute(sql, {"e": eid})
        after = _version(c)
        assert after != before, f"{what}: the version did not move"
        assert after not in seen, f"{what}: a version seen before came back"
        seen.add(after)
    assert eid2


def test_what_the_list_does_not_show_leaves_the_version(conn: psycopg.Connection[Any]) -> None:
    c = conn
    eid = _new_experiment(c)
    c.execute(
        "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
        " VALUES (%s, 'r1', 't1', '{}', 1, 'PAUSED')",
        (eid,),
    )
    trial = c.execute("SELECT id FROM trials").fetchone()
    assert trial is not None
    v = _version(c)
    unseen = [
        # The ingest's writes: metric rows and the trial's row (a report's statement).
        "INSERT INTO metrics (trial_id, metric_group, total_batches, metrics)"
        " VALUES (%(t)s, 'training', 1, '{\"avg_metrics\": {\"loss\": 1}}')",
        "UPDATE trials SET summary_metrics = '{}', steps_completed = 1, searcher_metric = 0.5,"
        " state = 'ACTIVE', restarts = 1 WHERE id = %(t)s",
        # The searcher's state with an unchanged progress, the same values written again.
        "UPDATE experiments SET searcher_state = '{}', progress = progress WHERE id = %(e)s",
        "UPDATE experiments SET name = name, labels = labels, config = config WHERE id = %(e)s",
        "UPDATE experiments SET checkpoint_gc_at = now() WHERE id = %(e)s",
        # A job's place in its queue; a user's login-related columns.
        "UPDATE jobs SET priority = 1, weight = 2 WHERE experiment_id = %(e)s",
        "UPDATE users SET display_name = 'O', modified_at = now() WHERE id = 1",
        "UPDATE projects SET description = 'd' WHERE id = 1",
        "UPDATE workspaces SET default_compute_pool = 'x' WHERE id = 1",
    ]
    for sql in unseen:
        c.execute(sql, {"e": eid, "t": trial[0]})
        assert _version(c) == v, f"the version moved on: {sql}"


def test_the_version_moves_when_the_change_commits_not_before(
    conn: psycopg.Connection[Any], pg_url: str
) -> None:
    eid = _new_experiment(conn)
    v = _version(conn)
    with psycopg.connect(pg_url) as writer:
        writer.execute("UPDATE experiments SET name = 'a' WHERE id = %s", (eid,))
        writer.execute("UPDATE experiments SET name = 'b' WHERE id = %s", (eid,))
        # Not committed: another connection sees neither the change nor a new version.
        assert _version(conn) == v
        writer.commit()
    assert _version(conn) != v
    row = conn.execute("SELECT name FROM experiments WHERE id = %s", (eid,)).fetchone()
    assert row == ("b",)

    # Rolled back: the version stays.
    v = _version(conn)
    with psycopg.connect(pg_url) as writer:
        writer.execute("UPDATE experiments SET name = 'c' WHERE id = %s", (eid,))
        writer.rollback()
    assert _version(conn) == v


def test_the_version_row_is_locked_only_at_commit(
    conn: psycopg.Connection[Any], pg_url: str
) -> None:
    """Two transactions each change an experiment; the first then changes the second's
    experiment too, so it waits for that row until the second commits. Both commit: neither
    holds the version's row while it waits (taken at the change instead, the second would wait
    for it while holding its row, and the two would never meet at the barrier)."""
    a, b = _new_experiment(conn, "a"), _new_experiment(conn, "b")
    v = _version(conn)
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    def first() -> None:
        try:
            with psycopg.connect(pg_url) as w:
                w.execute("UPDATE experiments SET notes = 'first' WHERE id = %s", (a,))
                barrier.wait(10)
                w.execute("UPDATE experiments SET notes = 'first' WHERE id = %s", (b,))
                w.commit()
        except BaseException as e:
            errors.append(e)

    def second() -> None:
        try:
            with psycopg.connect(pg_url) as w:
                w.execute("UPDATE experiments SET notes = 'second' WHERE id = %s", (b,))
                barrier.wait(10)
                time.sleep(0.5)  # the first is waiting for this row now
                w.commit()
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    rows = conn.execute(
        "SELECT id, notes FROM experiments WHERE id = ANY(%s) ORDER BY id", ([a, b],)
    ).fetchall()
    assert rows == [(a, "first"), (b, "first")]
    assert _version(conn) != v


# --- the API, across processes and masters --------------------------------------------------


def _fresh_reads(m: Master, token: str, n: int = SPREAD) -> list[dict[str, Any]]:
    """``n`` reads of the page on new connections (spread over the master's processes)."""
    out = []
    for _ in range(n):
        r = requests.get(m.url + PAGE, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        assert r.status_code == 200, r.text
        out.append(r.json())
    return out


def _experiment_in(page: dict[str, Any], eid: int) -> dict[str, Any] | None:
    return next((e for e in page["experiments"] if e["id"] == eid), None)


@pytest.fixture
def two_masters(master_factory: Any) -> tuple[Master, Master]:
    a: Master = master_factory(name="a", extra={"user_api_processes": 2})
    b: Master = master_factory(name="b", extra={"user_api_processes": 2, "api_processes": 2})
    return a, b


def test_each_kind_of_write_shows_in_the_next_read_of_every_process_of_another_master(
    two_masters: tuple[Master, Master], pg_url: str
) -> None:
    a, b = two_masters
    token = b.login()
    s = a.session()

    def created() -> int:
        out = a.post("/api/v1/experiments", {"config": CONFIG, "activate": False})
        return int(out["experiment"]["id"])

    eid = created()
    wait_for(
        lambda: (_experiment_in(b.get(PAGE), eid) or {}).get("numTrials") == 1,
        30,
        what="the searcher's trial",
    )
    project = a.post("/api/v1/workspaces/1/projects", {"name": "elsewhere", "workspaceId": 1})
    pid = int(project["project"]["id"])
    me = a.get("/api/v1/me")["user"]
    rows_trial = 0

    def call(method: str, path: str, body: Any = None) -> None:
        r = s.request(method, a.url + path, json=body, timeout=30)
        assert r.status_code == 200, (path, r.text)

    def add_trial() -> None:
        # As the searcher does, in its own transaction (no API creates trials).
        nonlocal rows_trial
        rows_trial += 1
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute(
                "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
                " VALUES (%s, %s, %s, '{}', 1, 'PAUSED')",
                (eid, f"extra{rows_trial}", f"extra-task-{rows_trial}"),
            )

    def progress() -> None:
        with psycopg.connect(pg_url, autocommit=True) as c:
            c.execute("UPDATE experiments SET progress = 0.25 WHERE id = %s", (eid,))

    def ended(eid: int) -> bool:
        return bool(_exp(b.get(PAGE), eid)["state"] in ("STATE_KILLED", "STATE_CANCELED"))

    def archive() -> None:
        wait_for(lambda: ended(new_ids[0]), 60, what="the killed experiment to end")
        _fresh_reads(b, token)
        call("POST", f"/api/v1/experiments/{new_ids[0]}/archive")

    new_ids: list[int] = []
    # (what, the write on master a, what every read on master b must show)
    steps: list[tuple[str, Callable[[], None], Callable[[list[dict[str, Any]]], bool]]] = [
        ("create", lambda: new_ids.append(created()),
         lambda p: bool(new_ids) and _experiment_in(p, new_ids[-1]) is not None),
        ("pause -> active", lambda: call("POST", f"/api/v1/experiments/{eid}/activate"),
         lambda p: _exp(p, eid)["state"] == "STATE_ACTIVE"),
        ("state -> paused", lambda: call("POST", f"/api/v1/experiments/{eid}/pause"),
         lambda p: _exp(p, eid)["state"] == "STATE_PAUSED"),
        ("name", lambda: call("PATCH", f"/api/v1/experiments/{eid}", {"name": "renamed"}),
         lambda p: _exp(p, eid)["name"] == "renamed"),
        ("description",
         lambda: call("PATCH", f"/api/v1/experiments/{eid}", {"description": "said"}),
         lambda p: _exp(p, eid)["description"] == "said"),
        ("notes", lambda: call("PATCH", f"/api/v1/experiments/{eid}", {"notes": "noted"}),
         lambda p: _exp(p, eid)["notes"] == "noted"),
        ("labels", lambda: call("PATCH", f"/api/v1/experiments/{eid}", {"labels": ["l1"]}),
         lambda p: _exp(p, eid)["labels"] == ["l1"]),
        ("a label", lambda: call("PUT", f"/api/v1/experiments/{eid}/labels/l2"),
         lambda p: _exp(p, eid)["labels"] == ["l1", "l2"]),
        ("trial count", add_trial, lambda p: _exp(p, eid)["numTrials"] == 2),
        ("progress", progress, lambda p: _exp(p, eid)["progress"] == 0.25),
        ("move", lambda: call("POST", f"/api/v1/experiments/{eid}/move",
                              {"destinationProjectId": pid, "experimentId": eid}),
         lambda p: _exp(p, eid)["projectId"] == pid and _exp(p, eid)["projectName"] == "elsewhere"),
        ("project renamed", lambda: call("PATCH", f"/api/v1/projects/{pid}", {"name": "there"}),
         lambda p: _exp(p, eid)["projectName"] == "there"),
        ("project archived", lambda: call("POST", f"/api/v1/projects/{pid}/archive"),
         lambda p: _exp(p, eid)["parentArchived"] is True),
        ("kill", lambda: call("POST", f"/api/v1/experiments/{new_ids[0]}/kill"),
         lambda p: _exp(p, new_ids[0])["state"] in (
             "STATE_STOPPING_KILLED", "STATE_KILLED", "STATE_CANCELED")),
        ("archive", archive,
         lambda p: _exp(p, new_ids[0])["archived"] is True),
        ("owner renamed",
         lambda: call("PATCH", f"/api/v1/users/{me['id']}", {"username": "chief"}),
         lambda p: _exp(p, eid)["username"] == "chief" and _exp(p, eid)["displayName"] == "chief"),
    ]  # fmt: skip
    for what, write, shows in steps:
        before = _fresh_reads(b, token)  # every process of b holds the page now
        assert not all(shows(p) for p in before), f"{what}: shown before the write"
        write()
        after = _fresh_reads(b, token) + _fresh_reads(a, token, 4)
        assert all(shows(p) for p in after), f"{what}: a read after the write missed it"

    # Delete (the killed experiment), then gone from the very next reads.
    victim = new_ids[0]
    assert all(_experiment_in(p, victim) for p in _fresh_reads(b, token))
    call("DELETE", f"/api/v1/experiments/{victim}")
    after = _fresh_reads(b, token) + _fresh_reads(a, token, 4)
    assert all(
        _experiment_in(p, victim) is None or _exp(p, victim)["state"] == "STATE_DELETING"
        for p in after
    )
    total = after[0]["pagination"]["total"]
    assert all(p["pagination"]["total"] == total for p in after)


def _exp(page: dict[str, Any], eid: int) -> dict[str, Any]:
    found = _experiment_in(page, eid)
    assert found is not None, f"experiment {eid} not in the page"
    return found


def test_a_write_shows_in_the_next_read_while_readers_keep_the_cache_busy(
    two_masters: tuple[Master, Master],
) -> None:
    """Each rename answered by master a is in the very next read of master b, while other
    clients read b's list all the time (so its processes store pages during the writes)."""
    a, b = two_masters
    token = b.login()
    eid = int(a.post("/api/v1/experiments", {"config": CONFIG, "activate": False})[
        "experiment"]["id"])  # fmt: skip
    stop = threading.Event()
    failures: list[str] = []

    def reader() -> None:
        s = requests.Session()
        s.headers["Authorization"] = f"Bearer {token}"
        while not stop.is_set():
            r = s.get(b.url + PAGE, timeout=30)
            if r.status_code != 200:
                failures.append(f"{r.status_code} {r.text[:200]}")

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for t in readers:
        t.start()
    try:
        s = a.session()
        for i in range(25):
            r = s.patch(f"{a.url}/api/v1/experiments/{eid}", json={"name": f"n{i}"}, timeout=30)
            assert r.status_code == 200, r.text
            for page in _fresh_reads(b, token, 3):
                assert _exp(page, eid)["name"] == f"n{i}", f"rename {i}: a stale page"
    finally:
        stop.set()
        for t in readers:
            t.join(30)
    assert not failures


def test_an_unchanged_page_is_answered_from_the_process_without_reading_the_list(
    master_factory: Any, pg_url: str
) -> None:
    """One process: a change made behind the triggers' back (they are disabled for it) is not
    seen, which shows that the page and its 304 come from the kept page; the next change
    through the API moves the version and both show."""
    m: Master = master_factory(extra={"user_api_processes": 0, "api_processes": 1})
    eid = int(m.post("/api/v1/experiments", {"config": CONFIG, "activate": False})[
        "experiment"]["id"])  # fmt: skip
    s = m.session()
    wait_for(lambda: _exp(m.get(PAGE), eid)["numTrials"] == 1, 30, what="the searcher's trial")
    with psycopg.connect(pg_url, autocommit=True) as c:
        # The control loop may still change the list (legitimately moving the version): try
        # again until one attempt's version stood still around its reads.
        for attempt in range(5):
            held = _version(c)
            first = s.get(m.url + PAGE, timeout=30)
            assert first.status_code == 200
            tag = first.headers["ETag"]
            silent = f"unseen-{attempt}"
            with c.transaction():
                c.execute("ALTER TABLE experiments DISABLE TRIGGER experiments_list_changed")
                c.execute("UPDATE experiments SET name = %s WHERE id = %s", (silent, eid))
                c.execute("ALTER TABLE experiments ENABLE TRIGGER experiments_list_changed")
            again = s.get(m.url + PAGE, timeout=30)
            conditional = s.get(m.url + PAGE, headers={"If-None-Match": tag}, timeout=30)
            if _version(c) == held:
                break
        else:
            pytest.fail("the list's version moved during each of 5 attempts")
    assert again.status_code == 200 and again.content == first.content
    assert _exp(again.json(), eid)["name"] != silent
    assert again.headers["ETag"] == tag
    assert conditional.status_code == 304 and conditional.headers["ETag"] == tag
    # Another page of the same list (another key) is read anew and shows it.
    assert _exp(s.get(m.url + PAGE + "&offset=0&orderBy=ORDER_BY_ASC", timeout=30).json(),
                eid)["name"] == silent  # fmt: skip
    # A sort by what the ingest writes is never kept.
    sorted_ = s.get(m.url + PAGE + "&sortBy=SORT_BY_SEARCHER_METRIC_VAL", timeout=30).json()
    assert _exp(sorted_, eid)["name"] == silent

    r = s.put(f"{m.url}/api/v1/experiments/{eid}/labels/seen", timeout=30)
    assert r.status_code == 200
    fresh = s.get(m.url + PAGE, headers={"If-None-Match": tag}, timeout=30)
    assert fresh.status_code == 200 and fresh.headers["ETag"] != tag
    assert _exp(fresh.json(), eid)["name"] == silent
    assert _exp(fresh.json(), eid)["labels"] == ["seen"]


def test_a_master_alone_checks_in_memory_until_another_starts_which_waits_to_be_seen(
    master_factory: Any,
) -> None:
    """A master alone on its database checks kept pages against its epoch (det.master.listcache);
    a second master serves only once the first has said it saw it, by which time the first
    checks against the database; when the second stops, the first is alone again (a standby's
    leader-lock wait, which outlives its master, does not count)."""
    alone = "alone on the database: the experiment list's kept pages are checked in memory"
    others = "other det masters on the database"
    a: Master = master_factory(name="a", extra={"user_api_processes": 1})
    wait_for(lambda: alone in a.logs(), 30, what="master a to find itself alone")
    b: Master = master_factory(name="b", extra={"user_api_processes": 1})
    # b answers only after a said it saw b: a switched before b could commit anything.
    assert others in a.logs()
    assert "did not say" not in b.logs()
    token = a.login()
    eid = int(b.post("/api/v1/experiments", {"config": CONFIG, "activate": False})[
        "experiment"]["id"])  # fmt: skip
    assert all(_experiment_in(p, eid) for p in _fresh_reads(a, token, 4))
    b.kill(signal.SIGTERM)
    wait_for(lambda: a.logs().count(alone) == 2, 30, what="master a alone again")
    # Alone again, its own writes show in the next reads of each of its processes.
    eid2 = int(a.post("/api/v1/experiments", {"config": CONFIG, "activate": False})[
        "experiment"]["id"])  # fmt: skip
    assert all(_experiment_in(p, eid2) for p in _fresh_reads(a, token, 6))
