"""A trial across two machines: how long until every rank trains, and a checkpoint's save and
restore across machines (issue 39).

Starts two machines (:mod:`tests.e2e.machines`: privileged containers, each with its own Docker
engine and det agent, on a bridge network of their own, the task image pulled from a registry),
a master and PostgreSQL on this host, and ``shared_fs`` checkpoint storage both machines mount.
Each run creates det's Core API example under Determined's ``torch_distributed`` launcher with
one slot per machine, and measures:

* **create -> all ranks training**: from ``POST /api/v1/experiments`` to the first training
  metric the master holds (the chief reports after a step, and a step's gradient all-reduce
  needs every rank);
* **pause -> stopped**: from the pause to no task container running on either machine (the
  chief's checkpoint on the preemption signal, every rank's exit, the allocation's end); and,
  inside it, **checkpoint save**: from the chief's "preempted at step" line to its "saved
  checkpoint" line (the containers' own log stamps);
* **activate -> all ranks training again**: from the activation to the first training metric
  after the restore (scheduling, both containers started, every rank restored from the
  checkpoint, a step); inside it, from the chief container's first log line to its "resumed
  from" (the launcher's start, ``import torch``, the checkpoint's read and load).

Prints each run and the medians. Machine load skews every figure: run it on a quiet machine.

    .venv/bin/python bench/machines.py [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pg import bench_database  # noqa: E402
from tests.e2e.cluster import Cluster, wait_for  # noqa: E402
from tests.e2e.machines import Machines, machines  # noqa: E402
from tests.integration.conftest import Master, start_master  # noqa: E402
from tests.ports import free_port  # noqa: E402

CORE = ROOT / "examples" / "core_api"


@contextlib.contextmanager
def two_machines(tmp: Path) -> Iterator[tuple[Cluster, Machines]]:
    ckpt = tmp / "checkpoints"
    ckpt.mkdir()
    _server, url = bench_database(tmp)
    with machines(tmp, 2, shared=[ckpt]) as group:
        port = free_port()
        extra: dict[str, Any] = {
            "bind_address": "0.0.0.0",
            "task_container_defaults": {
                "image": {"cpu": group.task_image(), "cuda": group.task_image()}
            },
            "checkpoint_storage": {"type": "shared_fs", "host_path": str(ckpt)},
        }
        master: Master = start_master(tmp, url, port=port, extra=extra)
        try:
            group.start_agents(port, master.agent_token, 1)
            wait_for(lambda: len(master.get("/api/v1/agents")["agents"] or []) == 2, 120, "agents")
            print(f"machines: {group.report()}", file=sys.stderr)
            yield Cluster(master, [], tmp, None, ckpt, url), group
        finally:
            master.kill()


def _stamp(entry: dict[str, Any]) -> float:
    """A log entry's RFC 3339 stamp (up to nanoseconds) as epoch seconds."""
    main, _, frac = str(entry["timestamp"]).rstrip("Z").partition(".")
    whole = dt.datetime.fromisoformat(main[:19]).replace(tzinfo=dt.UTC).timestamp()
    return whole + float("0." + (frac.split("+")[0] or "0"))


def _line(cluster: Cluster, tid: int, text: str, after: float = 0.0) -> float:
    """The container stamp of the trial's first log line holding ``text`` stamped after
    ``after`` (epoch seconds)."""

    def found() -> float | None:
        for e in cluster.trial_logs(tid):
            if text in (e.get("log") or "") and _stamp(e) > after:
                return _stamp(e)
        return None

    value: float = wait_for(found, 300, f"a log line with {text!r}", interval=0.5)
    return value


def _first_log_after(cluster: Cluster, tid: int, after: float) -> float:
    stamps = [_stamp(e) for e in cluster.trial_logs(tid) if e.get("agentId")]
    return min(s for s in stamps if s > after)


def _until(predicate: Callable[[], Any], what: str) -> float:
    wait_for(predicate, 600, what, interval=0.1)
    return time.time()


def one_run(cluster: Cluster, group: Machines) -> dict[str, float]:
    config = {
        "entrypoint": "python3 -m determined.launch.torch_distributed -- python3 train.py",
        "resources": {"slots_per_trial": 2},
        "searcher": {"max_length": {"batches": 1_000_000}},
        "hyperparameters": {"report_every": 10, "validate_every": 1_000_000,
                            "checkpoint_every": 1_000_000},
        "max_restarts": 0,
    }  # fmt: skip
    m = cluster.master
    created = time.time()
    eid = cluster.create(CORE / "distributed.yaml", CORE, config)
    tid = int(wait_for(lambda: cluster.trials(eid), 120, "the trial")[0]["id"])
    training = _until(lambda: cluster.metrics(tid, "training"), "the first training metric")

    paused = time.time()
    m.post(f"/api/v1/experiments/{eid}/pause", {})
    stopped = _until(
        lambda: (
            not any(x.task_containers(running=True) for x in group.machines)
            and cluster.state(eid) == "STATE_PAUSED"
        ),
        "every rank to stop",
    )
    preempted = _line(cluster, tid, "preempted at step", paused - 5)
    saved = _line(cluster, tid, "saved checkpoint", preempted - 0.001)

    seen = len(cluster.metrics(tid, "training"))  # every rank stopped: no report comes
    activated = time.time()
    m.post(f"/api/v1/experiments/{eid}/activate", {})
    again = _until(
        lambda: len(cluster.metrics(tid, "training")) > seen, "training again after the restore"
    )
    resumed = _line(cluster, tid, "resumed from", activated)
    started = _first_log_after(cluster, tid, activated)
    if resumed - started > 10:  # say what took the time
        for e in cluster.trial_logs(tid):
            if e.get("agentId") and started <= _stamp(e) <= resumed:
                print(f"  {_stamp(e) - started:7.2f} {(e.get('log') or '').rstrip()[:150]}")
    m.post(f"/api/v1/experiments/{eid}/kill", {})
    _until(lambda: not any(x.task_containers() for x in group.machines), "the containers removed")
    return {
        "create -> all ranks training": training - created,
        "pause -> every rank stopped": stopped - paused,
        "checkpoint save (chief)": saved - preempted,
        "activate -> all ranks training": again - activated,
        "chief container's first line -> restored": resumed - started,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    runs: list[dict[str, float]] = []
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="det-bench-machines-")))
        cluster, group = stack.enter_context(two_machines(tmp))
        for i in range(args.runs):
            r = one_run(cluster, group)
            runs.append(r)
            print(f"run {i + 1}: " + ", ".join(f"{k} {v:.2f} s" for k, v in r.items()))
    print(f"\nmedians of {len(runs)} runs (2 machines x 1 slot, Core API example):")
    for key in runs[0]:
        print(f"  {key:42s} {statistics.median(r[key] for r in runs):7.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
