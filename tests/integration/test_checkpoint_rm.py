"""``det checkpoint rm`` (CheckpointsRemoveFiles, issue 27 item 5): the official CLI asks, the
experiment's checkpoint-GC task (the real command, run by a SimAgent) removes the files the
globs name from a shared_fs checkpoint, keeps the rest, never follows a link, and reports what
is left; the master records it (PARTIALLY_DELETED, then DELETED when nothing is left). The
official CLI is a process of its own: the module's master is served on a real port by a thread
of the test's process, with its control loop (``cli_support.threaded_cli_master``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.compat.official import ensure_official_venv
from tests.fakes.sim_agent import SimAgent
from tests.integration import cli_support
from tests.integration.cli_support import Det, create_via_api, sim_config, wait
from tests.integration.test_official_client_answers import Official
from tests.integration.threaded import ThreadedMaster

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det


@pytest.fixture(scope="module")
def store(cli_master: ThreadedMaster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A finished experiment whose checkpoints (all kept) live in this shared_fs directory;
    the agent that runs its GC tasks keeps running."""
    root = tmp_path_factory.mktemp("rm-store")
    agent = SimAgent(cli_master.url, cli_master.agent_token, "sim-rm", slots=2).start()
    try:
        yield root
    finally:
        agent.stop()


def finished_checkpoints(m: ThreadedMaster, store: Path, name: str) -> list[str]:
    config = sim_config(name, trials=1) + (
        f"checkpoint_storage: {{type: shared_fs, host_path: {store},"
        " save_trial_latest: 10, save_trial_best: 10, save_experiment_best: 10}\n"
    )
    eid = create_via_api(m, config)
    cli_support.wait_state(m, eid, "STATE_COMPLETED", 90)
    cks = m.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]
    return [str(c["uuid"]) for c in cks if c["state"] == "STATE_COMPLETED"]


def checkpoint(m: ThreadedMaster, uid: str) -> dict[str, Any]:
    return dict(m.get(f"/api/v1/checkpoints/{uid}")["checkpoint"])


def write_files(d: Path, outside: Path) -> None:
    (d / "optimizer").mkdir(parents=True)
    (d / "optimizer" / "state.pt").write_bytes(b"s" * 10)
    (d / "model.pt").write_bytes(b"m" * 7)
    (d / "notes.txt").write_bytes(b"hello")
    outside.mkdir(exist_ok=True)
    (outside / "precious.pt").write_bytes(b"keep me")
    (d / "elsewhere").symlink_to(outside, target_is_directory=True)
    (d / "stolen.pt").symlink_to(outside / "precious.pt")


def test_official_rm_removes_what_the_globs_name_and_keeps_the_rest(
    cli_master: ThreadedMaster, store: Path, tmp_path: Path
) -> None:
    uid = finished_checkpoints(cli_master, store, "rm-official")[0]
    outside = tmp_path / "outside"
    write_files(store / uid, outside)
    o = Official(ensure_official_venv(), cli_master, tmp_path)
    o("user", "login", "admin", stdin=cli_support.ADMIN_PASSWORD + "\n")

    out = o("checkpoint", "rm", uid, "--glob", "**/*.pt", "--yes")
    assert "in progress" in out
    wait(lambda: checkpoint(cli_master, uid)["state"] == "STATE_PARTIALLY_DELETED", 60, "the GC")
    ck = checkpoint(cli_master, uid)
    assert ck["resources"] == {"notes.txt": "5", "optimizer/": "0"}
    assert sorted(p.name for p in (store / uid).iterdir()) == [
        "elsewhere",
        "notes.txt",
        "optimizer",
    ]
    assert (outside / "precious.pt").read_bytes() == b"keep me"

    # Everything: the checkpoint is gone, the directory its link named is not.
    o("checkpoint", "rm", uid, "--glob", "**", "--yes")
    wait(lambda: checkpoint(cli_master, uid)["state"] == "STATE_DELETED", 60, "the GC")
    assert checkpoint(cli_master, uid)["resources"] == {}
    assert not (store / uid).exists()
    assert (outside / "precious.pt").read_bytes() == b"keep me"


def test_no_glob_reads_the_files_again(cli_master: ThreadedMaster, store: Path, det: Det) -> None:
    uid = finished_checkpoints(cli_master, store, "rm-refresh")[0]
    (store / uid).mkdir(parents=True, exist_ok=True)
    (store / uid / "model.pt").write_bytes(b"0123456789")  # what the trial reported: 10 bytes
    det.login()
    r = det("checkpoint", "rm", uid)
    assert r.rc == 0, r.err
    assert "again" in r.out
    # The same files as recorded: the checkpoint keeps its state.
    wait(lambda: "removed files of 1" in events(cli_master, uid), 60, "the GC")
    assert checkpoint(cli_master, uid)["state"] == "STATE_COMPLETED"

    (store / uid / "extra.bin").write_bytes(b"xyz")
    (store / uid / "model.pt").unlink()
    assert det("checkpoint", "rm", uid).rc == 0
    wait(lambda: checkpoint(cli_master, uid)["resources"] == {"extra.bin": "3"}, 60, "the GC")
    assert checkpoint(cli_master, uid)["state"] == "STATE_PARTIALLY_DELETED"


def events(m: ThreadedMaster, uid: str) -> str:
    """The experiment's checkpoint-GC events, one a line."""
    eid = checkpoint(m, uid)["training"]["experimentId"]
    with psycopg.connect(m.db_url) as conn:
        rows = conn.execute(
            "SELECT message FROM events WHERE entity = 'experiment' AND entity_id = %s"
            " AND kind LIKE 'checkpoint-gc%%' ORDER BY id",
            (str(eid),),
        ).fetchall()
    return "\n".join(r[0] for r in rows)


def test_bad_globs_and_others_checkpoints_are_refused_changing_nothing(
    cli_master: ThreadedMaster, store: Path
) -> None:
    uid = finished_checkpoints(cli_master, store, "rm-refused")[0]
    s = cli_master.session()
    for globs, field in ((["../x"], "checkpointGlobs[0]"), (["ok", "/abs"], "checkpointGlobs[1]")):
        r = s.post(
            f"{cli_master.url}/api/v1/checkpoints/rm",
            json={"checkpointUuids": [uid], "checkpointGlobs": globs},
            timeout=30,
        )
        assert r.status_code == 400, r.text
        assert field in r.json()["message"] and "\n" not in r.json()["message"]
    r = s.post(f"{cli_master.url}/api/v1/checkpoints/rm", json={"checkpointGlobs": ["*"]})
    assert r.status_code == 400 and "checkpointUuids" in r.json()["message"]

    cli_master.post(
        "/api/v1/users", {"user": {"username": "rm-other", "admin": False}, "password": "Rm-pw-123"}
    )
    other = cli_master.session(cli_master.login("rm-other", "Rm-pw-123"))
    r = other.post(
        f"{cli_master.url}/api/v1/checkpoints/rm",
        json={"checkpointUuids": [uid], "checkpointGlobs": ["*"]},
        timeout=30,
    )
    assert r.status_code == 403, r.text
    assert checkpoint(cli_master, uid)["state"] == "STATE_COMPLETED"
    assert "removing" not in events(cli_master, uid)
