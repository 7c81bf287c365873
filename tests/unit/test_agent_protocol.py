"""The agent protocol's shared types (det.common.agent_protocol, det.common.states): what the
agent builds passes the master's own check of a heartbeat, what the master answers reads back in
the agent, and the states are the strings PostgreSQL holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from det.agent.daemon import parse_desired
from det.agent.devices import Slot
from det.agent.reconcile import UNKNOWN_ALLOCATION_ERROR, Actual, Desired, reports
from det.common import agent_protocol as protocol
from det.common.states import ALLOCATION_ORDER, AllocationState
from det.master import limits, states
from det.master.errors import InvalidArgument, PayloadTooLarge
from det.master.schemas import validate

MIGRATIONS = Path(__file__).resolve().parents[2] / "master" / "db" / "migrations"
REPORTED = [s for s in AllocationState if s is not AllocationState.PENDING]


def test_the_agents_heartbeat_passes_the_masters_contract() -> None:
    actual = [Actual(f"a-{s.value}", s, container_id=f"c-{s.value}") for s in REPORTED]
    actual.append(Actual("a-web", AllocationState.RUNNING, container_id="c-web", proxy_port=8888))
    desired = [Desired("a-gone", "KILL")]
    body: protocol.HeartbeatRequest = {
        "slots": [Slot("0", "cpu", None, "", 1024).to_wire()],
        "resourcePool": "default",
        "containers": reports(desired, actual),
    }
    checked = validate(protocol.HeartbeatRequest, body)
    got = {c["allocationId"]: c for c in checked["containers"]}
    assert [got[f"a-{s.value}"]["state"] for s in REPORTED] == [s.value for s in REPORTED]
    assert got["a-web"]["proxyPort"] == 8888
    assert got["a-gone"]["state"] == "TERMINATED"
    assert got["a-gone"]["error"] == UNKNOWN_ALLOCATION_ERROR
    assert checked["slots"][0]["memoryMb"] == 1024


def test_a_malformed_heartbeat_is_refused_naming_the_field() -> None:
    with pytest.raises(PayloadTooLarge, match="resourcePool"):
        validate(protocol.HeartbeatRequest, {"slots": [], "resourcePool": "p" * 513})
    with pytest.raises(InvalidArgument, match="slots"):
        validate(protocol.HeartbeatRequest, {"resourcePool": "default"})
    with pytest.raises(InvalidArgument, match="exitCode"):
        validate(protocol.HeartbeatRequest, {"slots": [], "containers": [{"exitCode": "x"}]})


def test_the_pool_name_limit_is_the_masters() -> None:
    assert protocol.POOL_NAME_MAX == limits.NAME


def test_the_masters_answer_reads_back_in_the_agent() -> None:
    answer: protocol.HeartbeatResponse = {
        "clusterId": "c1",
        "enabled": True,
        "draining": False,
        "heartbeatSeconds": 1.0,
        "containers": [
            {"allocationId": "a1", "action": "KILL"},
            {"allocationId": "a2", "action": "RUN", "spec": {"taskId": "t2"}},  # type: ignore[typeddict-item]
        ],
    }
    desired, specs = parse_desired(answer)
    assert desired == [Desired("a1", "KILL"), Desired("a2", "RUN")]
    assert specs["a2"]["taskId"] == "t2"
    with pytest.raises(InvalidArgument, match="action"):
        validate(protocol.DesiredContainer, {"allocationId": "a1", "action": "STOP"})


def test_the_states_are_the_strings_postgresql_holds() -> None:
    assert [s.value for s in ALLOCATION_ORDER] == [
        "PENDING", "ASSIGNED", "PULLING", "STARTING", "RUNNING", "TERMINATING", "TERMINATED",
    ]  # fmt: skip
    # The master's names are the shared members, and a row's string compares equal to them.
    assert list(AllocationState) == states.ALLOCATION_ORDER
    assert states.TERMINATED is AllocationState.TERMINATED
    assert states.RUNNING == "RUNNING" and {"RUNNING": 1}[AllocationState.RUNNING] == 1
    assert f"{AllocationState.PULLING}" == "PULLING" == str(AllocationState.PULLING)
    # The allocation states the migrations name (indexes, triggers) are members: no migration.
    sql = " ".join(p.read_text() for p in sorted(MIGRATIONS.glob("*.sql")))
    for named in ("'TERMINATED'", "'ASSIGNED'"):
        assert named in sql and AllocationState(named.strip("'"))


def test_the_stand_in_for_older_pythons_behaves_as_strenum() -> None:
    """Task images' Pythons before 3.11 get det.common.states' str+Enum stand-in: run that
    branch here (the module's source with the version test false) and use it as StrEnum is."""
    source = Path(__file__).resolve().parents[2] / "harness" / "common" / "states.py"
    text = source.read_text()
    assert text.count("sys.version_info >= (3, 11)") == 1
    namespace: dict[str, object] = {"__name__": "states_before_311"}
    exec(
        compile(text.replace("sys.version_info >= (3, 11)", "False"), str(source), "exec"),
        namespace,
    )
    old = namespace["AllocationState"]
    assert not issubclass(old, AllocationState)  # type: ignore[arg-type]  # the stand-in ran
    running = old("RUNNING")  # type: ignore[operator]
    assert running == "RUNNING" and str(running) == "RUNNING" and f"{running}" == "RUNNING"
    assert f"{running:>8}" == " RUNNING" and json.dumps({"s": running}) == '{"s": "RUNNING"}'
    assert [s.value for s in old] == [s.value for s in AllocationState]  # type: ignore[attr-defined]
