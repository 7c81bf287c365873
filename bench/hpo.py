"""Search quality: det's searchers against Optuna's pruners and samplers at equal budget.

Each problem is a noise-free objective ``f(x)`` on the unit cube, seen through learning curves
``y(x, t)`` that equal ``f(x)`` plus noise at ``t = R`` and are worse earlier. Every method gets
``budget`` x R epochs, trains one trial at a time and samples its first configurations uniformly;
a trial the budget cuts off before ``R`` does not count as trained to ``R``. Score of a run: the
true regret ``f(x*) - f_min`` of ``x*``, the configuration with the best observed value at ``R``
among the trials trained to ``R``. Printed per method: median and IQR over seeds (lower is better).

The methods that sample uniformly (random search, the plain rule, det's searchers without a
sampler) try the same configurations in the same order on the same noisy curves for a seed: det's
seeded stream. Their differences on a seed come from their decisions only, so each is also printed
paired with the plain rule, seed by seed over ``--paired-seeds`` (they cost milliseconds a run):
the mean difference with a 95% interval and the count of seeds better / equal / worse.

Problems:

* ``hartmann6``: Hartmann-6 (minimum -3.32237), ``y = h6(x) + 0.1 (0.5 + x0) ((R/t)^(0.3 + 0.7 x1)
  - 1) + N(0, 0.05^2)``: the early penalty depends on two coordinates, so early ranks mislead a
  little.
* ``hartmann3_lr``: Hartmann-3 plus a "learning rate" ``x3`` that finishes best at 0.25 but learns
  slower the smaller it is: ``y = h3(x0..x2) + (x3 - 0.25)^2 + (1 - x3)^2 ((R/t)^0.5 - 1) /
  (R^0.5 - 1) + N(0, 0.05^2)``. Fast learners lead at the first rungs and finish worse: curves
  cross.

    python bench/hpo.py [--seeds 20] [--first-seed 0] [--paired-seeds 200] [--problems hartmann6,hartmann3_lr] [--methods ...] [-j 2]

Needs the dev extra (Optuna) for the Optuna rows; ``--methods`` without them runs without it.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import random
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from det.master.searcher import new_searcher
from det.master.searcher.base import SearchContext
from det.master.searcher.hparams import parse_hyperparameters
from det.master.searcher.simulate import simulate

R = 81  # epochs of a full trial
RUNGS = (1, 3, 9, 27, 81)  # every method's report points (powers of 3 up to R)
NOISE = 0.05

# -- problems -------------------------------------------------------------------------------

_H6_ALPHA = (1.0, 1.2, 3.0, 3.2)
_H6_A = (
    (10, 3, 17, 3.5, 1.7, 8),
    (0.05, 10, 17, 0.1, 8, 14),
    (3, 3.5, 1.7, 10, 17, 8),
    (17, 8, 0.05, 10, 0.1, 14),
)
_H6_P = (
    (0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886),
    (0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991),
    (0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650),
    (0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381),
)
_H3_A = ((3.0, 10, 30), (0.1, 10, 35), (3.0, 10, 30), (0.1, 10, 35))
_H3_P = (
    (0.3689, 0.1170, 0.2673),
    (0.4699, 0.4387, 0.7470),
    (0.1091, 0.8732, 0.5547),
    (0.0381, 0.5743, 0.8828),
)


def _hartmann(x: list[float], a: Any, p: Any) -> float:
    return -sum(
        alpha
        * math.exp(-sum(aij * (xj - pij) ** 2 for aij, xj, pij in zip(ai, x, pi, strict=True)))
        for alpha, ai, pi in zip(_H6_ALPHA, a, p, strict=True)
    )


@dataclass(frozen=True)
class Problem:
    name: str
    dims: int
    f_min: float
    objective: Callable[[list[float]], float]  # noise-free final value
    excess: Callable[[list[float], float], float]  # how much worse than final at epoch t

    def curve(self, x: list[float], t: float, noise_key: str) -> float:
        # float(t): the same draw whether epoch t arrives as 3 (the bench's loops) or 3.0 (det's
        # rung times), so a configuration gets the same curve from every method.
        eps = random.Random(f"{noise_key}:{float(t)!r}").gauss(0.0, NOISE)
        return self.objective(x) + self.excess(x, t) + eps


def _h6_excess(x: list[float], t: float) -> float:
    return 0.1 * (0.5 + x[0]) * (float((R / t) ** (0.3 + 0.7 * x[1])) - 1)


def _h3_lr_objective(x: list[float]) -> float:
    return _hartmann(x[:3], _H3_A, _H3_P) + (x[3] - 0.25) ** 2


def _h3_lr_excess(x: list[float], t: float) -> float:
    return (1 - x[3]) ** 2 * (math.sqrt(R / t) - 1) / (math.sqrt(R) - 1)


PROBLEMS = {
    "hartmann6": Problem(
        "hartmann6", 6, -3.32237, lambda x: _hartmann(x, _H6_A, _H6_P), _h6_excess
    ),
    "hartmann3_lr": Problem("hartmann3_lr", 4, -3.86278, _h3_lr_objective, _h3_lr_excess),
}


# -- one run = (problem, method, seed) -> regret -------------------------------------------


@dataclass
class Budget:
    """Epochs left; a trial is cut off (and not counted as trained to R) when they run out."""

    left: float

    def train(self, epochs: float) -> bool:
        if self.left < epochs:
            self.left = 0.0
            return False
        self.left -= epochs
        return True


def _regret(problem: Problem, finals: list[tuple[float, list[float]]]) -> float:
    """True regret of the configuration with the best observed value at R."""
    if not finals:
        return math.nan
    _, x = min(finals, key=lambda fx: fx[0])
    return problem.objective(x) - problem.f_min


def _space(problem: Problem) -> dict[str, Any]:
    return {f"x{i}": {"type": "double", "minval": 0.0, "maxval": 1.0} for i in range(problem.dims)}


def _point(problem: Problem, hparams: dict[str, Any]) -> list[float]:
    return [hparams[f"x{i}"] for i in range(problem.dims)]


def _configurations(problem: Problem, seed: int) -> Iterator[tuple[list[float], str]]:
    """The uniform configurations det's searchers draw for ``seed``, in order, each with its
    trial's noise key: the methods that sample uniformly (random search, the plain rule and
    det's searchers without a sampler) try the same configurations on the same curves, so
    their per-seed differences come from their decisions alone (common random numbers)."""
    ctx = SearchContext(parse_hyperparameters(_space(problem)), seed)
    while True:
        create = ctx.create()
        yield _point(problem, create.hparams), f"{seed}:{create.seed}"


def run_random(problem: Problem, seed: int, budget: float) -> float:
    configurations = _configurations(problem, seed)
    finals = []
    for _ in range(int(budget)):
        x, key = next(configurations)
        finals.append((problem.curve(x, R, key), x))
    return _regret(problem, finals)


def run_plain_asha(problem: Problem, seed: int, budget: float, floor: bool = False) -> float:
    """The textbook stopping rule: a trial continues past a rung iff it is in the top third of
    the values recorded at that rung so far (itself included): rank < n / 3. ``floor``:
    Determined's count instead, rank < max(floor(n / 3), 1)."""
    configurations = _configurations(problem, seed)
    left = Budget(budget * R)
    rungs: list[list[float]] = [[] for _ in RUNGS]
    finals = []
    while left.left > 0:
        x, key = next(configurations)
        done = 0
        for i, t in enumerate(RUNGS):
            if not left.train(t - done):
                break
            done = t
            y = problem.curve(x, t, key)
            if t == R:
                finals.append((y, x))
                break
            rungs[i].append(y)
            rank = sorted(rungs[i]).index(y)
            keep = max(len(rungs[i]) // 3, 1) if floor else len(rungs[i]) / 3
            if rank >= keep:
                break
    return _regret(problem, finals)


def run_det(problem: Problem, seed: int, budget: float, searcher: dict[str, Any]) -> float:
    config: dict[str, Any] = {"metric": "loss", "max_concurrent_trials": 1, **searcher}
    if searcher["name"] in ("adaptive_asha", "async_halving"):
        # Only the ASHA methods stop trials by time (the others' trials run to default_length).
        config.update(time_metric="epochs", max_time=R)

    def curve(h: dict[str, Any], t: float, trial_seed: int) -> float:
        return problem.curve(_point(problem, h), t, f"{seed}:{trial_seed}")

    result = simulate(
        new_searcher(config, _space(problem), seed),
        curve,
        default_length=R,
        max_budget=budget * R,
    )
    trials = list(result.trials)
    if result.budget > budget * R and trials:
        # The simulator stops after the event that spent the budget; with one trial at a time
        # that is the last trial's, which ran past the budget: not trained to R in time, as the
        # other methods' Budget cuts it off.
        trials.pop()
    finals = [
        (curve(t.hparams, R, t.seed), _point(problem, t.hparams))
        for t in trials
        if t.trained >= R * (1 - 1e-9)
    ]
    return _regret(problem, finals)


def run_optuna(problem: Problem, seed: int, budget: float, sampler: str, pruner: str) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    samplers: dict[str, Callable[[], Any]] = {
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
    }
    pruners: dict[str, Callable[[], Any]] = {
        "none": lambda: optuna.pruners.NopPruner(),
        "sh": lambda: optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3),
        "hb": lambda: optuna.pruners.HyperbandPruner(
            min_resource=1, max_resource=R, reduction_factor=3
        ),
    }
    study = optuna.create_study(sampler=samplers[sampler](), pruner=pruners[pruner]())
    left = Budget(budget * R)
    finals = []
    while left.left > 0:
        trial = study.ask()
        x = [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(problem.dims)]
        done, value = 0, math.nan
        state = optuna.trial.TrialState.PRUNED
        for t in RUNGS:
            if not left.train(t - done):
                state = optuna.trial.TrialState.FAIL
                break
            done = t
            value = problem.curve(x, t, f"{seed}:{trial.number}")
            if t == R:
                finals.append((value, x))
                state = optuna.trial.TrialState.COMPLETE
                break
            trial.report(value, t)
            if trial.should_prune():
                break
        if state is optuna.trial.TrialState.COMPLETE:
            study.tell(trial, value)
        else:
            study.tell(trial, state=state)
    return _regret(problem, finals)


