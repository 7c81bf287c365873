"""Training and validation metrics, progress and early exit.

Metrics go to ``POST /api/v1/trials/{id}/metrics/batch`` from a background thread: ``report_*``
only enqueues, so training never waits on the network, and a master restart only delays delivery
(the session retries). Reports that queue up while a request is in flight go together in the
next one. Progress goes through the same thread and is coalesced: at most one
progress post is queued at a time and it carries the latest value. ``close()`` flushes everything
still queued. An error the thread hit is raised from the next ``report_*`` call (or from
``close()``).
"""

from __future__ import annotations

import enum
import logging
import math
import pathlib
import queue
import tempfile
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypedDict

from ..common import startup
from ..common.api import NotFoundError, Session
from ..common.metric_groups import TRAINING, VALIDATION
from ._metric_values import Metrics, MetricValue, SupportsItem
from ._tensorboard import TensorboardManager, training_scalars, validation_scalars

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from ..common.jsontypes import JSONObject, JSONValue

logger = logging.getLogger(__name__)


class EarlyExitReason(enum.Enum):
    INVALID_HP = "EXITED_REASON_INVALID_HP"
    USER_REQUESTED_STOP = "EXITED_REASON_USER_REQUESTED_STOP"


@dataclass(frozen=True)
class _Report:
    group: str
    steps_completed: int
    metrics: JSONObject
    batch_metrics: list[JSONObject] | None = None


class ReportedMetrics(TypedDict, total=False):
    """A report's values (Determined's ``v1Metrics``): the averages, and per batch."""

    avgMetrics: JSONObject
    batchMetrics: list[JSONObject]


class MetricsReportEntry(TypedDict):
    """One entry of det's batched metrics request, ``POST /api/v1/trials/{id}/metrics/batch``
    (the master validates it as ``det.master.schemas.trials.MetricsReportEntry``;
    tests/unit/harness/test_harness_report_wire.py holds the two together)."""

    group: str
    trialRunId: int
    stepsCompleted: int
    metrics: ReportedMetrics


def report_entry(trial_run_id: int, report: _Report) -> MetricsReportEntry:
    """One entry of the master's batched metrics request (pure)."""
    m: ReportedMetrics = {"avgMetrics": report.metrics}
    if report.batch_metrics is not None:
        m["batchMetrics"] = report.batch_metrics
    return {
        "group": report.group,
        "trialRunId": trial_run_id,
        "stepsCompleted": report.steps_completed,
        "metrics": m,
    }


def _item(name: str, value: SupportsItem) -> JSONValue:
    """A numpy / torch scalar's Python value; a TypeError naming the metric when it is none."""
    item = value.item()
    if item is None or isinstance(item, (bool, int, float, str)):
        return item
    raise TypeError(
        f"metric {name!r}: {type(value).__name__}.item() gave a {type(item).__name__}, not a number"
    )


def _json_safe(metrics: Metrics) -> JSONObject:
    """Reported metrics as JSON: numpy / torch scalars as their Python numbers, NaN and
    infinities (not JSON) as the strings the master's float parser accepts."""
    out: JSONObject = {}
    for k, v in metrics.items():
        value = _item(k, v) if isinstance(v, SupportsItem) else v
        if isinstance(value, float) and not math.isfinite(value):
            value = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        out[k] = value
    return out


_PROGRESS = "progress"
_NOTHING = object()
# Reports sent in one request at most (each is one row on the master).
MAX_REPORTS_PER_REQUEST = 500


