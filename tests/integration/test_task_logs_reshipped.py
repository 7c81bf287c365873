"""A container's lines shipped again by a restarted agent are stored once."""

from __future__ import annotations

import psycopg
import pytest

from tests.integration import cli_support
from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration


def _line(text: str, ts: str, container: str | None = "c-reship") -> dict[str, object]:
    return {
        "taskId": "reship-task",
        "allocationId": "reship-task.1",
        "agentId": "a-1",
        "containerId": container,
        "log": text,
        "timestamp": ts,
        "source": "container",
    }


@pytest.mark.parametrize("watched", [False, True], ids=["no log trigger", "a log trigger"])
def test_a_reshipped_batch_is_stored_once_and_repeats_in_a_batch_are_kept(
    api_master: InProcessMaster, pg_url: str, watched: bool
) -> None:
    """Both ways of storing a post: one statement when no webhook trigger watches log lines, a
    transaction with the events' check when one does (the lines stored once either way)."""
    if watched:
        with psycopg.connect(pg_url) as conn:
            conn.execute(
                "WITH w AS (INSERT INTO webhooks (name, url, webhook_type)"
                " VALUES ('h', 'http://127.0.0.1:9/', 'DEFAULT') RETURNING id)"
                " INSERT INTO webhook_triggers (webhook_id, trigger_type, condition)"
                " SELECT id, 'TASK_LOG', '{\"regex\": \"no such line\"}' FROM w"
            )
    agent = api_master.new_session()
    agent.headers["Authorization"] = f"Bearer {api_master.agent_token}"
    first = [
        _line("blank\n", "2026-11-25T10:00:00.000000001Z"),
        _line("blank\n", "2026-11-25T10:00:00.000000001Z"),  # the same instant, twice: 2 lines
        _line("step 50\n", "2026-11-25T10:00:01.5Z"),
        _line("from the harness\n", "2026-11-25T10:00:01.5Z", container=None),
    ]
    # The agent died before saving its cursor: it ships the same lines again, and new ones.
    again = [*first, _line("step 100\n", "2026-11-25T10:00:02Z")]
    for batch in (first, again):
        r = agent.post(f"{api_master.url}/api/v1/task/logs", json={"logs": batch}, timeout=30)
        assert r.status_code == 200, r.text
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT container_id, log FROM task_logs WHERE task_id = 'reship-task' ORDER BY id"
        ).fetchall()
    assert rows == [
        ("c-reship", "blank\n"),
        ("c-reship", "blank\n"),
        ("c-reship", "step 50\n"),
        (None, "from the harness\n"),
        (None, "from the harness\n"),  # no container: nothing says it is the same line
        ("c-reship", "step 100\n"),
    ]


def test_the_legacy_route_reads_a_text_rank_and_refuses_one_past_the_column(
    api_master: InProcessMaster, pg_url: str
) -> None:
    """Determined's unmanaged shipper (``POST /task-logs``) sends the rank as text: ASCII digits
    are the rank, anything else none (a superscript two counts as a digit to Python, and
    ``int`` refused it: a 500); a rank past a 32-bit integer is a 400 naming the line, and none
    of the batch is stored."""
    s, url = api_master.session(), api_master.url
    _, tid = cli_support.unmanaged_trial(s, url, "legacy")
    with psycopg.connect(pg_url) as conn:
        (task_id,) = conn.execute("SELECT task_id FROM trials WHERE id = %s", (tid,)).fetchone()  # type: ignore[misc]

    def lines(*ranks: str | None) -> list[dict[str, object]]:
        return [{"task_id": task_id, "log": f"rank {k!r}\n", "rank": k} for k in ranks]

    r = s.post(f"{url}/task-logs", json=lines("3", "\u00b2", "x", None), timeout=30)
    assert r.status_code == 200, r.text
    r = s.post(f"{url}/task-logs", json=lines("1", "99999999999"), timeout=30)
    assert r.status_code == 400 and "[1].rank" in r.json()["message"], r.text
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT rank_id, log FROM task_logs WHERE task_id = %s ORDER BY id", (task_id,)
        ).fetchall()
    assert rows == [
        (3, "rank '3'\n"),
        (None, "rank '²'\n"),
        (None, "rank 'x'\n"),
        (None, "rank None\n"),
    ]
