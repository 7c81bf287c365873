"""Trials across machines that share nothing but a network (issue 39), on real Docker engines.

Four machines (:mod:`tests.e2e.machines`: each a privileged container with its own Docker engine
and its own agent, on a bridge network of their own, the task image pulled from a registry on
the host), started once for this module, in parallel (their pulls included); the master and
PostgreSQL on the host, reached at the bridge's gateway. Checkpoints go to a ``shared_fs``
directory every machine mounts (an NFS export's stand-in). Each test picks how many machines
have an agent and with how many CPU slots (:meth:`Site.use`: agents restarted with another slot
count, the others stopped and disabled).

What runs in CI (the machine has 2 cores; the lightest shape each check allows):

* 2 machines x 1 slot: det's Core API example (``examples/core_api``) under Determined 0.38.1's
  own ``torch_distributed`` launcher (c10d at the chief machine's address) trains once; the
  worker machine's agent killed (``kill -9``), and separately the chief machine's network cut,
  every rank stops within 60 s and the trial resumes; a gang preempted by one of higher priority
  on the same pair checkpoints once and resumes. ``DET_MACHINES_SLOTS=2`` runs these on 2 x 2.
* 2 machines x 2 slots: Determined's ``PyTorchTrial`` example (``examples/pytorch_trial``,
  legacy ``model_def:RegressionTrial`` entrypoint) with ``slots_per_trial: 4`` trains once,
  ranks 0-1 on the first machine and 2-3 on the second.
* 4 machines x 1 slot: two gangs, one per pair of machines; a gang of higher priority preempts
  the lower one only, which checkpoints once and resumes.

Determined's Core API tutorial, stage 4 (``examples/tutorials/core_api/4_distributed.py`` with
its own launcher, unmodified), runs too when ``DET_DETERMINED_SRC`` names a checkout of
Determined v0.38.1 (``git clone --depth 1 --branch v0.38.1
https://github.com/determined-ai/determined``): it is Determined's code, not in this repository,
and CI reaches no source host, so that test exists only where the variable is set (it passed
across these machines, 2 x 1 and 2 x 2 slots).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import new_database
from tests.e2e.cluster import REPO, Cluster, wait_for
from tests.e2e.machines import Machines, leftovers, machines
from tests.integration.conftest import start_master
from tests.ports import free_port

# pytest-timeout counts the module's machines, started in the first test's setup, against that
# test: cold (a fresh machine: the machine image built, the 1.8 GB task image pushed and pulled
# by two engines) they took over 600 s at load 17-82 (issue 44's third fresh-machine run); four
# engines pull now. Each test's own waits are bounded by their wait_for timeouts.
pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

#: Machines started for the module (the two-gang test's); the other tests use the first two.
MACHINES = 4
#: CPU slots per machine's agent for the Core API tests: 1 (2 x 1, what CI runs);
#: DET_MACHINES_SLOTS=2 runs them on 2 x 2.
SLOTS_PER_MACHINE = int(os.environ.get("DET_MACHINES_SLOTS") or 1)
# The killed run trains long enough for the master to notice the lost agent (20 s) mid-way:
# paced at 40 ms a batch (the example's batch_seconds: its ranks sleep rather than spin the
# host's cores as fast as they go), its first checkpoint comes about 5 s in, then the kill, and
# about 55 s of batches are left after it. A batch of two ranks, all-reduced, costs each about 2
# CPU-ms (gloo's all-reduce), paced or not: a run lasts as long with fewer, slower batches and
# costs less (6,000 batches at 10 ms before).
BATCHES = 1500
BATCH_SECONDS = 0.04
#: How often the gangs report (and check for preemption): every 25 batches.
REPORT = 25
#: How often a wait asks the machines' engines (a ``docker exec`` into each machine: the host's
#: engine, the machine's CLI and its engine, tens of CPU-ms each): a stop's time is then known
#: to a second, within the 60 s it is given.
DOCKER_POLL = 1.0
#: The trial of the killed run, for the check of its metric rows.
RESUMED: list[int] = []


def tutorial() -> Path | None:
    """Determined's core_api tutorial, where ``DET_DETERMINED_SRC`` names its checkout."""
    src = os.environ.get("DET_DETERMINED_SRC")
    if not src:
        return None
    path = Path(src) / "examples" / "tutorials" / "core_api"
    if not (path / "4_distributed.py").is_file():
        raise FileNotFoundError(f"DET_DETERMINED_SRC={src} has no {path}/4_distributed.py")
    return path


