"""TensorBoard event files of a trial, written where Determined writes them and uploaded to the
experiment's checkpoint storage, where ``det tensorboard start`` fetches them.

* Local directory (``core.train.get_tensorboard_path()``): ``/tmp/tensorboard-<allocation
  id>-<rank>`` (or under ``checkpoint_storage.base_path`` when the config has one), as
  Determined's; /tmp is the temporary directory (``TMPDIR`` if set: a harness run on a host).
* In storage: ``<cluster id>/tensorboard/experiment/<experiment id>/trial/<trial id>/...``
  under the storage's root (a shared_fs ``host_path``/``storage_path``, a bucket's prefix), the
  layout Determined's harness uploads to, through the same storage managers as checkpoints.
* Scalars of ``report_training_metrics``/``report_validation_metrics`` are written as
  Determined's harness writes them: ``Determined/<name>`` for training,
  ``Determined/val_<name>`` for validation (a name that starts with ``val`` is kept as is).

The writer needs no TensorFlow or TensorBoard package: an event file is a TFRecord file (each
record: length, masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes) of
``tensorflow.Event`` protocol buffers, encoded here by hand (the few fields a scalar needs).
"""

from __future__ import annotations

import logging
import math
import os
import pathlib
import socket
import struct
import tempfile
import threading
import time
from typing import Any, BinaryIO, Callable

from .. import storage
from ._metric_values import Metrics

logger = logging.getLogger(__name__)

# --- CRC-32C (Castagnoli), the checksum of TFRecord framing ---------------------------------

_CRC_TABLE: list[int] = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tf_record(data: bytes) -> bytes:
    """One TFRecord: what an event file is a sequence of (pure)."""
    length = struct.pack("<Q", len(data))
    return (
        length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data))
    )


# --- the protocol buffers of an event (tensorflow/core/util/event.proto, summary.proto) -----


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # int64 fields: negatives as two's complement
    out = bytearray()
    while True:
        bits = n & 0x7F
        n >>= 7
        if n:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _field(number: int, wire_type: int) -> bytes:
    return _varint((number << 3) | wire_type)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _field(number, 2) + _varint(len(data)) + data


def event(
    wall_time: float,
    step: int = 0,
    *,
    file_version: str | None = None,
    scalars: dict[str, float] | None = None,
) -> bytes:
    """An encoded ``Event``: wall_time (1, double), step (2, int64), file_version (3, string),
    summary (5: ``Summary``, its values (1) each a tag (1) and a simple_value (2, float))."""
    out = _field(1, 1) + struct.pack("<d", wall_time)
    if step:
        out += _field(2, 0) + _varint(int(step))
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if scalars:
        values = b"".join(
            _bytes_field(1, _bytes_field(1, tag.encode()) + _field(2, 5) + struct.pack("<f", v))
            for tag, v in scalars.items()
        )
        out += _bytes_field(5, values)
    return out


