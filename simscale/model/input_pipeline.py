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

# Batches a loader decodes ahead of the GPUs: MXNet's ImageRecordIter prefetch_buffer
# default, 4 (mxnet.apache.org/api/python/docs/api/mxnet/io, ImageRecordIter parameters).
PREFETCH_BATCHES = 4


class InputPipeline:
    """One worker's data loader, decoding ``iterations`` batches in order."""

    def __init__(
        self, env: simpy.Environment, name: str, batch_decode_s: float, iterations: int
    ) -> None:
        self.env = env
        self.batch_decode_s = batch_decode_s
        self.queue = SerialQueue(env, name)  # the decoding cores, busy while a batch is made
        self.ready = simpy.Store(env, capacity=PREFETCH_BATCHES)
        env.process(self._decode(iterations))

    def _decode(self, iterations: int) -> simpy.events.ProcessGenerator:
        for it in range(iterations):
            yield self.queue.run(self.batch_decode_s)
            yield self.ready.put(it)  # waits while PREFETCH_BATCHES are ready and unused

    def next_batch(self) -> simpy.Event:
        """Fires when the next batch is decoded and handed to the GPUs."""
        return self.ready.get()


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