@dataclass
class Site:
    """The module's machines (all of them) and the master their agents report to."""

    cluster: Cluster
    machines: Machines
    port: int
    agent_token: str

    def use(self, n: int, slots: int) -> Machines:
        """The first ``n`` machines, each with a connected, enabled agent of ``slots`` CPU
        slots (an agent of another slot count restarted); the other machines' agents stopped
        and disabled, so no gang is placed there. Cheap when the layout is already so."""
        group = self.machines.first(n)
        master = self.cluster.master
        listed = {a["id"]: a for a in master.get("/api/v1/agents")["agents"] or []}
        for m in self.machines.machines[n:]:
            if m.agent_alive():
                m.stop_agent()
            if m.agent_id in listed and listed[m.agent_id]["enabled"]:
                master.post(f"/api/v1/agents/{m.agent_id}/disable", {})
        stale = [m for m in group.machines if m.slots != slots or not m.agent_alive()]
        if stale:
            replace(group, machines=stale).start_agents(self.port, self.agent_token, slots)

        def ready() -> bool:
            agents = {a["id"]: a for a in master.get("/api/v1/agents")["agents"] or []}
            for m in group.machines:
                a = agents.get(m.agent_id)
                if a is None or not a["connected"] or len(a["slots"] or {}) != slots:
                    return False
                if not a["enabled"]:
                    master.post(f"/api/v1/agents/{m.agent_id}/enable", {})
                    return False
            return True

        try:
            wait_for(ready, 120, f"{n} machines' agents with {slots} slots each")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\n{dump(self.cluster, self.machines)}") from None
        return group


@pytest.fixture(scope="module")
def machine_site(tmp_path_factory: pytest.TempPathFactory, pg_server: str) -> Iterator[Site]:
    """Four machines started (and the task image pulled by each) at once, a master, and agents
    on the first two with ``SLOTS_PER_MACHINE`` slots each; tests choose their layout with
    :meth:`Site.use`."""
    tmp = tmp_path_factory.mktemp("machines")
    ckpt = tmp / "checkpoints"
    ckpt.mkdir()
    with (
        new_database(pg_server, "det_machines") as url,
        machines(tmp, MACHINES, shared=[ckpt]) as group,
    ):
        port = free_port()
        extra: dict[str, Any] = {
            # The machines reach the master at the bridge's gateway. No master_url: the master
            # tells tasks http://127.0.0.1:PORT, and each agent gives its own URL instead.
            "bind_address": "0.0.0.0",
            "agent_timeout_seconds": 20,
            "task_container_defaults": {
                "image": {"cpu": group.task_image(), "cuda": group.task_image()}
            },
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(ckpt)},
            # A gang of higher priority takes a running gang's slots (the preemption tests).
            "resource_manager": {"scheduler": {"type": "priority", "preemption": True}},
        }
        master = start_master(tmp, url, port=port, extra=extra)
        site = Site(Cluster(master, [], tmp, None, ckpt, url), group, port, master.agent_token)
        try:
            site.use(2, SLOTS_PER_MACHINE)
            print(f"\nmachines: {group.report()}", file=sys.stderr)
            yield site
        finally:
            master.kill(signal.SIGTERM)
    assert leftovers() == []


@pytest.fixture
def machine_cluster(machine_site: Site) -> tuple[Cluster, Machines]:
    """The first two machines, each agent with ``SLOTS_PER_MACHINE`` slots (the others'
    agents stopped)."""
    return machine_site.cluster, machine_site.use(2, SLOTS_PER_MACHINE)


def dump(cluster: Cluster, group: Machines) -> str:
    parts = [cluster.dump()]
    for m in group.machines:
        parts.append(f"--- {m.name} ({m.address}) agent ---\n{m.agent_log()[-3000:]}")
    return "\n".join(parts)


