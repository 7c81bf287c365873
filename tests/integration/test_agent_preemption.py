"""The agent carries the cloud's spot/preemption notice in its heartbeats.

Real `det-agent` process, fake master (tests/fakes/master.py) and fake metadata server
(tests/fakes/imds.py); the notice classes are the real `det.agent.notice_aws` / `notice_gcp`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.imds import FakeImds
from tests.fakes.master import FakeMaster

pytestmark = [pytest.mark.integration, pytest.mark.docker]


@pytest.fixture
def master() -> Iterator[FakeMaster]:
    m = FakeMaster(token="tok", heartbeat_seconds=0.2).start()
    yield m
    m.stop()


def _agent(
    master: FakeMaster, imds: FakeImds, kind: str, tmp: Path
) -> tuple[str, subprocess.Popen[bytes]]:
    pytest.importorskip("docker").from_env().ping()
    agent_id = f"test-notice-{uuid.uuid4().hex[:8]}"
    cmd = [
        sys.executable,
        "-m",
        "det.agent",
        "--master-url",
        master.url,
        "--agent-id",
        agent_id,
        "--agent-token",
        "tok",
        "--state-dir",
        str(tmp),
        "--slot-type",
        "none",
        "--preemption-notice",
        kind,
        "--preemption-metadata-url",
        imds.url,
    ]
    env = {**os.environ, "DET_PREEMPTION_POLL_SECONDS": "0.2"}
    with open(tmp / "agent.log", "wb") as log:  # the child keeps its own copy of the fd
        return agent_id, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


@pytest.mark.parametrize(("kind", "source"), [("aws", "aws-spot"), ("gcp", "gcp-preemption")])
def test_heartbeats_carry_the_notice_once_the_cloud_publishes_it(
    master: FakeMaster, tmp_path: Path, kind: str, source: str
) -> None:
    with FakeImds() as imds:
        agent_id, proc = _agent(master, imds, kind, tmp_path)
        try:

            def last_body() -> dict[str, Any] | None:
                beats = master.heartbeats.get(agent_id) or []
                return beats[-1][1] if len(beats) >= 3 else None

            body = master.wait_for(last_body, desc="heartbeats")
            assert body["preemptionNotice"] is None
            assert body["slots"] == []  # slot_type none
            imds.trigger_spot_interruption()

            def notice() -> dict[str, Any] | None:
                beats = master.heartbeats.get(agent_id) or []
                return beats[-1][1]["preemptionNotice"] if beats else None

            got = master.wait_for(notice, desc="preemptionNotice")
            assert got["source"] == source
            assert got["deadline"]
        finally:
            proc.terminate()
            proc.wait(timeout=20)
