"""``DELETE /api/v1/experiments/{id}/tensorboard-files`` (``det experiment delete-tb-files``): the
experiment's GC task deletes the TensorBoard files its trials uploaded, and nothing else; the GC
of a deleted experiment takes them with its checkpoints. The GC command is the real one (the
simulated agent runs it in process) on a real shared_fs directory."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import psycopg
import pytest

from det import storage
from tests.fakes.sim_agent import SimAgent
from tests.integration.conftest import wait_for
from tests.integration.inproc import InProcessMaster
from tests.integration.test_checkpoint_gc import create_and_complete, states_by_step

pytestmark = pytest.mark.integration


def _config(root: pathlib.Path, keep: int) -> str:
    return f"""
name: tb-files
entrypoint: python3 train.py
searcher: {{name: single, metric: validation_loss}}
hyperparameters: {{lr: 0.5}}
checkpoint_storage: {{type: shared_fs, host_path: {root}, save_trial_latest: {keep}}}
"""


def _upload_tensorboard_files(
    m: InProcessMaster, root: pathlib.Path, eid: int, tmp: pathlib.Path
) -> None:
    """What a trial's TensorBoard sync leaves in storage (Determined's layout)."""
    cluster = m.get("/api/v1/master")["clusterId"]
    manager = storage.from_config({"type": "shared_fs", "host_path": str(root)})
    events = tmp / f"tb-{eid}" / "1"
    events.mkdir(parents=True)
    (events / "events.out.tfevents.1.host").write_bytes(b"\x00" * 64)
    manager.under(f"{cluster}/tensorboard/experiment/{eid}/trial").upload(events, "1")


def _tensorboard_dir(m: InProcessMaster, root: pathlib.Path, eid: int) -> pathlib.Path:
    cluster = m.get("/api/v1/master")["clusterId"]
    (found,) = [p for p in root.rglob(f"{cluster}/tensorboard/experiment/{eid}") if p.is_dir()]
    return found


def _gc_events(m: InProcessMaster, eid: int) -> list[str]:
    with psycopg.connect(m.db_url) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT message FROM events WHERE entity = 'experiment' AND entity_id = %s"
                " AND kind = 'checkpoint-gc' ORDER BY id",
                (str(eid),),
            )
        ]


@pytest.fixture
def agent(loop_master: InProcessMaster) -> Iterator[SimAgent]:
    """A simulated agent: it trains the experiments and runs the GC tasks (the real command)."""
    a = SimAgent(loop_master.url, loop_master.agent_token, "sim-tb").start()
    yield a
    a.stop()


def _finished_with_files(m: InProcessMaster, tmp: pathlib.Path) -> tuple[int, pathlib.Path]:
    """A completed experiment that keeps every checkpoint, with TensorBoard files in its
    storage (``tmp/storage``): its id and its TensorBoard directory."""
    root = tmp / "storage"
    root.mkdir(exist_ok=True)
    eid = create_and_complete(m, _config(root, keep=10))
    _upload_tensorboard_files(m, root, eid, tmp)
    return eid, _tensorboard_dir(m, root, eid)


def test_delete_tb_files_deletes_the_tensorboard_files_and_nothing_else(
    loop_master: InProcessMaster, agent: SimAgent, tmp_path: pathlib.Path
) -> None:
    m = loop_master
    eid, ours = _finished_with_files(m, tmp_path)
    _, theirs = _finished_with_files(m, tmp_path)  # another experiment
    assert list(ours.rglob("events.out.tfevents.*"))
    # Another user may not; an unknown experiment is 404.
    m.post("/api/v1/users", {"user": {"username": "tb-other"}, "password": "Other-pw-1"})
    stranger = m.session(m.login("tb-other", "Other-pw-1"))
    r = stranger.delete(f"{m.url}/api/v1/experiments/{eid}/tensorboard-files", timeout=30)
    assert r.status_code == 403, r.text
    r = m.session().delete(f"{m.url}/api/v1/experiments/999999/tensorboard-files", timeout=30)
    assert r.status_code == 404, r.text
    assert ours.exists()

    r = m.session().delete(f"{m.url}/api/v1/experiments/{eid}/tensorboard-files", timeout=30)
    assert r.status_code == 200, r.text
    wait_for(lambda: not ours.exists(), 60, what="the TensorBoard files to go")
    wait_for(lambda: "deleted the TensorBoard files" in _gc_events(m, eid), 30, what="the event")
    assert _gc_events(m, eid) == ["deleting the TensorBoard files", "deleted the TensorBoard files"]
    assert list(theirs.rglob("events.out.tfevents.*"))  # another experiment's stay
    assert set(states_by_step(m, eid).values()) == {"STATE_COMPLETED"}  # checkpoints stay


def test_a_running_experiment_keeps_its_files_and_says_why(loop_master: InProcessMaster) -> None:
    m = loop_master
    # No agent: the experiment stays ACTIVE with its trial queued.
    eid = m.post("/api/v1/experiments", {"config": _config(pathlib.Path("/tmp"), 1)})["experiment"][
        "id"
    ]
    m.post(f"/api/v1/experiments/{eid}/activate")
    r = m.session().delete(f"{m.url}/api/v1/experiments/{eid}/tensorboard-files", timeout=30)
    assert r.status_code == 409, r.text
    assert "once it has ended" in r.text and "ACTIVE" in r.text
    with psycopg.connect(m.db_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM checkpoint_gc WHERE experiment_id = %s", (eid,)
        ).fetchone() == (0,)


def test_deleting_an_experiment_deletes_its_tensorboard_files(
    loop_master: InProcessMaster, agent: SimAgent, tmp_path: pathlib.Path
) -> None:
    m = loop_master
    eid, ours = _finished_with_files(m, tmp_path)
    r = m.session().delete(f"{m.url}/api/v1/experiments/{eid}", timeout=30)
    assert r.status_code == 200, r.text
    wait_for(lambda: not ours.exists(), 60, what="the deleted experiment's TensorBoard files")
    done = "deleted 4 checkpoints and the TensorBoard files"
    wait_for(lambda: done in _gc_events(m, eid), 30, what="the GC's end")