def ranks_on_their_machines(cluster: Cluster, group: Machines, tid: int) -> None:
    """Each machine's agent registered at its bridge address, and each container's first line
    names its rank, its machine's address and the chief's."""
    agents = {a["id"]: a for a in cluster.master.get("/api/v1/agents")["agents"]}
    for m in group.machines:
        assert agents[m.agent_id]["addresses"] == [m.address], agents[m.agent_id]
    text = "".join(e.get("log") or "" for e in cluster.trial_logs(tid))
    chief = group.machines[0].address
    for r, m in enumerate(group.machines):
        line = f"container rank {r} of {len(group.machines)} at {m.address}, chief at {chief}"
        assert line in text, text[-3000:]


def test_a_trial_trains_once_across_two_machines(
    machine_cluster: tuple[Cluster, Machines],
) -> None:
    """det's Core API example under Determined's ``torch_distributed`` launcher on 2 machines:
    one chief's reports (each period once), one set of checkpoints, each container on its own
    machine, nothing left on either engine."""
    cluster, group = machine_cluster
    core = REPO / "examples" / "core_api"
    config = {
        "entrypoint": "python3 -m determined.launch.torch_distributed -- python3 train.py",
        "resources": {"slots_per_trial": SLOTS_PER_MACHINE * len(group.machines)},
        "searcher": {"max_length": {"batches": 100}},
        "hyperparameters": {"report_every": 10, "validate_every": 50, "checkpoint_every": 50},
    }
    eid = cluster.create(core / "distributed.yaml", core, config)
    try:
        cluster.wait_state(eid, "STATE_COMPLETED", 900)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
    trials = cluster.trials(eid)
    assert len(trials) == 1, trials
    tid = int(trials[0]["id"])
    training = [int(m["totalBatches"]) for m in cluster.metrics(tid, "training")]
    assert training == list(range(10, 101, 10)), training
    validation = [int(m["totalBatches"]) for m in cluster.metrics(tid, "validation")]
    assert validation == [50, 100], validation
    saved = sorted(int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(tid))
    assert saved == [50, 100], saved
    ranks_on_their_machines(cluster, group, tid)
    until_no_task_containers(group)


if tutorial() is not None:

    def test_the_core_api_tutorial_stage_4_trains_once_across_two_machines(
        machine_cluster: tuple[Cluster, Machines],
    ) -> None:
        """Determined's stage 4, unmodified (its own launcher), where its source is given."""
        cluster, group = machine_cluster
        path = tutorial()
        assert path is not None
        slots = SLOTS_PER_MACHINE * len(group.machines)
        eid = cluster.create(
            path / "4_distributed.yaml", path, {"resources": {"slots_per_trial": slots}}
        )
        try:
            cluster.wait_state(eid, "STATE_COMPLETED", 900)
        except (AssertionError, TimeoutError) as e:
            raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
        trials = cluster.trials(eid)
        assert len(trials) == 1, trials
        t = trials[0]
        increment = int(t["hparams"]["increment_by"])
        # One chief's reports: every 10 steps once, x summed over every worker (allgather).
        training = cluster.metrics(t["id"], "training")
        assert [int(m["totalBatches"]) for m in training] == list(range(10, 101, 10)), training
        assert [m["metrics"]["avg_metrics"]["x"] for m in training] == [
            s * slots * increment for s in range(10, 101, 10)
        ], training
        saved = sorted(
            int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(t["id"])
        )
        assert saved == list(range(10, 101, 10)), saved
        logs = cluster.trial_logs(t["id"])
        by_rank = {int(e["rankId"]): e["agentId"] for e in logs if e.get("rankId") is not None}
        assert by_rank == {
            i * SLOTS_PER_MACHINE + r: m.agent_id
            for i, m in enumerate(group.machines)
            for r in range(SLOTS_PER_MACHINE)
        }, by_rank
        ranks_on_their_machines(cluster, group, int(t["id"]))
        until_no_task_containers(group)


def all_connected(cluster: Cluster, group: Machines) -> bool:
    """Every machine's agent is connected (a machine back on the network re-registers)."""
    agents = {a["id"]: a for a in cluster.master.get("/api/v1/agents")["agents"] or []}
    return all(m.agent_id in agents and agents[m.agent_id]["connected"] for m in group.machines)


def no_task_containers(group: Machines, running: bool = False) -> bool:
    """No task container on any machine's engine (``running``: none running)."""
    return not any(m.task_containers(running) for m in group.machines)