class _MetricsShipper(threading.Thread):
    def __init__(self, session: Session, trial_id: int, trial_run_id: int) -> None:
        super().__init__(daemon=True, name="det-metrics-shipper")
        self._session = session
        self._trial_id = trial_id
        self._trial_run_id = trial_run_id
        self._queue: queue.Queue[_Report | str | threading.Event | None] = queue.Queue(maxsize=1000)
        self._lock = threading.Lock()
        self._progress: float | None = None
        self.error: BaseException | None = None
        self._first = True
        self._first_put = True

    def put(self, report: _Report) -> None:
        if self._first_put:
            self._first_put = False
            startup.mark("first report queued")
        self._queue.put(report)

    def put_progress(self, progress: float) -> None:
        with self._lock:
            queued = self._progress is not None
            self._progress = progress
        if not queued:
            self._queue.put(_PROGRESS)

    def flush(self, timeout: float = 60.0) -> None:
        """Waits until every report queued before now was sent (or failed): a checkpoint is
        registered only after the reports of its steps, so a run lost just after it loses none
        that its successor, resuming there, will not report again."""
        if not self.is_alive():
            return
        sent = threading.Event()
        self._queue.put(sent)
        sent.wait(timeout)

    def run(self) -> None:
        carried: _Report | str | object | None = _NOTHING
        while True:
            item = self._queue.get() if carried is _NOTHING else carried
            carried = _NOTHING
            if item is None:
                return
            if isinstance(item, threading.Event):
                item.set()  # a flush: everything before it went out
                continue
            try:
                if isinstance(item, _Report):
                    # Everything queued behind it goes in the same request (up to a limit),
                    # so a fast training loop costs the master a request per drain, not per
                    # report; order is kept because a non-report item ends the batch.
                    batch = [item]
                    while len(batch) < MAX_REPORTS_PER_REQUEST:
                        try:
                            following = self._queue.get_nowait()
                        except queue.Empty:
                            break
                        if not isinstance(following, _Report):
                            carried = following
                            break
                        batch.append(following)
                    if self._first:
                        startup.mark("first report sent")
                    self._session.post(
                        f"/api/v1/trials/{self._trial_id}/metrics/batch",
                        json={"reports": [report_entry(self._trial_run_id, r) for r in batch]},
                    )
                    if self._first:
                        self._first = False
                        startup.mark("first report acknowledged")
                else:
                    with self._lock:
                        progress, self._progress = self._progress, None
                    self._session.post(
                        f"/api/v1/trials/{self._trial_id}/progress",
                        json={"progress": progress, "is_raw": True},
                    )
            except BaseException as e:  # surfaced to the training thread
                logger.error("reporting to the master failed: %s", e)
                self.error = e

    def stop(self) -> None:
        self._queue.put(None)
        self.join()


class TensorboardError(RuntimeError):
    """A trial's TensorBoard events could not be written or uploaded (the message says why)."""


class TrainContext:
    """Reports metrics and progress of the current trial to the master, and (``tensorboard``,
    unless its mode is MANUAL) writes them as TensorBoard scalars uploaded to checkpoint
    storage (see ``det.core._tensorboard``)."""

    def __init__(
        self,
        session: Session,
        trial_id: int,
        trial_run_id: int,
        experiment_id: int,
        tensorboard: TensorboardManager | None = None,
        tensorboard_auto: bool = True,
    ) -> None:
        self._session = session
        self._trial_id = trial_id
        self._experiment_id = experiment_id
        self._shipper = _MetricsShipper(session, trial_id, trial_run_id)
        self._tensorboard = tensorboard
        self._tensorboard_auto = tensorboard_auto

    def _start(self) -> None:
        self._shipper.start()

    def _flush(self) -> None:
        """Every report queued so far sent (before a checkpoint is registered)."""
        self._shipper.flush()

    def _close(self) -> None:
        try:
            if self._tensorboard is not None:
                self._tensorboard.close(sync=self._tensorboard_auto)
        except Exception as e:
            # A trial whose TensorBoard files are lost fails, saying why (never COMPLETED with
            # a warning nobody reads).
            raise TensorboardError(f"the last TensorBoard files were not uploaded: {e}") from e
        finally:
            if self._shipper.is_alive():
                self._shipper.stop()
            self._raise_shipper_error()

    def get_tensorboard_path(self) -> pathlib.Path:
        """The directory whose files are uploaded for ``det tensorboard`` (write events here)."""
        if self._tensorboard is None:
            raise ValueError("this task has no TensorBoard directory (only trials have one)")
        return self._tensorboard.base_path

    def upload_tensorboard_files(
        self,
        selector: Callable[[pathlib.Path], bool] = lambda _: True,
        mangler: Callable[[pathlib.Path, int], pathlib.Path] = lambda p, _: p,
    ) -> None:
        """Uploads the TensorBoard directory's new and changed files (``TensorboardMode.MANUAL``
        only; AUTO uploads after every report). ``mangler(relative path, rank)`` renames."""
        if self._tensorboard_auto:
            raise RuntimeError("upload_tensorboard_files can only be used in MANUAL mode")
        if self._tensorboard is None:
            raise ValueError("this task has no TensorBoard directory (only trials have one)")
        self._tensorboard.sync(selector, mangler, force=True)

    def _tensorboard_write(self, step: int, scalars: dict[str, float]) -> None:
        if self._tensorboard is None or not self._tensorboard_auto:
            return
        try:
            self._tensorboard.writer.add_scalars(step, scalars)
            self._tensorboard.sync()
        except Exception as e:
            # Fails the trial (ERROR, with this reason) rather than let it complete without its
            # TensorBoard files. Object stores' transient errors are retried below this.
            raise TensorboardError(f"TensorBoard files not written or uploaded: {e}") from e

    def _raise_shipper_error(self) -> None:
        err, self._shipper.error = self._shipper.error, None
        if err is not None:
            raise RuntimeError(f"a metrics or progress report failed: {err}") from err

    def report_metrics(self, group: str, steps_completed: int, metrics: Metrics) -> None:
        """Report a dict of metrics of any ``group`` at ``steps_completed`` (batches)."""
        self._report(group, steps_completed, metrics, None)

    def report_training_metrics(
        self,
        steps_completed: int,
        metrics: Metrics,
        batch_metrics: list[Metrics] | None = None,
    ) -> None:
        logger.info("training metrics at %d: %s", steps_completed, metrics)
        self._report(TRAINING, steps_completed, metrics, batch_metrics)
        if self._tensorboard is not None:
            seen: set[str] = set()
            for i, batch in enumerate(batch_metrics or []):
                step = steps_completed - len(batch_metrics or []) + i
                self._tensorboard_write(step, training_scalars(batch))
                seen.update(batch)
            rest = {k: v for k, v in metrics.items() if k not in seen}
            self._tensorboard_write(steps_completed, training_scalars(rest))

    def report_validation_metrics(self, steps_completed: int, metrics: Metrics) -> None:
        logger.info("validation metrics at %d: %s", steps_completed, metrics)
        for k, v in metrics.items():
            if v is None:
                raise ValueError(f"validation metric {k!r} is None")
        kept = {k: v for k, v in metrics.items() if not isinstance(v, (bytes, bytearray))}
        self._report(VALIDATION, steps_completed, kept, None)
        self._tensorboard_write(steps_completed, validation_scalars(kept))

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: Metrics,
        batch_metrics: list[Metrics] | None,
    ) -> None:
        if "." in group:
            raise ValueError("metric group names cannot contain '.'")
        self._raise_shipper_error()
        batches = None if batch_metrics is None else [_json_safe(b) for b in batch_metrics]
        self._shipper.put(_Report(group, int(steps_completed), _json_safe(metrics), batches))

    def report_progress(self, progress: float) -> None:
        """Progress in [0, 1], shown by the WebUI."""
        if not 0 <= progress <= 1:
            raise ValueError(f"progress must be between 0 and 1, not {progress}")
        self._raise_shipper_error()
        self._shipper.put_progress(float(progress))

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        reason = EarlyExitReason(reason)
        logger.info("reporting early exit: %s", reason.value)
        try:
            self._session.post(
                f"/api/v1/trials/{self._trial_id}/early_exit", json={"reason": reason.value}
            )
        except Exception as e:
            if getattr(e, "status", None) == 400:
                logger.warning("early exit was already reported for this trial")
                return
            raise

    def get_experiment_best_validation(self) -> float | None:
        """The best searcher metric reported so far across the experiment, or None."""
        try:
            r = self._session.get(
                f"/api/v1/experiments/{self._experiment_id}/searcher/best_searcher_validation_metric"
            )
        except NotFoundError:
            return None
        metric = r.json().get("metric")
        return None if metric is None else float(metric)

    def set_status(self, status: str) -> None:
        self._session.post(
            f"/api/v1/trials/{self._trial_id}/runner/metadata", json={"state": status}
        )


