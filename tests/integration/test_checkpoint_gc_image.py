"""The checkpoint-GC image (``task_container_defaults.checkpoint_gc_image``): a GC task runs in
it on a real ``det-agent`` with Docker, and deletes the checkpoint files.

The experiment's trial runs on a simulated agent (it registers checkpoints; the test writes
their files into the shared_fs storage); its environment image does not exist, so a GC task
that ran in the experiment's image could not even start. The GC image is
``det-checkpoint-gc:py3.11`` (``infra/build-images.sh gc``): no det inside, the agent's harness
bundle brings it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from det.deploy.common.gc_image import IMAGE as GC_IMAGE
from tests.docker_support import docker_client
from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import Master, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.docker]

# Never built anywhere: a GC in the experiment's image fails to pull it.
ABSENT_IMAGE = "det-test-absent-image:gc"
CONFIG = f"""
name: gc-image
entrypoint: python3 train.py
searcher: {{name: single, metric: validation_loss}}
hyperparameters: {{lr: 0.5}}
environment: {{image: {ABSENT_IMAGE}}}
checkpoint_storage: {{save_trial_best: 10, save_trial_latest: 10}}
"""


def test_a_gc_task_runs_in_the_gc_image_on_a_docker_agent_and_deletes_the_files(
    master_factory: Any, tmp_path: Path
) -> None:
    engine = docker_client(GC_IMAGE)
    m: Master = master_factory(extra={"task_container_defaults": {"checkpoint_gc_image": GC_IMAGE}})
    sim = SimAgent(m.url, m.agent_token, f"sim-{uuid.uuid4().hex[:8]}").start()
    eid = int(
        m.post("/api/v1/experiments", {"config": CONFIG, "activate": True})["experiment"]["id"]
    )
    wait_for(
        lambda: m.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED",
        60,
        what="the experiment",
    )
    # No new task goes to the simulated agent: the GC task waits for the Docker agent.
    m.post(f"/api/v1/agents/{sim.agent_id}/disable", {"drain": False})
    sim.stop()
    uuids = [c["uuid"] for c in m.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]]
    assert len(uuids) == 4  # the policy kept all four
    storage = tmp_path / "checkpoints"
    for u in uuids:
        (storage / u / "sub").mkdir(parents=True)
        (storage / u / "model.pt").write_bytes(b"weights")
        (storage / u / "sub" / "state.json").write_text("{}")
    doomed, kept = uuids[:3], uuids[3]

    agent_id = f"gc-agent-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "det.agent", "--master-url", m.url, "--agent-id", agent_id,
             "--agent-token-file", str(m.data_dir / "agent_token"),
             "--state-dir", str(tmp_path / "agent-state"), "--artificial-slots", "1",
             "--heartbeat-seconds", "0.2"],
            stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ),
        )  # fmt: skip
    try:
        r = m.session().delete(
            m.url + "/api/v1/checkpoints", json={"checkpointUuids": doomed}, timeout=30
        )
        assert r.status_code == 200, r.text

        def states() -> dict[str, str]:
            rows = m.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]
            return {c["uuid"]: c["state"] for c in rows}

        wait_for(
            lambda: all(states()[u] == "STATE_DELETED" for u in doomed),
            180,
            what=f"the GC task on the Docker agent (its log: {log})",
        )
        assert states()[kept] == "STATE_COMPLETED"
        for u in doomed:
            assert not (storage / u).exists(), u
        assert (storage / kept / "sub" / "state.json").is_file()
        # The agent started the GC task's container from the GC image (its log says so).
        text = log.read_text(errors="replace")
        assert f"(image {GC_IMAGE})" in text, text[-2000:]
        assert ABSENT_IMAGE not in text
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        for c in engine.containers.list(all=True, filters={"label": f"ai.det.agent-id={agent_id}"}):
            c.remove(force=True)
