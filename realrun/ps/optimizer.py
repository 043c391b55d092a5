"""The server-side optimizer: SGD with momentum and weight decay, MXNet's ``sgd_mom_update``.

MXNet's rule (https://mxnet.apache.org/versions/1.6/api/r/docs/api/mx.symbol.sgd_mom_update.html,
kernel SGDMomKernel in src/operator/optimizer_op-inl.h):

    state  = momentum * state - lr * (wd * weight + rescale_grad * grad)
    weight = weight + state

Weight decay is applied inside the momentum (not decoupled), and the gradient is rescaled
before use; data-parallel training sets ``rescale_grad = 1 / number of GPUs`` so that the sum
the server aggregates becomes an average (MXNet's Module does the same with 1/batch).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

# What a CONFIGURE may set: the scenario's ranges (simscale.spec.scenario.OptimizerConfig); the
# gradient rescale is 1 / GPUs, at least 1 / (64 GPUs x 100,000 hosts).
_RANGES = {
    "learning_rate": (1e-12, 1000.0),
    "momentum": (0.0, 0.999),
    "weight_decay": (0.0, 1.0),
    "rescale_grad": (1e-8, 1.0),
}


@dataclass(frozen=True)
class SGD:
    """Hyper-parameters of the update; ``momentum == 0`` keeps no state (MXNet's sgd_update)."""

    learning_rate: float
    momentum: float = 0.0
    weight_decay: float = 0.0
    rescale_grad: float = 1.0

    def update(
        self, weight: np.ndarray, grad: np.ndarray, state: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """The new weight (a new array: the old one may still be on its way to a worker) and
        the new state (updated in place when there is one)."""
        step = grad * np.float32(self.rescale_grad)
        if self.weight_decay:
            step += np.float32(self.weight_decay) * weight
        step *= np.float32(self.learning_rate)
        if self.momentum == 0.0:
            return weight - step, None
        if state is None:
            state = np.zeros_like(weight)
        state *= np.float32(self.momentum)
        state -= step
        return weight + state, state

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SGD:
        """From a CONFIGURE body; ValueError for a value outside the scenario's ranges
        (simscale.spec.scenario.OptimizerConfig), so no peer can set ``learning_rate: 1e30``."""
        values = {}
        for name, (low, high) in _RANGES.items():
            value = data[name]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(f"optimizer {name}: got {value!r}, expected a number")
            if not (math.isfinite(value) and low <= value <= high):
                raise ValueError(f"optimizer {name}: got {value!r}, expected [{low}, {high}]")
            values[name] = float(value)
        return cls(**values)