def _det(searcher: dict[str, Any]) -> Callable[[Problem, int, float], float]:
    return lambda problem, seed, budget: run_det(problem, seed, budget, searcher)


def _optuna(sampler: str, pruner: str) -> Callable[[Problem, int, float], float]:
    return lambda problem, seed, budget: run_optuna(problem, seed, budget, sampler, pruner)


# Plenty of trials: the budget, not max_trials, ends every det search.
_ASHA = {"name": "adaptive_asha", "divisor": 3, "max_trials": 5000}
METHODS: dict[str, Callable[[Problem, int, float], float]] = {
    "random": run_random,
    "plain_asha": run_plain_asha,
    "optuna_random_sh": _optuna("random", "sh"),
    "optuna_random_hb": _optuna("random", "hb"),
    "optuna_tpe": _optuna("tpe", "none"),
    "optuna_tpe_sh": _optuna("tpe", "sh"),
    "optuna_tpe_hb": _optuna("tpe", "hb"),
    "det_random": _det({"name": "random", "max_trials": 5000}),
    "det_aggressive": _det({**_ASHA, "mode": "aggressive"}),
    "det_standard": _det({**_ASHA, "mode": "standard"}),
    "det_conservative": _det({**_ASHA, "mode": "conservative"}),
    "det_random_tpe": _det({"name": "random", "max_trials": 5000, "sampler": "tpe"}),
    "det_aggressive_tpe": _det({**_ASHA, "mode": "aggressive", "sampler": "tpe"}),
    "det_standard_tpe": _det({**_ASHA, "mode": "standard", "sampler": "tpe"}),
}


