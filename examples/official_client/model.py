"""A tiny regression problem: generated data and a small MLP (CPU, seconds per trial)."""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 8
TRAIN_SIZE = 2048
VAL_SIZE = 512


def make_data(seed: int = 1234) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The same data for every trial: y = sin(x·w) + 0.1·noise."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(FEATURES, 1, generator=g)
    x = torch.randn(TRAIN_SIZE + VAL_SIZE, FEATURES, generator=g)
    y = torch.sin(x @ w) + 0.1 * torch.randn(TRAIN_SIZE + VAL_SIZE, 1, generator=g)
    return x[:TRAIN_SIZE], y[:TRAIN_SIZE], x[TRAIN_SIZE:], y[TRAIN_SIZE:]


def make_model(hidden_size: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(FEATURES, hidden_size),
        nn.Tanh(),
        nn.Linear(hidden_size, hidden_size),
        nn.Tanh(),
        nn.Linear(hidden_size, 1),
    )
