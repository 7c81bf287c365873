"""The provisioner pass on a real PostgreSQL with an in-process provider that records its calls:
what it launches and terminates, what it stores (so a restart keeps the backoff), and which
events it writes, how often."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from det.master import config as master_config
from det.master.db import open_pool, upgrade
from det.master.handles import MasterState
from det.master.provisioner.provider import Instance, InstanceState, LaunchError, LaunchOption
from det.master.services import provisioning

pytestmark = pytest.mark.integration

POOL = "cloud"


class RecordingProvider:
    """A cloud in memory: instances start RUNNING; ``refuse`` maps an instance type to the
    capacity error its launches get."""

    def __init__(self) -> None:
        self.instances: dict[str, Instance] = {}
        self.launches: list[tuple[str, int]] = []
        self.terminated: list[str] = []
        self.lists = 0
        self.refuse: dict[str, str] = {}
        self.messages: dict[str, str] = {}  # the refusal's message by instance type

    def launch(self, option: LaunchOption, count: int) -> list[Instance]:
        self.launches.append((option.instance_type, count))
        if option.instance_type in self.refuse:
            message = self.messages.get(option.instance_type, "no capacity")
            raise LaunchError(self.refuse[option.instance_type], message, capacity=True)
        out = []
        for _ in range(count):
            inst = Instance(
                f"i-{uuid.uuid4().hex[:8]}",
                InstanceState.RUNNING,
                dt.datetime.now(dt.UTC),
                option.instance_type,
            )
            self.instances[inst.id] = inst
            out.append(inst)
        return out

    def list_instances(self) -> list[Instance]:
        self.lists += 1
        return list(self.instances.values())

    def terminate(self, instance_ids: list[str]) -> None:
        self.terminated.extend(instance_ids)
        for iid in instance_ids:
            self.instances.pop(iid, None)


PROVIDER: dict[str, Any] = {
    "type": "aws",
    "image_id": "ami-12c6146b",
    "instance_type": "m5.large",
    "instance_slots": 1,
    "max_instances": 2,
    "max_idle_agent_period": "30s",
    "fallback": [{"instance_type": "m5.xlarge", "instance_slots": 1}],
}


@pytest.fixture
def provider_config() -> dict[str, Any]:
    return PROVIDER


@pytest.fixture
def st(pg_url: str, provider_config: dict[str, Any]) -> Iterator[MasterState]:
    upgrade(pg_url)
    pool = open_pool(pg_url, min_size=1, max_size=4)
    cfg = master_config.parse_config(
        {"resource_pools": [{"pool_name": POOL, "provider": provider_config}]}
    )
    with pool.connection() as conn:
        conn.execute("INSERT INTO users (username, password_hash) VALUES ('u', 'x')")
    yield MasterState(cfg, pool, "cluster-1", "agent-tok", "secret", "master-1")
    pool.close()


@pytest.fixture
def cloud() -> RecordingProvider:
    return RecordingProvider()


def provisioner(cloud: RecordingProvider) -> provisioning.Provisioner:
    """What a control loop holds between passes, building every pool's provider as ``cloud``;
    a new one is what a master restart gives."""
    return provisioning.Provisioner(factory=lambda st, pool, config: cloud)


@pytest.fixture
def prov(cloud: RecordingProvider) -> provisioning.Provisioner:
    return provisioner(cloud)


def pending(st: MasterState, job: str, slots: int = 1, n: int = 1) -> None:
    with st.pool.connection() as conn:
        conn.execute(
            "INSERT INTO jobs (id, owner_id, resource_pool, priority, queue_key)"
            " VALUES (%s, (SELECT id FROM users LIMIT 1), %s, 42, extract(epoch FROM now()))"
            " ON CONFLICT DO NOTHING",
            (job, POOL),
        )
        for i in range(n):
            conn.execute(
                "INSERT INTO allocations (id, kind, task_id, job_id, resource_pool, slots_needed,"
                " state, token_hash) VALUES (%s, 'COMMAND', %s, %s, %s, %s, 'PENDING', 'h')",
                (f"{job}.{i}", f"{job}.{i}", job, POOL, slots),
            )


def experiment_job(st: MasterState, job: str, slots: int = 1, n: int = 1) -> None:
    """An ACTIVE experiment whose job has ``n`` pending requests (so the job list shows it)."""
    pending(st, job, slots=slots, n=n)
    with st.pool.connection() as conn:
        conn.execute(
            "WITH e AS (INSERT INTO experiments (name, config, original_config, state, owner_id)"
            " VALUES (%s, '{}', '', 'ACTIVE', (SELECT id FROM users LIMIT 1)) RETURNING id)"
            " UPDATE jobs SET experiment_id = (SELECT id FROM e) WHERE id = %s",
            (job, job),
        )


def agent(st: MasterState, agent_id: str, *, registered_ago: float = 0.0) -> None:
    with st.pool.connection() as conn:
        conn.execute(
            "INSERT INTO agents (id, resource_pool, registered_at)"
            " VALUES (%s, %s, now() - make_interval(secs => %s))",
            (agent_id, POOL, registered_ago),
        )
        conn.execute(
            "INSERT INTO slots (agent_id, slot_id, type) VALUES (%s, '0', 'cpu')", (agent_id,)
        )


def events(st: MasterState, entity: str, entity_id: str) -> list[tuple[str, str]]:
    with st.pool.connection() as conn:
        rows = conn.execute(
            "SELECT kind, message FROM events WHERE entity = %s AND entity_id = %s ORDER BY id",
            (entity, entity_id),
        ).fetchall()
    return [(r["kind"], r["message"]) for r in rows]


def test_demand_launches_once_and_starting_instances_count(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    pending(st, "job-a", n=3)
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 2)]  # three requests, capped at max_instances=2
    provisioning.run_pass(st, prov)
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 2)]  # the two starting machines are not relaunched
    with st.pool.connection() as conn:
        rows = conn.execute("SELECT id, option_index, state FROM instances").fetchall()
    assert {r["id"] for r in rows} == set(cloud.instances)
    assert {r["option_index"] for r in rows} == {0}
    pool_events = events(st, "pool", POOL)
    assert [k for k, _ in pool_events].count("launch") == 1
    # "needs 3 more" before the launch, "needs 1 more" after it; the third pass repeats the
    # second and writes nothing.
    at_max = [m for k, m in pool_events if k == "at-max"]
    assert len(at_max) == 2 and "3 more" in at_max[0] and "1 more" in at_max[1]


def test_capacity_error_falls_back_and_the_backoff_survives_a_restart(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    cloud.refuse["m5.large"] = "InsufficientInstanceCapacity"
    pending(st, "job-a")
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 1)]
    provisioning.run_pass(st, prov)
    assert cloud.launches[-1] == ("m5.xlarge", 1)
    with st.pool.connection() as conn:
        (err,) = conn.execute("SELECT option_index, code, capacity FROM launch_errors").fetchall()
    assert err == {"option_index": 0, "code": "InsufficientInstanceCapacity", "capacity": True}

    # A master restart: nothing in memory; more work arrives within the 10 s backoff.
    prov = provisioner(cloud)
    pending(st, "job-b")
    provisioning.run_pass(st, prov)
    assert cloud.launches[-1] == ("m5.xlarge", 1)
    assert ("m5.large", 1) not in cloud.launches[1:]
    assert any(k == "fallback" for k, _ in events(st, "job", "job-b"))


def test_idle_agents_past_the_period_are_terminated_and_busy_ones_kept(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    idle, busy = (i.id for i in cloud.launch(LaunchOption("m5.large", slots=1), 2))
    agent(st, idle, registered_ago=60)
    agent(st, busy, registered_ago=60)
    pending(st, "job-a")
    with st.pool.connection() as conn:
        conn.execute(
            "UPDATE allocations SET state = 'RUNNING', placement = %s", (json.dumps({busy: ["0"]}),)
        )
    provisioning.run_pass(st, prov)
    assert cloud.terminated == [idle]
    with st.pool.connection() as conn:
        draining = conn.execute("SELECT id FROM agents WHERE draining").fetchall()
        row = conn.execute("SELECT reason FROM instances WHERE id = %s", (idle,)).fetchone()
    assert [r["id"] for r in draining] == [idle]
    assert row is not None and "idle" in row["reason"]


def test_the_reason_for_a_termination_is_written_before_the_cloud_call(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    # Whoever sees an instance go (a user, a test polling the cloud) can already read why: the
    # pass commits its events before it calls the cloud. (Written after the call, a reader
    # polling the cloud raced the write: seen on CI.)
    (inst,) = cloud.launch(LaunchOption("m5.large", slots=1), 1)
    agent(st, inst.id, registered_ago=60)
    seen_at_call: list[list[tuple[str, str]]] = []
    terminate = cloud.terminate

    def terminate_and_look(ids: list[str]) -> None:
        seen_at_call.append(events(st, "pool", POOL))
        terminate(ids)

    cloud.terminate = terminate_and_look  # type: ignore[method-assign]
    provisioning.run_pass(st, prov)
    assert cloud.terminated == [inst.id]
    [at_call] = seen_at_call
    reason = f"terminating {inst.id}: agent idle longer than max_idle_agent_period"
    assert ("terminate", reason) in at_call, at_call


def test_an_agent_idle_for_less_than_the_period_stays(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    (inst,) = cloud.launch(LaunchOption("m5.large", slots=1), 1)
    agent(st, inst.id, registered_ago=60)
    pending(st, "job-a")
    with st.pool.connection() as conn:
        # Its last allocation ended 5 s ago: idle since then, not since registration.
        conn.execute(
            "UPDATE allocations SET state = 'TERMINATED', placement = %s,"
            " ended_at = now() - interval '5 seconds'",
            (json.dumps({inst.id: ["0"]}),),
        )
    provisioning.run_pass(st, prov)
    assert cloud.terminated == []


def test_waiting_events_go_to_the_pool_and_the_job_once(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    pending(st, "job-wide", slots=4)  # 4 one-slot machines needed, max_instances=2
    for _ in range(3):
        provisioning.run_pass(st, prov)
    assert cloud.launches == []
    pool_events = [k for k, _ in events(st, "pool", POOL)]
    job_events = events(st, "job", "job-wide")
    assert pool_events.count("cannot-fit") == 1
    assert [k for k, _ in job_events] == ["cannot-fit"]
    assert "4 slots" in job_events[0][1]


def test_a_fresh_list_is_taken_only_before_acting(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    provisioning.run_pass(st, prov)
    provisioning.run_pass(st, prov)
    assert cloud.lists == 1  # nothing to do: the cached list serves
    pending(st, "job-a")
    provisioning.run_pass(st, prov)
    assert cloud.lists == 2 and cloud.launches == [("m5.large", 1)]


def test_an_instance_the_cloud_no_longer_lists_is_recorded_as_ended(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    pending(st, "job-a")
    provisioning.run_pass(st, prov)
    (iid,) = cloud.instances
    cloud.instances.clear()  # the cloud took it (a spot reclaim)
    prov.forget_list(POOL)  # as after LIST_SECONDS
    with st.pool.connection() as conn:
        conn.execute("UPDATE allocations SET state = 'TERMINATED', ended_at = now()")
    provisioning.run_pass(st, prov)
    with st.pool.connection() as conn:
        row = conn.execute(
            "SELECT state, terminated_at FROM instances WHERE id = %s", (iid,)
        ).fetchone()
    assert row is not None and row["state"] == "terminated" and row["terminated_at"] is not None


def test_job_list_says_why_a_queued_job_waits(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    from det.master.services import jobs

    experiment_job(st, "job-wide", slots=4)
    provisioning.run_pass(st, prov)
    with st.pool.connection() as conn:
        listed = jobs.list_jobs(conn, st, POOL, False)
    assert [j["id"] for j in listed] == ["job-wide"]
    reason = jobs.job_json(listed[0])["pendingReason"]
    assert reason and "4 slots" in reason


def test_a_quota_refusal_is_not_capacity_and_the_waiting_job_names_the_quota(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    from det.master.services import jobs

    for instance_type in ("m5.large", "m5.xlarge"):
        cloud.refuse[instance_type] = "VcpuLimitExceeded"
        cloud.messages[instance_type] = (
            "vCPU limit of 0 exceeded. This is the account's EC2 quota in us-west-2, not capacity"
        )
    experiment_job(st, "job-q")
    provisioning.run_pass(st, prov)
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 1), ("m5.xlarge", 1)]
    # A restart 20 s later: a capacity refusal would be retried after 10 s; quota waits longer.
    with st.pool.connection() as conn:
        conn.execute("UPDATE launch_errors SET at = at - interval '20 seconds'")
    prov = provisioner(cloud)
    provisioning.run_pass(st, prov)
    assert len(cloud.launches) == 2
    kinds = [k for k, _ in events(st, "job", "job-q")]
    assert "quota-exceeded" in kinds and "no-capacity" not in kinds
    with st.pool.connection() as conn:
        listed = jobs.list_jobs(conn, st, POOL, False)
    reason = jobs.job_json(listed[0])["pendingReason"]
    assert reason and "quota" in reason and "VcpuLimitExceeded" in reason, reason
    assert "in us-west-2" in reason
    assert any("quota: this option waits" in m for k, m in events(st, "pool", POOL))


COSTED = {
    **PROVIDER,
    "max_instances": 5,
    "cost": {"prices": {"m5.large": 0.1, "m5.xlarge": 0.2}, "max_hourly_cost": 0.25},
}


@pytest.mark.parametrize("provider_config", [COSTED])
def test_the_hourly_cost_cap_holds_launches_and_the_job_says_why(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    from det.master.services import jobs

    experiment_job(st, "job-many", n=4)
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 2)]  # 0.25 $/h allows two at 0.1 $/h
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 2)]  # the two running ones use the budget
    caps = [m for k, m in events(st, "pool", POOL) if k == "cost-cap"]
    assert caps and "max_hourly_cost=$0.25/h allows 2" in caps[0]
    assert "allows 0 (running now: $0.20/h)" in caps[-1]
    with st.pool.connection() as conn:
        (job,) = jobs.list_jobs(conn, st, POOL, False)
    assert "max_hourly_cost" in jobs.job_json(job)["pendingReason"]

    def reason_when_running(n: int) -> Any:
        with st.pool.connection() as conn:
            conn.execute(
                "UPDATE allocations SET state = 'RUNNING' WHERE job_id = 'job-many' AND id IN"
                " (SELECT id FROM allocations WHERE job_id = 'job-many' ORDER BY id LIMIT %s)",
                (n,),
            )
            (job,) = jobs.list_jobs(conn, st, POOL, False)
        return jobs.job_json(job).get("pendingReason")

    # Two trials run on the two instances; the other two still wait for the cap, and say so.
    assert "max_hourly_cost" in (reason_when_running(2) or "")


BUDGETED = {
    **PROVIDER,
    "cost": {"prices": {"m5.large": 0.1, "m5.xlarge": 0.2}, "monthly_budget": 0.0001},
}


@pytest.mark.parametrize("provider_config", [BUDGETED])
def test_a_spent_monthly_budget_stops_launches(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    # An instance that ran for the last hour at 0.1 $/h: far past a 0.0001 $ budget (which
    # 3.6 s of this month already reach).
    with st.pool.connection() as conn:
        conn.execute(
            "INSERT INTO instances (id, resource_pool, instance_type, market, state, launched_at,"
            " terminated_at) VALUES ('i-old', %s, 'm5.large', 'on_demand', 'terminated',"
            " now() - interval '1 hour', now())",
            (POOL,),
        )
    pending(st, "job-a")
    provisioning.run_pass(st, prov)
    assert cloud.launches == []
    (message,) = [m for k, m in events(st, "pool", POOL) if k == "budget-spent"]
    assert "monthly_budget $0.0001" in message and "no launches until" in message


STARTING_SOON = {**PROVIDER, "max_agent_starting_period": "2s"}


@pytest.mark.parametrize("provider_config", [STARTING_SOON])
def test_instances_whose_agent_never_starts_back_off_and_the_job_says_why(
    st: MasterState, cloud: RecordingProvider, prov: provisioning.Provisioner
) -> None:
    """The fake cloud's instances run but never start an agent: the instance is terminated,
    the failure is stored (a restart keeps the backoff), nothing is relaunched while the
    backoff lasts, and the waiting job says why; an agent that registers later resets it."""
    from det.master.services import jobs

    def age_instances(seconds: float) -> None:
        for iid, inst in list(cloud.instances.items()):
            cloud.instances[iid] = dataclasses.replace(
                inst, launched_at=inst.launched_at - dt.timedelta(seconds=seconds)
            )
        with st.pool.connection() as conn:
            conn.execute(
                "UPDATE instances SET launched_at = launched_at - make_interval(secs => %s)",
                (seconds,),
            )
        prov.forget_list(POOL)

    experiment_job(st, "job-a")
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 1)]
    (first,) = cloud.instances
    age_instances(3)  # past max_agent_starting_period, no agent
    provisioning.run_pass(st, prov)
    assert cloud.terminated == [first]
    assert cloud.launches == [("m5.large", 1)]  # no replacement in the same pass

    # A master restart: the failure comes back from the database and still holds launches.
    prov = provisioner(cloud)
    for _ in range(3):
        provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 1)]
    with st.pool.connection() as conn:
        row = conn.execute("SELECT reason FROM instances WHERE id = %s", (first,)).fetchone()
        (listed,) = jobs.list_jobs(conn, st, POOL, False)
    assert row is not None and "did not connect" in row["reason"]
    reason = jobs.job_json(listed)["pendingReason"]
    assert reason.startswith("agents launched in pool 'cloud' did not register within 2s")
    assert f"(last: {first})" in reason and "see the instance's boot log" in reason
    pool_kinds = [k for k, _ in events(st, "pool", POOL)]
    assert "terminate" in pool_kinds and "agent-not-registered" in pool_kinds

    # The backoff (one starting period: 2 s) ends: one more try, which fails the same way and
    # now waits twice as long.
    with st.pool.connection() as conn:
        conn.execute("UPDATE instances SET terminated_at = terminated_at - interval '3 seconds'")
    provisioning.run_pass(st, prov)
    assert cloud.launches == [("m5.large", 1)] * 2
    (second,) = cloud.instances
    age_instances(3)
    provisioning.run_pass(st, prov)
    assert cloud.terminated == [first, second]
    with st.pool.connection() as conn:
        conn.execute("UPDATE instances SET terminated_at = terminated_at - interval '3 seconds'")
    provisioning.run_pass(st, prov)
    assert len(cloud.launches) == 2  # 3 s after the second failure: it waits 4 s now
    (listed,) = (jobs.job_json(j) for j in _jobs(st))
    assert "(2 of the last 2 launch failures)" in listed["pendingReason"]

    # The second instance's agent did register after all (a slow boot), then went away with
    # its machine: a registration is a success and resets the streak.
    agent(st, second)
    with st.pool.connection() as conn:
        conn.execute("UPDATE agents SET connected = false WHERE id = %s", (second,))
    provisioning.run_pass(st, prov)
    assert len(cloud.launches) == 3


def _jobs(st: MasterState) -> list[dict[str, Any]]:
    from det.master.services import jobs

    with st.pool.connection() as conn:
        return jobs.list_jobs(conn, st, POOL, False)


def test_the_loop_state_builds_each_pools_provider_once(
    st: MasterState, cloud: RecordingProvider
) -> None:
    """The providers live in the Provisioner the control loop holds: built on a pool's first
    pass from the master config's parsed provider block, kept for the next passes; a new
    Provisioner (a master restart) builds again."""
    built: list[tuple[str, Any]] = []

    def factory(_st: MasterState, pool: str, config: Any) -> RecordingProvider:
        built.append((pool, config))
        return cloud

    prov = provisioning.Provisioner(factory=factory)
    for _ in range(3):
        provisioning.run_pass(st, prov)
    pool_cfg = st.config.pool(POOL)
    assert pool_cfg is not None
    assert built == [(POOL, pool_cfg.provider_config)]
    provisioning.run_pass(st, provisioning.Provisioner(factory=factory))
    assert len(built) == 2
