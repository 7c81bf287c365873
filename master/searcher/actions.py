"""What a searcher asks the master to do, and why a trial ended early.

Actions are frozen dataclasses with a ``to_dict``/``action_from_dict`` round trip so the master can
store the actions it has not applied yet next to the searcher snapshot.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from det.common.jsontypes import JSONObject


class ExitedReason(enum.Enum):
    """Why a trial ended before the searcher was done with it (Determined's ``ExitedReason``)."""

    ERRORED = "ERRORED"
    USER_CANCELED = "USER_CANCELED"
    # The training code raised InvalidHP: the hyperparameters were unusable. The trial is replaced
    # by a new one and does not count toward max_trials.
    INVALID_HP = "INVALID_HP"


@dataclass(frozen=True)
class CreateTrial:
    """Create a trial with these hyperparameters and this trial seed (``DET_TRIAL_SEED``)."""

    request_id: str
    hparams: JSONObject
    seed: int

    def to_dict(self) -> JSONObject:
        return {
            "type": "create",
            "request_id": self.request_id,
            "hparams": self.hparams,
            "seed": self.seed,
        }


@dataclass(frozen=True)
class StopTrial:
    """Stop a trial gracefully: the master preempts it, it checkpoints and ends COMPLETED."""

    request_id: str

    def to_dict(self) -> JSONObject:
        return {"type": "stop", "request_id": self.request_id}


@dataclass(frozen=True)
class Shutdown:
    """The search is over: every trial it asked for has exited and no more will be created.

    ``failure`` is set when every trial that counted toward the search errored (the experiment
    should end ERRORED rather than COMPLETED). The built-in searchers never set ``cancel``.
    """

    failure: bool = False
    cancel: bool = False

    def to_dict(self) -> JSONObject:
        return {"type": "shutdown", "failure": self.failure, "cancel": self.cancel}


Action = CreateTrial | StopTrial | Shutdown


def action_from_dict(raw: JSONObject) -> Action:
    """Inverse of ``Action.to_dict``."""
    kind = raw.get("type")
    if kind == "create":
        hparams, seed = raw["hparams"], raw["seed"]
        if not isinstance(hparams, dict) or not isinstance(seed, int):
            raise ValueError(f"searcher action: a create needs hparams and a seed: {raw!r}")
        return CreateTrial(str(raw["request_id"]), dict(hparams), seed)
    if kind == "stop":
        return StopTrial(str(raw["request_id"]))
    if kind == "shutdown":
        return Shutdown(bool(raw.get("failure", False)), bool(raw.get("cancel", False)))
    raise ValueError(f"unknown searcher action type: {kind!r}")
