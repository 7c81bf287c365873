"""The core_api example's training loop written against the official ``determined`` 0.38.1
package (``pip install determined==0.38.1``): the compatibility test that scripts written for
Determined run unchanged on det. Off-cluster: ``python3 train.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

import determined as det
import torch
from determined import core
from model import make_data, make_model
from torch import nn

logger = logging.getLogger("official_client_example")

DEFAULT_HPARAMS: dict[str, Any] = {
    "learning_rate": 0.05,
    "hidden_size": 32,
    "batch_size": 32,
    "max_steps": 100,
    "report_every": 10,
    "validate_every": 50,
    "checkpoint_every": 50,
}


def main(max_steps_offcluster: int) -> None:
    torch.set_num_threads(1)
    info = det.get_cluster_info()
    hp = {
        **DEFAULT_HPARAMS,
        **(info.trial.hparams if info else {"max_steps": max_steps_offcluster}),
    }
    torch.manual_seed(info.trial.trial_seed if info else 0)
    model = make_model(int(hp["hidden_size"]))
    # Plain SGD, written out as the core_api example's (torch.optim's first use imports
    # torch._dynamo: about 0.8 s of CPU at every start of a trial).
    lr = float(hp["learning_rate"])
    x, y, val_x, val_y = make_data()
    bs = int(hp["batch_size"])
    max_steps = int(hp["max_steps"])

    # MANUAL: no automatic TensorBoard writer (it needs the tensorboard package in the image).
    with core.init(tensorboard_mode=core.TensorboardMode.MANUAL) as ctx:
        steps = 0
        if info and info.latest_checkpoint:
            with ctx.checkpoint.restore_path(info.latest_checkpoint) as path:
                model.load_state_dict(torch.load(path / "model.pt"))
                steps = json.loads((path / "state.json").read_text())["steps_completed"]
            logger.info("resumed at step %d", steps)

        def save() -> None:
            md = {"steps_completed": steps}
            with ctx.checkpoint.store_path(md) as (path, storage_id):
                torch.save(model.state_dict(), path / "model.pt")
                (path / "state.json").write_text(json.dumps(md))
            logger.info("saved checkpoint %s at step %d", storage_id, steps)

        def validate() -> None:
            with torch.no_grad():
                loss = nn.functional.mse_loss(model(val_x), val_y).item()
            ctx.train.report_validation_metrics(steps, {"validation_loss": loss, "batches": steps})

        losses: list[float] = []
        while steps < max_steps:
            idx = torch.arange(steps * bs, steps * bs + bs) % len(x)
            loss = nn.functional.mse_loss(model(x[idx]), y[idx])
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    if p.grad is not None:
                        p.sub_(p.grad, alpha=lr)
                        p.grad = None
            losses.append(loss.item())
            steps += 1
            if steps % int(hp["report_every"]) == 0:
                ctx.train.report_training_metrics(steps, {"loss": sum(losses) / len(losses)})
                ctx.train.report_progress(min(1.0, steps / max_steps))
                losses = []
                if ctx.preempt.should_preempt():
                    save()
                    return
            if steps % int(hp["validate_every"]) == 0:
                validate()
            if steps % int(hp["checkpoint_every"]) == 0:
                save()
        if steps % int(hp["validate_every"]) != 0:
            validate()
        if steps % int(hp["checkpoint_every"]) != 0:
            save()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-steps", type=int, default=100)
    main(parser.parse_args().max_steps)
