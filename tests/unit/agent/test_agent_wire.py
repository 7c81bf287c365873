"""The agent's side of the wire: container environment and heartbeat answers."""

from __future__ import annotations

import json

from det.agent.containers import container_env
from det.agent.daemon import parse_desired
from det.agent.reconcile import Desired


def test_container_env_adds_the_agents_view_over_the_spec() -> None:
    spec = {
        "taskId": "7.1",
        "slotIds": ["0", 1],
        "env": {"DET_MASTER": "http://m:8080", "DET_AGENT_ID": "master-guess", "N": 3},
    }
    env = container_env(spec, "agent-1", "cid-1", "7.1.1")
    assert env["DET_AGENT_ID"] == "agent-1"  # the agent's own view wins
    assert json.loads(env["DET_SLOT_IDS"]) == ["0", "1"]
    assert env["DET_CONTAINER_ID"] == "cid-1"
    assert env["DET_ALLOCATION_ID"] == "7.1.1"
    assert env["DET_TASK_ID"] == "7.1"
    assert env["DET_RESOURCES_TYPE"] == "docker-container"
    assert env["DET_MASTER"] == "http://m:8080"
    assert env["N"] == "3"


def test_container_env_keeps_master_values_it_only_defaults() -> None:
    spec = {"env": {"DET_ALLOCATION_ID": "from-master", "DET_RESOURCES_TYPE": "docker-container"}}
    env = container_env(spec, "a", "c", "other")
    assert env["DET_ALLOCATION_ID"] == "from-master"
    assert env["DET_SLOT_IDS"] == "[]"
    assert "DET_TASK_ID" not in env


def test_parse_desired_keeps_specs_of_runs_and_skips_malformed_items() -> None:
    answer = {
        "containers": [
            {"allocationId": "1", "action": "RUN", "spec": {"image": "x"}},
            {"allocationId": "2", "action": "KILL"},
            {"allocationId": "3", "action": "PAUSE"},
            {"action": "RUN"},
        ]
    }
    desired, specs = parse_desired(answer)
    assert desired == [Desired("1", "RUN"), Desired("2", "KILL")]
    assert specs == {"1": {"image": "x"}}
    assert parse_desired({}) == ([], {})
