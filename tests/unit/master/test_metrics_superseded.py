"""metrics_superseded.plan: the ingest skips looking for superseded rows only when the trial's
row proves none would move, and looks only once per run that reports in order."""

from __future__ import annotations

import random

from det.master.services.metrics_superseded import plan

Row = tuple[int, str, int]  # run, group, total_batches


def _moves(rows: set[Row], run: int, group: str, total: int) -> set[Row]:
    """Determined's rule: earlier runs' rows of the same group at or past, others past."""
    return {(r, g, t) for r, g, t in rows if r < run and (t > total or (t == total and g == group))}


def test_a_skipped_look_never_misses_a_row_over_random_histories() -> None:
    rng = random.Random(39)
    for _ in range(300):
        rows: set[Row] = set()
        clean = (0, 0)
        for _ in range(40):
            run = rng.randint(0, 4)
            reports = [(rng.choice(["training", "validation"]), rng.randint(0, 10) * 100)]
            if rng.random() < 0.3:
                reports.append((rng.choice(["training", "validation"]), rng.randint(0, 10) * 100))
            totals = [t for _, t in reports]
            fate = plan(*clean, {run: (min(totals), max(totals))})
            firsts: dict[str, int] = {}
            for g, t in reports:
                firsts[g] = min(firsts.get(g, t), t)
            moved = set().union(*(_moves(rows, run, g, t) for g, t in firsts.items()))
            assert fate.look or not moved, (clean, run, reports, moved)
            if fate.look:
                rows -= moved
            rows |= {(run, g, t) for g, t in reports}
            clean = (fate.clean_run, fate.clean_from)
            # What the trial's row says holds of the rows now.
            assert not {x for x in rows if x[0] < clean[0] and x[2] >= clean[1]}, (clean, rows)


def test_a_run_reporting_in_order_looks_at_its_first_report_only() -> None:
    clean = (1, 501)
    looks = []
    for total in range(300, 1001, 100):
        fate = plan(*clean, {2: (total, total)})
        looks.append(fate.look)
        clean = (fate.clean_run, fate.clean_from)
    assert looks == [True] + [False] * 7
    assert clean == (2, 301)


def test_several_runs_in_one_batch_look_and_forget() -> None:
    fate = plan(3, 700, {2: (100, 200), 3: (800, 900)})
    assert (fate.look, fate.clean_run, fate.clean_from) == (True, 0, 0)
    assert not plan(3, 700, {}).look
