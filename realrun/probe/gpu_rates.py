"""Per-layer GPU compute and host<->device copy rates, when this host has CUDA.

Compute: ``realrun.training.compute_profile`` (the profile emulated compute replays) on the
model and batch asked for. Copies: pinned host memory to the device and back, by size. Without
CUDA both are recorded as skipped, with the reason.
"""

from __future__ import annotations

import time
from typing import Any

from realrun.probe.hosts import HostSet
from realrun.records.probe_record import Measurement

COPY_SIZES_BYTES = (1 << 20, 16 << 20, 64 << 20)
NO_CUDA = "no CUDA device on host {host} (torch.cuda.is_available() is False)"


def measure(model: str, batch: int, reps: int) -> dict:
    """Agent end: the compute profile and the copy rates, or why not."""
    import torch

    if not torch.cuda.is_available():
        return {"skipped": "no CUDA"}
    from realrun.training import compute_profile, torch_models

    profile = compute_profile.measure(torch_models, model, batch, "cuda", iterations=reps)
    copies: dict[str, dict[str, list[float]]] = {"h2d": {}, "d2h": {}}
    for size in COPY_SIZES_BYTES:
        host = torch.empty(size, dtype=torch.uint8).pin_memory()
        dev = torch.empty(size, dtype=torch.uint8, device="cuda")
        for way in ("h2d", "d2h"):
            rates = []
            for i in range(reps + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                (dev.copy_(host, non_blocking=True) if way == "h2d" else host.copy_(dev))
                torch.cuda.synchronize()
                if i:
                    rates.append(size / (time.perf_counter() - t0))
            copies[way][str(size)] = rates
    return {
        "device": torch.cuda.get_device_name(0),
        "profile": profile.to_dict(),
        "copies_Bps": copies,
    }


def run(hosts: HostSet, model: str, batch: int, reps: int, host: int = 0) -> dict[str, Measurement]:
    proc = hosts.start(host, "gpu", "--model", model, "--batch", batch, "--reps", reps)
    res: dict[str, Any] = hosts.result(host, proc, 300.0, "the GPU probe")
    name = hosts.hosts[host].name
    if "skipped" in res:
        reason = NO_CUDA.format(host=name)
        return {
            "gpu_layer_forward_s": Measurement(unit="s", skipped=reason),
            "gpu_copy_h2d_Bps": Measurement(unit="bytes/s", skipped=reason),
            "gpu_copy_d2h_Bps": Measurement(unit="bytes/s", skipped=reason),
        }
    prof = res["profile"]
    ctx = {"host": name, "device": res["device"], "model": model, "batch": batch}
    out = {
        "gpu_iteration_s": Measurement(
            unit="s",
            samples=(
                sum(x["gap_before_s"] + x["forward_s"] for x in prof["layers"])
                + prof["forward_tail_s"]
                + prof["backward_s"],
            ),
            context={**ctx, "profile": prof},
        ),
        "gpu_layer_forward_s": Measurement(
            unit="s",
            samples=tuple(x["forward_s"] for x in prof["layers"]),
            context={**ctx, "per": "layer, forward order (medians)"},
        ),
    }
    for way in ("h2d", "d2h"):
        big = str(max(COPY_SIZES_BYTES))
        out[f"gpu_copy_{way}_Bps"] = Measurement(
            unit="bytes/s",
            samples=tuple(res["copies_Bps"][way][big]),
            context={**ctx, "size_bytes": int(big), "by_size": res["copies_Bps"][way]},
        )
    return out
