"""Tasks on the wire from their typed rows: ``GetTasks``' allocation summaries (named by what
they run) and ``GetTask``'s allocations (newest first; ready only while running)."""

from __future__ import annotations

import dataclasses
import datetime as dt

from det.master.rows.agents import SlotDevice
from det.master.rows.tasks import AllocationSummaryRow, TaskAllocation
from det.master.schemas.notebooks import task
from det.master.schemas.tasks import allocation_summary

NOW = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)

SUMMARY = AllocationSummaryRow(
    id="t.1",
    task_id="t",
    resource_pool="default",
    slots_needed=2,
    placement={"agent-a": ["0", "1"]},
    container_id=None,
    created_at=NOW,
    started_at=NOW,
    trial_id=3,
    experiment_id=2,
    gc_experiment_id=None,
    ntsc_description=None,
    priority=42,
)


def test_an_allocation_summary_is_named_by_what_it_runs() -> None:
    gpu: SlotDevice = {"type": "cuda", "uuid": "GPU-0", "brand": "x"}
    s = allocation_summary(SUMMARY, {("agent-a", "0"): gpu})
    assert s.get("name") == "Trial 3 (Experiment 2)" and s.get("priority") == 42
    assert s.get("registeredTime") == "2024-05-01T12:00:00Z" and s.get("slotsNeeded") == 2
    (res,) = s.get("resources") or []
    assert res.get("containerId") == "t.1" and res.get("started") == {}
    devices = (res.get("agentDevices") or {})["agent-a"].get("devices") or []
    assert len(devices) == 2
    gc = dataclasses.replace(SUMMARY, trial_id=None, experiment_id=None, gc_experiment_id=5)
    assert allocation_summary(gc, {}).get("name") == "Checkpoint GC (Experiment 5)"
    ntsc = dataclasses.replace(gc, gc_experiment_id=None, ntsc_description="Notebook (x)")
    assert allocation_summary(ntsc, {}).get("name") == "Notebook (x)"
    queued = dataclasses.replace(ntsc, ntsc_description=None, placement=None, started_at=None)
    q = allocation_summary(queued, {})
    assert q.get("name") == "t" and q.get("resources") == []


def test_a_task_shows_its_allocations_newest_first_ready_only_while_running() -> None:
    running = TaskAllocation(
        id="t.2",
        slots_needed=1,
        state="RUNNING",
        created_at=NOW,
        started_at=NOW,
        ended_at=None,
        exit_reason=None,
    )
    ended = dataclasses.replace(
        running, id="t.1", state="TERMINATED", ended_at=NOW, exit_reason="x"
    )
    t = task("t", "NOTEBOOK", NOW, None, [running, ended], ready=True)
    assert t["taskType"] == "TASK_TYPE_NOTEBOOK" and t.get("endTime") is None
    first, second = t.get("allocations") or []
    assert first.get("state") == "STATE_RUNNING" and first.get("isReady") is True
    assert second.get("state") == "STATE_TERMINATED" and second.get("isReady") is False
    assert second.get("exitReason") == "x" and second.get("endTime") == "2024-05-01T12:00:00Z"
    queued = dataclasses.replace(running, state="PENDING", started_at=None)
    (only,) = task("t", "COMMAND", NOW, None, [queued], ready=True).get("allocations") or []
    assert only.get("state") == "STATE_QUEUED" and only.get("isReady") is False
