"""TensorBoard files of a trial: the Core API writes reported metrics as event files (TFRecord
framing with CRC-32C, Determined's tag names) and uploads them to checkpoint storage under
Determined's layout; the TensorBoard task's fetcher copies new and grown files, and its gate
admits only the master's credential. TensorBoard itself reading the files is checked on real
Docker (tests/e2e/test_tensorboards.py)."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

import det
from det import storage
from det.core import _tensorboard as tb
from det.core._train import TensorboardError
from det.exec import tensorboard as tb_task


def read_events(path: Path) -> list[dict[str, Any]]:
    """Decodes an event file: checks each record's length and data checksums, then the fields
    the writer uses (step, file_version, the summary's tag/simple_value pairs)."""
    data = path.read_bytes()
    out = []
    i = 0
    while i < len(data):
        header = data[i : i + 8]
        (length,) = struct.unpack("<Q", header)
        (len_crc,) = struct.unpack("<I", data[i + 8 : i + 12])
        assert len_crc == tb.masked_crc(header)
        body = data[i + 12 : i + 12 + length]
        (body_crc,) = struct.unpack("<I", data[i + 12 + length : i + 16 + length])
        assert body_crc == tb.masked_crc(body)
        i += 16 + length
        out.append(_decode(body))
    return out


def _varint(b: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return n, i


def _fields(b: bytes) -> list[tuple[int, Any]]:
    out, i = [], 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 1:
            v, i = struct.unpack("<d", b[i : i + 8])[0], i + 8
        elif wt == 5:
            v, i = struct.unpack("<f", b[i : i + 4])[0], i + 4
        else:
            n, i = _varint(b, i)
            v, i = b[i : i + n], i + n
        out.append((num, v))
    return out


def _decode(body: bytes) -> dict[str, Any]:
    ev: dict[str, Any] = {"step": 0, "scalars": {}}
    for num, v in _fields(body):
        if num == 2:
            ev["step"] = v
        elif num == 3:
            ev["file_version"] = v.decode()
        elif num == 5:
            for _, value in _fields(v):
                parts = dict(_fields(value))
                ev["scalars"][parts[1].decode()] = round(parts[2], 4)
    return ev


def test_the_local_directory_is_under_the_temporary_directory_or_the_base_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /tmp in a task container, as Determined's; where the harness runs on a host, its TMPDIR
    # (a fixed /tmp left tensorboard-* directories in the host's /tmp from the tests).
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    assert tb.base_path({}, "3.1.1", 0) == tmp_path / "tensorboard-3.1.1-0"
    assert tb.base_path({"base_path": "/b"}, "3.1.1", 1) == Path("/b/tensorboard-3.1.1-1")


def test_crc32c_is_castagnoli() -> None:
    assert tb.crc32c(b"123456789") == 0xE3069283  # the standard check value
    assert tb.crc32c(b"") == 0


def test_scalars_are_named_as_determined_names_them() -> None:
    assert tb.training_scalars({"loss": 0.5, "acc": 1, "name": "x", "flag": True}) == {
        "Determined/loss": 0.5,
        "Determined/acc": 1.0,
    }
    assert tb.validation_scalars(
        {"validation_loss": 0.25, "accuracy": 0.5, "nan": float("nan")}
    ) == {
        "Determined/validation_loss": 0.25,
        "Determined/val_accuracy": 0.5,
    }


def test_reported_metrics_land_in_storage_as_event_files(on_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ckpts = tmp_path / "ckpts"
    on_cluster(
        config={
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(ckpts),
                "base_path": str(tmp_path / "local"),
            },
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 8}},
        }
    )
    with det.core.init() as ctx:
        local = ctx.train.get_tensorboard_path()
        assert local == tmp_path / "local" / "tensorboard-3.1.1-0"
        ctx.train.report_training_metrics(10, {"loss": 0.5, "note": "text"})
        ctx.train.report_training_metrics(
            20, {"loss": 0.25}, batch_metrics=[{"loss": 0.3}, {"loss": 0.2}]
        )
        ctx.train.report_validation_metrics(20, {"validation_loss": 0.125, "accuracy": 0.75})
        with pytest.raises(RuntimeError, match="MANUAL"):
            ctx.train.upload_tensorboard_files()
    # Determined's layout under the storage root; trial 11 of experiment 3 on cluster-1.
    stored = ckpts / "cluster-1" / "tensorboard" / "experiment" / "3" / "trial" / "11"
    files = sorted(stored.iterdir())
    assert len(files) == 1 and files[0].name.startswith("events.out.tfevents."), files
    assert files[0].read_bytes() == next(local.iterdir()).read_bytes()
    events = read_events(files[0])
    assert events[0]["file_version"] == "brain.Event:2"
    assert [(e["step"], e["scalars"]) for e in events[1:]] == [
        (10, {"Determined/loss": 0.5}),
        (18, {"Determined/loss": 0.3}),
        (19, {"Determined/loss": 0.2}),
        (20, {"Determined/validation_loss": 0.125, "Determined/val_accuracy": 0.75}),
    ]


