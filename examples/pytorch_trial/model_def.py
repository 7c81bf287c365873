"""A PyTorchTrial (Determined's trial-class API) that learns y = 3x - 1 from noisy samples.

Runs unchanged on det with the legacy ``model_def:RegressionTrial`` entrypoint; the task image
needs the official ``determined`` package (det's torch image carries it). With
``resources.slots_per_trial: 2`` (up to 8) it trains distributed (one chief), on one agent or
several.
"""

from __future__ import annotations

from typing import Any

import torch
from determined import pytorch
from torch import nn


def _samples(n: int, seed: int) -> torch.utils.data.TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, generator=g) * 2 - 1
    y = 3 * x - 1 + 0.05 * torch.randn(n, 1, generator=g)
    return torch.utils.data.TensorDataset(x, y)


class RegressionTrial(pytorch.PyTorchTrial):
    def __init__(self, context: pytorch.PyTorchTrialContext) -> None:
        self.context = context
        self.model = context.wrap_model(nn.Linear(1, 1))
        self.optimizer = context.wrap_optimizer(
            torch.optim.SGD(self.model.parameters(), lr=float(context.get_hparam("lr")))
        )
        self.loss = nn.MSELoss()
        self._weights_shown_at = -1

    def build_training_data_loader(self) -> pytorch.DataLoader:
        return pytorch.DataLoader(
            _samples(512, seed=1), batch_size=self.context.get_per_slot_batch_size(), shuffle=True
        )

    def build_validation_data_loader(self) -> pytorch.DataLoader:
        # 8 batches: every rank gets some on up to 8 slots (the harness shards them by rank,
        # and a rank with none fails "validation_loader is empty").
        return pytorch.DataLoader(_samples(128, seed=2), batch_size=16)

    def train_batch(self, batch: Any, epoch_idx: int, batch_idx: int) -> dict[str, Any]:
        x, y = batch
        loss = self.loss(self.model(x), y)
        self.context.backward(loss)
        self.context.step_optimizer(self.optimizer)
        return {"loss": loss}

    def evaluate_batch(self, batch: Any) -> dict[str, Any]:
        trained = self.context.current_train_batch()
        if trained != self._weights_shown_at:
            # One line per validation on each rank (a distributed trial's ranks hold the same).
            self._weights_shown_at = trained
            weights = [float(v) for p in self.model.parameters() for v in p.detach().flatten()]
            print(f"weights after {trained} batches: {weights}", flush=True)
        x, y = batch
        return {"validation_loss": self.loss(self.model(x), y)}