def until_no_task_containers(
    group: Machines, what: str = "the machines' task containers to go", running: bool = False
) -> None:
    """Waits up to 60 s for :func:`no_task_containers`, asking every ``DOCKER_POLL`` s."""
    wait_for(lambda: no_task_containers(group, running), 60, what, DOCKER_POLL)


def test_a_dead_agent_stops_every_rank_and_the_trial_resumes(
    machine_cluster: tuple[Cluster, Machines],
) -> None:
    """``kill -9`` of the worker machine's agent mid-training. Its container is told nothing
    (its agent is gone) and its rank would wait in a collective for ever; the master ends the
    allocation once the agent is lost, the chief's agent kills the chief's container, and the
    orphan stops when its collective fails or the master refuses its token
    (det.exec.allocation_watch), whichever comes first. Every
    rank stops within 60 s; the agent back, the trial resumes from its checkpoint on both
    machines and completes, no period reported twice, nothing left on either engine. Runs
    det's Core API example under Determined's own ``torch_distributed`` launcher (c10d at the
    chief machine's address)."""
    cluster, group = machine_cluster
    core = REPO / "examples" / "core_api"
    config = {
        "entrypoint": "python3 -m determined.launch.torch_distributed -- python3 train.py",
        "resources": {"slots_per_trial": SLOTS_PER_MACHINE * len(group.machines)},
        "searcher": {"max_length": {"batches": BATCHES}},
        "hyperparameters": {
            "report_every": REPORT,
            "validate_every": 500,
            "checkpoint_every": 125,
            "batch_seconds": BATCH_SECONDS,
        },
        "max_restarts": 1,
    }
    eid = cluster.create(core / "distributed.yaml", core, config)
    tid = int(wait_for(lambda: cluster.trials(eid), 120, "the trial")[0]["id"])
    try:
        wait_for(lambda: cluster.checkpoints_of(tid), 600, "the trial's first checkpoint")
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{dump(cluster, group)}") from None
    victim = group.machines[1]
    assert victim.task_containers(running=True), dump(cluster, group)
    victim.kill_agent(9)
    killed = time.monotonic()
    try:
        until_no_task_containers(group, "every rank to stop", running=True)
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{dump(cluster, group)}") from None
    stopped = time.monotonic() - killed
    wait_for(
        lambda: not group.machines[0].task_containers(),
        30,
        "the chief's container to go",
        DOCKER_POLL,
    )
    victim.start_agent()
    try:
        cluster.wait_state(eid, "STATE_COMPLETED", 900)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
    print(f"\nagent killed: every rank stopped after {stopped:.1f} s", file=sys.stderr)
    RESUMED.append(tid)
    training = [int(m["totalBatches"]) for m in cluster.metrics(tid, "training")]
    assert sorted(set(training)) == list(range(REPORT, BATCHES + 1, REPORT)), training
    saved = [int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(tid)]
    assert len(saved) == len(set(saved)) and max(saved) == BATCHES, saved
    logs = "".join(e.get("log") or "" for e in cluster.trial_logs(tid))
    assert "resumed from" in logs, logs[-3000:]
    # The orphan stopped (asserted above: every rank within 60 s) by whichever came first: its
    # collective failing once the chief's container was killed, or its watch (the master's 401,
    # "the master ended allocation"; tests/unit/harness/test_harness_allocation_watch.py). CI's
    # runs logged the watch's line; the fresh machine's run 4 (issue 44) had none, its orphan
    # stopped all the same: which one is not asserted.
    until_no_task_containers(group)


def test_a_resumed_trial_reports_each_period_once(
    machine_cluster: tuple[Cluster, Machines],
) -> None:
    """The killed run reported the periods after its last checkpoint; its resumption reports
    them again. Each period should be listed once."""
    cluster, _ = machine_cluster
    if not RESUMED:
        pytest.skip("needs test_a_dead_agent_stops_every_rank_and_the_trial_resumes's trial")
    training = [int(m["totalBatches"]) for m in cluster.metrics(RESUMED[0], "training")]
    assert len(training) == len(set(training)), training


#: The cut run: short, yet it cannot finish while cut off. Its ranks stop at the next
#: checkpoint (500) at the latest, where the chief waits for the master to register it.
CUT_BATCHES = 750


