"""det's autoscaling views of a pool: their query is checked (a bad ``limit`` is a 400 naming
it, not a server error) and their answers are det's declared shapes."""

from __future__ import annotations

import pytest

from tests.integration.conftest import MasterClient

pytestmark = pytest.mark.integration


def test_pool_events_and_instances_check_their_query(api_master: MasterClient) -> None:
    s = api_master.session()
    base = f"{api_master.url}/api/v1/resource-pools/default"
    bad = s.get(f"{base}/events", params={"limit": "many"}, timeout=10)
    assert bad.status_code == 400, bad.text
    assert "limit" in bad.json()["message"]
    ok = s.get(f"{base}/events", params={"limit": 0}, timeout=10)  # clamped to 1
    assert ok.status_code == 200 and len(ok.json()["events"]) <= 1
    assert s.get(f"{base}/instances", timeout=10).json() == {"instances": []}
    missing = s.get(f"{api_master.url}/api/v1/resource-pools/nope/events", timeout=10)
    assert missing.status_code == 404
