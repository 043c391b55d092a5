"""Horovod's tensor fusion: which tensors every rank has ready, packed into buffers.

Horovod's background thread wakes once per cycle (HOROVOD_CYCLE_TIME, 5 ms by default), agrees
with the other ranks on the tensors that are ready on *all* of them, and all-reduces those in
fused buffers of at most HOROVOD_FUSION_THRESHOLD bytes (64 MiB) (docs/tensor-fusion.rst).
The agreement here is one MIN all-reduce of a readiness bit per tensor, which is what Horovod's
response cache does for tensors it has seen before (horovod/common/response_cache.cc): every
rank gets the same answer, so every rank then issues the same collectives in the same order,
whatever its own timing was. The packing rule is the simulator's (``simscale.comm.allreduce``):
tensors in order, a buffer closed when the next tensor would overflow it, a tensor larger than
the threshold alone in its buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

# The scenario's fusion_mb in bytes, as the simulator converts it (simscale.simulator), so the
# buffers measured here are the buffers predicted there (Horovod's own 64 MB default is MiB).
BYTES_PER_MB = 1e6


def fuse(keys: Sequence[int], nbytes: Sequence[int], fusion_bytes: float) -> list[list[int]]:
    """``keys`` (in the order they are to be reduced) packed into buffers of at most
    ``fusion_bytes`` (``nbytes[k]`` is key k's size)."""
    buffers: list[list[int]] = []
    total = 0
    for k in keys:
        if buffers and total + nbytes[k] <= fusion_bytes:
            buffers[-1].append(k)
            total += nbytes[k]
        else:
            buffers.append([k])
            total = nbytes[k]
    return buffers


def agreed_order(agreed: Sequence[int]) -> list[int]:
    """Keys whose agreed (MIN over ranks) readiness bit is set, last key first: the order
    backward produces gradients in, so the buffer holding the last layers goes first."""
    return [k for k in range(len(agreed) - 1, -1, -1) if agreed[k]]