def torch_core_api(batches: int, **hparams: float) -> dict[str, Any]:
    """det's Core API example under Determined's ``torch_distributed`` launcher, one rank per
    slot of every machine; paced at 20 ms a batch unless ``batch_seconds`` says otherwise (the
    ranks of a gang that only has to be training when something happens to it sleep between
    batches instead of keeping the host's cores busy, and train a quarter of the batches they
    did at 5 ms for the same time: see BATCHES)."""
    return {
        "entrypoint": "python3 -m determined.launch.torch_distributed -- python3 train.py",
        "resources": {"slots_per_trial": SLOTS_PER_MACHINE * 2},
        "searcher": {"max_length": {"batches": batches}},
        "hyperparameters": {"batch_seconds": 0.02, **hparams},
        "max_restarts": 1,
    }


def test_a_machine_cut_off_the_network_stops_every_rank_and_the_trial_resumes(
    machine_cluster: tuple[Cluster, Machines],
) -> None:
    """The chief's machine loses its link (``ip link set eth0 down`` in its namespace) after the
    trial's first checkpoint. Nothing on it can reach the master, and the master cannot tell it
    anything: the master marks its agent lost after ``agent_timeout_seconds`` (20 s here) and
    the other machine's agent kills its rank; the cut machine's agent, hearing nothing from the
    master for a little less than that (10 s here; the heartbeat the cut caught in flight held
    it until its 10 s read timeout), stops its own task containers (fencing: a rank the master has given up
    on must not train on, or write checkpoints, beside the trial's next run). Both within 60 s
    of the cut (the old agent left the cut machine's rank running until the link was back). The link back, the agent re-registers, the trial resumes from its
    checkpoint on both machines and completes (no restart counted: the machine was lost, the
    trial did not fail), each period and checkpoint listed once, nothing left on either
    engine."""
    cluster, group = machine_cluster
    wait_for(lambda: all_connected(cluster, group), 120, "every machine's agent connected")
    chief, other = group.machines[0], group.machines[1]
    core = REPO / "examples" / "core_api"
    config = torch_core_api(
        CUT_BATCHES, report_every=REPORT, validate_every=625, checkpoint_every=250
    )
    eid = cluster.create(core / "distributed.yaml", core, config)
    tid = int(wait_for(lambda: cluster.trials(eid), 120, "the trial")[0]["id"])
    try:
        wait_for(lambda: cluster.checkpoints_of(tid), 600, "the trial's first checkpoint")
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{dump(cluster, group)}") from None
    assert chief.task_containers(running=True), dump(cluster, group)
    assert other.task_containers(running=True), dump(cluster, group)
    route = chief.cut_network()
    cut = time.monotonic()
    stopped: dict[str, float] = {}

    def both_stopped() -> bool:
        for m in (other, chief):
            if m.name not in stopped and not m.task_containers(running=True):
                stopped[m.name] = time.monotonic() - cut
        return len(stopped) == 2

    try:
        try:
            wait_for(both_stopped, 60, "every rank to stop", DOCKER_POLL)
        except TimeoutError as e:
            raise TimeoutError(f"{e}: {stopped}\n{dump(cluster, group)}") from None
    finally:
        chief.restore_network(route)
    print(
        f"\nnetwork cut: the other machine's rank stopped after {stopped[other.name]:.1f} s,"
        f" the cut machine's after {stopped[chief.name]:.1f} s",
        file=sys.stderr,
    )
    try:
        cluster.wait_state(eid, "STATE_COMPLETED", 900)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
    logs = "".join(e.get("log") or "" for e in cluster.trial_logs(tid))
    # The cut machine stopped its rank itself (no word of the master reaches it): its agent's
    # fence, or the container's own watch with the same fence (det.exec.allocation_watch),
    # whichever counted the silence out first; the agent learns of the silence only when its
    # heartbeat's read times out, so either may win. Their lines, shipped once the link is back.
    assert "fencing:" in chief.agent_log() or "(fenced:" in logs, (
        chief.agent_log()[-3000:] + logs[-3000:]
    )
    assert int(cluster.trial(tid)["restarts"]) == 0, cluster.trial(tid)
    training = [int(m["totalBatches"]) for m in cluster.metrics(tid, "training")]
    assert training == list(range(REPORT, CUT_BATCHES + 1, REPORT)), training
    saved = [int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(tid)]
    assert len(saved) == len(set(saved)) and max(saved) == CUT_BATCHES, saved
    assert "resumed from" in logs, logs[-3000:]
    until_no_task_containers(group)


