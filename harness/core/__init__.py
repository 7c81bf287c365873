"""Core API: what training code calls from inside a task container.

``with det.core.init() as core_context:`` gives ``train``, ``checkpoint``, ``searcher``,
``preempt``, ``distributed`` and ``info``, with the shape of Determined's ``core``.
"""

from ._checkpoint import (
    CheckpointContext,
    DownloadMode,
    DummyCheckpointContext,
    merge_metadata,
    merge_resources,
)
from ._context import Context, InvalidHP, TensorboardMode, init
from ._distributed import DistributedContext, DummyDistributedContext
from ._preempt import DummyPreemptContext, PreemptContext, PreemptMode
from ._searcher import (
    DummySearcherContext,
    SearcherContext,
    SearcherMode,
    SearcherOperation,
    Unit,
)
from ._train import DummyTrainContext, EarlyExitReason, TrainContext

__all__ = [
    "CheckpointContext",
    "Context",
    "DistributedContext",
    "DownloadMode",
    "DummyCheckpointContext",
    "DummyDistributedContext",
    "DummyPreemptContext",
    "DummySearcherContext",
    "DummyTrainContext",
    "EarlyExitReason",
    "InvalidHP",
    "PreemptContext",
    "PreemptMode",
    "SearcherContext",
    "SearcherMode",
    "SearcherOperation",
    "TensorboardMode",
    "TrainContext",
    "Unit",
    "init",
    "merge_metadata",
    "merge_resources",
]
