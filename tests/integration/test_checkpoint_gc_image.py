"""The checkpoint-GC image (``task_container_defaults.checkpoint_gc_image``): a GC task runs in
it on a real ``det-agent`` with Docker, and deletes the checkpoint files.

The experiment's trial runs on a simulated agent (it registers checkpoints; the test writes
their files into the shared_fs storage); its environment image does not exist, so a GC task
that ran in the experiment's image could not even start. The GC image is
``det-checkpoint-gc:py3.11`` (``infra/build-images.sh gc``): no det inside, the agent's harness
bundle brings it. Its storage clients are proven against moto's S3 and the GCS emulator by the
GC command alone in a container of it (no master needed for that). The agent is a process of its
own; the master is served on a real port by a thread of the test's process with its control
loop (``threaded_master_factory``, tests/integration/threaded.py): nothing checked needs a
master process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from det import storage
from det.agent import harness_bundle
from det.deploy.common.gc_image import IMAGE as GC_IMAGE
from tests.docker_support import docker_client
from tests.fakes.moto_server import MotoServer
from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.storage_support import gcs_emulator
from tests.integration.threaded import ThreadedMaster

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
    threaded_master_factory: Any, tmp_path: Path
) -> None:
    engine = docker_client(GC_IMAGE)
    m: ThreadedMaster = threaded_master_factory(
        extra={"task_container_defaults": {"checkpoint_gc_image": GC_IMAGE}}
    )
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
        for c in engine.containers.list(
            all=True, ignore_removed=True, filters={"label": f"ai.det.agent-id={agent_id}"}
        ):
            c.remove(force=True)


@pytest.mark.parametrize("kind", ["s3", "gcs"])
def test_the_gc_image_deletes_from_s3_and_gcs_with_its_own_clients(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The GC command in the GC image, with the harness bundle mounted as the agent mounts it:
    the image's boto3 / google-cloud-storage delete one checkpoint and leave the other (moto
    and the GCS emulator on this host; the container shares its network)."""
    docker_client(GC_IMAGE)
    bundle = harness_bundle.build(tmp_path / "harness")
    with contextlib.ExitStack() as stack:
        env: dict[str, str] = {"AWS_EC2_METADATA_DISABLED": "true"}
        if kind == "s3":
            # The test process's moto (conftest_aws), asked for here: the GCS case needs none.
            moto: MotoServer = request.getfixturevalue("moto_server")
            moto.reset()
            url = moto.endpoint
            config: dict[str, Any] = {
                "type": "s3", "bucket": "ckpts", "prefix": "team", "endpoint_url": url,
                "access_key": "k", "secret_key": "s",
            }  # fmt: skip
            monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
            env["AWS_DEFAULT_REGION"] = "us-east-1"
            boto3 = pytest.importorskip("boto3")
            boto3.client(
                "s3", endpoint_url=url, aws_access_key_id="k", aws_secret_access_key="s"
            ).create_bucket(Bucket="ckpts")
        else:
            url = stack.enter_context(gcs_emulator(tmp_path))
            config = {"type": "gcs", "bucket": "ckpts", "prefix": "team"}
            monkeypatch.setenv("STORAGE_EMULATOR_HOST", url)
            env["STORAGE_EMULATOR_HOST"] = url
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import storage as gcs

            gcs.Client(project="test", credentials=AnonymousCredentials()).create_bucket("ckpts")
        manager = storage.from_config(config)
        src = tmp_path / "src"
        (src / "sub").mkdir(parents=True)
        (src / "model.pt").write_bytes(b"weights")
        (src / "sub" / "state.json").write_text("{}")
        doomed, kept = str(uuid.uuid4()), str(uuid.uuid4())
        manager.upload(src, doomed)
        manager.upload(src, kept)
        env.update(
            {
                "PYTHONPATH": harness_bundle.python_path(None),
                "DET_CHECKPOINT_STORAGE": json.dumps(config),
                "DET_DELETE_CHECKPOINTS": json.dumps([doomed]),
            }
        )
        argv = ["docker", "run", "--rm", "--network", "host"]
        argv += ["-v", f"{bundle}:{harness_bundle.CONTAINER_PATH}:ro"]
        for key, value in env.items():
            argv += ["-e", f"{key}={value}"]
        argv += [GC_IMAGE, "python3", "-m", "det.exec.gc_checkpoints"]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        assert f"checkpoint {doomed}: deleted" in r.stdout + r.stderr
        out = tmp_path / "kept"
        storage.download_checkpoint(config, kept, str(out))
        assert (out / "sub" / "state.json").read_text() == "{}"
        assert manager.delete(doomed) == {}  # nothing of it was left to delete
