"""Two clusters on one Docker engine, with agents of the same id (as ``det deploy local`` names
them ``local-agent-<i>`` in every cluster): neither cluster's agent adopts or kills the other's
containers, and each runs its trial to completion while the other's agent reconciles."""

from __future__ import annotations

import contextlib
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.e2e.cluster import (
    EXAMPLES,
    LABEL_ALLOCATION,
    Agent,
    Cluster,
    agent_argv,
    docker_or_skip,
    master_extra,
    stop_cluster,
    wait_for,
)
from tests.integration.conftest import start_master

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

CORE = EXAMPLES / "core_api"
# Long enough (30 s, paced at 10 ms a batch: the trial sleeps rather than spins a core) to be
# running while the other cluster's agent starts; no restart: a container killed by the other
# cluster's agent ends the experiment in ERROR.
LONG: dict[str, Any] = {
    "hyperparameters": {
        "report_every": 100,
        "validate_every": 1000,
        "checkpoint_every": 1000,
        "batch_seconds": 0.01,
    },
    "searcher": {"max_length": {"batches": 3000}},
    "max_restarts": 0,
}


@pytest.fixture
def second_pg_url(pg_server: str) -> Iterator[str]:
    name = f"det_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    head, sep, query = pg_server.partition("?")
    base, _, _ = head.rpartition("/")
    yield f"{base}/{name}{sep}{query}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _cluster(tmp: Path, db_url: str, agent_id: str) -> Cluster:
    """A master, and an agent of ``agent_id`` not started yet (``agents[0].start()``)."""
    tmp.mkdir(parents=True, exist_ok=True)
    master = start_master(tmp, db_url, extra=master_extra(tmp), name="master")
    state = tmp / "agent"
    state.mkdir()
    agent = Agent(agent_id, agent_argv(master, agent_id, state, 1), tmp / "agent.log")
    return Cluster(master, [agent], tmp, docker_or_skip(), tmp / "checkpoints", db_url)


def _registered(c: Cluster) -> bool:
    return any(a["id"] == c.agents[0].agent_id for a in c.master.get("/api/v1/agents")["agents"])


def _running_container(c: Cluster, eid: int) -> Any:
    (trial,) = wait_for(lambda: c.trials(eid), 60, f"experiment {eid}'s trial")

    def find() -> Any:
        for container in c.containers():
            if container.labels.get(LABEL_ALLOCATION, "").startswith(f"{trial['taskId']}."):
                return container
        return None

    return wait_for(find, 180, f"experiment {eid}'s container")


@pytest.mark.slow
def test_two_clusters_with_the_same_agent_ids_run_side_by_side(
    tmp_path: Path, pg_url: str, second_pg_url: str
) -> None:
    agent_id = f"twin-{uuid.uuid4().hex[:8]}"
    first = _cluster(tmp_path / "first", pg_url, agent_id)
    second: Cluster | None = None
    try:
        first.agents[0].start()
        wait_for(lambda: _registered(first), 120, "the first cluster's agent")
        eid_first = first.create(CORE / "single.yaml", CORE, LONG)
        mine = _running_container(first, eid_first)
        assert mine.labels["ai.det.cluster-id"] == first.master.get("/info")["clusterId"]

        # The second cluster's agent (same id) starts while the first's trial trains: it
        # reconciles against its own master, which wants nothing of that container.
        second = _cluster(tmp_path / "second", second_pg_url, agent_id)
        second.agents[0].start()
        wait_for(lambda: _registered(second), 120, "the second cluster's agent")
        eid_second = second.create(CORE / "single.yaml", CORE, LONG)
        theirs = _running_container(second, eid_second)
        assert theirs.id != mine.id
        mine.reload()
        assert mine.status == "running", second.agents[0].output()[-3000:]

        for c, eid in ((first, eid_first), (second, eid_second)):
            c.wait_state(eid, "STATE_COMPLETED", 600)
            (trial,) = c.trials(eid)
            assert trial["restarts"] == 0, trial
            assert trial["totalBatchesProcessed"] == 3000, trial
        # Neither agent touched the other cluster's allocation.
        other_alloc = theirs.labels[LABEL_ALLOCATION]
        assert other_alloc not in first.agents[0].output()
        assert mine.labels[LABEL_ALLOCATION] not in second.agents[0].output()
    finally:
        for c in (second, first):
            if c is not None:
                for a in c.agents:
                    a.kill(signal.SIGTERM)
        for c in (second, first):
            if c is not None:
                with contextlib.suppress(Exception):
                    stop_cluster(c)
