"""Prints the best trial of a finished experiment from the ``det`` CLI's JSON output.

Usage: python3 scripts/best_trial.py EXPERIMENT_JSON CHECKPOINTS_JSON
  EXPERIMENT_JSON:  output of ``det experiment describe ID --json``
  CHECKPOINTS_JSON: output of ``det checkpoint list ID --json``
Exit code 1 when no trial reported the searcher metric.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def best_trial(experiment: dict[str, Any], checkpoints: list[dict[str, Any]]) -> dict[str, Any]:
    config = experiment["experiment"].get("config") or {}
    searcher = config.get("searcher") or {}
    metric = searcher.get("metric") or experiment["experiment"].get("searcherMetric")
    smaller = bool(searcher.get("smaller_is_better", True))
    scored = [t for t in experiment["trials"] if _number(t.get("searcherMetricValue")) is not None]
    if not scored:
        raise SystemExit("no trial reported the searcher metric")
    sign = 1.0 if smaller else -1.0
    trial = min(scored, key=lambda t: sign * float(t["searcherMetricValue"]))
    own = [
        c
        for c in checkpoints
        if (c.get("training") or {}).get("trialId") == trial["id"]
        and c.get("state") != "STATE_DELETED"  # removed by the retention policy
    ]
    with_metric = [c for c in own if _number(c["training"].get("searcherMetric")) is not None]
    if with_metric:
        ckpt = min(with_metric, key=lambda c: sign * float(c["training"]["searcherMetric"]))
    else:
        ckpt = max(own, key=lambda c: c.get("reportTime") or "", default=None)
    return {
        "experiment_id": experiment["experiment"]["id"],
        "experiment_state": experiment["experiment"]["state"],
        "trials": len(experiment["trials"]),
        "trial_id": trial["id"],
        "hparams": trial["hparams"],
        "metric": metric,
        "smaller_is_better": smaller,
        "best_validation": float(trial["searcherMetricValue"]),
        "batches": trial.get("totalBatchesProcessed"),
        "checkpoint_uuid": ckpt["uuid"] if ckpt else None,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        experiment = json.load(f)
    if isinstance(experiment, list):  # describe prints a list when given several ids
        experiment = experiment[0]
    with open(argv[2]) as f:
        checkpoints = json.load(f)
    if isinstance(checkpoints, dict):
        checkpoints = checkpoints.get("checkpoints") or []
    b = best_trial(experiment, checkpoints)
    state = str(b["experiment_state"]).removeprefix("STATE_")
    print("== best trial ==")
    print(f"experiment:      {b['experiment_id']} ({state}, {b['trials']} trials)")
    print(f"best trial:      {b['trial_id']} ({b['batches']} batches)")
    print(f"hyperparameters: {json.dumps(b['hparams'], sort_keys=True)}")
    direction = "lower" if b["smaller_is_better"] else "higher"
    print(f"best {b['metric']}: {b['best_validation']:.6g} ({direction} is better)")
    print(f"checkpoint:      {b['checkpoint_uuid'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