# Methods that try the configurations of ``_configurations`` (uniform, det's seeded stream): their
# regrets pair seed by seed with the plain rule's.
PAIRED = ("random", "det_random", "det_aggressive", "det_standard", "det_conservative")


def _job(args: tuple[str, str, int, float]) -> tuple[str, str, int, float, float]:
    problem, method, seed, budget = args
    started = time.process_time()
    regret = METHODS[method](PROBLEMS[problem], seed, budget)
    return problem, method, seed, regret, time.process_time() - started


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def _print_paired(problem: str, methods: list[str], results: list[Any]) -> None:
    """Per seed, method minus plain rule on the same configurations and curves: the mean with a
    95% interval (normal approximation), and on how many seeds the method was better, equal
    (usually: the same configuration chosen) or worse."""
    plain = {r[2]: r[3] for r in results if r[0] == problem and r[1] == "plain_asha"}
    if not plain or not methods:
        return
    print(
        f"  paired with plain_asha over {len(plain)} seeds (same configurations and noise): "
        "method - plain_asha"
    )
    print(f"  {'method':<22} {'mean':>7} {'95% CI':>17} {'median':>7}  better/equal/worse")
    for method in methods:
        diffs = [r[3] - plain[r[2]] for r in results if r[0] == problem and r[1] == method]
        mean = statistics.fmean(diffs)
        half = (
            1.96 * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan
        )
        better = sum(d < 0 for d in diffs)
        worse = sum(d > 0 for d in diffs)
        print(
            f"  {method:<22} {mean:+7.3f} [{mean - half:+7.3f}, {mean + half:+7.3f}] "
            f"{statistics.median(diffs):+7.3f}  {better}/{len(diffs) - better - worse}/{worse}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--first-seed", type=int, default=0, help="seeds first-seed .. first-seed + seeds - 1"
    )
    parser.add_argument(
        "--paired-seeds",
        type=int,
        default=200,
        help="seeds of the paired comparison with plain_asha (its methods cost milliseconds)",
    )
    parser.add_argument("--budget", type=float, default=40, help="in full trials (x R epochs)")
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("-j", "--jobs", type=int, default=1, help="worker processes")
    args = parser.parse_args()
    problems = args.problems.split(",")
    methods = args.methods.split(",")
    paired = [m for m in methods if m in PAIRED]
    if "plain_asha" not in methods:
        paired = []

    def seeds(method: str) -> int:
        if method in paired or (paired and method == "plain_asha"):
            return max(args.seeds, args.paired_seeds)
        return args.seeds

    jobs = [
        (p, m, s, args.budget)
        for p in problems
        for m in methods
        for s in range(args.first_seed, args.first_seed + seeds(m))
    ]
    started = time.perf_counter()
    if args.jobs > 1:
        with multiprocessing.Pool(args.jobs) as pool:
            results = pool.map(_job, jobs, chunksize=1)
    else:
        results = [_job(j) for j in jobs]
    elapsed = time.perf_counter() - started

    print(
        f"budget {args.budget:g} x R = {args.budget * R:g} epochs, R = {R}, one trial at a time; "
        f"true regret of the best-at-R configuration; {args.seeds} seeds"
    )
    for problem in problems:
        print(f"\n{problem}: {'method':<22} {'median':>7} {'q1':>7} {'q3':>7} {'cpu s/run':>9}")
        for method in methods:
            rows = [
                r
                for r in results
                if r[0] == problem and r[1] == method and r[2] < args.first_seed + args.seeds
            ]
            regrets = [r[3] for r in rows]
            q1, q2, q3 = _quartiles(regrets)
            cpu = statistics.median(r[4] for r in rows)
            print(f"{'':<{len(problem) + 1}} {method:<22} {q2:7.3f} {q1:7.3f} {q3:7.3f} {cpu:9.2f}")
        _print_paired(problem, paired, results)
    print(f"\nwall time: {elapsed:.1f} s")


if __name__ == "__main__":
    main()
