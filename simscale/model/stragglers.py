"""Stragglers: a synchronous job waits, every iteration, for the slowest of its GPUs.

GPUs of one model do not all finish an iteration at the same time: clocks boost and throttle
with temperature and power, the host's threads are preempted, a kernel waits for memory. In an
asynchronous job that costs nothing (each worker goes at its own pace); in a synchronous one
every iteration ends when the LAST gradient arrives, so the job runs at the pace of the
expected maximum of N iteration times, which grows with N like sqrt(2 ln N). This is why
synchronous SGD is said to suffer stragglers (Chen et al., "Revisiting Distributed Synchronous
SGD", arXiv:1604.00981, 2016) and why published scaling curves lose efficiency slowly but
steadily with GPU count even where the network is far from busy.

The model: each GPU's compute time per iteration is its mean times (1 + sigma z), z standard
normal and independent across GPUs and iterations; a job that synchronises N GPUs pays, on
every GPU, the expected maximum, (1 + sigma E[max of N z]). Taking the expectation rather than
drawing keeps the prediction deterministic and every worker alike (the symmetric fast path
still applies); ``simulation.compute_jitter`` remains for drawing per-GPU factors explicitly.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

# Modes whose iteration ends when every worker's gradient has arrived. DDP and ZeRO/FSDP end
# their steps the same way but are left out on purpose: the only fitted sigma (real-v1's, from
# the 2016-2019 CNN campaigns) would cost a compute-bound 8-GPU BERT job 8.5% where NVIDIA's
# rows show ~1.4%, and no transformer campaign but NVIDIA's can teach one (a sigma per model
# family is open: docs/transformer-judgement.md).
SYNCHRONOUS_MODES = ("dist_sync", "dist_sync_device", "allreduce", "local", "device")


@lru_cache(maxsize=256)
def expected_max_of_normals(n: int) -> float:
    """E[max of n independent standard normals]: 0 for one, 1/sqrt(pi) for two, ~sqrt(2 ln n)
    for many. Integrated numerically: E = integral of x n phi(x) Phi(x)^(n-1) dx."""
    if n < 1:
        raise ValueError(f"expected at least one draw, got {n}")
    if n == 1:
        return 0.0
    # math.erfc, not scipy.special: importing scipy.special costs ~0.2 s of every `predict`.
    x, dx = np.linspace(-12.0, 12.0, 24_001, retstep=True)
    cdf = np.array([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x])  # > 0 down to -12
    log_density = math.log(n) - 0.5 * x * x - 0.5 * math.log(2 * math.pi) + (n - 1) * np.log(cdf)
    return float(np.sum(x * np.exp(log_density)) * dx)


def synchronised_gpus(mode: str, total_gpus: int, gpus_per_worker: int) -> int:
    """How many GPUs one iteration waits for: every GPU of the job when it is synchronous, the
    worker's own GPUs (summed on its host before a push) when it is asynchronous."""
    return total_gpus if mode in SYNCHRONOUS_MODES else gpus_per_worker


def straggler_factor(sigma: float, gpus: int) -> float:
    """Factor on every GPU's compute time of an iteration that waits for ``gpus`` GPUs, each
    with relative spread ``sigma``: 1 + sigma E[max of gpus normals]."""
    if sigma == 0.0:
        return 1.0
    return 1.0 + sigma * expected_max_of_normals(gpus)


def gpu_jitter(rng: np.random.Generator, sigma: float, gpus: int, iterations: int) -> np.ndarray:
    """Drawn per-iteration factors on a host's compute time (``simulation.compute_jitter``):
    the host waits for its slowest GPU, the max of per-GPU log-normal factors; all ones for
    sigma 0, drawing nothing."""
    if sigma == 0:
        return np.ones(iterations)
    return rng.lognormal(0.0, sigma, size=(iterations, gpus)).max(axis=1)