def test_manual_mode_uploads_only_when_asked(on_cluster, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    ckpts = tmp_path / "ckpts"
    on_cluster(
        config={
            "checkpoint_storage": {
                "type": "shared_fs",
                "host_path": str(ckpts),
                "base_path": str(tmp_path / "local"),
            },
            "searcher": {"name": "single", "metric": "loss", "max_length": {"batches": 8}},
        }
    )
    stored = ckpts / "cluster-1" / "tensorboard" / "experiment" / "3" / "trial" / "11"
    with det.core.init(tensorboard_mode=det.core.TensorboardMode.MANUAL) as ctx:
        ctx.train.report_training_metrics(10, {"loss": 0.5})
        path = ctx.train.get_tensorboard_path()
        path.mkdir(parents=True, exist_ok=True)
        (path / "mine.txt").write_text("a")
        (path / "skip.txt").write_text("b")
        assert not stored.exists() or not any(stored.iterdir())
        ctx.train.upload_tensorboard_files(
            selector=lambda p: p.name != "skip.txt",
            mangler=lambda p, rank: p.with_name(f"{rank}-{p.name}"),
        )
        assert sorted(p.name for p in stored.iterdir()) == ["0-mine.txt"]
    # MANUAL writes no scalars of its own and uploads nothing more at the end.
    assert sorted(p.name for p in stored.iterdir()) == ["0-mine.txt"]


def test_storage_under_a_sub_path(tmp_path: Path) -> None:
    root = storage.DirectoryStorageManager(tmp_path)
    sub = root.under("c/tensorboard/experiment/1/trial")
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("x")
    sub.upload(src, "7")
    assert (tmp_path / "c/tensorboard/experiment/1/trial/7/f").read_text() == "x"
    for bad in ("", "/abs", "a/../b", "a//b", "."):
        with pytest.raises(ValueError, match="sub-path"):
            root.under(bad)


def test_the_task_fetches_new_and_grown_files_in_place(tmp_path: Path) -> None:
    ckpts = tmp_path / "ckpts"
    cfg = {"type": "shared_fs", "host_path": str(ckpts)}
    stored = ckpts / "cl" / "tensorboard" / "experiment" / "4" / "trial" / "9"
    stored.mkdir(parents=True)
    (stored / "events.out.tfevents.1").write_bytes(b"abc")
    logdir = tmp_path / "logdir"
    fetcher = tb_task.Fetcher(
        "cl",
        [
            {"storage": cfg, "experimentId": 4, "trialId": 9},
            {"storage": cfg, "experimentId": 4, "trialId": 10},  # nothing written yet
        ],
        logdir,
    )
    assert fetcher.fetch() == 1
    local = logdir / "experiment" / "4" / "trial" / "9" / "events.out.tfevents.1"
    assert local.read_bytes() == b"abc"
    inode = os.stat(local).st_ino
    assert fetcher.fetch() == 0  # unchanged: not copied again
    (stored / "events.out.tfevents.1").write_bytes(b"abcdef")
    (stored / "sub").mkdir()
    (stored / "sub" / "events.out.tfevents.2").write_bytes(b"z")
    assert fetcher.fetch() == 2
    assert local.read_bytes() == b"abcdef" and os.stat(local).st_ino == inode
    assert (local.parent / "sub" / "events.out.tfevents.2").read_bytes() == b"z"


def test_the_gate_admits_only_the_master_credential() -> None:
    assert tb_task.authorized("token s3cret", "s3cret")
    assert tb_task.authorized(" Token s3cret ", "s3cret")
    assert not tb_task.authorized("token other", "s3cret")
    assert not tb_task.authorized("Bearer s3cret", "s3cret")
    assert not tb_task.authorized("", "s3cret")

    seen: list[str] = []

    def board(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["PATH_INFO"])
        start_response("200 OK", [])
        return [b"runs"]

    app = tb_task.guarded(board, "s3cret")
    statuses: list[str] = []

    def call(auth: str | None) -> bytes:
        environ = {"PATH_INFO": "/data/runs", **({"HTTP_AUTHORIZATION": auth} if auth else {})}
        return b"".join(app(environ, lambda status, headers: statuses.append(status)))

    assert call(None).startswith(b"this TensorBoard is reached through") and not seen
    assert call("token nope") and not seen
    assert call("token s3cret") == b"runs" and seen == ["/data/runs"]
    assert statuses == ["403 Forbidden", "403 Forbidden", "200 OK"]


def test_a_trial_whose_tensorboard_files_cannot_be_written_fails_saying_why(
    on_cluster, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    """Issue 41 item 5: never COMPLETED with a warning that its TensorBoard files are lost. The
    metrics reported before the failure still reach the master."""
    master = on_cluster()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise PermissionError("[Errno 13] Permission denied: 'experiment/3'")

    monkeypatch.setattr(storage.DirectoryStorageManager, "upload", broken)
    expected = r"TensorBoard files not written or uploaded: .*Permission denied"
    with pytest.raises(TensorboardError, match=expected), det.core.init() as ctx:
        ctx.train.report_training_metrics(1, {"loss": 1.0})
        ctx.train.report_validation_metrics(1, {"loss": 0.5})  # never reached
    assert [r["group"] for r in master.metric_reports(11)] == ["training"]
