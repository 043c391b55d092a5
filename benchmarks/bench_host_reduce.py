"""One core's rate of a pass over host memory: summing a received float32 chunk into its own
buffer, and copying a buffer into another.

The figure behind ``simscale.spec.costs.HOST_REDUCE_GBYTES_PER_S``: Open MPI's MPI_SUM on a
host-memory all-reduce (Horovod without HOROVOD_GPU_ALLREDUCE) is a single-threaded loop
``a[i] += b[i]`` over buffers far larger than the caches, i.e. memory-bound. numpy's in-place
add is the same loop. The same rate prices Horovod's copies into and out of its fusion buffer
and Open MPI's copy of a lone tensor into its output buffer (``memcpy``; numpy's ``copyto``),
so both are timed side by side, alternating. Run: ``python benchmarks/bench_host_reduce.py``;
prints, for each, the median of 7 repeats over a 64 MB buffer (GB/s of the buffer) beside the
CPU seconds it took and the load.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

BUFFER_BYTES = 64 * 2**20  # Horovod's fusion buffer (HOROVOD_FUSION_THRESHOLD's default)
REPEATS = 7


def main() -> None:
    n = BUFFER_BYTES // 4
    a = np.ones(n, np.float32)
    b = np.ones(n, np.float32)
    passes: dict[str, Callable[[], object]] = {
        "sum": lambda: np.add(a, b, out=a),
        "copy": lambda: np.copyto(a, b),
    }
    for run in passes.values():
        run()  # touch every page once before timing
    wall: dict[str, list[float]] = {k: [] for k in passes}
    cpu: dict[str, list[float]] = {k: [] for k in passes}
    for _ in range(REPEATS):
        for name, run in passes.items():
            t0, c0 = time.perf_counter(), time.process_time()
            run()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    out: dict[str, object] = {"buffer_bytes": BUFFER_BYTES}
    for name in passes:
        out[name] = {
            "gbytes_per_s_median": BUFFER_BYTES / statistics.median(wall[name]) / 1e9,
            "wall_s_median": statistics.median(wall[name]),
            "cpu_s_median": statistics.median(cpu[name]),
        }
    out["load_1min"] = os.getloadavg()[0]
    out["cores"] = os.cpu_count()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
