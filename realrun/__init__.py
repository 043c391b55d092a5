"""realrun: a real parameter-server training backend (pyzmq transport, PyTorch compute), and
a Horovod-style all-reduce one on torch.distributed.

- ``ps/``: the PS core (message, van, postoffice, tracker, kv_worker, kv_server, scheduler,
  optimizer, compression, roles).
- ``allreduce/``: the all-reduce backend (rendezvous, membership, fusion, trainer, coordinator).
- ``training/``: the PyTorch models, the worker's training loop, emulated compute.
- ``launching/``: role commands, the job's life cycle, local/ssh/netns launchers.
- ``emulated/``: the emulated cluster (namespaces, shaping, delay wire, probes, load verdict).
- ``records/``: run records, campaigns, timelines, message traces, progress.
- ``node.py`` (``python -m realrun.node``), ``cli.py`` (``realrun``), ``auth.py``,
  ``safejson.py``: the entry points and what every part shares.
"""
