"""Per-layer compute times of a model measured on this machine's device, for emulated compute.

When a scenario has more workers than the machine has devices (an emulated cluster of many
hosts on one box), realrun can replay the compute instead of running it: every worker then
waits, layer by layer, as long as the real device took, and pushes gradients of the real sizes
at the moments backward really produced them, so the network and the servers see the real
traffic pattern. The profile is measured here, once, on the real model and device.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any

import torch


@dataclass(frozen=True)
class LayerTime:
    """One module that owns parameters, in forward order: the compute before it that belongs
    to no such module (activations, pooling), then its own forward."""

    keys: tuple[int, ...]
    gap_before_s: float
    forward_s: float


@dataclass(frozen=True)
class ComputeProfile:
    """Median per-layer times of one replica's iteration (batch ``batch`` on ``device``)."""

    model: str
    batch: int
    device: str
    threads: int
    layers: tuple[LayerTime, ...]
    forward_tail_s: float  # after the last layer: the loss
    grad_ready_s: tuple[float, ...]  # per key: seconds after backward began
    backward_s: float
    key_elements: tuple[int, ...]

    @property
    def iteration_s(self) -> float:
        forward = sum(x.gap_before_s + x.forward_s for x in self.layers) + self.forward_tail_s
        return forward + self.backward_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ComputeProfile:
        layers = tuple(
            LayerTime(tuple(x["keys"]), float(x["gap_before_s"]), float(x["forward_s"]))
            for x in d["layers"]
        )
        return cls(
            str(d["model"]),
            int(d["batch"]),
            str(d["device"]),
            int(d["threads"]),
            layers,
            float(d["forward_tail_s"]),
            tuple(map(float, d["grad_ready_s"])),
            float(d["backward_s"]),
            tuple(map(int, d["key_elements"])),
        )


def measure(
    models: ModuleType,
    model: str,
    batch: int,
    device: str = "cpu",
    iterations: int = 5,
    warmup: int = 2,
    seed: int = 0,
) -> ComputeProfile:
    """Run forward/backward ``warmup + iterations`` times and keep each time's median."""
    dev = torch.device(device)
    torch.manual_seed(seed)
    with torch.device(dev):
        net = models.build(model)
    params = [p for _, p in net.named_parameters()]
    key_of = {id(p): k for k, p in enumerate(params)}
    owners = [(m, tuple(key_of[id(p)] for p in m.parameters(recurse=False))) for m in net.modules()]
    owners = [(m, keys) for m, keys in owners if keys]
    x, y = models.synthetic_batch(model, batch, torch.Generator().manual_seed(seed), dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    stamps: dict[str, float] = {}
    ready: dict[int, float] = {}

    def stamp(name: str):
        def hook(*_: Any) -> None:
            sync()
            stamps[name] = time.perf_counter()

        return hook

    handles = []
    for i, (m, _) in enumerate(owners):
        handles.append(m.register_forward_pre_hook(stamp(f"pre{i}")))
        handles.append(m.register_forward_hook(stamp(f"post{i}")))
    for k, p in enumerate(params):
        handles.append(
            p.register_post_accumulate_grad_hook(
                lambda p, k=k: ready.__setitem__(k, time.perf_counter())
            )
        )

    samples: list[tuple[list[float], list[float], float, list[float], float]] = []
    try:
        for it in range(warmup + iterations):
            net.zero_grad(set_to_none=True)
            sync()
            start = time.perf_counter()
            loss = models.loss(net(x), y)
            sync()
            forward_end = time.perf_counter()
            loss.backward()
            sync()
            end = time.perf_counter()
            if it < warmup:
                continue
            gaps, fwd, last = [], [], start
            for i in range(len(owners)):
                gaps.append(max(0.0, stamps[f"pre{i}"] - last))
                fwd.append(stamps[f"post{i}"] - stamps[f"pre{i}"])
                last = stamps[f"post{i}"]
            ready_s = [ready.get(k, end) - forward_end for k in range(len(params))]
            samples.append((gaps, fwd, forward_end - last, ready_s, end - forward_end))
    finally:
        for h in handles:
            h.remove()

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    layers = tuple(
        LayerTime(keys, med([s[0][i] for s in samples]), med([s[1][i] for s in samples]))
        for i, (_, keys) in enumerate(owners)
    )
    return ComputeProfile(
        model=model,
        batch=batch,
        device=str(dev),
        threads=torch.get_num_threads(),
        layers=layers,
        forward_tail_s=med([s[2] for s in samples]),
        grad_ready_s=tuple(med([s[3][k] for s in samples]) for k in range(len(params))),
        backward_s=med([s[4] for s in samples]),
        key_elements=tuple(p.numel() for p in params),
    )