class EventFileWriter:
    """Appends scalar events to one event file in ``directory`` (created on first write)."""

    _count = 0
    _count_lock = threading.Lock()

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        self._file: BinaryIO | None = None
        self._lock = threading.Lock()

    def _open(self) -> BinaryIO:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            with EventFileWriter._count_lock:
                EventFileWriter._count += 1
                n = EventFileWriter._count
            name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}"
            self._file = open(self.directory / f"{name}.{os.getpid()}.{n}", "ab")  # noqa: SIM115
            self._file.write(tf_record(event(time.time(), file_version="brain.Event:2")))
        return self._file

    def add_scalars(self, step: int, scalars: dict[str, float]) -> None:
        if not scalars:
            return
        with self._lock:
            self._open().write(tf_record(event(time.time(), step, scalars=scalars)))

    def flush(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def numerical_scalar(value: Any) -> float | None:
    """The value as a float when it is one number (bools and non-finite values are not)."""
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            value = value.item()
        except (ValueError, RuntimeError):  # an array of several values
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def training_scalars(metrics: Metrics) -> dict[str, float]:
    """Training metrics as Determined's harness names them in TensorBoard (pure)."""
    out = {}
    for name, value in metrics.items():
        f = numerical_scalar(value)
        if f is not None:
            out["Determined/" + name] = f
    return out


def validation_scalars(metrics: Metrics) -> dict[str, float]:
    return training_scalars(
        {(k if k.startswith("val") else "val_" + k): v for k, v in metrics.items()}
    )


def sync_path(cluster_id: str, experiment_id: int, trial_id: int) -> str:
    """Where a trial's TensorBoard files go under the storage's root (Determined's layout)."""
    return f"{cluster_id}/tensorboard/experiment/{experiment_id}/trial/{trial_id}"


#: Where the local TensorBoard directory goes unless checkpoint_storage has a ``base_path``;
#: None: the temporary directory (``tempfile.gettempdir()``: /tmp in a task container, as
#: Determined's fixed /tmp; ``TMPDIR`` where the harness runs on a host).
DEFAULT_ROOT: str | None = None


def base_path(checkpoint_storage: Any, allocation_id: str, rank: int) -> pathlib.Path:
    """The local directory the trial writes TensorBoard files into (Determined's)."""
    root = DEFAULT_ROOT or tempfile.gettempdir()
    if isinstance(checkpoint_storage, dict) and checkpoint_storage.get("base_path"):
        root = str(checkpoint_storage["base_path"])
    return pathlib.Path(root, f"tensorboard-{allocation_id}-{rank}")


Mangler = Callable[[pathlib.Path, int], pathlib.Path]


class TensorboardManager:
    """Uploads what changed in ``base_path`` to ``<storage>/<sync path>``: at most once a second
    from ``sync`` (as Determined's, to spare cloud storage request quotas) and on ``close``."""

    MIN_INTERVAL = 1.0

    def __init__(
        self,
        base: pathlib.Path,
        manager: storage.StorageManager,
        path: str,
        rank: int = 0,
    ) -> None:
        self.base_path = base
        parent, _, self._leaf = path.rpartition("/")
        self._storage = manager.under(parent) if parent else manager
        self._rank = rank
        self._seen: dict[str, tuple[int, int]] = {}
        self._last_sync = 0.0
        self._lock = threading.Lock()
        self.writer = EventFileWriter(base)

    def check_writable(self) -> None:
        """Raises (storage.StorageNotWritableError, one line) when this task could not upload
        its files, creating the shared levels of the path on the way (det.storage.shared)."""
        self._storage.check_writable()

    def sync(
        self,
        selector: Callable[[pathlib.Path], bool] | None = None,
        mangler: Mangler | None = None,
        force: bool = False,
    ) -> None:
        with self._lock:
            if not force and time.monotonic() - self._last_sync < self.MIN_INTERVAL:
                return
            self._last_sync = time.monotonic()
            self.writer.flush()
            self._upload(selector, mangler)

    def _upload(
        self, selector: Callable[[pathlib.Path], bool] | None, mangler: Mangler | None
    ) -> None:
        if not self.base_path.is_dir():
            return
        changed = {}
        for path in self.base_path.rglob("*"):
            if not path.is_file() or (selector is not None and not selector(path)):
                continue
            st = path.stat()
            rel = path.relative_to(self.base_path)
            key = str(rel)
            if self._seen.get(key) == (st.st_size, st.st_mtime_ns):
                continue
            self._seen[key] = (st.st_size, st.st_mtime_ns)
            changed[key] = str(mangler(rel, self._rank)) if mangler is not None else key
        if not changed:
            return
        if all(k == v for k, v in changed.items()):
            self._storage.upload(self.base_path, self._leaf, set(changed))
            return
        # Renamed by the caller's mangler: stage the files under their new names.
        import shutil

        with tempfile.TemporaryDirectory(prefix="det-tb-") as tmp:
            for src, dst in changed.items():
                target = pathlib.Path(tmp, dst)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(self.base_path / src, target)
            self._storage.upload(tmp, self._leaf, set(changed.values()))

    def close(self, sync: bool = True) -> None:
        """Closes the event file; uploads what changed unless ``sync`` is False (MANUAL)."""
        try:
            if sync:
                self.sync(force=True)
        finally:
            self.writer.close()
