"""Autoscaling figures from an offline simulation of the scale decider (no cloud, no master).

Prints:

1. ``decide()`` latency (median of several runs) for pools of 10, 100 and 1,000 instances.
2. A capacity outage: the first option of the fallback list has no capacity for 10 minutes.
   Compared: our decider (backoff + fallback list) and a Determined-style policy (one option,
   retry every pass). Figures: launch calls made, time until all work is placed.

Run: ``python bench/autoscale.py``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import statistics
import time

from det.master.provisioner.decider import (
    AgentInfo,
    LaunchRecord,
    PoolSnapshot,
    ScalePolicy,
    decide,
    record_launch,
)
from det.master.provisioner.provider import Instance, InstanceState, LaunchOption, Market

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SPOT = LaunchOption("p3.8xlarge", market=Market.SPOT, slots=4)
OTHER = LaunchOption("g5.12xlarge", market=Market.SPOT, slots=4)
ON_DEMAND = LaunchOption("p3.8xlarge", market=Market.ON_DEMAND, slots=4)


def latency() -> None:
    policy = ScalePolicy(options=(SPOT, OTHER, ON_DEMAND), max_instances=2000)
    for size in (10, 100, 1000):
        instances = tuple(
            Instance(f"i-{n}", InstanceState.RUNNING, T0 - dt.timedelta(hours=1), "p3.8xlarge")
            for n in range(size)
        )
        agents = tuple(
            AgentInfo(
                f"i-{n}",
                4,
                True,
                T0,
                idle_since=T0 - dt.timedelta(minutes=n % 30) if n % 3 == 0 else None,
            )
            for n in range(size)
        )
        snapshot = PoolSnapshot(
            "gpu", demand=(4, 8, 2, 1) * (size // 4), instances=instances, agents=agents
        )
        runs = []
        for _ in range(7):
            start = time.perf_counter()
            decide(snapshot, policy, T0)
            runs.append(time.perf_counter() - start)
        print(f"decide() with {size:5d} instances: median {statistics.median(runs) * 1000:8.2f} ms")


@dataclasses.dataclass
class Sim:
    policy: ScalePolicy
    outage: set[LaunchOption]
    outage_until: dt.datetime
    boot: dt.timedelta = dt.timedelta(seconds=90)
    instances: dict[str, Instance] = dataclasses.field(default_factory=dict)
    busy: set[str] = dataclasses.field(default_factory=set)
    history: tuple[LaunchRecord, ...] = ()
    launch_calls: int = 0
    capacity_errors: int = 0

    def run(self, jobs: list[int], tick: dt.timedelta, limit: dt.timedelta) -> dt.timedelta | None:
        queue = list(jobs)
        now = T0
        while now - T0 < limit:
            agents = tuple(
                AgentInfo(i.id, 4, True, now, idle_since=None if i.id in self.busy else now)
                for i in self.instances.values()
                if now - i.launched_at >= self.boot
            )
            # Schedule: one 4-slot job per idle agent.
            for agent in agents:
                if queue and agent.id not in self.busy:
                    queue.pop()
                    self.busy.add(agent.id)
            if not queue:
                return now - T0
            snapshot = PoolSnapshot(
                "gpu",
                demand=tuple(queue),
                instances=tuple(self.instances.values()),
                agents=agents,
                history=self.history,
            )
            for order in decide(snapshot, self.policy, now).launches:
                self.launch_calls += 1
                if order.option in self.outage and now < self.outage_until:
                    self.capacity_errors += 1
                    rec = LaunchRecord(now, order.option, "InsufficientInstanceCapacity", True)
                else:
                    for _ in range(order.count):
                        iid = f"i-{len(self.instances)}"
                        self.instances[iid] = Instance(
                            iid, InstanceState.RUNNING, now, order.option.instance_type
                        )
                    rec = LaunchRecord(now, order.option)
                self.history = record_launch(self.history, rec, now)
            now += tick
        return None


def outage() -> None:
    jobs = [4] * 8
    ours = ScalePolicy(options=(SPOT, OTHER, ON_DEMAND), max_instances=10)
    # Determined: one option, retried every pass (no backoff).
    naive = dataclasses.replace(ours, options=(SPOT,), base_backoff=dt.timedelta(0))
    until = T0 + dt.timedelta(minutes=10)
    for name, policy in (("fallback+backoff", ours), ("retry every pass", naive)):
        sim = Sim(policy, outage={SPOT}, outage_until=until)
        took = sim.run(jobs, tick=dt.timedelta(seconds=1), limit=dt.timedelta(minutes=30))
        placed = f"{took.total_seconds():6.0f} s" if took else "   never"
        print(
            f"{name:18s}: all 8 jobs placed after {placed}; launch calls {sim.launch_calls:4d}"
            f" ({sim.capacity_errors} capacity errors)"
        )


if __name__ == "__main__":
    latency()
    outage()
