"""Unmanaged experiments (issue 26 item 7): a ``core_v2`` script of the official
``determined==0.38.1`` package runs outside the cluster (here: a process on this machine, no
agent, no container), reports metrics and a checkpoint to its own shared_fs storage with its
owner's session token, and shows up as an unmanaged experiment; a rerun with the same external
ids resumes from its checkpoint. Nobody else may report into it, and a user token still cannot
reach a managed trial its holder does not own."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import requests

from tests.compat.official import ensure_official_venv
from tests.integration import cli_support
from tests.integration.cli_support import Det, sim_config
from tests.integration.conftest import ADMIN_PASSWORD, Master, wait_for
from tests.integration.threaded import ThreadedMaster
from tests.integration.webui_support import browser, login, page  # noqa: F401 (fixtures)

pytestmark = pytest.mark.integration
cli_master = cli_support.threaded_cli_master
det = cli_support.det

ALICE_PW = "Alice-pw-1"
BOB_PW = "Bob-pw-1"

# Five steps per run from where the last checkpoint left off; the checkpoint holds the step.
SCRIPT = textwrap.dedent(
    """
    import json, pathlib, sys
    from determined import core
    from determined.common.api import bindings
    from determined.experimental import client, core_v2

    master, password, ext_exp, ext_trial, store = sys.argv[1:6]
    alice = client.Determined(master=master, user="alice", password=password)
    core_v2.init(
        client=alice,
        # The official venv has no torch for TensorBoard's writer: no TensorBoard files.
        tensorboard_mode=core.TensorboardMode.MANUAL,
        config=core_v2.Config(
            name="unmanaged-test",
            hparams={"lr": 0.5},
            external_experiment_id=ext_exp,
            external_trial_id=ext_trial,
            checkpoint_storage=store,
        ),
    )
    # Determined's GetTrialByExternalID, parsed by the official bindings.
    found = bindings.get_GetTrialByExternalID(
        alice._session, externalExperimentId=ext_exp, externalTrialId=ext_trial
    ).trial
    latest = core_v2.info.latest_checkpoint
    start = 0
    if latest is not None:
        with core_v2.checkpoint.restore_path(latest) as path:
            start = int((pathlib.Path(path) / "step").read_text())
    print(f"training from step {start}", flush=True)
    for step in range(start + 1, start + 6):
        core_v2.train.report_training_metrics(steps_completed=step, metrics={"loss": 1.0 / step})
    end = start + 5
    # Run metadata (PostRunMetadata / GetRunMetadata), replaced whole by each run.
    core_v2.train.set_metadata({"data": {"version": end, "tags": ["a", "b"]}, "seen": start})
    metadata = core_v2.train.get_metadata()
    core_v2.train.report_progress(end / 10)
    core_v2.train.report_validation_metrics(steps_completed=end, metrics={"loss": 1.0 / end})
    with core_v2.checkpoint.store_path({"steps_completed": end}) as (path, storage_id):
        (pathlib.Path(path) / "step").write_text(str(end))
    result = {
        "start": start,
        "end": end,
        "latest": latest,
        "trial_id": core_v2.info.trial.trial_id,
        "experiment_id": core_v2.info.trial.experiment_id,
        "run_id": core_v2.info.trial._trial_run_id,
        "task_id": core_v2.info.task_id,
        "checkpoint": storage_id,
        "found": [found.id, found.experimentId, found.state.value],
        "metadata": metadata,
    }
    core_v2.close()
    print("RESULT " + json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def users(cli_master: Master) -> dict[str, str]:
    """alice and bob (neither an admin): their session tokens."""
    for name, pw in (("alice", ALICE_PW), ("bob", BOB_PW)):
        cli_master.post(
            "/api/v1/users", {"user": {"username": name, "admin": False}, "password": pw}
        )
    return {"alice": cli_master.login("alice", ALICE_PW), "bob": cli_master.login("bob", BOB_PW)}


def _run_script(master: Master, tmp: Path, ext_exp: str, ext_trial: str, store: Path) -> Any:
    bin_dir = ensure_official_venv()
    script = tmp / "train.py"
    script.write_text(SCRIPT)
    home = tmp / "home"
    home.mkdir(exist_ok=True)
    r = subprocess.run(
        [
            str(bin_dir / "python"),
            str(script),
            master.url,
            ALICE_PW,
            ext_exp,
            ext_trial,
            str(store),
        ],
        capture_output=True,
        text=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin", "DET_MASTER": master.url},
        timeout=300,
    )
    assert r.returncode == 0, f"core_v2 script failed:\n{r.stdout}\n{r.stderr}"
    line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
    return json.loads(line.removeprefix("RESULT "))


def _metrics(master: Master, trial_id: int, group: str) -> list[dict[str, Any]]:
    """The trial's reports of ``group``, by step (each has totalBatches and trialRunId)."""
    out = master.get(f"/api/v1/trials/{trial_id}/metrics", params={"group": group})
    return list(out["metrics"])


def test_core_v2_script_runs_unmanaged_and_resumes(
    cli_master: Master, users: dict[str, str], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    store.mkdir()
    ext_exp = f"exp-{uuid.uuid4().hex[:8]}"
    first = _run_script(cli_master, tmp_path, ext_exp, "trial-1", store)
    assert first["start"] == 0 and first["latest"] is None and first["run_id"] == 1

    eid, tid = first["experiment_id"], first["trial_id"]
    assert first["found"] == [tid, eid, "STATE_ACTIVE"]
    assert first["metadata"] == {"data": {"version": 5, "tags": ["a", "b"]}, "seen": 0}
    exp = cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]
    assert exp["unmanaged"] is True
    assert exp["externalExperimentId"] == ext_exp
    assert exp["state"] == "STATE_COMPLETED"
    assert exp["username"] == "alice"
    assert exp["progress"] == 0.5  # what the script reported
    listed = cli_master.get("/api/v1/experiments", params={"limit": 100})["experiments"]
    assert [e["unmanaged"] for e in listed if e["id"] == eid] == [True]
    trial = cli_master.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["state"] == "STATE_COMPLETED"
    assert trial["hparams"] == {"lr": 0.5}
    assert trial["taskId"] == first["task_id"]
    assert trial["latestCheckpointUuid"] == first["checkpoint"]
    ckpts = cli_master.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"]
    assert [(c["uuid"], c["state"]) for c in ckpts] == [(first["checkpoint"], "STATE_COMPLETED")]
    assert (store / first["checkpoint"] / "step").read_text() == "5"
    # Never scheduled nor queued: no job in the queue.
    jobs = cli_master.get("/api/v1/job-queues")["jobs"]
    assert all(j.get("entityId") != str(eid) for j in jobs)

    second = _run_script(cli_master, tmp_path, ext_exp, "trial-1", store)
    assert (second["experiment_id"], second["trial_id"]) == (eid, tid)
    assert second["found"] == [tid, eid, "STATE_ACTIVE"]
    assert second["metadata"] == {"data": {"version": 10, "tags": ["a", "b"]}, "seen": 5}
    r = cli_master.session().get(f"{cli_master.url}/api/v1/runs/{tid}/metadata", timeout=30)
    assert r.json() == {"metadata": second["metadata"]}, r.text
    assert second["latest"] == first["checkpoint"]
    assert second["start"] == 5 and second["end"] == 10
    assert second["run_id"] == 2
    steps = [m["totalBatches"] for m in _metrics(cli_master, tid, "training")]
    assert steps == list(range(1, 11))
    runs = {m["totalBatches"]: m["trialRunId"] for m in _metrics(cli_master, tid, "training")}
    assert runs[5] == 1 and runs[6] == 2
    exp = cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]
    assert exp["state"] == "STATE_COMPLETED" and exp["numTrials"] == 1
    assert exp["progress"] == 1.0
    trial = cli_master.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["latestCheckpointUuid"] == second["checkpoint"]
    # What the script printed went to the trial's logs (core_v2's log shipper, /task-logs).
    logs = cli_master.session().get(f"{cli_master.url}/api/v1/trials/{tid}/logs", timeout=30)
    assert logs.status_code == 200, logs.text
    assert "training from step 0" in logs.text and "training from step 5" in logs.text


