"""realrun: a real parameter-server training backend (pyzmq transport, PyTorch compute), and
a Horovod-style all-reduce one on torch.distributed.

- ``ps/``: the PS core (message, van, postoffice, tracker, kv_worker, kv_server, scheduler,
  optimizer, compression, roles, the opt-in message trace).
- ``allreduce/``: the all-reduce backend (rendezvous, membership, fusion, trainer, coordinator).
- ``training/``: the PyTorch models, the worker's training loop, emulated compute.
- ``launching/``: role commands, the job's life cycle, local/ssh/netns launchers.
- ``emulated/``: the emulated cluster (namespaces, shaping, delay wire, probes, load verdict).
- ``records/``: what a run leaves, as data: run records, timelines, progress, runs tables.
- ``run.py`` (one scenario to one record, on any launcher) and ``campaign.py`` (many runs,
  resumable): the top of the import graph, above ``launching/`` and both backends.
- ``node.py`` (``python -m realrun.node``), ``cli.py`` (``realrun``), ``auth.py``,
  ``safejson.py``: the entry points and what every part shares.

Imports run one way, each layer using only those before it: auth, safejson, emulated; ps;
records; training; node and launching; allreduce (its job is a launching job); run; campaign;
cli (``tests/test_architecture.py`` checks there is no circle).
"""
