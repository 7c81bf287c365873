"""What an agent's heartbeat writes: its liveness, and its slots only when they changed (a
heartbeat every second per agent must not rewrite every slot row: new row versions, WAL and
vacuum work for nothing)."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

pytestmark = pytest.mark.integration


def _beat(m: Any, slots: list[dict[str, Any]]) -> None:
    s = m.new_session()
    s.headers["Authorization"] = f"Bearer {m.agent_token}"
    body = {"resourcePool": "default", "version": "t", "slots": slots, "containers": []}
    r = s.post(f"{m.url}/api/v1/agents/a1/heartbeat", json=body)
    assert r.status_code == 200, r.text


def _slot_versions(db_url: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(db_url, autocommit=True) as c:
        rows = c.execute(
            "SELECT slot_id, xmin::text, brand FROM slots WHERE agent_id = 'a1' ORDER BY slot_id"
        ).fetchall()
    return [(str(a), str(b), str(d)) for a, b, d in rows]


def test_an_unchanged_slot_is_not_rewritten_and_a_changed_one_is(
    api_master: Any, pg_url: str
) -> None:
    slots = [{"id": str(i), "type": "cpu", "brand": "x"} for i in range(2)]
    _beat(api_master, slots)
    first = _slot_versions(pg_url)
    assert [s[0] for s in first] == ["0", "1"]
    _beat(api_master, slots)
    assert _slot_versions(pg_url) == first  # same row versions: nothing written

    slots[1]["brand"] = "y"
    _beat(api_master, slots)
    now = _slot_versions(pg_url)
    assert now[0] == first[0] and now[1][1] != first[1][1] and now[1][2] == "y"

    _beat(api_master, slots[:1])  # a slot gone from the report is gone from the table
    assert [s[0] for s in _slot_versions(pg_url)] == ["0"]
