"""Core API example: train a small model, report metrics, checkpoint, resume, honour preemption.

Runs on a det cluster (single, random, adaptive_asha or distributed configs) and off-cluster:
``python3 train.py`` (metrics logged, checkpoints in ./checkpoints).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from typing import Any

import torch
from model import make_data, make_model
from torch import nn

import det
from det import core

logger = logging.getLogger("core_api_example")
#: The least sleep a paced run takes (``batch_seconds``): batches are paced in steps of it.
PACE_QUANTUM = 0.05

DEFAULT_HPARAMS: dict[str, Any] = {
    "learning_rate": 0.05,
    "hidden_size": 32,
    "batch_size": 32,
    "report_every": 10,
    "validate_every": 50,
    "checkpoint_every": 100,
    # The least wall time a batch takes on average (0: as fast as the CPU goes): stands in for
    # a heavier model, e.g. to watch a long run or a preemption without burning a core.
    "batch_seconds": 0.0,
}


class Trainer:
    def __init__(self, core_context: core.Context, hparams: dict[str, Any], seed: int) -> None:
        self.ctx = core_context
        self.hp = {**DEFAULT_HPARAMS, **hparams}
        self.dist = core_context.distributed
        torch.manual_seed(seed)
        self.model = make_model(int(self.hp["hidden_size"]))
        if self.dist.size > 1:
            # Data parallel, written out: every rank starts from rank 0's weights and, after each
            # backward pass, averages its gradients with the other ranks' in one all-reduce, as
            # DistributedDataParallel does with a model this small. DDP's constructor imports
            # torch._dynamo: about 0.7 s of CPU at every start of every rank.
            self._broadcast_weights()
        # Plain SGD, written out: torch.optim's first use imports torch._dynamo (about 0.8 s of
        # CPU at every start of a trial), more than this model's whole training costs.
        self.lr = float(self.hp["learning_rate"])
        self.x, self.y, self.val_x, self.val_y = make_data()
        self.steps_completed = 0
        self.saved_at = -1
        self.last_val_loss = float("nan")

    # --- checkpoints ----------------------------------------------------------------------

    def save(self) -> None:
        if self.saved_at == self.steps_completed:
            return
        self.saved_at = self.steps_completed
        if self.dist.rank == 0:
            md = {"steps_completed": self.steps_completed}
            with self.ctx.checkpoint.store_path(md) as (path, storage_id):
                torch.save(self.model.state_dict(), path / "model.pt")
                (path / "state.json").write_text(json.dumps(md))
            logger.info("saved checkpoint %s at step %d", storage_id, self.steps_completed)
        self.dist.allgather(None)  # everyone continues once the checkpoint exists

    def restore(self, storage_id: str) -> None:
        with self.ctx.checkpoint.restore_path(storage_id) as path:
            self.model.load_state_dict(torch.load(path / "model.pt"))
            self.steps_completed = json.loads((path / "state.json").read_text())["steps_completed"]
        self.saved_at = self.steps_completed
        logger.info("resumed from %s at step %d", storage_id, self.steps_completed)

    # --- data parallel ---------------------------------------------------------------------

    def _broadcast_weights(self) -> None:
        params = [p.detach() for p in self.model.parameters()]
        flat = torch.cat([p.reshape(-1) for p in params])
        torch.distributed.broadcast(flat, src=0)
        _unflatten(flat, params)

    def _average_gradients(self) -> None:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        flat = torch.cat([g.reshape(-1) for g in grads])
        torch.distributed.all_reduce(flat)  # the sum over the ranks
        flat /= self.dist.size
        _unflatten(flat, grads)

    # --- training -------------------------------------------------------------------------

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        bs = int(self.hp["batch_size"])
        start = (step * bs) % len(self.x)
        idx = torch.arange(start, start + bs) % len(self.x)
        idx = idx[self.dist.rank :: self.dist.size]  # each worker takes its share
        return self.x[idx], self.y[idx]

    def sgd_step(self, loss: torch.Tensor) -> None:
        """One step of SGD on ``loss``, as ``torch.optim.SGD`` without momentum takes it (so the
        optimizer keeps no state to checkpoint)."""
        loss.backward()
        if self.dist.size > 1:
            self._average_gradients()
        with torch.no_grad():
            for p in self.model.parameters():
                if p.grad is not None:
                    p.sub_(p.grad, alpha=self.lr)
                    p.grad = None

    def validate(self) -> float:
        with torch.no_grad():
            loss = nn.functional.mse_loss(self.model(self.val_x), self.val_y).item()
        self.last_val_loss = loss
        if self.dist.rank == 0:
            self.ctx.train.report_validation_metrics(
                self.steps_completed,
                {"validation_loss": loss, "batches": self.steps_completed},
            )
        return loss

    def pace(self, pace: float, since: float, steps: int) -> tuple[float, int]:
        """Sleeps what the batches since ``(since, steps)`` are ahead of ``pace`` seconds each,
        once that is at least PACE_QUANTUM: a sleep and its wake-up cost about what a batch of
        this model costs, so one sleep a batch doubles the CPU of a paced run. A run that fell
        behind (a busy machine) starts a new schedule instead of catching up at full speed.
        Returns the schedule to keep."""
        now = time.monotonic()
        ahead = since + (self.steps_completed - steps) * pace - now
        if ahead >= PACE_QUANTUM:
            time.sleep(ahead)
        elif ahead < -PACE_QUANTUM:
            return now, self.steps_completed
        return since, steps

    def train_until(self, max_steps: int) -> bool:
        """Train to ``max_steps`` batches. Returns False if preempted (checkpoint saved)."""
        losses: list[float] = []
        pace = float(self.hp["batch_seconds"])
        paced_from, paced_steps = time.monotonic(), self.steps_completed
        while self.steps_completed < max_steps:
            x, y = self.batch(self.steps_completed)
            loss = nn.functional.mse_loss(self.model(x), y)
            self.sgd_step(loss)
            losses.append(loss.item())
            self.steps_completed += 1
            if pace > 0:
                paced_from, paced_steps = self.pace(pace, paced_from, paced_steps)
            s = self.steps_completed
            if s % int(self.hp["report_every"]) == 0 and self.dist.rank == 0:
                self.ctx.train.report_training_metrics(s, {"loss": sum(losses) / len(losses)})
                self.ctx.train.report_progress(min(1.0, s / max_steps))
                losses = []
            if s % int(self.hp["validate_every"]) == 0:
                self.validate()
            if s % int(self.hp["checkpoint_every"]) == 0:
                self.save()
            # should_preempt() is collective (all ranks call it in step) and cheap: the
            # long-poll runs in a background thread.
            if s % int(self.hp["report_every"]) == 0 and self.ctx.preempt.should_preempt():
                logger.info("preempted at step %d: checkpointing and exiting", s)
                self.save()
                return False
        if self.steps_completed % int(self.hp["validate_every"]) != 0:
            self.validate()
        self.save()
        return True


def _unflatten(flat: torch.Tensor, into: list[torch.Tensor]) -> None:
    """Copies consecutive slices of ``flat`` into the tensors ``into``, in order."""
    offset = 0
    with torch.no_grad():
        for t in into:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()


def main(max_steps_offcluster: int) -> None:
    torch.set_num_threads(1)
    info = det.get_cluster_info()
    distributed = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        torch.distributed.init_process_group("gloo")
        distributed = core.DistributedContext.from_torch_distributed()

    with core.init(distributed=distributed) as core_context:
        trial = info.trial if info else None
        hparams = trial.hparams if trial else {}
        searcher_cfg: dict[str, Any] = (trial.config.get("searcher") or {}) if trial else {}
        trainer = Trainer(core_context, hparams, seed=trial.trial_seed if trial else 0)
        if info and info.latest_checkpoint:
            trainer.restore(info.latest_checkpoint)

        if searcher_cfg.get("max_length") is not None:
            # 0.38 semantics: one operation whose length is searcher.max_length.
            for op in core_context.searcher.operations():
                if not trainer.train_until(op.length):
                    return
                if core_context.distributed.rank == 0:
                    op.report_progress(trainer.steps_completed)
                    op.report_completed(trainer.last_val_loss)
        else:
            # Adaptive searchers stop a trial early through the preemption signal;
            # the full length is the searcher's max_time (time_metric: batches).
            max_steps = int(searcher_cfg.get("max_time") or max_steps_offcluster)
            trainer.train_until(max_steps)

    if distributed is not None:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--max-steps",
        type=int,
        default=200,
        help="training length when the searcher config gives none (e.g. off-cluster)",
    )
    args = parser.parse_args()
    main(args.max_steps)
