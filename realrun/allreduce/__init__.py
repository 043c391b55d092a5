"""realrun's all-reduce backend (``kvstore.mode: allreduce``): Horovod-style fused ring
all-reduce over ``torch.distributed`` (gloo on CPU, NCCL with CUDA), beside the PS core.

- ``layout``: which processes a scenario runs (one per host, or one per GPU) and their data.
- ``rendezvous``: the ``MASTER_ADDR``/``RANK``/``WORLD_SIZE`` environment and the process group.
- ``fusion``: Horovod's cycle: agree on the tensors ready everywhere, fuse them into buffers.
- ``trainer``: the training loop, all-reducing buffers as backward produces them.
- ``coordinator``: the store host our launchers start; relays reports, watches heartbeats.
- ``worker``: ``python -m realrun.allreduce.worker``, one rank.
- ``job``: ``realrun run`` for an all-reduce scenario, on any of realrun's launchers.
"""
