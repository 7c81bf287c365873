"""A linked user's trial runs as its agent user (issue 27 item 8), with real Docker: the files its
checkpoints leave on shared storage are owned by the linked uid/gid, and its checkpoint GC (run
as the same user) deletes them; an unlinked user's trial runs as the image's user (root in
``det-base:trixie``), as Determined runs it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.cluster import EXAMPLES, Cluster, cluster_factory

__all__ = ["cluster_factory"]

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

EXAMPLE = EXAMPLES / "stdlib_core_api"
UID, GID = 4321, 4322
SHORT = {"searcher": {"max_length": {"batches": 100}}}


def owners(root: Path) -> set[tuple[int, int]]:
    return {(p.stat().st_uid, p.stat().st_gid) for p in [root, *root.rglob("*")]}


def test_a_linked_users_trial_writes_files_owned_by_its_uid(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(agents=1, slots=1)
    m = cluster.master
    os.chmod(cluster.checkpoints, 0o777)  # shared storage every agent user may write
    body = {"user": {"username": "linked", "admin": False}, "password": "Linked-pw-1"}
    uid = m.post("/api/v1/users", body)["user"]["id"]
    link = {"agentUid": UID, "agentGid": GID, "agentUser": "alice", "agentGroup": "ml"}
    r = m.session().patch(f"{m.url}/api/v1/users/{uid}", json={"agentUserGroup": link})
    assert r.status_code == 200, r.text

    admin_token = m.token
    m._token = m.login("linked", "Linked-pw-1")  # Cluster.create posts as this user
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
