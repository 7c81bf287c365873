"""Task log retention (issue 27 item 3): the master's ``retention_policy``, a trial's or an
experiment's own retention (the official ``det e|trial set log-retention``), ``det task
cleanup-logs`` (official and ours), the scheduled run, and batched deletion, against a real
master and PostgreSQL with SimAgents that ship log lines. The master is served on a real port
by a thread of the test's process with its control loop, which makes the scheduled runs
(tests/integration/threaded.py): the official CLI and Chromium are processes of their own;
nothing here needs a master process."""

from __future__ import annotations

import contextlib
import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master.services import log_retention
from tests.compat.official import ensure_official_venv
from tests.fakes.sim_agent import SimAgent
from tests.integration import cli_support
from tests.integration.cli_support import Det, create_via_api, logging_training, sim_config, wait
from tests.integration.conftest import ADMIN_PASSWORD
from tests.integration.test_official_client_answers import Official
from tests.integration.threaded import ThreadedMaster, threaded_master
from tests.integration.webui_support import browser, login, page  # noqa: F401

pytestmark = pytest.mark.integration
det = cli_support.det


@contextlib.contextmanager
def _master(pg_server: str, tmp: Path, policy: dict[str, Any]) -> Iterator[ThreadedMaster]:
    name = f"det_logs_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, query = pg_server.partition("?")
    base, _, _ = head.rpartition("/")
    url = f"{base}/{name}{sep}{query}"
    with threaded_master(tmp, url, {"retention_policy": policy}, loop=True) as m:
        yield m


@pytest.fixture(scope="module")
def cli_master(
    pg_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ThreadedMaster]:
    """Logs kept 30 days by default; the schedule (midnight of January 1st) never runs here."""
    with _master(
        pg_server,
        tmp_path_factory.mktemp("logs-master"),
        {"log_retention_days": 30, "schedule": "0 0 1 1 *"},
    ) as m:
        agent = SimAgent(
            m.url, m.agent_token, "logs-sim", slots=2, train=logging_training(m.agent_token)
        ).start()
        try:
            yield m
        finally:
            agent.stop()


def db_url(m: ThreadedMaster) -> str:
    return m.db_url


def finished_trial(m: ThreadedMaster, name: str) -> tuple[int, int, str]:
    eid = create_via_api(m, sim_config(name, trials=1))
    cli_support.wait_state(m, eid, "STATE_COMPLETED", 90)
    (trial,) = cli_support.trials(m, eid)
    wait(lambda: log_lines(m, str(trial["taskId"])) == 4, 30, "the trial's logs")
    return eid, int(trial["id"]), str(trial["taskId"])


def log_lines(m: ThreadedMaster, task_id: str) -> int:
    with psycopg.connect(db_url(m)) as conn:
        row = conn.execute("SELECT count(*) FROM task_logs WHERE task_id = %s", (task_id,))
        return int(row.fetchone()[0])  # type: ignore[index]


def ended_days_ago(m: ThreadedMaster, task_id: str, days: int) -> None:
    with psycopg.connect(db_url(m)) as conn:
        conn.execute(
            "UPDATE allocations SET ended_at = now() - make_interval(days => %s)"
            " WHERE task_id = %s",
            (days, task_id),
        )


# First in the file, before the module's master (cli_master) starts: the log-retention check is
# one per process (det.master.services.log_retention's next check, as in det-master), and that
# master's loop, in this process too, would take turns at it with this test's master's.
def test_the_scheduled_run_deletes_expired_logs_by_itself(pg_server: str, tmp_path: Path) -> None:
    with _master(pg_server, tmp_path, {"log_retention_days": 0, "schedule": "1m"}) as m:
        agent = SimAgent(
            m.url, m.agent_token, "logs-sched", slots=1, train=logging_training(m.agent_token)
        ).start()
        try:
            eid = create_via_api(m, sim_config("logs-sched", trials=1))
            cli_support.wait_state(m, eid, "STATE_COMPLETED", 90)
            (trial,) = cli_support.trials(m, eid)
            # The master's first scheduled run came at its start, before the trial logged; rather
            # than wait out the schedule's minute, that run is moved two minutes back: the next
            # check (every log_retention.CHECK_SECONDS) finds a run due by the schedule and makes
            # it, by itself. (Before the first run there is no row; the first run then cleans.)
            with psycopg.connect(db_url(m), autocommit=True) as conn:
                conn.execute(
                    "UPDATE log_retention_runs SET last_run_at = now() - interval '2 minutes'"
                )
            # Within a check interval (generous on a loaded machine).
            wait(lambda: log_lines(m, str(trial["taskId"])) == 0, 180, "the scheduled cleanup")
            with psycopg.connect(db_url(m)) as conn:
                run = conn.execute("SELECT last_run_at FROM log_retention_runs").fetchone()
            assert run is not None and run[0] > dt.datetime.now(dt.UTC) - dt.timedelta(minutes=10)
        finally:
            agent.stop()