#: The preempted gang's length: it is preempted early on and trains the rest after.
LOW_BATCHES = 750


def test_a_gang_preempted_by_a_higher_priority_gang_checkpoints_once_and_resumes(
    machine_cluster: tuple[Cluster, Machines],
) -> None:
    """A gang across both machines (priority 50) is training when a gang of higher priority
    (10) needs the same slots: the low gang's chief sees the preemption, checkpoints once, and
    every rank exits; the high gang runs and completes; the low one resumes from that
    checkpoint and completes, no restart counted, each period once. (One gang at a time: with
    one slot per machine, the two gangs share the same pair of machines.)"""
    cluster, group = machine_cluster
    wait_for(lambda: all_connected(cluster, group), 120, "every machine's agent connected")
    core = REPO / "examples" / "core_api"
    # No periodic checkpoint: the preemption's and the last are the only ones.
    low_config = torch_core_api(
        LOW_BATCHES, report_every=REPORT, validate_every=250, checkpoint_every=10**9
    )
    low_config["resources"]["priority"] = 50
    low = cluster.create(core / "distributed.yaml", core, low_config)
    tid = int(wait_for(lambda: cluster.trials(low), 120, "the low gang's trial")[0]["id"])
    try:
        wait_for(lambda: cluster.metrics(tid, "training"), 600, "the low gang to train")
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{dump(cluster, group)}") from None
    high_config = torch_core_api(200, report_every=50, validate_every=100, checkpoint_every=100)
    high_config["resources"]["priority"] = 10
    high = cluster.create(core / "distributed.yaml", core, high_config)
    try:
        cluster.wait_state(high, "STATE_COMPLETED", 600)
        cluster.wait_state(low, "STATE_COMPLETED", 900)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
    saved = sorted(
        (int(c["metadata"]["steps_completed"]), str(c["uuid"])) for c in cluster.checkpoints_of(tid)
    )
    # Once: one checkpoint at the preemption (from the chief), then the last one.
    assert len(saved) == 2 and saved[0][0] < LOW_BATCHES == saved[1][0], saved
    logs = cluster.trial_logs(tid)
    text = "".join(e.get("log") or "" for e in logs)
    assert f"resumed from {saved[0][1]} at step {saved[0][0]}" in text, text[-3000:]
    assert int(cluster.trial(tid)["restarts"]) == 0, cluster.trial(tid)
    training = [int(m["totalBatches"]) for m in cluster.metrics(tid, "training")]
    assert training == list(range(REPORT, LOW_BATCHES + 1, REPORT)), training
    high_trial = cluster.trials(high)[0]
    high_saved = [
        int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(high_trial["id"])
    ]
    assert sorted(high_saved) == [100, 200], high_saved
    until_no_task_containers(group)


#: Determined's PyTorchTrial example (legacy ``model_def:RegressionTrial`` entrypoint) on 4 slots:
#: reports every 5 batches, a validation and a checkpoint every 10, 20 in all.
TRIAL = REPO / "examples" / "pytorch_trial"
TRIAL_4_SLOTS: dict[str, Any] = {
    "resources": {"slots_per_trial": 4},
    "searcher": {"max_length": {"batches": 20}},
    "scheduling_unit": 5,
    "min_validation_period": {"batches": 10},
    "min_checkpoint_period": {"batches": 10},
    "max_restarts": 0,
}
_WEIGHTS = re.compile(r"weights after (\d+) batches: (\[.*\])")


