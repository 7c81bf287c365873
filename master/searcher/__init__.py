"""Hyperparameter searchers with Determined 0.38 semantics, as pure state machines.

No I/O, no clock: every decision comes from the events below and one ``random.Random`` seeded
with the experiment seed. Searchers: ``single``, ``random``, ``grid``, ``async_halving`` (ASHA,
stopping variant) and ``adaptive_asha`` (brackets of ASHA).

Build one with ``new_searcher(searcher_config, hyperparameters, seed)`` from the plain
``searcher:`` and ``hyperparameters:`` dicts of the experiment config (``ValueError`` names a bad
field). Then feed it events; each returns a list of actions to apply:

* ``initial_trials()``, once when the experiment starts: N x ``CreateTrial``.
* ``trial_created(request_id)``, when the trial row exists (optional): usually nothing.
* ``validation_completed(request_id, metric, time_value)``: ``StopTrial`` (ASHA family only).
* ``trial_exited(request_id)``, the trial ended COMPLETED: ``CreateTrial`` and/or ``Shutdown``.
* ``trial_exited_early(request_id, reason)``: ``CreateTrial`` and/or ``Shutdown``.

Actions (``actions.py``):

* ``CreateTrial(request_id, hparams, seed)``: create a trial with these hyperparameters and trial
  seed. Request ids are UUID strings; ids, hparams and seeds all come from the seeded RNG, so the
  same config and seed give the same trials.
* ``StopTrial(request_id)``: the master delivers a graceful preemption; the trial checkpoints and
  ends COMPLETED, and the master then reports ``trial_exited``. Validations reported after a
  stop are ignored.
* ``Shutdown(failure, cancel)``: every requested trial has exited and none will be created;
  ``failure`` when every trial errored.

Contract for the caller:

* ``metric`` is the validation's value of ``searcher.metric`` (``smaller_is_better`` is applied
  here; NaN ranks worst); ``time_value`` is the trial's ``searcher.time_metric`` value reported
  with the same validation (e.g. ``batches``). Only the ASHA searchers use ``time_value``.
  ``validation_metrics(request_id, metrics_dict)`` does that lookup for you.
* Report a trial's end once: ``trial_exited`` when it ended COMPLETED (also after a
  ``StopTrial``), ``trial_exited_early(rid, ExitedReason.ERRORED | USER_CANCELED | INVALID_HP)``
  otherwise. A second report for the same trial is ignored. An INVALID_HP trial is replaced and
  does not count toward ``max_trials``; an errored or canceled one counts as done.
* A new trial is created only when a trial has exited, so no more than
  ``max_concurrent_trials`` trials are ever alive at once.
* ``progress()`` is in [0, 1] (1 after ``Shutdown``). ``trial_target_length(request_id)`` is what
  the harness can report as the trial's length: ``max_time`` for the ASHA searchers, the
  deprecated ``max_length`` (or ``None``) for the others.
* ``snapshot()`` returns a JSON-serialisable dict (config, seed, RNG state and all state);
  ``Searcher.restore(snapshot)`` continues with exactly the decisions the original would make.
  Store it in the same transaction as the applied actions.

``det.master.searcher.simulate`` runs a search offline against a synthetic learning curve
(``simulate``) and previews a config (``preview``, used by ``det preview-search``).
"""

from .actions import (
    Action,
    CreateTrial,
    ExitedReason,
    Shutdown,
    StopTrial,
    action_from_dict,
)
from .config import SearcherConfig, parse_searcher_config
from .hparams import grid_points, parse_hyperparameters, sample_all
from .searcher import Searcher, new_searcher

__all__ = [
    "Action",
    "CreateTrial",
    "ExitedReason",
    "Searcher",
    "SearcherConfig",
    "Shutdown",
    "StopTrial",
    "action_from_dict",
    "grid_points",
    "new_searcher",
    "parse_hyperparameters",
    "parse_searcher_config",
    "sample_all",
]
