"""Temporary stand-in for ``realrun.torch_models`` (branch ``zoo``) until it lands on main.

Same interface (``build``, ``synthetic_batch``, ``loss``) for the one model the CPU tests need,
the zoo's 784-512-256-10 ``mlp``. Delete this file once ``realrun/torch_models.py`` is merged.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class MLP(nn.Module):
    """784-512-256-10 perceptron, as ``simscale.zoo.get('mlp')``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 256)
        self.fc3 = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def build(name: str) -> nn.Module:
    if name != "mlp":
        raise KeyError(f"no torch model {name!r} before realrun.torch_models lands; known: mlp")
    return MLP()


def synthetic_batch(
    name: str,
    batch_size: int,
    generator: torch.Generator | None = None,
    device: torch.device | str = "cpu",
) -> tuple[Tensor, Tensor]:
    build(name)  # the name check
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    x = torch.randn((batch_size, 784), generator=g)
    y = torch.randint(0, 10, (batch_size,), generator=g)
    return x.to(device), y.to(device)


def loss(outputs: Tensor, labels: Tensor) -> Tensor:
    return F.cross_entropy(outputs, labels)