class DummyTrainContext(TrainContext):
    """Off-cluster: metrics are logged and kept in ``self.reports`` (group, steps, metrics)."""

    def __init__(self, tensorboard_path: pathlib.Path | None = None) -> None:
        self.reports: list[tuple[str, int, dict[str, MetricValue]]] = []
        self._tensorboard = None
        self._tensorboard_auto = True
        self._tbd_directory = tensorboard_path

    def get_tensorboard_path(self) -> pathlib.Path:
        """Off-cluster: a local directory (nothing is uploaded)."""
        if self._tbd_directory is None:
            self._tbd_directory = pathlib.Path(tempfile.mkdtemp(prefix="det-tensorboard-"))
        return self._tbd_directory

    def upload_tensorboard_files(
        self,
        selector: Callable[[pathlib.Path], bool] = lambda _: True,
        mangler: Callable[[pathlib.Path, int], pathlib.Path] = lambda p, _: p,
    ) -> None:
        logger.info("off-cluster: TensorBoard files are not uploaded")

    def _start(self) -> None:
        pass

    def _close(self) -> None:
        pass

    def _report(
        self,
        group: str,
        steps_completed: int,
        metrics: Metrics,
        batch_metrics: list[Metrics] | None,
    ) -> None:
        if "." in group:
            raise ValueError("metric group names cannot contain '.'")
        self.reports.append((group, int(steps_completed), dict(metrics)))
        logger.debug("%s metrics at %d: %s", group, steps_completed, metrics)

    def report_progress(self, progress: float) -> None:
        if not 0 <= progress <= 1:
            raise ValueError(f"progress must be between 0 and 1, not {progress}")
        logger.info("progress: %.3f", progress)

    def report_early_exit(self, reason: EarlyExitReason) -> None:
        logger.info("early exit: %s", EarlyExitReason(reason).value)

    def get_experiment_best_validation(self) -> float | None:
        return None

    def set_status(self, status: str) -> None:
        logger.info("status: %s", status)
