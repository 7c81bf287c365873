"""The Core API against a master (the fake stand-in until the live-master fixture exists)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

import det
from det.core import EarlyExitReason, InvalidHP
from tests.unit.harness.fake_master import TOKEN, FakeMaster


def test_init_reads_the_task_environment(on_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    on_cluster(DET_LATEST_CHECKPOINT="abc")
    with det.core.init() as ctx:
        assert ctx.info is not None and ctx.info.trial is not None
        assert ctx.info.trial.trial_id == 11
        assert ctx.info.trial.experiment_id == 3
        assert ctx.info.trial.hparams == {"lr": 0.1}
        assert ctx.info.trial.trial_seed == 42
        assert ctx.info.latest_checkpoint == "abc"
        assert ctx.distributed.size == 1


def test_metrics_are_shipped_in_order_in_batches(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        for step in range(1, 6):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
        ctx.train.report_validation_metrics(5, {"validation_loss": 0.3, "blob": b"x"})
        ctx.train.report_metrics("custom", 5, {"x": float("nan")})
    reports = master.metric_reports(11)
    assert [r["group"] for r in reports] == ["training"] * 5 + ["validation", "custom"]
    assert reports[0] == {
        "group": "training",
        "trialRunId": 2,
        "stepsCompleted": 1,
        "metrics": {"avgMetrics": {"loss": 1.0}},
    }
    assert reports[5]["metrics"]["avgMetrics"] == {"validation_loss": 0.3}
    assert reports[6]["metrics"]["avgMetrics"] == {"x": "NaN"}


def test_batch_metrics_are_sent_as_json_as_the_averages_are(on_cluster) -> None:  # type: ignore[no-untyped-def]
    # NaN and numpy scalars in per-batch metrics: strings and numbers, as in avgMetrics (NaN is
    # no JSON token and a numpy scalar no JSON type: the request would fail).
    numpy = pytest.importorskip("numpy")
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        ctx.train.report_training_metrics(
            2,
            {"loss": numpy.float32(0.5)},
            batch_metrics=[
                {"loss": float("inf")},
                {"loss": numpy.float64(0.25), "n": numpy.int64(3)},
            ],
        )
    (report,) = master.metric_reports(11)
    assert report["metrics"] == {
        "avgMetrics": {"loss": 0.5},
        "batchMetrics": [{"loss": "Infinity"}, {"loss": 0.25, "n": 3}],
    }


def test_reports_queued_behind_a_slow_request_share_the_next_one(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    # The first metrics request is held in flight until all of 2..200 are queued behind it (a
    # fixed delay let a loaded machine's slow loop see it answered early: [1, 37, 162, 1]).
    gate = threading.Event()
    master.state.hold[r"/metrics/batch$"] = gate
    with det.core.init() as ctx:
        for step in range(1, 201):
            ctx.train.report_training_metrics(step, {"loss": 1.0 / step})
            if step == 1:
                master.wait_for("/metrics/batch")  # the first request is now in flight
        gate.set()
        ctx.train.report_progress(0.5)
        ctx.train.report_training_metrics(201, {"loss": 0.0})
    requests = master.requests_to("/api/v1/trials/11/metrics/batch")
    steps = [r["stepsCompleted"] for r in master.metric_reports(11)]
    assert steps == list(range(1, 202))
    # 1 alone, 2..200 queued behind it, then 201 after the progress report
    assert [len(r.body["reports"]) for r in requests] == [1, 199, 1]


def test_a_failed_metrics_report_surfaces_in_the_training_thread(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    master.state.fail_status[r"/metrics/batch$"] = 400
    ctx = det.core.init()
    ctx.start()
    ctx.train.report_training_metrics(1, {"loss": 1.0})
    with pytest.raises(RuntimeError, match="report failed"):
        ctx.close()


def test_validation_metric_none_is_rejected(on_cluster) -> None:  # type: ignore[no-untyped-def]
    on_cluster()
    with det.core.init() as ctx, pytest.raises(ValueError):
        ctx.train.report_validation_metrics(1, {"loss": None})


def test_progress_and_early_exit_bodies(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        ctx.train.report_progress(0.25)
        ctx.train.report_early_exit(EarlyExitReason.USER_REQUESTED_STOP)
        with pytest.raises(ValueError):
            ctx.train.report_progress(1.5)
    assert master.requests_to("/trials/11/progress")[0].body == {"progress": 0.25, "is_raw": True}
    assert master.requests_to("/trials/11/early_exit")[0].body == {
        "reason": "EXITED_REASON_USER_REQUESTED_STOP"
    }


def test_best_validation_is_none_until_the_master_has_one(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        assert ctx.train.get_experiment_best_validation() is None
        master.state.best_validation = 0.125
        assert ctx.train.get_experiment_best_validation() == 0.125


def test_store_path_saves_and_reports_the_checkpoint(on_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        with ctx.checkpoint.store_path({"steps_completed": 8, "note": "hi"}) as (path, sid):
            (path / "model.bin").write_bytes(b"\0" * 100)
            (path / "sub").mkdir()
            (path / "sub" / "opt.bin").write_bytes(b"\1" * 10)
        assert ctx.checkpoint.get_metadata(sid)["note"] == "hi"
        with ctx.checkpoint.restore_path(sid) as restored:
            assert (restored / "sub" / "opt.bin").read_bytes() == b"\1" * 10
    stored = tmp_path / "ckpts" / sid
    assert json.loads((stored / "metadata.json").read_text()) == {
        "steps_completed": 8,
        "note": "hi",
    }
    (start,) = master.requests_to("/api/v1/runs/start")
    assert start.body["runId"] == 11
    assert start.body["checkpointStorage"]["type"] == "shared_fs"
    (rec,) = master.requests_to("/api/v1/checkpoints", method="POST")
    body = rec.body
    assert body["uuid"] == sid
    assert body["taskId"] == "3.1" and body["allocationId"] == "3.1.1"
    assert body["state"] == "STATE_COMPLETED"
    assert body["storageId"] == 7
    assert body["training"] == {}
    assert body["metadata"] == {"steps_completed": 8, "note": "hi"}
    assert body["resources"] == {
        "model.bin": "100",
        "sub/": "0",
        "sub/opt.bin": "10",
        "metadata.json": str((stored / "metadata.json").stat().st_size),
    }


def test_checkpoint_without_steps_completed_is_refused(on_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    on_cluster()
    src = tmp_path / "src"
    src.mkdir()
    (src / "w").write_text("x")
    with det.core.init() as ctx, pytest.raises(ValueError, match="steps_completed"):
        ctx.checkpoint.upload(src, {"epoch": 1})
    assert not (tmp_path / "ckpts").exists()  # refused before anything was stored


def test_preemption_signal_is_seen_and_acknowledged_once(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        assert ctx.preempt.should_preempt() is False
        master.set_preempt()
        deadline = time.monotonic() + 10
        while not ctx.preempt.should_preempt() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ctx.preempt.should_preempt() is True
        assert ctx.preempt.should_preempt() is True
    polls = master.requests_to("/signals/preemption")
    assert polls[0].query["timeout_seconds"] == ["0"]
    assert any(p.query["timeout_seconds"] == ["60"] for p in polls[1:])
    assert len(master.requests_to("/api/v1/allocations/3.1.1/signals/ack_preemption")) == 1


def test_searcher_yields_one_operation_of_max_length(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        with pytest.warns(FutureWarning):
            ops = ctx.searcher.operations()
            op = next(ops)
        assert op.length == 8
        op.report_progress(4)
        op.report_completed(0.5)
        assert list(ops) == []
    assert master.requests_to("/trials/11/progress")[0].body == {"progress": 0.5, "is_raw": True}


def test_searcher_requires_completion(on_cluster) -> None:  # type: ignore[no-untyped-def]
    on_cluster()
    with det.core.init() as ctx, pytest.warns(FutureWarning):
        ops = ctx.searcher.operations()
        next(ops)
        with pytest.raises(RuntimeError, match="report_completed"):
            next(ops)


def test_searcher_without_max_length_raises(on_cluster) -> None:  # type: ignore[no-untyped-def]
    on_cluster(config={"checkpoint_storage": {"type": "directory", "container_path": "/tmp/x"}})
    with det.core.init() as ctx, pytest.warns(FutureWarning), pytest.raises(ValueError):
        next(ctx.searcher.operations())


def test_invalid_hp_reports_early_exit_and_exits_zero(on_cluster) -> None:  # type: ignore[no-untyped-def]
    master: FakeMaster = on_cluster()
    with pytest.raises(SystemExit) as e, det.core.init():
        raise InvalidHP("lr too big")
    assert e.value.code == 0
    assert master.requests_to("/early_exit")[0].body == {"reason": "EXITED_REASON_INVALID_HP"}


def test_progress_is_coalesced_to_the_latest_value(master: FakeMaster) -> None:
    from det.common.api import Session
    from det.core._train import _MetricsShipper, _Report

    shipper = _MetricsShipper(Session(master.url, allocation_token=TOKEN), 11, 2)
    shipper.put(_Report("training", 1, {"loss": 1.0}))
    for p in (0.1, 0.2, 0.3):
        shipper.put_progress(p)
    shipper.put(_Report("training", 2, {"loss": 0.5}))
    shipper.put_progress(0.4)
    shipper.start()  # everything above was queued before the thread could send any of it
    shipper.stop()
    # One progress post, sent when its turn came, with the value current at that time.
    assert [r.body["progress"] for r in master.requests_to("/progress")] == [0.4]
    assert [r.path.rsplit("/", 1)[1] for r in master.state.records] == [
        "batch",
        "progress",
        "batch",
    ]
    assert shipper.error is None


def test_metrics_queued_during_a_master_restart_are_delivered(on_cluster) -> None:  # type: ignore[no-untyped-def]
    import threading

    master: FakeMaster = on_cluster()
    with det.core.init() as ctx:
        master.stop()
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        ctx.train.report_training_metrics(2, {"loss": 0.9})
        restart = threading.Timer(1.0, master.start)
        restart.start()
    restart.join()
    steps = [r["stepsCompleted"] for r in master.metric_reports(11)]
    assert steps == [1, 2]


def test_workers_follow_the_chiefs_preemption_decision(on_cluster) -> None:  # type: ignore[no-untyped-def]
    from det.common.api import Session
    from det.core import PreemptContext
    from tests.unit.harness.test_harness_distributed import run_ranks

    master: FakeMaster = on_cluster()
    master.set_preempt(True)

    def work(d):  # type: ignore[no-untyped-def]
        p = PreemptContext(Session(master.url, allocation_token=TOKEN), "3.1.1", d)
        p._start()
        try:
            return [p.should_preempt() for _ in range(3)]
        finally:
            p._close()

    assert run_ranks(3, work) == [[True] * 3] * 3
    # Only the chief talks to the master, and acknowledges once.
    assert len(master.requests_to("/signals/ack_preemption")) == 1
    assert len(master.requests_to("/signals/preemption")) == 1


def test_a_checkpoint_reaches_the_master_after_the_reports_of_its_steps(on_cluster) -> None:  # type: ignore[no-untyped-def]
    """Reports ship from a background thread; a checkpoint waits for the ones queued before it.
    A run lost right after a checkpoint whose step's report was still queued lost that report
    for good: its successor resumes after the step and does not report it again."""
    master: FakeMaster = on_cluster()
    gate = threading.Event()
    master.state.hold[r"/metrics/batch$"] = gate  # the report stays in flight until released
    seen: list[bool] = []

    def watch() -> None:  # whether the report was answered when the checkpoint arrived
        master.wait_for("/api/v1/checkpoints")
        seen.append(gate.is_set())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with det.core.init() as ctx:
        ctx.train.report_training_metrics(8, {"loss": 0.5})
        master.wait_for("/metrics/batch")
        threading.Timer(1.0, gate.set).start()
        with ctx.checkpoint.store_path({"steps_completed": 8}) as (path, _):
            (path / "model.bin").write_bytes(b"\0")
    watcher.join(30)
    assert seen == [True]
