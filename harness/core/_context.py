"""``det.core.init()``: the Core API entry point.

On the cluster (the ``DET_*`` task environment is present) it returns contexts that talk to the
master; off the cluster it returns a null twin of each (metrics logged, checkpoints in a local
directory, never preempted), so the same script runs on a laptop.
"""

from __future__ import annotations

import enum
import logging
import os
import sys
import types
from typing import TYPE_CHECKING, Any

from .. import storage
from ..common import startup
from ..common.api import MasterStatusError, Session
from ..common.info import ClusterInfo, get_cluster_info
from ._checkpoint import CheckpointContext, DummyCheckpointContext
from ._distributed import DistributedContext, DummyDistributedContext
from ._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from ._searcher import (
    DummySearcherContext,
    SearcherContext,
    parse_max_length,
    parse_units,
)
from ._tensorboard import TensorboardManager
from ._tensorboard import base_path as tensorboard_base_path
from ._tensorboard import sync_path as tensorboard_sync_path
from ._train import DummyTrainContext, EarlyExitReason, TrainContext

# The task side's Python has no typing_extensions: the JSON types are for mypy only.
if TYPE_CHECKING:
    from ..common.jsontypes import JSONObject

logger = logging.getLogger(__name__)

DEFAULT_LOCAL_CHECKPOINT_DIR = "checkpoints"


class TensorboardMode(enum.Enum):
    """AUTO: reported metrics are written as TensorBoard scalars and the TensorBoard directory
    (``core.train.get_tensorboard_path()``) is uploaded after each report and at the end.
    MANUAL: nothing is written, and files are uploaded only by
    ``core.train.upload_tensorboard_files()``."""

    AUTO = "AUTO"
    MANUAL = "MANUAL"


class InvalidHP(Exception):
    """Raise inside ``with core.init()`` to end the trial as 'invalid hyperparameters' (exit 0)."""


class Context:
    """The Core API: ``train``, ``checkpoint``, ``searcher``, ``preempt``, ``distributed``,
    ``info`` (None off-cluster). Use as ``with det.core.init() as core_context:``."""

    def __init__(
        self,
        *,
        checkpoint: CheckpointContext,
        distributed: DistributedContext,
        preempt: PreemptContext,
        train: TrainContext,
        searcher: SearcherContext,
        info: ClusterInfo | None = None,
        session: Session | None = None,
    ) -> None:
        self.checkpoint = checkpoint
        self.distributed = distributed
        self.preempt = preempt
        self.train = train
        self.searcher = searcher
        self.info = info
        self._session = session

    def start(self) -> None:
        self.preempt._start()
        self.train._start()
        startup.mark("context started")

    def alert(
        self,
        title: str | None = None,
        description: str | None = None,
        level: str | None = "info",
    ) -> None:
        """Sends an alert to the webhooks with a CUSTOM trigger that this experiment's config
        names (``integrations.webhooks.webhook_name`` or ``webhook_id``), as Determined's
        ``core_context.alert`` does. ``level``: ``debug``, ``info``, ``warn`` or ``error``."""
        if self._session is None or self.info is None:
            raise ValueError("alert() works only in a task the master runs (det.core.init())")
        if self.info.trial is None:
            raise ValueError("alert() works only in a trial")
        levels = {"debug": "DEBUG", "info": "INFO", "warn": "WARNING", "error": "ERROR"}
        self._session.post(
            "/api/v1/webhooks/custom",
            json={
                "data": {
                    "title": title or "",
                    "description": description or "",
                    "level": "LOG_LEVEL_" + levels.get(level or "info", "INFO"),
                },
                "experimentId": self.info.trial.experiment_id,
                "trialId": self.info.trial.trial_id,
            },
        )

    def close(self) -> None:
        try:
            self.train._close()
        finally:
            self.preempt._close()
            self.distributed.close()
            if self._session is not None:
                self._session.close()

    def __enter__(self) -> Context:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: types.TracebackType | None,
    ) -> None:
        self.close()
        if isinstance(exc_val, InvalidHP):
            self.train.report_early_exit(EarlyExitReason.INVALID_HP)
            logger.info("InvalidHP raised: ending the trial with exit code 0")
            sys.exit(0)


def _dummy_init(
    distributed: DistributedContext | None,
    checkpoint_storage: str | JSONObject | None,
    preempt_mode: PreemptMode,
) -> Context:
    dist = distributed or DummyDistributedContext()
    if checkpoint_storage is None:
        base = os.path.abspath(DEFAULT_LOCAL_CHECKPOINT_DIR)
        logger.info("off-cluster: storing checkpoints in %s", base)
        manager: storage.StorageManager = storage.DirectoryStorageManager(base)
    else:
        manager = storage.from_config(checkpoint_storage)
    return Context(
        checkpoint=DummyCheckpointContext(dist, manager),
        distributed=dist,
        preempt=DummyPreemptContext(dist, preempt_mode),
        train=DummyTrainContext(),
        searcher=DummySearcherContext(dist),
    )


