"""TensorBoard on a real cluster: the example experiment's trial writes its metrics as
TensorBoard files to checkpoint storage (shared_fs), ``det tensorboard start`` serves them
through the master's proxy (its data endpoints list the trial's run and its scalars) to its
owner only (401 without a token, 403 for another user; the task port itself admits only the
master), and the official client's ``tensorboard start --no-browser`` works against it."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cluster import HOLD, Cluster, plain, unique, wait_for
from tests.e2e.test_commands import det

pytestmark = pytest.mark.e2e

CORE = Path(__file__).resolve().parents[2] / "examples" / "core_api"
SHORT = {
    "searcher": {"max_length": {"batches": 100}},
    "hyperparameters": {"report_every": 10, "validate_every": 50, "checkpoint_every": 100},
}


def tensorboard_ids(c: Cluster) -> set[str]:
    return {str(t["id"]) for t in c.master.get("/api/v1/tensorboards")["tensorboards"]}


def test_tensorboard_serves_the_trials_scalars_through_the_proxy(shared_one_slot: Cluster) -> None:
    c = shared_one_slot
    before = tensorboard_ids(c)  # earlier tests' TensorBoards are the cluster's
    eid = c.create(CORE / "single.yaml", CORE, SHORT)
    c.wait_state(eid, "STATE_COMPLETED", 600)
    (trial,) = c.trials(eid)
    # The harness uploaded the event files to the experiment's checkpoint storage.
    cluster_id = c.master.get("/api/v1/master")["clusterId"]
    stored = c.checkpoints / cluster_id / "tensorboard" / "experiment" / str(eid)
    files = list((stored / "trial" / str(trial["id"])).glob("events.out.tfevents.*"))
    assert files, f"no event files under {stored}: {list(c.checkpoints.rglob('*'))[:20]}"

    r = det(c, "tensorboard", "start", str(eid), "--no-browser")
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n{c.dump()}"
    m = re.search(r"TensorBoard is running at: (http://\S+/proxy/([0-9a-f-]{36})/)", r.stdout)
    assert m, r.stdout
    base, tid = m.group(1), m.group(2)
    auth = {"Authorization": f"Bearer {c.master.token}"}
    run = f"experiment/{eid}/trial/{trial['id']}"

    def runs() -> list[str]:
        got = plain().get(f"{base}data/runs", headers=auth, timeout=30)
        assert got.status_code == 200, got.text
        return list(got.json())

    wait_for(lambda: run in runs(), 60, f"TensorBoard to list the run {run}")
    tags = plain().get(f"{base}data/plugin/scalars/tags", headers=auth, timeout=30).json()
    assert {"Determined/loss", "Determined/validation_loss"} <= set(tags[run]), tags
    points = (
        plain()
        .get(
            f"{base}data/plugin/scalars/scalars",
            params={"run": run, "tag": "Determined/loss"},
            headers=auth,
            timeout=30,
        )
        .json()
    )
    assert [p[1] for p in points] == list(range(10, 101, 10)), points
    page = plain().get(base, headers=auth, timeout=30)
    assert page.status_code == 200 and "<tb-webapp>" in page.text, page.text[:300]

    assert plain().get(f"{base}data/runs", timeout=30).status_code == 401
    other_name = unique("other")
    c.master.post(
        "/api/v1/users",
        {"user": {"username": other_name, "admin": False}, "password": "Other-pw-1"},
    )
    other = c.master.login(other_name, "Other-pw-1")
    denied = plain().get(
        f"{base}data/runs", headers={"Authorization": f"Bearer {other}"}, timeout=30
    )
    assert denied.status_code == 403 and "belongs to admin" in denied.json()["message"]

    # The task's port on the agent (host networking) answers only the master's credential.
    port = c.service_port(tid)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"GET /proxy/{tid}/data/runs HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert s.recv(4096).startswith(b"HTTP/1.1 403"), "the task port let a stranger in"

    listed = json.loads(det(c, "tensorboard", "list", "--json").stdout)
    assert [t["id"] for t in listed if t["id"] not in before] == [tid]

    # The official client against the same master.
    r = det(c, "tensorboard", "start", "--no-browser", str(eid), official=True)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}"
    assert "Tensorboard is running at" in r.stdout, r.stdout
    ids = [t["id"] for t in c.master.get("/api/v1/tensorboards")["tensorboards"]]
    ids = [t for t in ids if t not in before]
    assert len(ids) == 2 and tid in ids

    for t in ids:
        assert det(c, "tensorboard", "kill", t).returncode == 0
    wait_for(
        lambda: all(
            c.master.get(f"/api/v1/tensorboards/{t}")["tensorboard"]["state"] == "STATE_TERMINATED"
            for t in ids
        ),
        60,
        "the kills",
    )
    gone = plain().get(f"{base}data/runs", headers=auth, timeout=30)
    assert gone.status_code == 503


def test_an_idle_tensorboard_is_killed(shared_one_slot: Cluster) -> None:
    """``idle_timeout`` kills a TensorBoard no request has reached through the proxy for that
    long (its trial need not have written anything yet)."""
    c = shared_one_slot
    eid = c.create(CORE / "single.yaml", CORE, HOLD)
    wait_for(lambda: c.trials(eid), 120, "the trial")
    body = {"experimentIds": [eid], "config": {"idle_timeout": "5s"}}
    tid = c.master.post("/api/v1/tensorboards", body)["tensorboard"]["id"]

    def tensorboard() -> dict[str, Any]:
        return dict(c.master.get(f"/api/v1/tensorboards/{tid}")["tensorboard"])

    wait_for(
        lambda: c.master.get(f"/api/v1/tasks/{tid}")["task"]["allocations"][0].get("isReady"),
        180,
        "the TensorBoard to be ready",
    )
    wait_for(lambda: tensorboard()["state"] == "STATE_TERMINATED", 90, "the idle kill")
    assert "idle" in str(tensorboard()["exitStatus"])
    c.master.post(f"/api/v1/experiments/{eid}/kill")