def test_a_trial_class_on_four_slots_of_two_machines_trains_once(machine_site: Site) -> None:
    """``examples/pytorch_trial`` with ``slots_per_trial: 4`` on 2 machines x 2 slots: one
    container per machine, two ranks in each (det's launcher runs the official harness, one
    chief for all four). One chief's reports (each period once), one set of checkpoints, ranks
    0-1 on the first machine and 2-3 on the second, each container's line with its machine's
    address, all four ranks ending with the same weights, nothing left on either engine."""
    cluster = machine_site.cluster
    group = machine_site.use(2, 2)
    created = time.monotonic()
    eid = cluster.create(TRIAL / "const.yaml", TRIAL, TRIAL_4_SLOTS)
    tid = int(wait_for(lambda: cluster.trials(eid), 120, "the trial")[0]["id"])
    try:
        wait_for(lambda: cluster.metrics(tid, "training"), 600, "the first training report")
        training_at = time.monotonic() - created
        cluster.wait_state(eid, "STATE_COMPLETED", 600)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
    print(
        f"\n2 x 2 trial class: created -> all ranks training {training_at:.1f} s", file=sys.stderr
    )
    trials = cluster.trials(eid)
    assert len(trials) == 1, trials
    training = [int(m["totalBatches"]) for m in cluster.metrics(tid, "training")]
    assert training == [5, 10, 15, 20], training
    validation = [int(m["totalBatches"]) for m in cluster.metrics(tid, "validation")]
    assert validation == [10, 20], validation
    saved = sorted(int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(tid))
    assert saved == [10, 20], saved
    logs = cluster.trial_logs(tid)
    by_rank: dict[int, set[str]] = {}
    final: dict[int, tuple[int, str]] = {}
    for entry in logs:
        if entry.get("rankId") is None:
            continue
        rank = int(entry["rankId"])
        by_rank.setdefault(rank, set()).add(str(entry["agentId"]))
        m = _WEIGHTS.search(entry.get("log") or "")
        if m:
            seen = (int(m.group(1)), m.group(2))
            final[rank] = max(final.get(rank, seen), seen)
    first, second = (m.agent_id for m in group.machines)
    assert by_rank == {0: {first}, 1: {first}, 2: {second}, 3: {second}}, by_rank
    ranks_on_their_machines(cluster, group, tid)
    assert set(final) == {0, 1, 2, 3}, f"the ranks' final weights: {final}"
    assert len(set(final.values())) == 1, final  # after the same batch, the same weights
    assert final[0][0] >= 19, final  # the last validation's (batch index 19: 20 trained)
    until_no_task_containers(group)


def gang_config(batches: int, priority: int, **hparams: float) -> dict[str, Any]:
    """det's Core API example under Determined's ``torch_distributed`` launcher on 2 slots (one
    per machine), at ``priority``."""
    config = torch_core_api(batches, **hparams)
    config["resources"] = {"slots_per_trial": 2, "priority": priority}
    return config


def rank_agents(cluster: Cluster, tid: int) -> dict[int, str]:
    """The agent of each rank's first log line."""
    out: dict[int, str] = {}
    for e in cluster.trial_logs(tid):
        if e.get("rankId") is not None:
            out.setdefault(int(e["rankId"]), str(e["agentId"]))
    return out


def running_containers(group: Machines) -> dict[str, list[str]]:
    return {m.agent_id: m.task_containers(running=True) for m in group.machines}


