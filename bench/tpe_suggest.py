"""The CPU one ``sampler: tpe`` proposal costs the master, with the Gaussian-process refinement.

A random search with ``sampler: tpe`` over four hyperparameters (a double, an int, a log and a
categorical), one trial at a time, each reporting one loss of a noisy bowl; every trial's end
asks the searcher for the next trial, which is when the sampler fits its model. Printed: the
median and the 90th percentile of the CPU (``time.process_time``) of the proposals made once the
refinement runs (``GP_MIN_PER_DIM * dims + 2`` trials with a loss, up to ``GP_MAX`` of them in a
fit), over ``--seeds`` searches of ``--trials`` trials. ``--gp FILE`` runs the same searches a
second time with another ``gp.py`` (e.g. an older one from git) in place of det's, so a change's
before and after are measured in one run.

    .venv/bin/python bench/tpe_suggest.py [--seeds 3] [--trials 60] [--gp OLD_GP_PY]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import statistics
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from det.master.searcher import new_searcher, tpe

SPACE = {
    "d": {"type": "double", "minval": -2, "maxval": 2},
    "i": {"type": "int", "minval": 1, "maxval": 50},
    "l": {"type": "log", "base": 10, "minval": -5, "maxval": -1},
    "c": {"type": "categorical", "vals": ["a", "b", "c", "d"]},
}


def loss(h: dict[str, Any], seed: int) -> float:
    noise = random.Random(seed).gauss(0, 0.02)
    return float(
        ((h["d"] - 1.2) / 4) ** 2
        + ((h["i"] - 40) / 49) ** 2
        + ((math.log10(h["l"]) + 4) / 4) ** 2
        + (0.0 if h["c"] == "c" else 0.3)
        + noise
    )


def proposals(seed: int, trials: int) -> list[float]:
    """CPU seconds of each proposal made with the model (the refinement's start on)."""
    config = {
        "name": "random",
        "metric": "loss",
        "max_trials": trials,
        "max_concurrent_trials": 1,
        "sampler": "tpe",
    }
    searcher = new_searcher(config, SPACE, seed)
    live = [a for a in searcher.initial_trials() if hasattr(a, "hparams")]
    start = max(tpe.GP_MIN, tpe.GP_MIN_PER_DIM * len(SPACE) + 2)
    reported, out = 0, []
    while live:
        trial = live.pop(0)
        searcher.trial_created(trial.request_id)
        searcher.validation_completed(trial.request_id, loss(trial.hparams, trial.seed), 1)
        reported += 1
        began = time.process_time()
        new = [a for a in searcher.trial_exited(trial.request_id) if hasattr(a, "hparams")]
        spent = time.process_time() - began
        if new and reported >= start:
            out.append(spent)
        live += new
    return out


def load_gp(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location("gp_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure(label: str, seeds: int, trials: int) -> None:
    samples = [s for seed in range(seeds) for s in proposals(seed, trials)]
    samples.sort()
    p90 = samples[int(0.9 * (len(samples) - 1))]
    print(
        f"{label:12} {len(samples):4d} proposals with the model: median"
        f" {1000 * statistics.median(samples):6.1f} CPU-ms, p90 {1000 * p90:6.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=60)
    ap.add_argument("--gp", type=Path, default=None, help="another gp.py, measured after det's")
    args = ap.parse_args()
    print(f"{args.seeds} searches of {args.trials} trials, 4 hyperparameters, one at a time")
    measure("det's gp", args.seeds, args.trials)
    if args.gp is not None:
        own = tpe.gp
        tpe.gp = load_gp(args.gp)  # type: ignore[assignment]
        try:
            measure(args.gp.name, args.seeds, args.trials)
        finally:
            tpe.gp = own


if __name__ == "__main__":
    main()
