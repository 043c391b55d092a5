"""Where a sweep's points run: in this process, on local processes, or on a Dask cluster.

All three take the same picklable tasks and the same top-level function and yield results as
they finish (in any order; the sweep puts them back in point order), so the rows cannot
depend on where they ran. ``local`` (the default) uses one process per core; ``dask://HOST:PORT``
connects to an existing ``dask.distributed`` scheduler, whose workers must be able to import
simscale.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from simscale.whatif.errors import WhatIfError

Fn = Callable[[Any], Any]
# How long to wait for a Dask scheduler before saying it cannot be reached.
DASK_CONNECT_TIMEOUT_S = 10.0


def run_tasks(spec: str, fn: Fn, tasks: Sequence[Any], jobs: int | None = None) -> Iterator[Any]:
    """Yield ``fn(task)`` for every task as each finishes, on the executor ``spec``."""
    if not tasks:
        return iter(())
    if spec == "serial" or (spec == "local" and (jobs == 1 or len(tasks) == 1)):
        return (fn(t) for t in tasks)
    if spec == "local":
        return _local(fn, tasks, jobs)
    if spec.startswith("dask://"):
        return _dask(spec, fn, tasks)
    raise WhatIfError(
        f"--executor {spec!r}: expected local, serial or dask://HOST:PORT (a Dask scheduler)"
    )


def _local(fn: Fn, tasks: Sequence[Any], jobs: int | None) -> Iterator[Any]:
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    # spawn, not fork: forking a process that may hold threads (tqdm's monitor, a notebook's
    # kernel) can deadlock the children.
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx)
    pending: set[Future[Any]] = set()
    try:
        queue = iter(tasks)
        # Keep a few tasks per worker in flight, so an interrupt loses little.
        for t in queue:
            pending.add(pool.submit(fn, t))
            if len(pending) >= 2 * workers:
                break
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                try:
                    result = f.result()
                except BrokenProcessPool:
                    raise WhatIfError(
                        "a local sweep process died before answering: killed for memory, or the "
                        "sweep was started at a script's top level, which each spawned process "
                        'runs again (call it under `if __name__ == "__main__":`, or pass '
                        'executor="serial")'
                    ) from None
                yield result
                nxt = next(queue, None)
                if nxt is not None:
                    pending.add(pool.submit(fn, nxt))
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=True, cancel_futures=True)


def dask_address(spec: str) -> str:
    """``dask://host:port`` -> the scheduler's ``tcp://host:port`` address."""
    rest = spec[len("dask://") :]
    if not rest or ":" not in rest:
        raise WhatIfError(f"--executor {spec!r}: expected dask://HOST:PORT")
    return rest if "://" in rest else f"tcp://{rest}"


def _dask(spec: str, fn: Fn, tasks: Sequence[Any]) -> Iterator[Any]:
    address = dask_address(spec)
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise WhatIfError(
            f"--executor {spec}: dask.distributed is not installed (pip install 'simscale[dask]')"
        ) from None
    try:
        client = Client(address, timeout=DASK_CONNECT_TIMEOUT_S, set_as_default=False)
    except (OSError, TimeoutError) as e:
        raise WhatIfError(f"--executor {spec}: cannot reach the Dask scheduler: {e}") from None
    futures = []
    try:
        futures = client.map(fn, list(tasks), pure=False)
        for f in as_completed(futures, loop=client.loop):
            yield f.result()
    finally:
        for f in futures:
            f.cancel()
        client.close()
