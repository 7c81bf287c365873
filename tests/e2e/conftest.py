"""Clusters shared between end-to-end tests (issue 42, build 5): one per pytest process (each
xdist worker has its own), started on the first test that asks for it, stopped with
:func:`stop_cluster`'s checks (its event loop sound) when no test next needs it or at the end of
the session.

- ``shared_cluster``: two agents with two artificial CPU slots each (what ``cluster`` starts);
- ``shared_one_slot``: one agent with one slot (what ``one_slot`` starts), a cluster of its own
  rather than a pool of the first: a test of it sees exactly one agent and one slot (a task that
  needs a slot waits while another holds it), and its requests, ``det`` commands and the
  official CLI's name no pool.

Each is stopped once a module that leased it is done and the process's next test does not lease
it (``pytest_runtest_teardown`` below), and started again by the next test that does.

For tests on the default configuration that neither kill, restart nor reconfigure the master
or its agents, and look only at what they made (their experiment and task ids, their
containers by label, user names of their own), since other tests ran on the cluster before.
Each test gets a :class:`Cluster` of its own over the shared processes (its ``tmp`` is the
test's ``tmp_path``, its ``experiments`` its own); after it, :func:`settle` kills what it left
running and waits until every allocation has ended, every ended experiment's checkpoint GC was
decided, no task container runs and every agent is up and enabled, as the test found it: a
test that leaves it otherwise fails (an error at its teardown), and the next test gets a fresh
cluster. Tests that kill agents, containers or the master, need master.yaml keys of their own
(``extra=``), or check the whole cluster's state take ``cluster_factory`` (tests/e2e/cluster.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.conftest import new_database
from tests.e2e.cluster import Cluster, start_cluster, stop_cluster, wait_for

# Interactive tasks by their ntsc_tasks.kind: the API's collection.
_KINDS = {"COMMAND": "commands", "NOTEBOOK": "notebooks", "SHELL": "shells",
          "TENSORBOARD": "tensorboards"}  # fmt: skip
_TERMINAL = "('COMPLETED', 'CANCELED', 'ERROR')"
SETTLE_SECONDS = 300


class SharedCluster:
    """One shape of shared cluster: started on first use, replaced when a test left it unsound."""

    def __init__(self, name: str, agents: int, slots: int, tmp: pytest.TempPathFactory,
                 pg_server: str) -> None:  # fmt: skip
        self.name, self.agents, self.slots = name, agents, slots
        self.tmp, self.pg_server = tmp, pg_server
        self.cluster: Cluster | None = None
        self.admin_token = ""
        self.storage_mode = 0
        self._db: contextlib.ExitStack | None = None

    def get(self) -> Cluster:
        if self.cluster is None:
            self._db = contextlib.ExitStack()
            url = self._db.enter_context(new_database(self.pg_server, f"det_e2e_{self.name}"))
            try:
                self.cluster = start_cluster(
                    self.tmp.mktemp(f"shared-{self.name}"), url, self.agents, self.slots
                )
            except BaseException:
                self._db.close()
                self._db = None
                raise
            self.admin_token = self.cluster.master.token
            self.storage_mode = stat.S_IMODE(os.stat(self.cluster.checkpoints).st_mode)
        return self.cluster

    def stop(self) -> None:
        cluster, self.cluster = self.cluster, None
        try:
            if cluster is not None:
                stop_cluster(cluster)
        finally:
            if self._db is not None:
                self._db.close()
                self._db = None


def settle(shared: SharedCluster) -> None:
    """Kills what the last test left running and waits until the cluster is as a test finds it;
    raises AssertionError naming what is not."""
    c = shared.cluster
    assert c is not None
    m = c.master
    m._token = shared.admin_token  # a test that acted as another user and did not switch back
    with psycopg.connect(c.db_url, autocommit=True) as conn:
        for (eid,) in conn.execute(
            "SELECT id FROM experiments WHERE state IN ('ACTIVE', 'PAUSED')"
        ).fetchall():
            m.post(f"/api/v1/experiments/{eid}/kill")
        for tid, kind in conn.execute(
            "SELECT id, kind FROM ntsc_tasks WHERE state <> 'TERMINATED'"
        ).fetchall():
            m.post(f"/api/v1/{_KINDS[kind]}/{tid}/kill")

        def left() -> list[str]:
            out = [
                f"experiment {eid} {state}"
                for eid, state in conn.execute(
                    f"SELECT id, state FROM experiments WHERE state NOT IN {_TERMINAL}"
                ).fetchall()
            ]
            out += [
                f"experiment {eid}: its checkpoint GC not decided"
                for (eid,) in conn.execute(
                    "SELECT id FROM experiments WHERE checkpoint_gc_at IS NULL AND NOT deleted"
                    " AND NOT unmanaged"
                ).fetchall()
            ]
            out += [
                f"allocation {aid} {state}"
                for aid, state in conn.execute(
                    "SELECT id, state FROM allocations WHERE state <> 'TERMINATED'"
                ).fetchall()
            ]
            out += [f"container {k.name} running" for k in c.containers()]
            return out

        try:
            wait_for(lambda: not left(), SETTLE_SECONDS, "the test's work to end")
        except TimeoutError as e:
            raise AssertionError(f"{e}: {left()}\n{c.dump()}") from None
        agents: dict[str, bool] = dict(
            conn.execute("SELECT id, enabled AND NOT draining FROM agents").fetchall()
        )
    unsound = [a.agent_id for a in c.agents if not a.alive() or not agents.get(a.agent_id)]
    assert not unsound, f"agents not up and enabled after the test: {unsound}\n{c.dump()}"
    mode = stat.S_IMODE(os.stat(c.checkpoints).st_mode)
    assert mode == shared.storage_mode, f"the storage root's mode is {mode:o} now"


@contextlib.contextmanager
def lease(shared: SharedCluster, tmp_path: Path) -> Iterator[Cluster]:
    base = shared.get()
    yield dataclasses.replace(base, tmp=tmp_path, agents=list(base.agents), experiments=[])
    try:
        settle(shared)
    except BaseException:
        shared.stop()  # the next test gets a fresh one; this one fails at its teardown
        raise


_SHARED = pytest.StashKey[dict[str, SharedCluster]]()
# The fixture that leases each shape, by the shape's name.
_FIXTURE = {"two": "shared_cluster", "one": "shared_one_slot"}


@pytest.fixture(scope="session")
def _shared_clusters(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, pg_server: str
) -> Iterator[dict[str, SharedCluster]]:
    shared = {
        "two": SharedCluster("two", 2, 2, tmp_path_factory, pg_server),
        "one": SharedCluster("one", 1, 1, tmp_path_factory, pg_server),
    }
    request.config.stash[_SHARED] = shared
    yield shared
    try:
        shared["two"].stop()
    finally:
        shared["one"].stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A shared cluster is stopped when its module is done and the next test does not lease it
    (a later test that does starts it again): the files that lease one are spread over the
    run (longest first, tests/xdist_schedule.py) with other files between them, and an idle
    cluster still costs its master, agents and PostgreSQL about 20 CPU-ms a second. ``nextitem``
    is the test this process runs next (an xdist worker holds it before it runs this one); at
    the session's end (None) the session fixture stops what is left, as before."""
    yield
    shared = item.config.stash.get(_SHARED, None)
    if (
        not shared
        or nextitem is None
        or getattr(nextitem, "module", None) is getattr(item, "module", None)
    ):
        return None
    upcoming = getattr(nextitem, "fixturenames", ())
    for name, one in shared.items():
        if one.cluster is not None and _FIXTURE[name] not in upcoming:
            one.stop()
    return None


@pytest.fixture
def shared_cluster(_shared_clusters: dict[str, SharedCluster], tmp_path: Path) -> Iterator[Cluster]:
    """The session's two agents with two slots each (``cluster``'s shape), for this test."""
    with lease(_shared_clusters["two"], tmp_path) as c:
        yield c


@pytest.fixture
def shared_one_slot(
    _shared_clusters: dict[str, SharedCluster], tmp_path: Path
) -> Iterator[Cluster]:
    """The session's one agent with one slot (``one_slot``'s shape), for this test."""
    with lease(_shared_clusters["one"], tmp_path) as c:
        yield c
