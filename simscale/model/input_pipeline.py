"""The host's input pipeline: CPU cores reading and decoding the next batches of images.

With synthetic data (tf_cnn_benchmarks' default, MXNet's benchmark_score.py) batches are
already tensors and cost nothing. Training on real images, every sample is read, JPEG-decoded
and augmented on the host's CPU cores while the GPUs work on the previous batch, so a host
can never train faster than its cores decode: a ceiling per host that does not move with the
network or the number of hosts. Published scaling tables show it as a flat per-host rate
(MXNet's p2.16xlarge AlexNet rows, DLPerf's mixed-precision ResNet-50 runs).

The model: one loader per worker, its share of the host's cores producing one batch every
``samples x decode_us_per_sample / cores`` seconds, at most ``PREFETCH_BATCHES`` ahead; an
iteration starts its forward pass only when its batch is ready. A training script gives each
process a fixed number of decoding threads (``training.data_threads``): one process on a big
host then decodes with those threads only, however many cores stand idle beside it.
"""

from __future__ import annotations

import simpy

from simscale.des.serial import SerialQueue
from simscale.des.utilization import Utilization, busy_fraction
from simscale.model.cluster import Layout
from simscale.spec.costs import CostModel
from simscale.spec.scenario import Scenario

# Batches a loader decodes ahead of the GPUs: MXNet's ImageRecordIter prefetch_buffer
# default, 4 (mxnet.apache.org/api/python/docs/api/mxnet/io, ImageRecordIter parameters).
PREFETCH_BATCHES = 4


class InputPipeline:
    """Worker ``rank``'s data loader, decoding ``iterations`` batches in order."""

    def __init__(
        self, env: simpy.Environment, rank: int, batch_decode_s: float, iterations: int
    ) -> None:
        self.env = env
        self.rank = rank
        self.batch_decode_s = batch_decode_s
        # The decoding cores, busy while a batch is made.
        self.queue = SerialQueue(env, f"worker{rank}.input")
        self.ready = simpy.Store(env, capacity=PREFETCH_BATCHES)
        env.process(self._decode(iterations))

    def _decode(self, iterations: int) -> simpy.events.ProcessGenerator:
        for it in range(iterations):
            yield self.queue.run(self.batch_decode_s)
            yield self.ready.put(it)  # waits while PREFETCH_BATCHES are ready and unused

    def next_batch(self) -> simpy.Event:
        """Fires when the next batch is decoded and handed to the GPUs."""
        return self.ready.get()

    def reset_counters(self) -> None:
        self.queue.reset()

    def utilization(self, t0: float, t1: float) -> list[Utilization]:
        what = f"worker {self.rank} input pipeline (host CPU cores decoding images)"
        return [busy_fraction(self.queue, t0, t1, "input", what)]


def worker_loader(
    env: simpy.Environment,
    scenario: Scenario,
    costs: CostModel,
    layout: Layout,
    rank: int,
    iterations: int,
) -> InputPipeline | None:
    """Worker ``rank``'s input pipeline when it trains on images: its share of its host's CPU
    cores decoding its GPUs' batches (None for synthetic data). An all-reduce worker stands
    for one process per GPU (Horovod's ranks), each with its own loader threads."""
    s, decode_us = scenario, costs.decode_us_per_sample
    if s.training.data != "images" or decode_us == 0:
        return None
    host = layout.hosts[layout.worker_hosts[rank]]
    gpus = layout.gpus_of(rank)
    processes = gpus if s.kvstore.mode == "allreduce" else 1
    sharing = layout.worker_hosts.count(host.index) * processes
    cores = loader_cores(host.cpu_cores, sharing, processes, s.training.data_threads)
    batch_s = batch_decode_s(gpus * s.training.batch_per_gpu, decode_us, cores)
    return InputPipeline(env, rank, batch_s, iterations)


def batch_decode_s(samples: int, decode_us_per_sample: float, cores: float) -> float:
    """Seconds ``cores`` CPU cores take to read, decode and augment ``samples`` images."""
    return samples * decode_us_per_sample * 1e-6 / cores


def loader_cores(
    host_cores: int, processes_on_host: int, processes: int, data_threads: int | None
) -> float:
    """CPU cores decoding for ``processes`` training processes of a host running
    ``processes_on_host``: each process gets its fair share of the cores, and no more than the
    ``data_threads`` its script starts (None: no limit but the share)."""
    share = host_cores / processes_on_host
    per_process = share if data_threads is None else min(float(data_threads), share)
    return per_process * processes