def test_official_retention_and_cleanup_keep_and_delete_as_set(
    cli_master: ThreadedMaster, tmp_path: Path, det: Det
) -> None:
    m = cli_master
    o = Official(ensure_official_venv(), m, tmp_path)
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")
    short_eid, _, short_task = finished_trial(m, "logs-short")
    _, forever_tid, forever_task = finished_trial(m, "logs-forever")
    _, _, old_task = finished_trial(m, "logs-old")
    _, _, fresh_task = finished_trial(m, "logs-fresh")

    o("experiment", "set", "log-retention", str(short_eid), "--days", "0")
    o("trial", "set", "log-retention", str(forever_tid), "--forever")
    for task in (forever_task, old_task):
        ended_days_ago(m, task, 31)  # past the master's 30 days

    out = o("task", "cleanup-logs")
    assert "Deleted 8 rows of log entries." in out, out
    assert log_lines(m, short_task) == 0  # its own 0 days
    assert log_lines(m, old_task) == 0  # the master's 30 days
    assert log_lines(m, forever_task) == 4  # --forever wins over the master's days
    assert log_lines(m, fresh_task) == 4  # ended now: 30 days to go
    det.login()
    r = det("task", "cleanup-logs")
    assert r.rc == 0 and "Deleted 0 rows" in r.out, r.err

    # Ours set it too, and bad values are refused in one line, changing nothing.
    assert det("trial", "set", "log-retention", str(forever_tid), "--days", "3").rc == 0
    with psycopg.connect(db_url(m)) as conn:
        days = conn.execute(
            "SELECT log_retention_days FROM trials WHERE id = %s", (forever_tid,)
        ).fetchone()
    assert days == (3,)
    s = m.session()
    for value in (40000, -2, "x"):
        r = s.put(f"{m.url}/api/v1/trials/{forever_tid}/retain_logs", json={"numDays": value})
        assert r.status_code == 400 and "numDays" in r.json()["message"], r.text
    assert log_retention.check_days(-1) == -1


def test_only_owners_set_retention_only_admins_clean_and_only_ended(
    cli_master: ThreadedMaster,
) -> None:
    m = cli_master
    eid, tid, _ = finished_trial(m, "logs-owned")
    m.post("/api/v1/users", {"user": {"username": "logs-user"}, "password": "Logs-user-pw1"})
    user = m.session(m.login("logs-user", "Logs-user-pw1"))
    r = user.put(f"{m.url}/api/v1/experiments/{eid}/retain_logs", json={"numDays": 1})
    assert r.status_code == 403, r.text
    r = user.put(f"{m.url}/api/v1/trials/{tid}/retain_logs", json={"numDays": 1})
    assert r.status_code == 403, r.text
    assert user.post(f"{m.url}/api/v1/cleanup_logs", json={}).status_code == 403

    paused = create_via_api(m, sim_config("logs-paused", trials=1), activate=False)
    r = m.session().put(f"{m.url}/api/v1/experiments/{paused}/retain_logs", json={"numDays": 1})
    assert r.status_code == 409 and "once it ended" in r.json()["message"], r.text


def test_deletion_goes_in_batches_and_leaves_other_tasks(pg_url: str) -> None:
    from det.master import db

    db.upgrade(pg_url)
    with psycopg.connect(pg_url) as conn:
        conn.execute(
            "INSERT INTO task_logs (task_id, log) SELECT t, 'x' FROM"
            " unnest(ARRAY['a', 'b', 'keep']) t, generate_series(1, 250)"
        )
    batches: list[int] = []

    def connect() -> psycopg.Connection[Any]:
        batches.append(1)
        return psycopg.connect(pg_url, row_factory=dict_row)

    removed = log_retention.delete_logs(connect, ["a", "b"], batch=100, pause=0)
    assert removed == 500
    assert len(batches) == 6  # 100, 100, 50 for each task: one transaction each
    with psycopg.connect(pg_url) as conn:
        left = conn.execute("SELECT task_id, count(*) FROM task_logs GROUP BY task_id").fetchall()
    assert left == [("keep", 250)]


