"""Where a sweep's points run: in this process, on local processes, or on a Dask cluster.

All three take the same picklable tasks and the same top-level function and yield results as
they finish (in any order; the sweep puts them back in point order), so the rows cannot
depend on where they ran. ``local`` (the default) uses one process per core; ``dask://HOST:PORT``
connects to an existing ``dask.distributed`` scheduler, whose workers must be able to import
simscale.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from simscale.whatif.errors import WhatIfError

Fn = Callable[[Any], Any]
# How long to wait for a Dask scheduler before saying it cannot be reached.
DASK_CONNECT_TIMEOUT_S = 10.0
# How long an interrupted sweep's workers get to exit on SIGTERM before SIGKILL.
TERMINATE_GRACE_S = 0.5


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
    """Ctrl-C (or SIGTERM, through simscale.lifetime) is the main process's alone: its workers
    ignore SIGINT from birth, so none prints a traceback, and on the interrupt the main process
    terminates them rather than waiting for their points, so it exits at once and leaves no
    orphan; the rows already yielded are kept by the caller."""
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    # spawn, not fork: forking a process that may hold threads (tqdm's monitor, a notebook's
    # kernel) can deadlock the children.
    ctx = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint)
    pending: set[Future[Any]] = set()
    finished = False
    try:
        queue = iter(tasks)
        # Keep a few tasks per worker in flight, so an interrupt loses little.
        for t in queue:
            pending.add(_submit(pool, fn, t))
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
                    pending.add(_submit(pool, fn, nxt))
        finished = True
    finally:
        if finished:
            pool.shutdown(wait=True)
        else:  # interrupted, failed or abandoned: end the workers, do not wait for their points
            _terminate(pool)


def _ignore_sigint() -> None:
    """A worker's initializer: Ctrl-C is the main process's to handle (it ends the workers)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _submit(pool: ProcessPoolExecutor, fn: Fn, task: Any) -> Future[Any]:
    """``pool.submit`` with SIGINT blocked in this thread: a submit may spawn a worker, and the
    worker inherits the blocked signal through fork and exec, so a Ctrl-C pressed while it
    starts (before its initializer runs) cannot reach it; here the signal stays pending and is
    delivered as KeyboardInterrupt when it is unblocked."""
    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks
        return pool.submit(fn, task)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(fn, task)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _terminate(pool: ProcessPoolExecutor) -> None:
    """End the pool now: SIGTERM the workers (SIGKILL those that linger) and reap them, so
    nothing outlives the sweep and nothing is waited on. The pool's manager thread then fails
    every future still pending with BrokenProcessPool; none is cancelled here first, because
    CPython 3.11's manager raises InvalidStateError from its thread (a traceback on stderr) when
    it fails a future that was cancelled."""
    # ProcessPoolExecutor.terminate_workers() does this from Python 3.14; until then, by hand.
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        with contextlib.suppress(OSError):  # already gone
            p.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            with contextlib.suppress(OSError):
                p.kill()
            p.join(TERMINATE_GRACE_S)
    pool.shutdown(wait=True)  # the workers are gone: returns at once


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
