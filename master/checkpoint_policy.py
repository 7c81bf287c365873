"""Which checkpoints an ended experiment keeps (Determined's retention policy). Pure.

``checkpoint_storage`` says how many to keep:

* ``save_experiment_best`` (default 0): the N best across the experiment,
* ``save_trial_best`` (default 1): the N best of each trial,
* ``save_trial_latest`` (default 1): the N latest of each trial.

"Best" ranks checkpoints by the searcher metric of the validation at the checkpoint's step
(``searcher.smaller_is_better``); a checkpoint without such a validation is never among the best
but may be among the latest. Everything no rule keeps is deleted.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence

from det.master.expconf.base import default_of
from det.master.expconf.searcher import _SearcherBase
from det.master.expconf.storage import _StorageBase


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    uuid: str
    trial_id: int
    steps: int
    metric: float | None = None  # the searcher metric validated at ``steps``, if any


@dataclasses.dataclass(frozen=True)
class Retention:
    """What a GC keeps; the defaults are the experiment config's (read from its models)."""

    experiment_best: int = default_of(_StorageBase, "save_experiment_best", int)
    trial_best: int = default_of(_StorageBase, "save_trial_best", int)
    trial_latest: int = default_of(_StorageBase, "save_trial_latest", int)
    smaller_is_better: bool = default_of(_SearcherBase, "smaller_is_better", bool)


def _best(ckpts: Iterable[Checkpoint], n: int, smaller: bool) -> list[Checkpoint]:
    ranked = [c for c in ckpts if c.metric is not None]
    # Ties: the later checkpoint first, then the uuid (deterministic).
    ranked.sort(key=lambda c: (c.metric if smaller else -c.metric, -c.steps, c.uuid))  # type: ignore[operator]
    return ranked[:n]


def to_delete(ckpts: Sequence[Checkpoint], policy: Retention) -> list[str]:
    """The uuids the policy does not keep, in the order given."""
    keep: set[str] = set()
    keep.update(c.uuid for c in _best(ckpts, policy.experiment_best, policy.smaller_is_better))
    by_trial: dict[int, list[Checkpoint]] = defaultdict(list)
    for c in ckpts:
        by_trial[c.trial_id].append(c)
    for trial in by_trial.values():
        keep.update(c.uuid for c in _best(trial, policy.trial_best, policy.smaller_is_better))
        latest = sorted(trial, key=lambda c: (-c.steps, c.uuid))[: policy.trial_latest]
        keep.update(c.uuid for c in latest)
    return [c.uuid for c in ckpts if c.uuid not in keep]
