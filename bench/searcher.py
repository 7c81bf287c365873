"""adaptive_asha versus random search on the same synthetic learning curves and budget.

For each seed: random search trains ``--random-trials`` trials to ``max_time``; adaptive_asha
(standard mode) gets the same total budget. Printed per seed: random's final best, the budget
random needed to first reach it, and the budget adaptive_asha needed to reach it (or "never").
Goal: adaptive_asha needs at most 1/3 of random's budget (median over seeds).

    python bench/searcher.py [--seeds 10] [--random-trials 64] [--max-time 81]
"""

from __future__ import annotations

import argparse
import statistics
import time

from det.master.searcher import new_searcher
from det.master.searcher.simulate import SimResult, SyntheticCurve, simulate

HPARAMS = {
    "lr": {"type": "log", "minval": -5, "maxval": -1},
    "dropout": {"type": "double", "minval": 0.0, "maxval": 0.5},
    "width": {"type": "int", "minval": 16, "maxval": 512},
    "optimizer": {"type": "categorical", "vals": ["sgd", "adam", "adamw"]},
    "global_batch_size": 64,
}


MODES = ("aggressive", "standard", "conservative")


def run_random(seed: int, args: argparse.Namespace) -> SimResult:
    curve = SyntheticCurve(HPARAMS, seed=seed, noise=0.01, crossing=args.crossing)
    cfg = {
        "name": "random",
        "metric": "validation_loss",
        "max_trials": args.random_trials,
        "max_concurrent_trials": args.concurrency,
    }
    return simulate(new_searcher(cfg, HPARAMS, seed), curve, default_length=args.max_time)


def run_asha(seed: int, mode: str, budget: float, args: argparse.Namespace) -> SimResult:
    curve = SyntheticCurve(HPARAMS, seed=seed, noise=0.01, crossing=args.crossing)
    cfg = {
        "name": "adaptive_asha",
        "metric": "validation_loss",
        "time_metric": "batches",
        "max_time": args.max_time,
        "divisor": 3,
        "mode": mode,
        "max_trials": args.random_trials * 20,
        "max_concurrent_trials": args.concurrency,
    }
    return simulate(new_searcher(cfg, HPARAMS, seed), curve, max_budget=budget)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--random-trials", type=int, default=64)
    parser.add_argument("--max-time", type=float, default=81.0)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--crossing", type=float, default=0.5)
    args = parser.parse_args()

    print(
        f"budget = total batches trained. random: {args.random_trials} trials x {args.max_time:g} "
        f"batches; adaptive_asha (divisor 3) capped at random's total budget. "
        f"max_concurrent_trials {args.concurrency}, curve crossing {args.crossing:g}, "
        f"{args.seeds} seeds"
    )
    print("columns: random's final best; budget random needed to reach it; per mode, the budget "
          "adaptive_asha needed to reach it and the ratio to random's")  # fmt: skip
    header = f"{'seed':>4} {'best':>7} {'random':>7}"
    for mode in MODES:
        header += f" {mode[:12]:>12} {'ratio':>5}"
    print(header)
    ratios: dict[str, list[float]] = {m: [] for m in MODES}
    needs: dict[str, list[float]] = {m: [] for m in (*MODES, "random")}
    started = time.perf_counter()
    for seed in range(args.seeds):
        rand = run_random(seed, args)
        assert rand.best_metric is not None
        rand_need = rand.budget_to_reach(rand.best_metric)
        assert rand_need is not None
        needs["random"].append(rand_need)
        line = f"{seed:>4} {rand.best_metric:7.4f} {rand_need:7.0f}"
        for mode in MODES:
            need = run_asha(seed, mode, rand.budget, args).budget_to_reach(rand.best_metric)
            ratio = need / rand_need if need is not None else float("inf")
            ratios[mode].append(ratio)
            needs[mode].append(need if need is not None else float("inf"))
            line += (
                f" {need:12.0f} {ratio:5.2f}" if need is not None else f" {'never':>12} {'-':>5}"
            )
        print(line)
    elapsed = time.perf_counter() - started
    random_median = statistics.median(needs["random"])
    print(f"{'random':>12}: median budget to reach its best {random_median:.0f}")
    for mode in MODES:
        rs = ratios[mode]
        median_need = statistics.median(needs[mode])
        print(
            f"{mode:>12}: median budget {median_need:.0f} "
            f"(ratio of medians {median_need / random_median:.3f}); "
            f"median per-seed ratio {statistics.median(rs):.3f}; "
            f"<= 1/3 in {sum(1 for r in rs if r <= 1 / 3)}/{len(rs)} seeds; "
            f"never reached in {sum(1 for r in rs if r == float('inf'))}/{len(rs)}"
        )
    print(f"simulation time: {elapsed:.2f} s")


if __name__ == "__main__":
    main()
