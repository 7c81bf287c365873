"""A trial on two slots is one trial, never two (issue 38, finding 3 and build 3), on real Docker.

One cluster for the module: agent ``a`` with two CPU slots, agents ``b`` and ``c`` with one each
(all on this host, host networking, as ``det deploy local`` runs them). Each test enables only
the agents it wants the trial on. Determined's ``PyTorchTrial`` example
(``examples/pytorch_trial``, legacy ``model_def:RegressionTrial`` entrypoint) with
``slots_per_trial: 2`` trains once, under det's launcher with one chief: one set of training
and validation reports, one set of checkpoints, and both ranks end with the same weights. A
script that trains on its own in each container is refused at the second container's first
report, naming the launcher to use.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import new_database
from tests.e2e.cluster import (
    EXAMPLES,
    Agent,
    Cluster,
    agent_argv,
    start_cluster,
    stop_cluster,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

TRIAL = EXAMPLES / "pytorch_trial"
CORE = EXAMPLES / "core_api"
# A few batches: reports every 5, validation and checkpoint every 10.
SHORT: dict[str, Any] = {
    "resources": {"slots_per_trial": 2},
    "searcher": {"max_length": {"batches": 20}},
    "scheduling_unit": 5,
    "min_validation_period": {"batches": 10},
    "min_checkpoint_period": {"batches": 10},
    "max_restarts": 0,
}
_WEIGHTS = re.compile(r"weights after (\d+) batches: (\[.*\])")


@pytest.fixture(scope="module")
def gang(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("gang")
    with new_database(pg_server, "det_gang") as url:
        cluster = start_cluster(tmp, url, agents=1, slots=2)
        try:
            for name in ("b", "c"):
                state = tmp / f"agent-{name}"
                state.mkdir()
                aid = f"{cluster.agents[0].agent_id}-{name}"
                argv = agent_argv(cluster.master, aid, state, 1)
                cluster.agents.append(Agent(aid, argv, tmp / f"agent-{name}.log").start())

            def registered() -> bool:
                ids = {a["id"] for a in cluster.master.get("/api/v1/agents")["agents"] or []}
                return all(a.agent_id in ids for a in cluster.agents)

            wait_for(registered, 120, "agents b and c to register")
            yield cluster
        finally:
            stop_cluster(cluster)


def use_agents(cluster: Cluster, *which: int) -> list[str]:
    """Enables agents ``which`` (indexes: 0 is ``a``, 1 ``b``, 2 ``c``), disables the others."""
    for i, a in enumerate(cluster.agents):
        verb = "enable" if i in which else "disable"
        cluster.master.post(f"/api/v1/agents/{a.agent_id}/{verb}", {})
    return [cluster.agents[i].agent_id for i in which]


def only_trial(cluster: Cluster, eid: int) -> dict[str, Any]:
    trials = wait_for(lambda: cluster.trials(eid), 60, "the trial to exist")
    assert len(trials) == 1, trials
    return dict(trials[0])


def assert_trained_once(cluster: Cluster, eid: int, agents: list[str]) -> None:
    cluster.wait_state(eid, "STATE_COMPLETED", 600)
    t = only_trial(cluster, eid)
    tid = t["id"]
    # One chief's reports: each period once (two trainings gave every row twice).
    training = [int(m["totalBatches"]) for m in cluster.metrics(tid, "training")]
    assert training == [5, 10, 15, 20], training
    validation = [int(m["totalBatches"]) for m in cluster.metrics(tid, "validation")]
    assert validation == [10, 20], validation
    # One set of checkpoints (two trainings saved four).
    saved = sorted(int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(tid))
    assert saved == [10, 20], saved
    # Two workers, on the agents chosen, ending with the same weights.
    logs = cluster.trial_logs(tid)
    assert {e["agentId"] for e in logs if e.get("rankId") is not None} == set(agents)
    final: dict[int, tuple[int, str]] = {}
    for e in logs:
        m = _WEIGHTS.search(e.get("log") or "")
        if m and e.get("rankId") is not None:
            seen = (int(m.group(1)), m.group(2))
            final[int(e["rankId"])] = max(final.get(int(e["rankId"]), seen), seen)
    assert set(final) == {0, 1}, f"the ranks' final weights: {final}\n{cluster.dump()}"
    assert final[0] == final[1], final  # after the same batch, the same weights
    assert final[0][0] >= 19, final  # the last validation's (batch index 19: 20 trained)


def test_a_trial_class_on_two_slots_of_one_agent_trains_once(gang: Cluster) -> None:
    """Before: refused at run time ("a trial-class entrypoint runs on one slot here, not 2")."""
    agents = use_agents(gang, 0)
    eid = gang.create(TRIAL / "const.yaml", TRIAL, SHORT)
    assert_trained_once(gang, eid, agents)


def test_a_trial_class_on_two_agents_trains_once(gang: Cluster) -> None:
    """Before: both containers trained on their own; every report twice, four checkpoints."""
    agents = use_agents(gang, 1, 2)
    eid = gang.create(TRIAL / "const.yaml", TRIAL, SHORT)
    assert_trained_once(gang, eid, agents)


def test_a_script_training_in_each_container_is_refused(gang: Cluster) -> None:
    """A Core API script with no launcher on two agents: each container believes it is the
    chief. The second container's first report ends the trial ERROR, naming the launcher; no
    period is reported twice."""
    use_agents(gang, 1, 2)
    long = {
        "resources": {"slots_per_trial": 2},
        "searcher": {"max_length": {"batches": 100000}},
        "max_restarts": 2,
    }
    eid = gang.create(CORE / "single.yaml", CORE, long)
    gang.wait_state(eid, "STATE_ERROR", 600)
    t = only_trial(gang, eid)
    assert t["restarts"] == 0  # not retried: every retry would train twice again
    training = [int(m["totalBatches"]) for m in gang.metrics(t["id"], "training")]
    assert len(training) == len(set(training)), training
    logs = "".join(e.get("log") or "" for e in gang.trial_logs(t["id"]))
    assert "not the chief's" in logs and "determined.launch.torch_distributed" in logs, logs[-3000:]


@pytest.mark.parametrize(
    "launcher", ["det.launch.torch_distributed", "determined.launch.torch_distributed"]
)
def test_a_script_under_a_launcher_on_two_agents_trains_once(gang: Cluster, launcher: str) -> None:
    """The Core API example under det's launcher and under Determined's own (finding 9: its
    fixed c10d port was bound by both containers of one host) on two agents: one chief, each
    report once, workers on both agents."""
    agents = use_agents(gang, 1, 2)
    config = {
        "entrypoint": f"python3 -m {launcher} -- python3 train.py",
        "searcher": {"max_length": {"batches": 100}},
        "max_restarts": 0,
    }
    eid = gang.create(CORE / "distributed.yaml", CORE, config)
    gang.wait_state(eid, "STATE_COMPLETED", 600)
    t = only_trial(gang, eid)
    training = [int(m["totalBatches"]) for m in gang.metrics(t["id"], "training")]
    assert training == list(range(10, 101, 10)), training
    validation = [int(m["totalBatches"]) for m in gang.metrics(t["id"], "validation")]
    assert validation == [50, 100], validation
    logs = gang.trial_logs(t["id"])
    by_rank = {e["rankId"]: e["agentId"] for e in logs if e.get("rankId") is not None}
    assert by_rank == {0: agents[0], 1: agents[1]}, by_rank
