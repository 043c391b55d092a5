"""MXNet's single-machine kvstore: whether a job has one, and where its optimizer runs.

The rules of ``mxnet.model._create_kvstore`` (apache/mxnet python/mxnet/model.py), which both
Module and gluon's Trainer call:

- one device on one machine (``local`` or ``device``): no kvstore at all. The optimizer updates
  the weights on the GPU itself; no gradient crosses PCIe, nothing runs on the host's CPU.
- ``local`` when any array has more than 16M elements: ``update_on_kvstore = False``. The
  kvstore only sums the GPUs' gradients in CPU memory and copies the sum back; every GPU then
  runs the optimizer on its own copy (VGG-16's 103M-element fc6 and AlexNet's 38M-element fc6
  take this path).
- ``local`` otherwise: the kvstore sums on the CPU and the CPU runs the optimizer; ``device``
  sums and updates on the GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from simscale.comm.communicator import Communicator, Done
from simscale.model.worker import HostCopies

# ``max_size > 1024 * 1024 * 16`` in _create_kvstore: above it, 'local' stops updating on the CPU.
UPDATE_ON_KVSTORE_MAX_ELEMENTS = 16 * 1024 * 1024

SINGLE_MACHINE_MODES = ("local", "device")


def has_kvstore(mode: str, job_gpus: int) -> bool:
    """Whether the job creates a kvstore: every job but a single-machine one on one device."""
    return not (mode in SINGLE_MACHINE_MODES and job_gpus == 1)


def updates_on_cpu(mode: str, array_elements: Iterable[int]) -> bool:
    """Whether a single-machine kvstore runs the optimizer on the host's CPU."""
    return mode == "local" and max(array_elements, default=0) <= UPDATE_ON_KVSTORE_MAX_ELEMENTS


class NoKVStore:
    """One device on one machine: the GPU updates its own weights, nothing is copied."""

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        done(0.0)


class LocalKVStore:
    """A single machine's kvstore: each key summed over the host's GPUs on its copy engine,
    updated on the CPU where it runs the optimizer, and copied back to every GPU."""

    def __init__(
        self, copies: HostCopies, key_bytes: Sequence[float], update_s_per_byte: float
    ) -> None:
        self.copies = copies
        self.key_bytes = key_bytes
        self.update_s_per_byte = update_s_per_byte  # 0 where the GPUs update (not on the CPU)

    def communicate(self, iteration: int, key: int, done: Done) -> None:
        copies, nbytes = self.copies, self.key_bytes[key]
        cost = (
            copies.reduce_s(nbytes) + nbytes * self.update_s_per_byte + copies.broadcast_s(nbytes)
        )
        copies.queue.run(cost).callbacks.append(lambda _e: done(0.0))


def local_kvstore(
    mode: str,
    job_gpus: int,
    array_elements: Sequence[int],
    copies: HostCopies,
    key_bytes: Sequence[float],
    update_ns_per_byte: float,
) -> Communicator:
    """The kvstore ``mode`` gives a single-machine job of ``job_gpus`` GPUs, as MXNet decides
    it (module doc); ``update_ns_per_byte``: the CPU optimizer's cost where it runs there."""
    if not has_kvstore(mode, job_gpus):
        return NoKVStore()
    on_cpu = updates_on_cpu(mode, array_elements)
    return LocalKVStore(copies, key_bytes, update_ns_per_byte * 1e-9 if on_cpu else 0.0)
