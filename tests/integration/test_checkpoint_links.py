"""The master's checkpoint download never reads a file it was not given as checkpoint content
(issue 23, finding 1): a task's link ``<uuid>/leak -> <the master's agent_token>`` in shared_fs
storage, downloaded as a tar by the user who owns the checkpoint, must not hand out the token.

The master's app in the test's process (``api_master``) over a real PostgreSQL with its default
shared_fs storage (what a process would log is read with caplog); the trial and
checkpoint rows stand for what a task reports (written with SQL: no agent is needed to place
files in shared_fs, which is what a task does)."""

from __future__ import annotations

import io
import os
import tarfile
import uuid
from pathlib import Path

import psycopg
import pytest
import requests

from tests.integration.inproc import InProcessMaster

pytestmark = pytest.mark.integration

CONFIG = """
name: links
entrypoint: python3 train.py
searcher: {name: single, metric: loss}
hyperparameters: {lr: 0.1}
"""


def _alice(m: InProcessMaster) -> str:
    m.post(
        "/api/v1/users", {"user": {"username": "alice", "admin": False}, "password": "Alice-pw-1"}
    )
    return m.login("alice", "Alice-pw-1")


def _checkpoint(m: InProcessMaster, pg_url: str, token: str) -> str:
    """A checkpoint of alice's experiment; returns its uuid."""
    r = m.session(token).post(
        m.url + "/api/v1/experiments", json={"config": CONFIG, "activate": False}, timeout=30
    )
    assert r.status_code == 200, r.text
    eid = int(r.json()["experiment"]["id"])
    uid = str(uuid.uuid4())
    with psycopg.connect(pg_url, autocommit=True) as c:
        trial = c.execute(
            "INSERT INTO trials (experiment_id, request_id, task_id, hparams, seed, state)"
            " VALUES (%s, 'r1', %s, '{\"lr\": 0.1}', 1, 'COMPLETED') RETURNING id",
            (eid, f"links-{eid}"),
        ).fetchone()
        assert trial is not None
        c.execute(
            "INSERT INTO checkpoints (uuid, trial_id, task_id, steps_completed, resources)"
            " VALUES (%s, %s, %s, 1, '{\"model.pt\": 7}')",
            (uid, trial[0], f"links-{eid}"),
        )
    return uid


def _download(m: InProcessMaster, token: str, uid: str) -> requests.Response:
    return m.session(token).get(f"{m.url}/checkpoints/{uid}", timeout=60)


def _members(body: bytes) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tf:
        for info in tf.getmembers():
            f = tf.extractfile(info) if info.isfile() else None
            out[info.name] = f.read() if f is not None else b"<" + info.type + b">"
    return out


def test_download_leaves_out_a_link_to_the_masters_agent_token(
    api_master: InProcessMaster, pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    token = _alice(api_master)
    uid = _checkpoint(api_master, pg_url, token)
    agent_token_file = api_master.data_dir / "agent_token"
    secret = agent_token_file.read_bytes()
    assert secret.strip()
    ckpt = api_master.data_dir.parent / "checkpoints" / uid
    ckpt.mkdir(parents=True)
    (ckpt / "model.pt").write_bytes(b"weights")
    os.symlink(str(agent_token_file), ckpt / "leak")
    os.symlink(os.path.relpath(agent_token_file, ckpt), ckpt / "leak-relative")
    os.symlink("model.pt", ckpt / "latest.pt")  # stays inside: its content is stored

    r = _download(api_master, token, uid)
    assert r.status_code == 200, r.text
    members = _members(r.content)
    assert members == {"model.pt": b"weights", "latest.pt": b"weights"}
    assert secret.strip() not in r.content and all(secret not in v for v in members.values())
    assert "leak skipped: a link that leaves the checkpoint directory" in caplog.text


def test_download_refuses_a_checkpoint_directory_that_is_a_link(
    api_master: InProcessMaster, pg_url: str, tmp_path: Path
) -> None:
    token = _alice(api_master)
    uid = _checkpoint(api_master, pg_url, token)
    storage = api_master.data_dir.parent / "checkpoints"
    storage.mkdir(parents=True, exist_ok=True)
    os.symlink(str(api_master.data_dir), storage / uid)  # the master's own directory

    r = _download(api_master, token, uid)
    assert r.status_code == 409, r.text
    assert "the checkpoint directory is a link" in r.json()["message"]
    assert api_master.agent_token.encode() not in r.content
