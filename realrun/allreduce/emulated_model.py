"""Emulated GPUs for DDP and FSDP ranks: a torch model whose layers replay compute times.

The parameter-server path replays compute as a timeline (``realrun.training.emulated_compute``);
DDP and FSDP cannot be driven that way, because their communication is triggered from inside
autograd: DDP's reducer all-reduces a bucket when the AccumulateGrad hooks of its parameters
have fired, FSDP all-gathers a unit in its forward and backward pre-hooks and reduce-scatters
it in its post-backward hook. So the device is emulated one level down: one ``nn.Module`` per
layer of the zoo's model spec, holding real parameters of that layer's arrays' sizes (in the
zoo's key order, so DDP's buckets and FSDP's flat parameters are the real ones), whose forward
(``TimedLayer``, a custom autograd.Function) sleeps the layer's forward seconds and whose
backward sleeps its backward seconds and returns fixed, seeded gradients for its parameters.
The hooks then fire at the moments a GPU would produce them; the process group, the bytes and
the optimizer step are real. The activations passed between layers are a one-element tensor:
their cost is already in the replayed time.

Times come from ``realrun.compute_times`` as the parameter-server path takes them
(``emulated_times_source``): ``model`` from simscale's compute model for the scenario's GPU
(``emulated_compute.emulated_device``), ``measured`` from a profile of the real torch model
timed on this machine (``realrun.training.compute_profile``), both times the dilation.

FSDP wraps every layer the zoo names as a block (``EmulatedBlock``; the rest stays in the root
unit), the units simscale models (``simscale.zoo.fsdp_units.root_layers``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from realrun.training.compute_profile import ComputeProfile
from realrun.training.emulated_compute import synthetic_gradients
from simscale.zoo import ModelSpec
from simscale.zoo.fsdp_units import root_layers

INIT_STD = 0.02  # GPT-2's initialiser; the values only need to be finite and shared


@dataclass(frozen=True)
class LayerSeconds:
    """Per-layer forward and backward seconds one rank replays (already dilated)."""

    forward_s: tuple[float, ...]
    backward_s: tuple[float, ...]
    source: str  # where they come from, for the run record
    dilation: float

    @property
    def iteration_s(self) -> float:
        """One forward and backward with free communication, in this machine's seconds."""
        return sum(self.forward_s) + sum(self.backward_s)


def modelled_seconds(scenario: Any, host: int) -> LayerSeconds:
    """Layer times of one GPU of worker host ``host`` from simscale's compute model (the
    emulated parameter-server worker's, ``emulated_compute.emulated_device``), times the
    dilation. A DDP/FSDP rank drives one GPU, so no host copies are replayed."""
    from realrun.training.emulated_compute import TIMES_SOURCE
    from simscale.model.cluster import layout
    from simscale.model.compute import layer_times
    from simscale.spec.costs import CostModel
    from simscale.spec.hardware import GPUS

    lay = layout(scenario)
    gpu = GPUS[str(lay.hosts[lay.worker_hosts[host]].gpu)].name
    tr, d = scenario.training, scenario.realrun.dilation
    times = layer_times(
        scenario.model_spec(), gpu, tr.compute_precision, tr.batch_per_gpu, CostModel()
    )
    return LayerSeconds(
        tuple(float(t) * d for t in times.forward_s),
        tuple(float(t) * d for t in times.backward_s),
        f"{TIMES_SOURCE} ({gpu})",
        d,
    )


def measured_seconds(spec: ModelSpec, profile: ComputeProfile, dilation: float) -> LayerSeconds:
    """A measured profile's times regrouped by the spec's layers, times ``dilation``.

    A layer's forward is that of the torch modules owning its keys (with the parameter-free
    work before each); the loss goes to the last layer. Its backward ends when the last of its
    gradients is ready, so it is the time from the later layer's end to that moment (a tied
    weight, such as GPT-2's token embedding, is ready when its last use's gradient is)."""
    if len(profile.key_elements) != len(spec.arrays):
        raise ValueError(
            f"compute profile of {profile.model!r} has {len(profile.key_elements)} arrays, "
            f"the model spec {len(spec.arrays)}"
        )
    layers = len(spec.layers)
    forward = [0.0] * layers
    for lt in profile.layers:
        forward[spec.array_layer[lt.keys[0]]] += lt.gap_before_s + lt.forward_s
    forward[-1] += profile.forward_tail_s
    ready = [0.0] * layers
    for key, layer in enumerate(spec.array_layer):
        ready[layer] = max(ready[layer], profile.grad_ready_s[key])
    backward, done = [0.0] * layers, 0.0
    for layer in reversed(range(layers)):
        end = max(done, ready[layer])
        backward[layer], done = end - done, end
    backward[0] += max(0.0, profile.backward_s - done)
    source = f"realrun.training.compute_profile on {profile.device} (batch {profile.batch})"
    return LayerSeconds(
        tuple(t * dilation for t in forward),
        tuple(t * dilation for t in backward),
        source,
        dilation,
    )