def test_of_two_gangs_on_four_machines_the_lower_priority_one_is_preempted_and_resumes(
    machine_site: Site,
) -> None:
    """Four machines with one slot each; two gangs of two ranks, one per pair of machines: the
    "steady" gang (priority 40, trains until it is killed at the end) and the "low" gang
    (priority 50). A gang of higher priority (10) needs two slots: the low gang, and only it, is
    preempted: its chief checkpoints once and every rank exits, the high gang runs on the pair
    it freed and completes, and the low gang resumes from that checkpoint and completes (no
    restart counted, each period once). The steady gang's containers run throughout, untouched
    (the same container on each of its machines, no checkpoint, no restart)."""
    cluster = machine_site.cluster
    group = machine_site.use(MACHINES, 1)
    core = REPO / "examples" / "core_api"
    never = 10**9
    # The steady gang only holds its pair: paced (200 ms a batch), it trains without a busy core.
    steady_config = gang_config(
        10**7, 40, report_every=5, validate_every=never, checkpoint_every=never,
        batch_seconds=0.2,
    )  # fmt: skip
    steady = cluster.create(core / "distributed.yaml", core, steady_config)
    low_config = gang_config(
        LOW_BATCHES, 50, report_every=REPORT, validate_every=250, checkpoint_every=never
    )
    low = cluster.create(core / "distributed.yaml", core, low_config)
    steady_tid = int(wait_for(lambda: cluster.trials(steady), 120, "the steady trial")[0]["id"])
    low_tid = int(wait_for(lambda: cluster.trials(low), 120, "the low trial")[0]["id"])

    def both_training() -> bool:
        return all(
            cluster.metrics(t, "training") and len(rank_agents(cluster, t)) == 2
            for t in (steady_tid, low_tid)
        )

    try:
        wait_for(both_training, 600, "both gangs to train, every rank logging")
    except TimeoutError as e:
        raise TimeoutError(f"{e}\n{dump(cluster, group)}") from None
    # One gang per pair: each machine runs one rank, the steady gang's two on two machines.
    before = running_containers(group)
    assert all(len(c) == 1 for c in before.values()), before
    steady_pair = set(rank_agents(cluster, steady_tid).values())
    low_pair = set(rank_agents(cluster, low_tid).values())
    assert len(steady_pair) == 2 and low_pair == {m.agent_id for m in group.machines} - steady_pair

    high_config = gang_config(200, 10, report_every=50, validate_every=100, checkpoint_every=100)
    asked = time.monotonic()
    high = cluster.create(core / "distributed.yaml", core, high_config)
    try:
        wait_for(lambda: cluster.checkpoints_of(low_tid), 300, "the low gang's checkpoint")
        checkpointed = time.monotonic() - asked
        high_tid = int(wait_for(lambda: cluster.trials(high), 120, "the high trial")[0]["id"])
        wait_for(lambda: cluster.metrics(high_tid, "training"), 600, "the high gang to train")
        high_training = time.monotonic() - asked
        cluster.wait_state(high, "STATE_COMPLETED", 600)
        cluster.wait_state(low, "STATE_COMPLETED", 900)
    except (AssertionError, TimeoutError) as e:
        raise AssertionError(f"{e}\n{dump(cluster, group)}") from None
    print(
        f"\ntwo gangs on 4 machines: the high gang created -> the low gang's checkpoint"
        f" {checkpointed:.1f} s, -> the high gang training {high_training:.1f} s",
        file=sys.stderr,
    )
    # The steady gang ran throughout: the same containers, still running, never preempted.
    assert cluster.state(steady) == "STATE_ACTIVE", cluster.experiment(steady)
    after = running_containers(group)
    assert {a: after[a] for a in steady_pair} == {a: before[a] for a in steady_pair}, after
    cluster.master.post(f"/api/v1/experiments/{steady}/kill", {})
    cluster.wait_state(steady, "STATE_CANCELED", 120)
    assert int(cluster.trial(steady_tid)["restarts"]) == 0, cluster.trial(steady_tid)
    assert cluster.checkpoints_of(steady_tid) == []
    steady_logs = "".join(e.get("log") or "" for e in cluster.trial_logs(steady_tid))
    assert "preempted at step" not in steady_logs and "resumed from" not in steady_logs

    # The high gang ran on the pair the low gang freed.
    assert set(rank_agents(cluster, high_tid).values()) == low_pair
    high_saved = [int(c["metadata"]["steps_completed"]) for c in cluster.checkpoints_of(high_tid)]
    assert sorted(high_saved) == [100, 200], high_saved

    # The low gang: one checkpoint at the preemption (from the chief), then its last.
    saved = sorted(
        (int(c["metadata"]["steps_completed"]), str(c["uuid"]))
        for c in cluster.checkpoints_of(low_tid)
    )
    assert len(saved) == 2 and saved[0][0] < LOW_BATCHES == saved[1][0], saved
    text = "".join(e.get("log") or "" for e in cluster.trial_logs(low_tid))
    # Every rank that logged its exit left at the step of that one checkpoint.
    steps = set(re.findall(r"preempted at step (\d+)", text))
    assert steps == {str(saved[0][0])}, text[-3000:]
    assert f"resumed from {saved[0][1]} at step {saved[0][0]}" in text, text[-3000:]
    assert int(cluster.trial(low_tid)["restarts"]) == 0, cluster.trial(low_tid)
    training = [int(m["totalBatches"]) for m in cluster.metrics(low_tid, "training")]
    assert training == list(range(REPORT, LOW_BATCHES + 1, REPORT)), training
    until_no_task_containers(group)
