"""A linked user's trial runs as its agent user (issue 27 item 8), with real Docker: the files its
checkpoints leave on shared storage are owned by the linked uid/gid, and its checkpoint GC (run
as the same user) deletes them; an unlinked user's trial runs as the image's user (root in
``det-base:trixie``), as Determined runs it. On storage a root task wrote first, with no
permission set by hand, a linked user's checkpoints and TensorBoard events (issue 41 item 5)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.cluster import EXAMPLES, Cluster, cluster_factory, unique

__all__ = ["cluster_factory"]

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

EXAMPLE = EXAMPLES / "stdlib_core_api"
UID, GID = 4321, 4322
SHORT = {"searcher": {"max_length": {"batches": 100}}}
SHARED = "/determined_shared_fs"  # where task containers see the checkpoint storage


def owners(root: Path) -> set[tuple[int, int]]:
    return {(p.stat().st_uid, p.stat().st_gid) for p in [root, *root.rglob("*")]}


def test_a_linked_users_trial_writes_files_owned_by_its_uid(shared_one_slot: Cluster) -> None:
    cluster = shared_one_slot
    mode = cluster.checkpoints.stat().st_mode & 0o7777
    os.chmod(cluster.checkpoints, 0o777)  # shared storage every agent user may write
    try:
        linked_users_trial(cluster)
    finally:
        os.chmod(cluster.checkpoints, mode)  # the shared cluster's, as the test found it


def linked_users_trial(cluster: Cluster) -> None:
    m = cluster.master
    name = unique("linked")  # a shared cluster keeps earlier tests' users
    body = {"user": {"username": name, "admin": False}, "password": "Linked-pw-1"}
    uid = m.post("/api/v1/users", body)["user"]["id"]
    link = {"agentUid": UID, "agentGid": GID, "agentUser": "alice", "agentGroup": "ml"}
    r = m.session().patch(f"{m.url}/api/v1/users/{uid}", json={"agentUserGroup": link})
    assert r.status_code == 200, r.text

    admin_token = m.token
    m._token = m.login(name, "Linked-pw-1")  # Cluster.create posts as this user
    try:
        linked_eid = cluster.create(EXAMPLE / "const.yaml", EXAMPLE, SHORT)
    finally:
        m._token = admin_token
    cluster.wait_state(linked_eid, "STATE_COMPLETED", 300)
    root_eid = cluster.create(EXAMPLE / "const.yaml", EXAMPLE, SHORT)
    cluster.wait_state(root_eid, "STATE_COMPLETED", 300)

    (linked,) = cluster.trials(linked_eid)
    (root,) = cluster.trials(root_eid)
    linked_ckpts = cluster.checkpoints_of(linked["id"])
    latest = max(linked_ckpts, key=lambda c: int(c["metadata"]["steps_completed"]))
    assert owners(cluster.checkpoints / latest["uuid"]) == {(UID, GID)}
    root_latest = max(
        cluster.checkpoints_of(root["id"]), key=lambda c: int(c["metadata"]["steps_completed"])
    )
    assert owners(cluster.checkpoints / root_latest["uuid"]) == {(0, 0)}

    # The GC task ran as the agent user too and deleted the checkpoint it does not keep.
    cluster.wait_checkpoint_gc(linked_eid)
    states = {c["uuid"]: c["state"] for c in cluster.checkpoints_of(linked["id"])}
    deleted = [u for u, s in states.items() if s == "STATE_DELETED"]
    assert deleted, states
    assert not any((cluster.checkpoints / u).exists() for u in deleted)


def test_an_agent_user_writes_checkpoints_and_tensorboard_events_after_a_root_task(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Issue 41 item 5, end to end: on a shared_fs cluster whose storage root a root task made
    (``storage_path``, under an admin's 0755 host path: no permission set by hand), a user
    linked to uid 1234 then writes its checkpoints and its TensorBoard events, owned by it;
    a linked user on a storage root it cannot write fails at its start, saying why."""
    cluster = cluster_factory(
        agents=1, slots=1, extra={"checkpoint_storage": {"storage_path": "det-checkpoints"}}
    )
    m = cluster.master
    os.chmod(cluster.checkpoints, 0o755)  # the admin's host path, as mkdir made it
    base = cluster.checkpoints / "det-checkpoints"
    cluster_id = str(m.get("/api/v1/master")["clusterId"])

    root_eid = cluster.create(EXAMPLE / "const.yaml", EXAMPLE, SHORT)
    cluster.wait_state(root_eid, "STATE_COMPLETED", 300)
    assert base.stat().st_uid == 0 and oct(base.stat().st_mode & 0o7777) == "0o1777"

    body = {"user": {"username": "alice", "admin": False}, "password": "Alice-pw-1"}
    uid = m.post("/api/v1/users", body)["user"]["id"]
    link = {"agentUid": 1234, "agentGid": 2345, "agentUser": "alice", "agentGroup": "ml"}
    r = m.session().patch(f"{m.url}/api/v1/users/{uid}", json={"agentUserGroup": link})
    assert r.status_code == 200 and "X-Det-Warning" not in r.headers, (r.text, r.headers)

    admin_token = m.token
    m._token = m.login("alice", "Alice-pw-1")  # Cluster.create posts as this user
    try:
        eid = cluster.create(EXAMPLE / "const.yaml", EXAMPLE, SHORT)
    finally:
        m._token = admin_token
    try:
        cluster.wait_state(eid, "STATE_COMPLETED", 300)
    except Exception as e:
        (t,) = cluster.trials(eid)
        logs = "\n".join(x.get("log", "") for x in cluster.trial_logs(t["id"]))
        raise AssertionError(logs) from e
    (trial,) = cluster.trials(eid)
    latest = max(
        cluster.checkpoints_of(trial["id"]), key=lambda c: int(c["metadata"]["steps_completed"])
    )
    assert owners(base / latest["uuid"]) == {(1234, 2345)}
    events = base / cluster_id / "tensorboard" / "experiment" / str(eid) / "trial"
    written = list((events / str(trial["id"])).glob("events.out.tfevents.*"))
    assert written and all(f.stat().st_size > 0 for f in written), list(events.rglob("*"))
    assert owners(events.parent) == {(1234, 2345)}
    # The root task's files are where they were, still its own.
    assert list((events.parent.parent / str(root_eid)).rglob("events.out.tfevents.*"))

    # The storage root as an older harness left it (root's, 0755): the linked user's next
    # trial fails at its start, saying why, and stores nothing.
    os.chmod(base, 0o755)
    m._token = m.login("alice", "Alice-pw-1")
    try:
        bad = cluster.create(EXAMPLE / "const.yaml", EXAMPLE, SHORT)
    finally:
        m._token = admin_token
    cluster.wait_state(bad, "STATE_ERROR", 300)
    (bad_trial,) = cluster.trials(bad)
    logs = "\n".join(x.get("log", "") for x in cluster.trial_logs(bad_trial["id"]))
    line = f"checkpoint storage {SHARED}/det-checkpoints is not writable by this task's user"
    assert line in logs and "uid 1234, gid 2345; owned by 0:0, mode 0755" in logs, logs
    assert not cluster.checkpoints_of(bad_trial["id"])