def _prepare_run(
    session: Session, trial_id: int, checkpoint_storage: JSONObject | None
) -> int | None:
    """``POST /api/v1/runs/start`` as the official harness does; returns the master's id for
    the storage backend (sent back with each checkpoint), None if the master has none."""
    try:
        r = session.post(
            "/api/v1/runs/start",
            json={"runId": trial_id, "checkpointStorage": checkpoint_storage},
        )
    except MasterStatusError as e:
        logger.warning("runs/start failed (continuing without a storage id): %s", e)
        return None
    sid = r.json().get("storageId")
    return int(sid) if sid is not None else None


def init(
    *,
    distributed: DistributedContext | None = None,
    checkpoint_storage: str | dict[str, Any] | None = None,
    preempt_mode: PreemptMode = PreemptMode.WorkersAskChief,
    tensorboard_mode: TensorboardMode = TensorboardMode.AUTO,
) -> Context:
    """Build the Core API context.

    Arguments:
        distributed: required when the task has several workers (e.g.
            ``DistributedContext.from_torch_distributed()``).
        checkpoint_storage: overrides the experiment's ``checkpoint_storage`` (a dict of the
            same shape, a path, ``s3://bucket/prefix`` or ``gs://bucket/prefix``).
        preempt_mode: how workers learn about preemption (see ``PreemptMode``).
        tensorboard_mode: AUTO (metrics become TensorBoard scalars, uploaded to checkpoint
            storage) or MANUAL (see ``TensorboardMode``).
    """
    startup.mark_process_start()
    startup.mark("core.init called")
    info = get_cluster_info()
    if info is None:
        return _dummy_init(distributed, checkpoint_storage, preempt_mode)

    # The task's own calls go as the task (its allocation token), as Determined's harness
    # makes them: DET_USER_TOKEN is the user's tools' (client.login(), det), and a user
    # session on these calls would take the master's task-only endpoints away from them.
    session = Session(info.master_url, allocation_token=info.session_token)
    if (
        distributed is None
        and len(info.slot_ids) > 1
        and int(os.environ.get("WORLD_SIZE", "1")) > 1
    ):
        raise ValueError("a multi-worker task must pass distributed=DistributedContext(...)")
    dist = distributed or DummyDistributedContext()

    if info.task_type != "TRIAL" or info.trial is None:
        manager = storage.from_config(checkpoint_storage or DEFAULT_LOCAL_CHECKPOINT_DIR)
        return Context(
            checkpoint=DummyCheckpointContext(dist, manager),
            distributed=dist,
            preempt=DummyPreemptContext(dist, preempt_mode),
            train=DummyTrainContext(),
            searcher=DummySearcherContext(dist),
            info=info,
            session=session,
        )

    trial = info.trial
    storage_cfg: str | JSONObject = (
        checkpoint_storage
        if checkpoint_storage is not None
        else trial.config.get("checkpoint_storage") or DEFAULT_LOCAL_CHECKPOINT_DIR
    )
    if isinstance(storage_cfg, dict):
        manager = storage.from_config(
            storage_cfg, container_path=storage.in_container_path(storage_cfg)
        )
        reported_cfg: JSONObject | None = storage_cfg
    else:
        manager = storage.from_config(storage_cfg)
        reported_cfg = storage.shortcut_to_config(storage_cfg)
    backend_id = _prepare_run(session, trial.trial_id, reported_cfg) if dist.rank == 0 else None
    startup.mark("runs/start answered")
    tensorboard = TensorboardManager(
        tensorboard_base_path(storage_cfg, info.allocation_id, dist.rank),
        manager,
        tensorboard_sync_path(info.cluster_id, trial.experiment_id, trial.trial_id),
        dist.rank,
    )
    # Storage this task's user cannot write (an agent user on a directory another user made)
    # fails the trial here, in one line, not at its first checkpoint nor silently for its
    # TensorBoard files.
    manager.check_writable()
    tensorboard.check_writable()

    train = TrainContext(
        session,
        trial.trial_id,
        trial.trial_run_id,
        trial.experiment_id,
        tensorboard,
        tensorboard_auto=TensorboardMode(tensorboard_mode) == TensorboardMode.AUTO,
    )
    checkpoint = CheckpointContext(
        dist, manager, session, info.task_id, info.allocation_id, backend_id
    )
    # The reports of a checkpoint's steps reach the master before the checkpoint does.
    checkpoint.before_report = train._flush
    return Context(
        checkpoint=checkpoint,
        distributed=dist,
        preempt=PreemptContext(session, info.allocation_id, dist, preempt_mode),
        train=train,
        searcher=SearcherContext(
            session,
            dist,
            trial.trial_id,
            parse_max_length(trial.config),
            parse_units(trial.config),
        ),
        info=info,
        session=session,
    )