# The shape of Determined's examples/features/unmanaged/1: no external ids, no storage given.
SIMPLE = textwrap.dedent(
    """
    import json, sys
    from determined import core
    from determined.experimental import client, core_v2

    master, password = sys.argv[1:3]
    core_v2.init(
        client=client.Determined(master=master, user="alice", password=password),
        tensorboard_mode=core.TensorboardMode.MANUAL,
        config=core_v2.Config(name="unmanaged-simple"),
    )
    for i in range(3):
        core_v2.train.report_training_metrics(steps_completed=i, metrics={"loss": 1.0})
    core_v2.train.report_validation_metrics(steps_completed=2, metrics={"loss": 0.5})
    result = {"experiment_id": core_v2.info.trial.experiment_id}
    core_v2.close()
    print("RESULT " + json.dumps(result))
    """
)


def test_a_script_without_external_ids_makes_a_new_experiment_each_run(
    cli_master: Master, users: dict[str, str], tmp_path: Path
) -> None:
    bin_dir = ensure_official_venv()
    script = tmp_path / "simple.py"
    script.write_text(SIMPLE)
    home = tmp_path / "home"
    home.mkdir()
    eids = []
    for _ in range(2):
        r = subprocess.run(
            [str(bin_dir / "python"), str(script), cli_master.url, ALICE_PW],
            capture_output=True,
            text=True,
            env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
            timeout=300,
        )
        assert r.returncode == 0, f"core_v2 script failed:\n{r.stdout}\n{r.stderr}"
        line = [x for x in r.stdout.splitlines() if x.startswith("RESULT ")][-1]
        eids.append(json.loads(line.removeprefix("RESULT "))["experiment_id"])
    assert eids[0] != eids[1]
    for eid in eids:
        exp = cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]
        assert (exp["unmanaged"], exp["state"], exp["numTrials"]) == (True, "STATE_COMPLETED", 1)
        assert "externalExperimentId" not in exp
        (trial,) = cli_support.trials(cli_master, eid)
        assert [m["totalBatches"] for m in _metrics(cli_master, trial["id"], "training")] == [
            0,
            1,
            2,
        ]


