"""One core's rate of summing a received float32 chunk into its own buffer in host memory.

The figure behind ``simscale.spec.costs.HOST_REDUCE_GBYTES_PER_S``: Open MPI's MPI_SUM on a
host-memory all-reduce (Horovod without HOROVOD_GPU_ALLREDUCE) is a single-threaded loop
``a[i] += b[i]`` over buffers far larger than the caches, i.e. memory-bound. numpy's in-place
add is the same loop. Run: ``python benchmarks/bench_host_reduce.py``; prints the median of 7
repeats of a 64 MB sum (GB/s of the summed buffer) beside the CPU seconds it took and the load.
"""

from __future__ import annotations

import json
import os
import statistics
import time

import numpy as np

BUFFER_BYTES = 64 * 2**20  # Horovod's fusion buffer (HOROVOD_FUSION_THRESHOLD's default)
REPEATS = 7


def main() -> None:
    n = BUFFER_BYTES // 4
    a = np.ones(n, np.float32)
    b = np.ones(n, np.float32)
    np.add(a, b, out=a)  # touch every page once before timing
    wall, cpu = [], []
    for _ in range(REPEATS):
        t0, c0 = time.perf_counter(), time.process_time()
        np.add(a, b, out=a)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(
        json.dumps(
            {
                "buffer_bytes": BUFFER_BYTES,
                "gbytes_per_s_median": BUFFER_BYTES / statistics.median(wall) / 1e9,
                "wall_s_median": statistics.median(wall),
                "cpu_s_median": statistics.median(cpu),
                "load_1min": os.getloadavg()[0],
                "cores": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
