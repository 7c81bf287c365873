"""``det agent``, ``det slot`` and ``det resource-pool`` against the master's app and control loop
in the test's process (``loop_cli_master``) with SimAgents."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration import cli_support
from tests.integration.cli_support import Det
from tests.integration.conftest import MasterClient

pytestmark = pytest.mark.integration
cli_master = cli_support.loop_cli_master
det = cli_support.det
sim_agents = cli_support.sim_agents


def agent(master: MasterClient, agent_id: str) -> dict[str, Any]:
    return dict(master.get(f"/api/v1/agents/{agent_id}")["agent"])


def test_agent_list(det: Det, sim_agents: object) -> None:
    det.login()
    agents = {a["id"]: a for a in det.ok("agent", "list", "--json").json()}
    assert set(agents) == {"sim-0", "sim-1"}
    assert all(len(a["slots"]) == 2 for a in agents.values())
    table = det.ok("a", "ls").out
    assert "Agent ID" in table and "sim-0" in table and "sim-1" in table


def test_agent_disable_drain_and_enable(
    det: Det, cli_master: MasterClient, sim_agents: object
) -> None:
    det.login()
    det.ok("agent", "disable", "sim-0", "--drain")
    a = agent(cli_master, "sim-0")
    assert a["enabled"] is False and a["draining"] is True
    det.ok("agent", "enable", "sim-0")
    a = agent(cli_master, "sim-0")
    assert a["enabled"] is True and a["draining"] is False
    det.ok("agent", "disable", "sim-1")
    a = agent(cli_master, "sim-1")
    assert a["enabled"] is False and a["draining"] is False
    det.ok("agent", "enable", "--all")
    assert all(a["enabled"] for a in det.ok("a", "list", "--json").json())
    r = det("agent", "disable", "no-such-agent")
    assert r.rc == 1 and "not found" in r.err
    assert det("agent", "enable").rc == 2  # neither an id nor --all


def test_slot_list_disable_enable(det: Det, cli_master: MasterClient, sim_agents: object) -> None:
    det.login()
    slots = det.ok("slot", "list", "--json").json()
    assert {(s["agentId"], s["slotId"]) for s in slots} == {
        (f"sim-{i}", str(j)) for i in range(2) for j in range(2)
    }
    assert "FREE" in det.ok("slot", "ls").out
    det.ok("slot", "disable", "sim-0", "1")
    s = agent(cli_master, "sim-0")["slots"]
    assert [v["enabled"] for v in s.values() if v["id"] == "1"] == [False]
    listed = {(x["agentId"], x["slotId"]): x for x in det.ok("slot", "list", "--json").json()}
    assert listed[("sim-0", "1")]["enabled"] is False
    det.ok("slot", "enable", "sim-0", "1")
    s = agent(cli_master, "sim-0")["slots"]
    assert [v["enabled"] for v in s.values() if v["id"] == "1"] == [True]
    r = det("slot", "disable", "sim-0", "77")
    assert r.rc == 1 and "not found" in r.err


def test_resource_pool_list(det: Det, sim_agents: object) -> None:
    det.login()
    pools = det.ok("resource-pool", "list", "--json").json()
    default = next(p for p in pools if p["name"] == "default")
    assert default["numAgents"] == 2 and default["slotsAvailable"] == 4
    table = det.ok("rp", "ls").out
    assert "default" in table and "0/4" in table
