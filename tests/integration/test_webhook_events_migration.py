"""Migration 0041 (webhook delivery state) on a queue written by the code before it: each old
event keeps the id its receiver got (a DEFAULT payload's ``event_id``), a Slack one gets a new
id, the type comes from the payload, and an event the old sender gave up on is a dead letter
that can be re-sent with the same id."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from det.master import db
from det.master.services import webhooks

pytestmark = pytest.mark.integration

MIGRATION = "webhook_delivery_state"


def test_old_events_keep_their_ids_and_dead_ones_can_be_resent(pg_url: str) -> None:
    (target,) = [v for v, name, _ in db._migrations() if name == MIGRATION]
    with psycopg.connect(pg_url, autocommit=True) as c:
        c.execute(
            "CREATE TABLE schema_migrations (version int PRIMARY KEY, name text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, name, sql in db._migrations():
            if version >= target:
                break
            c.execute(sql.encode())
            c.execute("INSERT INTO schema_migrations VALUES (%s, %s)", (version, name))
        hook = c.execute(
            "INSERT INTO webhooks (name, url, webhook_type) VALUES ('h', 'http://x/h', 'DEFAULT')"
            " RETURNING id"
        ).fetchone()
        assert hook is not None
        pending_id = str(uuid.uuid4())
        dead_id = str(uuid.uuid4())
        for payload, failed in (
            ({"event_id": pending_id, "event_type": "EXPERIMENT_STATE_CHANGE"}, False),
            ({"event_id": dead_id, "event_type": "TASK_LOG"}, True),
            ({"blocks": []}, False),  # Slack: no id in the payload
        ):
            c.execute(
                "INSERT INTO webhook_events (webhook_id, url, webhook_type, payload, attempts,"
                " created_at, failed_at) VALUES (%s, 'http://x/h', 'DEFAULT', %s, 5,"
                " now() - interval '1 hour', CASE WHEN %s THEN now() END)",
                (hook[0], json.dumps(payload), failed),
            )

    assert target in db.upgrade(pg_url)

    with psycopg.connect(pg_url, autocommit=True, row_factory=dict_row) as c:
        rows = c.execute(
            "SELECT event_id, event_type, retry_since = created_at AS clock FROM webhook_events"
            " ORDER BY id"
        ).fetchall()
        assert [str(r["event_id"]) for r in rows[:2]] == [pending_id, dead_id]
        assert isinstance(rows[2]["event_id"], uuid.UUID)
        assert [r["event_type"] for r in rows] == ["EXPERIMENT_STATE_CHANGE", "TASK_LOG", "UNKNOWN"]
        assert all(r["clock"] for r in rows)
        listed = webhooks.events(c, hook[0], "DEAD")  # type: ignore[arg-type]
        assert [str(e["event_id"]) for e in listed] == [dead_id]
        assert webhooks.resend(c, hook[0], None) == [uuid.UUID(dead_id)]  # type: ignore[arg-type]
        again = webhooks.events(c, hook[0], "PENDING")  # type: ignore[arg-type]
        assert sorted(str(e["event_id"]) for e in again) == sorted(
            [pending_id, dead_id, str(rows[2]["event_id"])]
        )
        assert [(e["attempts"], e["resends"]) for e in again if str(e["event_id"]) == dead_id] == [
            (0, 1)
        ]