def rank_seconds(scenario: Any, host: int, profile_path: str | None) -> LayerSeconds:
    """The times a rank on worker host ``host`` replays, from where ``realrun.compute_times``
    says (a measured profile is written by the job, ``realrun.launching.job``)."""
    from realrun.training.emulated_compute import emulated_times_source

    if emulated_times_source(scenario) == "model":
        return modelled_seconds(scenario, host)
    if profile_path is None:
        raise ValueError(
            "realrun.compute_times is measured, but no --compute-profile was given "
            "(realrun run measures one; or use realrun.compute_times=model)"
        )
    import json
    from pathlib import Path

    profile = ComputeProfile.from_dict(json.loads(Path(profile_path).read_text()))
    return measured_seconds(scenario.model_spec(), profile, scenario.realrun.dilation)


class TimedLayer(torch.autograd.Function):
    """Forward sleeps ``forward_s``; backward sleeps ``backward_s`` and returns ``grads``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, layer: EmulatedLayer, *params: Tensor) -> Tensor:  # type: ignore[override]
        ctx.layer = layer
        time.sleep(layer.forward_s)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        layer: EmulatedLayer = ctx.layer
        time.sleep(layer.backward_s)
        layer.backward_calls += 1
        return (grad, None, *layer.fixed_grads)


class EmulatedLayer(nn.Module):
    """One zoo layer: its arrays as real flat parameters, its compute as replayed time."""

    def __init__(
        self,
        elements: Sequence[int],
        forward_s: float,
        backward_s: float,
        fixed_grads: Sequence[Tensor],
    ) -> None:
        super().__init__()
        self.arrays = nn.ParameterList(
            nn.Parameter(torch.empty(n).normal_(std=INIT_STD)) for n in elements
        )
        self.forward_s, self.backward_s = forward_s, backward_s
        self.fixed_grads = tuple(fixed_grads)
        self.forward_calls = 0
        self.backward_calls = 0

    def forward(self, x: Tensor) -> Tensor:
        self.forward_calls += 1
        return TimedLayer.apply(x, self, *self.arrays)


class EmulatedBlock(EmulatedLayer):
    """A layer the zoo names as a block: one FSDP unit of its own."""


class EmulatedModel(nn.Module):
    """The zoo model's layers in order; ``parameters()`` lists the zoo's arrays in key order."""

    def __init__(self, layers: Sequence[EmulatedLayer]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    def fixed_gradients(self) -> list[Tensor]:
        """The gradients backward yields, in key order."""
        return [g for layer in self.layers for g in layer.fixed_grads]  # type: ignore[union-attr]


class EmulatedModels:
    """What ``DataParallelTrainer`` asks of ``realrun.training.torch_models`` (build, batch,
    loss, FSDP's unit class), for one rank of an emulated device."""

    fsdp_units: frozenset[type[nn.Module]] = frozenset({EmulatedBlock})

    def __init__(self, spec: ModelSpec, seconds: LayerSeconds, seed: int, rank: int) -> None:
        if len(seconds.forward_s) != len(spec.layers):
            raise ValueError(
                f"{len(seconds.forward_s)} layer times for a model of {len(spec.layers)} layers"
            )
        self.spec, self.seconds, self.seed, self.rank = spec, seconds, seed, rank

    def build(self, name: str) -> EmulatedModel:
        """The model (parameters from torch's global RNG, as every rank seeds it alike) with
        this rank's gradients, seeded by (seed, rank): the same every step and every run."""
        spec = self.spec
        # The parameter-server emulated worker's gradients, drawn in the same key order.
        drawn = iter(synthetic_gradients([a.elements for a in spec.arrays], self.seed, self.rank))
        root = set(root_layers(spec))
        layers = []
        for index, layer in enumerate(spec.layers):
            elements = [a.elements for a in layer.arrays]
            grads = [torch.from_numpy(next(drawn)) for _ in elements]
            # No block named (a CNN): root is empty and FSDP wraps layer by layer.
            cls = EmulatedLayer if index in root else EmulatedBlock
            layers.append(
                cls(elements, self.seconds.forward_s[index], self.seconds.backward_s[index], grads)
            )
        return EmulatedModel(layers)

    def synthetic_batch(
        self, name: str, batch_size: int, generator: torch.Generator | None = None, **_: Any
    ) -> tuple[Tensor, Tensor]:
        """A one-element activation: the batch's size is in the replayed times."""
        return torch.zeros(1), torch.zeros(1)

    @staticmethod
    def loss(outputs: Tensor, labels: Tensor) -> Tensor:
        return (outputs - labels).sum()

    def describe(self) -> dict[str, Any]:
        """The compute side of the environment, for the run record."""
        s = self.seconds
        return {
            "compute": "emulated",
            "compute_times_source": s.source,
            "device_name": "emulated",
            "time_dilation": s.dilation,
            "emulated_compute_s_per_iteration": s.iteration_s / s.dilation,
            "layers": len(s.forward_s),
        }
