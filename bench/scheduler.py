"""How long one scheduling pass takes over a large pool.

Builds 1,000 agents of mixed sizes (1, 2, 4 and 8 slots; some draining, some disabled) about
half full of running trials, and 10,000 queued trials from 500 experiments (mixed priorities,
weights and gang sizes), seeded. Times :func:`det.master.scheduler.schedule` for each policy
and prints the median, min and max in milliseconds (wall clock, and the process's CPU time,
which a busy shared machine disturbs less). Target: at most 200 ms a pass.

    python bench/scheduler.py [--runs 7] [--seed 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from det.master.scheduler import AgentState, Policy, PoolSnapshot, Request, schedule

AGENTS = 1_000
QUEUED = 10_000
EXPERIMENTS = 500


def build(seed: int, policy: Policy) -> PoolSnapshot:
    rng = random.Random(seed)
    agents = []
    for i in range(AGENTS):
        size = rng.choice((1, 2, 4, 4, 8, 8))
        roll = rng.random()
        agents.append(
            AgentState.with_slots(
                f"agent-{i:04d}", size, enabled=roll > 0.01, draining=0.01 <= roll < 0.03
            )
        )
    experiments = [
        (f"job-{j}", rng.choice((1, 10, 42, 42, 42, 60, 99)), rng.choice((0.5, 1.0, 1.0, 2.0)))
        for j in range(EXPERIMENTS)
    ]
    requests: list[Request] = []
    n = 0
    # About half of every agent's slots already run trials of random experiments.
    for a in agents:
        free = list(a.slot_ids)
        while len(free) >= 1 and rng.random() < 0.6:
            k = min(len(free), rng.choice((1, 1, 2, 4)))
            job, prio, weight = rng.choice(experiments)
            requests.append(
                Request(
                    f"run-{n}",
                    job,
                    k,
                    prio,
                    weight,
                    order=rng.random() * 1e6,
                    placement={a.id: tuple(free[:k])},
                )
            )
            del free[:k]
            n += 1
    for i in range(QUEUED):
        job, prio, weight = rng.choice(experiments)
        slots = rng.choice((1, 1, 1, 2, 4, 8, 16))
        requests.append(Request(f"q-{i}", job, slots, prio, weight, order=rng.random() * 1e6))
    rng.shuffle(requests)
    return PoolSnapshot(tuple(agents), tuple(requests), policy, max_aux_containers_per_agent=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    policies = {
        "priority": Policy("priority"),
        "priority+preemption": Policy("priority", preemption=True),
        "fair_share": Policy("fair_share"),
    }
    print(f"{AGENTS} agents, {QUEUED} queued trials, {args.runs} runs per policy")
    for name, policy in policies.items():
        snapshot = build(args.seed, policy)
        running = sum(1 for r in snapshot.requests if r.placed)
        wall, cpu = [], []
        decision = None
        for _ in range(args.runs):
            start, start_cpu = time.perf_counter(), time.process_time()
            decision = schedule(snapshot)
            wall.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
        assert decision is not None
        print(
            f"{name:20s} wall median {statistics.median(wall):6.1f} ms (min {min(wall):6.1f},"
            f" max {max(wall):6.1f});  cpu median {statistics.median(cpu):6.1f} ms"
            f" (min {min(cpu):6.1f}, max {max(cpu):6.1f})"
        )
        print(
            f"{'':20s} running {running}, placed {len(decision.placements)},"
            f" preempted {len(decision.preemptions)}, waiting {len(decision.waiting)}"
        )


if __name__ == "__main__":
    main()
