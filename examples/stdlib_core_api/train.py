"""Core API example with no dependencies but the standard library: it runs in any image that
has a ``python3`` (3.8 or newer), such as Debian's own, because the agent brings det's harness.

Fits ``y = 3x + 1`` by stochastic gradient descent, reports training and validation metrics,
checkpoints its two weights, resumes from the latest checkpoint and honours preemption.
Off-cluster: ``python3 train.py`` (with det importable).
"""

from __future__ import annotations

import json
import logging
import platform
import random
from typing import Any

import det
from det import core

logger = logging.getLogger("stdlib_core_api_example")


def make_data(n: int, seed: int) -> list[tuple[float, float]]:
    rng = random.Random(seed)
    return [
        (x, 3.0 * x + 1.0 + rng.gauss(0.0, 0.05)) for x in (rng.uniform(-1, 1) for _ in range(n))
    ]


def mse(w: float, b: float, data: list[tuple[float, float]]) -> float:
    return sum((w * x + b - y) ** 2 for x, y in data) / len(data)


def main() -> None:
    info = det.get_cluster_info()
    hp: dict[str, Any] = {"learning_rate": 0.1, "report_every": 10, "checkpoint_every": 50}
    hp.update(info.trial.hparams if info and info.trial else {})
    train, val = make_data(512, 1), make_data(128, 2)
    w, b, steps, saved_at = 0.0, 0.0, 0, -1
    logger.info("python %s, det from %s", platform.python_version(), det.__file__)
    with core.init() as ctx:
        if info and info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                state = json.loads((path / "state.json").read_text())
            w, b, steps = state["w"], state["b"], state["steps_completed"]
            saved_at = steps
            logger.info("resumed at step %d", steps)

        def save() -> None:
            nonlocal saved_at
            if saved_at == steps:
                return
            saved_at = steps
            md = {"steps_completed": steps}
            with ctx.checkpoint.store_path(md) as (path, _storage_id):
                (path / "state.json").write_text(json.dumps({"w": w, "b": b, **md}))

        for op in ctx.searcher.operations():
            while steps < op.length:
                x, y = train[steps % len(train)]
                err = w * x + b - y
                w -= float(hp["learning_rate"]) * 2 * err * x
                b -= float(hp["learning_rate"]) * 2 * err
                steps += 1
                if steps % int(hp["report_every"]) == 0:
                    ctx.train.report_training_metrics(steps, {"loss": mse(w, b, train)})
                    if ctx.preempt.should_preempt():
                        save()
                        return
                if steps % int(hp["checkpoint_every"]) == 0:
                    save()
            val_loss = mse(w, b, val)
            ctx.train.report_validation_metrics(steps, {"validation_loss": val_loss})
            save()
            op.report_completed(val_loss)
        logger.info("done: w=%.3f b=%.3f", w, b)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    main()