def test_remaining_log_retention_days_count_as_determined_does(cli_master: ThreadedMaster) -> None:
    """GetTrialRemainingLogRetentionDays (the WebUI's trial page): whole days left of the
    trial's own retention, else the master's 30; -1 kept forever; none while not ended."""
    m = cli_master
    _, tid, task = finished_trial(m, "logs-remaining")
    path = f"/api/v1/trials/{tid}/remaining_log_retention_days"
    assert m.get(path) == {"remainingDays": 29}  # ended just now: 29 whole days and change
    ended_days_ago(m, task, 5)
    assert m.get(path) == {"remainingDays": 24}
    ended_days_ago(m, task, 31)
    assert m.get(path) == {"remainingDays": 0}
    m.session().put(f"{m.url}/api/v1/trials/{tid}/retain_logs", json={"numDays": -1})
    assert m.get(path) == {"remainingDays": -1}
    m.session().put(f"{m.url}/api/v1/trials/{tid}/retain_logs", json={"numDays": 40})
    assert m.get(path) == {"remainingDays": 8}

    paused = create_via_api(m, sim_config("logs-remaining-paused", trials=1), activate=False)
    wait(lambda: cli_support.trials(m, paused), 30, "the paused experiment's trial")
    (trial,) = cli_support.trials(m, paused)
    assert m.get(f"/api/v1/trials/{trial['id']}/remaining_log_retention_days") == {}
    r = m.session().get(f"{m.url}/api/v1/trials/987654/remaining_log_retention_days")
    assert r.status_code == 404, r.text


def test_logs_retention_deleted_say_so_in_the_api_cli_official_client_and_webui(
    cli_master: ThreadedMaster,
    tmp_path: Path,
    det: Det,
    page: Any,  # noqa: F811
) -> None:
    """Issue 41 item 6: after retention, a trial's or task's logs answer says when they were
    deleted (X-Det-Logs-Deleted, which the official client ignores), det's CLI prints it on
    stderr and the WebUI's log view shows it, rather than an empty log."""
    m = cli_master
    _, gone_tid, gone_task = finished_trial(m, "logs-gone")
    _, kept_tid, kept_task = finished_trial(m, "logs-kept")
    m.session().put(f"{m.url}/api/v1/trials/{gone_tid}/retain_logs", json={"numDays": 0})
    before = dt.datetime.now(dt.UTC)
    m.post("/api/v1/cleanup_logs")
    assert log_lines(m, gone_task) == 0 and log_lines(m, kept_task) == 4

    s = m.session()
    for path in (f"/api/v1/trials/{gone_tid}/logs", f"/api/v1/tasks/{gone_task}/logs"):
        r = s.get(m.url + path, params={"follow": "false"}, timeout=30)
        assert r.status_code == 200 and r.text == "", (path, r.text)
        when = dt.datetime.fromisoformat(r.headers["X-Det-Logs-Deleted"].replace("Z", "+00:00"))
        assert before - dt.timedelta(seconds=5) <= when <= dt.datetime.now(dt.UTC), when
    kept = s.get(f"{m.url}/api/v1/trials/{kept_tid}/logs", timeout=30)
    assert "X-Det-Logs-Deleted" not in kept.headers and len(kept.text.splitlines()) == 4

    # det's CLI: nothing on stdout, the reason on stderr, exit 0; a trial with logs: no note.
    det.login()
    day = when.strftime("%Y-%m-%d")
    for args in (("trial", "logs", str(gone_tid)), ("task", "logs", gone_task)):
        r = det(*args)
        assert r.rc == 0 and r.out == "", (args, r)
        assert f"logs deleted by the retention policy on {day}" in r.err, (args, r.err)
    r = det("trial", "logs", str(kept_tid))
    assert r.rc == 0 and len(r.out.splitlines()) == 4 and "retention" not in r.err

    # The official client reads the same answer as before (its bindings skip headers).
    o = Official(ensure_official_venv(), m, tmp_path)
    o("user", "login", "admin", stdin=ADMIN_PASSWORD + "\n")

    def official_lines(tid: int) -> list[str]:
        out = o("trial", "logs", str(tid)).strip().splitlines()
        assert out[-1].startswith("Trial log stream ended"), out  # its own closing line
        return out[:-1]

    assert official_lines(gone_tid) == [] and len(official_lines(kept_tid)) == 4

    # The WebUI's log view.
    login(page, m, f"/det/trials/{gone_tid}")
    note = page.locator("pre.logs .logs-deleted")
    note.wait_for(timeout=30_000)
    assert f"Logs deleted by the retention policy on {day}" in note.inner_text()
    page.goto(f"{m.url}/det/trials/{kept_tid}")
    page.locator("pre.logs .log-line").first.wait_for(timeout=30_000)
    assert page.locator("pre.logs .logs-deleted").count() == 0