def _as(master: Master, token: str) -> requests.Session:
    return master.session(token)


def test_only_the_owner_reports_into_an_unmanaged_trial(
    cli_master: Master, users: dict[str, str]
) -> None:
    alice, bob = _as(cli_master, users["alice"]), _as(cli_master, users["bob"])
    url = cli_master.url
    ext = f"exp-{uuid.uuid4().hex[:8]}"
    config = "name: alice-run\nsearcher: {name: single, metric: loss}\n"
    r = alice.put(
        f"{url}/api/v1/experiments/by-external-id/{ext}",
        json={"config": config, "unmanaged": True},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    eid = r.json()["experiment"]["id"]
    r = alice.put(
        f"{url}/api/v1/trials",
        json={
            "createTrialRequest": {"experimentId": eid, "unmanaged": True},
            "externalTrialId": "t",
        },
        timeout=30,
    )
    assert r.status_code == 200, r.text
    trial = r.json()["trial"]
    tid, task_id = trial["id"], trial["taskId"]
    assert alice.post(f"{url}/api/v1/trials/{tid}/start", json={"trialId": tid}, timeout=30).ok

    # bob: every route a core_v2 script uses, into alice's trial.
    attempts = [
        bob.post(f"{url}/api/v1/trials", json={"experimentId": eid, "unmanaged": True}),
        bob.put(
            f"{url}/api/v1/trials",
            json={
                "createTrialRequest": {"experimentId": eid, "unmanaged": True},
                "externalTrialId": "t",
            },
        ),
        bob.post(f"{url}/api/v1/trials/{tid}/start", json={"trialId": tid, "resume": True}),
        bob.patch(f"{url}/api/v1/trials/{tid}", json={"trialId": tid, "state": "STATE_ERROR"}),
        bob.post(
            f"{url}/api/v1/trials/{tid}/metrics",
            json={
                "metrics": {
                    "trialId": tid,
                    "trialRunId": 1,
                    "stepsCompleted": 1,
                    "metrics": {"avgMetrics": {"loss": 9.0}},
                },
                "group": "training",
            },
        ),
        bob.post(
            f"{url}/api/v1/checkpoints",
            json={
                "uuid": str(uuid.uuid4()),
                "taskId": task_id,
                "resources": {},
                "metadata": {"steps_completed": 1},
                "state": "STATE_COMPLETED",
            },
        ),
        bob.post(f"{url}/api/v1/runs/start", json={"runId": tid}),
        bob.post(f"{url}/task-logs", json=[{"task_id": task_id, "log": "bob was here\n"}]),
    ]
    assert [a.status_code for a in attempts] == [403] * len(attempts), [
        (a.request.method, a.request.url, a.status_code, a.text) for a in attempts
    ]
    trial = cli_master.get(f"/api/v1/trials/{tid}")["trial"]
    assert trial["state"] == "STATE_ACTIVE"
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["numTrials"] == 1
    assert cli_master.get(f"/api/v1/experiments/{eid}/checkpoints")["checkpoints"] == []
    assert _metrics(cli_master, tid, "training") == []

    # bob's own run with the same external id is his own experiment, not alice's.
    r = bob.put(
        f"{url}/api/v1/experiments/by-external-id/{ext}",
        json={"config": config, "unmanaged": True},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    bob_eid = r.json()["experiment"]["id"]
    assert bob_eid != eid
    # GetTrialByExternalID: only alice's trial has that name so far, and users read everything.
    by_ext = f"{url}/api/v1/trials/by-external-id/{ext}/t"
    assert bob.get(by_ext, timeout=30).json()["trial"]["id"] == tid
    r = bob.put(
        f"{url}/api/v1/trials",
        json={
            "createTrialRequest": {"experimentId": bob_eid, "unmanaged": True},
            "externalTrialId": "t",
        },
        timeout=30,
    )
    assert r.status_code == 200, r.text
    bob_tid = r.json()["trial"]["id"]
    # Now each finds their own; a third user is told the name is ambiguous; none: a 404.
    assert alice.get(by_ext, timeout=30).json()["trial"]["id"] == tid
    assert bob.get(by_ext, timeout=30).json()["trial"]["id"] == bob_tid
    r = cli_master.session().get(by_ext, timeout=30)
    assert r.status_code == 400 and "externalExperimentId" in r.json()["message"], r.text
    r = alice.get(f"{url}/api/v1/trials/by-external-id/{ext}/no-such-trial", timeout=30)
    assert r.status_code == 404, r.text

    # alice's own reports land; her script's states move the experiment.
    r = alice.patch(
        f"{url}/api/v1/trials/{tid}", json={"trialId": tid, "state": "STATE_COMPLETED"}, timeout=30
    )
    assert r.status_code == 200, r.text
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED"
    # The cluster does not run it: pause, activate, kill and continue are refused, naming why.
    for verb in ("activate", "pause", "kill"):
        r = alice.post(f"{url}/api/v1/experiments/{eid}/{verb}", json={}, timeout=30)
        assert r.status_code == 409 and "unmanaged" in r.json()["message"], (verb, r.text)
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"] == "STATE_COMPLETED"
    r = alice.patch(
        f"{url}/api/v1/trials/{tid}", json={"trialId": tid, "state": "STATE_DELETED"}, timeout=30
    )
    assert r.status_code == 400 and "state" in r.json()["message"], r.text


def test_a_user_token_cannot_reach_a_managed_trial_of_another(
    cli_master: Master, users: dict[str, str]
) -> None:
    """A managed experiment of admin's: bob's token reports nothing into its trial, and
    nobody turns it into an unmanaged one (CreateTrial, StartTrial refuse managed ones)."""
    eid = cli_support.create_via_api(cli_master, sim_config("managed-one", trials=1))
    cli_support.wait(lambda: len(cli_support.trials(cli_master, eid)) == 1, 60, "its trial")
    trial = cli_support.trials(cli_master, eid)[0]
    tid, task_id = trial["id"], trial["taskId"]
    bob = _as(cli_master, users["bob"])
    url = cli_master.url
    attempts = [
        bob.patch(f"{url}/api/v1/trials/{tid}", json={"trialId": tid, "state": "STATE_COMPLETED"}),
        bob.post(f"{url}/api/v1/trials/{tid}/start", json={"trialId": tid, "resume": True}),
        bob.post(
            f"{url}/api/v1/trials/{tid}/metrics",
            json={
                "metrics": {
                    "trialId": tid,
                    "trialRunId": 1,
                    "stepsCompleted": 1,
                    "metrics": {"avgMetrics": {"loss": 9.0}},
                },
                "group": "training",
            },
        ),
        bob.post(
            f"{url}/api/v1/checkpoints",
            json={
                "uuid": str(uuid.uuid4()),
                "taskId": task_id,
                "resources": {},
                "metadata": {"steps_completed": 1},
            },
        ),
        bob.post(f"{url}/api/v1/trials", json={"experimentId": eid, "unmanaged": True}),
    ]
    assert [a.status_code for a in attempts] == [403] * len(attempts), [
        (a.request.method, a.request.url, a.status_code, a.text) for a in attempts
    ]
    # Logs of a managed task through the unmanaged route: not an unmanaged trial's task.
    r = bob.post(f"{url}/task-logs", json=[{"task_id": task_id, "log": "x\n"}])
    assert r.status_code == 404, r.text
    # Even its owner cannot start it as an unmanaged trial or add trials to it.
    admin = cli_master.session()
    r = admin.post(f"{url}/api/v1/trials/{tid}/start", json={"trialId": tid, "resume": True})
    assert r.status_code == 400 and "managed" in r.json()["message"], r.text
    r = admin.post(f"{url}/api/v1/trials", json={"experimentId": eid, "unmanaged": True})
    assert r.status_code == 400 and "managed" in r.json()["message"], r.text
    assert len(cli_support.trials(cli_master, eid)) == 1


def _finished_unmanaged(master: Master, token: str, name: str) -> int:
    """An unmanaged experiment of one trial that its script ran and completed."""
    s, url = _as(master, token), master.url
    eid, tid = cli_support.unmanaged_trial(s, url, name)
    assert s.post(f"{url}/api/v1/trials/{tid}/start", json={"trialId": tid}, timeout=30).ok
    r = s.patch(
        f"{url}/api/v1/trials/{tid}", json={"trialId": tid, "state": "STATE_COMPLETED"}, timeout=30
    )
    assert r.status_code == 200, r.text
    return eid


def test_det_cli_shows_unmanaged_experiments(
    cli_master: Master, users: dict[str, str], det: Det
) -> None:
    eid = _finished_unmanaged(cli_master, users["alice"], "cli-unmanaged")
    det.login("admin", ADMIN_PASSWORD)
    row = [
        x for x in det.ok("experiment", "list", "--all").out.splitlines() if "cli-unmanaged" in x
    ]
    assert len(row) == 1 and "(unmanaged)" in row[0] and "COMPLETED" in row[0], row
    out = det.ok("experiment", "describe", str(eid)).out
    assert f"Experiment {eid}: cli-unmanaged (COMPLETED, unmanaged (external id " in out, out


@pytest.mark.browser
def test_webui_marks_unmanaged_experiments(
    cli_master: Master,
    users: dict[str, str],
    page: Any,  # noqa: F811
) -> None:
    eid = _finished_unmanaged(cli_master, users["alice"], "webui-unmanaged")
    login(page, cli_master, "/det/experiments")
    row = page.locator(f'tbody tr[data-id="{eid}"]')
    row.locator(".state-UNMANAGED").wait_for()
    assert row.locator(".state-UNMANAGED").inner_text() == "UNMANAGED"
    page.goto(f"{cli_master.url}/det/experiments/{eid}")
    page.locator("h1 .state-UNMANAGED").wait_for()
    assert "a script run outside the cluster" in page.locator("dl.facts").inner_text()
    # No Fork, Continue, Pause, Kill or TensorBoard: the cluster has no code of it and does not
    # run it. Archive and Unarchive only (issue 26).
    head = page.locator("h1")
    assert [b.strip() for b in head.locator("button").all_inner_texts()] == ["Archive"]
    head.get_by_role("button", name="Archive", exact=True).click()
    head.get_by_role("button", name="Unarchive").wait_for()
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["archived"] is True
    head.get_by_role("button", name="Unarchive").click()
    head.get_by_role("button", name="Archive", exact=True).wait_for()
    assert cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["archived"] is False
    # The list offers the same, and only that, on its row.
    page.goto(f"{cli_master.url}/det/experiments")
    # The list renders after its fetch: wait for the row's button (all_inner_texts waits not).
    row.get_by_role("button", name="Archive", exact=True).wait_for()
    assert [b.strip() for b in row.locator(".actions button").all_inner_texts()] == ["Archive"]
    row.get_by_role("button", name="Archive", exact=True).click()
    wait_for(
        lambda: cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["archived"],
        30,
        what="the archive from the list",
    )


def test_concurrent_puts_of_one_external_id_make_one_experiment_and_one_trial(
    cli_master: Master, users: dict[str, str]
) -> None:
    """Two copies of a script started at once (say on two nodes) find one experiment and one
    trial: the second put waits for the first and finds it, instead of failing."""
    from concurrent.futures import ThreadPoolExecutor

    url, ext = cli_master.url, f"exp-{uuid.uuid4().hex[:8]}"
    config = "name: raced\nsearcher: {name: single, metric: loss}\n"

    def put_both(_: int) -> tuple[int, int]:
        s = _as(cli_master, users["alice"])
        r = s.put(
            f"{url}/api/v1/experiments/by-external-id/{ext}",
            json={"config": config, "unmanaged": True},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        eid = int(r.json()["experiment"]["id"])
        r = s.put(
            f"{url}/api/v1/trials",
            json={
                "createTrialRequest": {"experimentId": eid, "unmanaged": True},
                "externalTrialId": "same",
            },
            timeout=60,
        )
        assert r.status_code == 200, r.text
        return eid, int(r.json()["trial"]["id"])

    with ThreadPoolExecutor(6) as pool:
        got = set(pool.map(put_both, range(6)))
    assert len(got) == 1, got


def _db_url(master: ThreadedMaster) -> str:
    return master.db_url


def test_a_silent_script_is_lost_and_its_next_heartbeat_revives_it(
    cli_master: Master, users: dict[str, str], det: Det
) -> None:
    """A script that stops reporting (killed, its node gone) leaves its trial ERROR once
    ``unmanaged_timeout_seconds`` (300) pass without a heartbeat, ended when it was last heard
    from; a heartbeat from it afterwards makes it ACTIVE again, while an ERROR the script
    reported itself stays."""
    alice, url = _as(cli_master, users["alice"]), cli_master.url
    eid, tid = cli_support.unmanaged_trial(alice, url, "silent")
    assert alice.post(f"{url}/api/v1/trials/{tid}/start", json={"trialId": tid}, timeout=30).ok

    def states() -> tuple[str, str]:
        trial = cli_master.get(f"/api/v1/trials/{tid}")["trial"]
        return trial["state"], cli_master.get(f"/api/v1/experiments/{eid}")["experiment"]["state"]

    assert states() == ("STATE_ACTIVE", "STATE_ACTIVE")
    with psycopg.connect(_db_url(cli_master), autocommit=True) as conn:
        # Heard from 4 minutes ago: not lost yet.
        conn.execute(
            "UPDATE trials SET last_activity = now() - interval '4 minutes' WHERE id = %s", (tid,)
        )
        row = conn.execute("SELECT last_activity FROM trials WHERE id = %s", (tid,)).fetchone()
        assert row is not None
        time.sleep(8)  # more than one look of the leader (every 5 s)
        assert states() == ("STATE_ACTIVE", "STATE_ACTIVE")
        conn.execute(
            "UPDATE trials SET last_activity = now() - interval '6 minutes' WHERE id = %s", (tid,)
        )
        heard = conn.execute("SELECT last_activity FROM trials WHERE id = %s", (tid,)).fetchone()
    assert heard is not None
    cli_support.wait(lambda: states() == ("STATE_ERROR", "STATE_ERROR"), 60, "the trial lost")
    trial = cli_master.get(f"/api/v1/trials/{tid}")["trial"]
    ended = dt.datetime.fromisoformat(trial["endTime"].replace("Z", "+00:00"))
    assert abs((ended - heard[0]).total_seconds()) < 1, (ended, heard[0])
    # det's CLI says why (the master's line in the trial's log).
    det.login("admin", ADMIN_PASSWORD)
    out = det.ok("experiment", "describe", str(eid)).out
    assert f"Trial {tid}: lost: its script sent no heartbeat for 300 s" in out, out

    # The script was alive after all: its next heartbeat (PatchTrial without a state).
    r = alice.patch(f"{url}/api/v1/trials/{tid}", json={"trialId": tid}, timeout=30)
    assert r.status_code == 200, r.text
    assert states() == ("STATE_ACTIVE", "STATE_ACTIVE")
    # An ERROR the script reports stays one, whatever heartbeat races in after it.
    r = alice.patch(
        f"{url}/api/v1/trials/{tid}", json={"trialId": tid, "state": "STATE_ERROR"}, timeout=30
    )
    assert r.status_code == 200, r.text
    r = alice.patch(f"{url}/api/v1/trials/{tid}", json={"trialId": tid}, timeout=30)
    assert r.status_code == 200, r.text
    assert states() == ("STATE_ERROR", "STATE_ERROR")
