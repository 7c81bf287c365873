"""det-agent against a real det master (real PostgreSQL): registration and authentication.

The contract test between the two sides of the agent protocol; no containers are started. The
agent is a process of its own; the master is served on a real port by a thread of the test's
process (``threaded_master``, tests/integration/threaded.py): nothing here needs a master
process (no signal, restart or second master process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests import stall_clock
from tests.integration.conftest import wait_for
from tests.integration.threaded import ThreadedMaster

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture
def run_agent(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("docker").from_env().ping()
    procs: list[subprocess.Popen[bytes]] = []

    def start(master: ThreadedMaster, *args: str) -> tuple[str, Path]:
        agent_id = f"agent-{uuid.uuid4().hex[:8]}"
        log = tmp_path / f"{agent_id}.log"
        cmd = [
            sys.executable,
            "-m",
            "det.agent",
            "--master-url",
            master.url,
            "--agent-id",
            agent_id,
            "--state-dir",
            str(tmp_path / "state"),
            *args,
        ]
        with open(log, "wb") as out:
            procs.append(
                subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
            )
        return agent_id, log

    yield start
    for p in procs:
        p.send_signal(signal.SIGTERM)
        stall_clock.wait_process(p, 20)


def test_agent_registers_with_its_slots_and_labels(
    threaded_master: ThreadedMaster, run_agent: Any
) -> None:
    token_file = threaded_master.data_dir / "agent_token"
    agent_id, _ = run_agent(
        threaded_master,
        "--agent-token-file",
        str(token_file),
        "--artificial-slots",
        "2",
        "--label",
        "zone=a",
    )

    def registered() -> dict[str, Any] | None:
        agents = threaded_master.get("/api/v1/agents")["agents"]
        return next((a for a in agents if a["id"] == agent_id), None)

    agent = wait_for(registered, what="agent registered")
    assert len(agent["slots"]) == 2
    assert {s["device"]["type"] for s in agent["slots"].values()} == {"TYPE_CPU"}
    assert agent["labels"] == {"zone": "a"}
    assert agent["resourcePools"] == ["default"]
    assert agent["addresses"]


def test_agent_with_a_wrong_token_is_refused_and_keeps_retrying(
    threaded_master: ThreadedMaster, run_agent: Any
) -> None:
    agent_id, log = run_agent(
        threaded_master, "--agent-token", "not-the-token", "--log-level", "DEBUG"
    )
    wait_for(lambda: log.read_text().count("heartbeat refused") >= 2, what="refused heartbeats")
    text = log.read_text()
    assert "master answered 401" in text and "check the agent token" in text
    assert "heartbeat failed" not in text  # a refusal is not reported as an outage
    agents = threaded_master.get("/api/v1/agents")["agents"]
    assert agent_id not in {a["id"] for a in agents}
