"""``solve_grouped`` compiled with numba, for the network states of large symmetric shapes.

The same rounds as ``simscale.network.fairshare.solve_grouped`` (the reference, which stays
pure numpy), written as loops so that numba can compile them: a solve at 256 hosts with a server
per host (about 130 flows over 515 links) spends most of its 60 us in numpy's per-call overhead,
not in arithmetic; compiled, 9 us. Sums run in a different order than numpy's, so rates agree
with the reference to rounding (tests/test_fairshare.py holds them within 1e-9), not bit for bit.

Optional: numba is the ``fast`` extra (``pip install -e ".[fast]"``, part of ``dev``). Without
it, or with ``SIMSCALE_SOLVER=reference`` in the environment, every solve takes the reference.
Importing numba and loading the compiled code costs a process about 0.45 s, so only networks of
256 hosts and more use it; the code is cached beside this file, and only the first such
prediction on a machine pays the compile (about 2 s).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from simscale.network.fairshare import LEVEL_RTOL, WEIGHT_RESIDUE, FloatArray, IntArray

# Below this many links (two per host and a sentinel) the reference is as fast as numba's import
# and cache load repay: measured per prediction at 128 hosts 1.2 s reference, 1.7 s compiled; at
# 256 hosts 4.8 s and 3.7 s (scenarios/64gpu.yaml with a server per host, 2026-11-25).
MIN_LINKS = 513


def _kernel(
    cap_ext: FloatArray,
    links: IntArray,
    weight: FloatArray,
    group: IntArray,
    group_weight: FloatArray,
    mask: FloatArray,
    bound: float,
    residue: float,
    rtol: float,
) -> FloatArray:
    """solve_grouped's rounds as loops; ``mask`` is its ``group_links`` as floats."""
    n_ext = cap_ext.shape[0]
    sentinel = n_ext - 1
    n_flows, width = links.shape
    n_groups = mask.shape[0]
    rate = np.full(n_flows, bound)
    if n_flows == 0:
        return rate
    gw_of = np.zeros(n_flows)
    g_index = np.zeros(n_flows, dtype=np.int64)
    unfrozen_g = np.zeros(n_groups)
    n_unfrozen = np.zeros(n_ext)
    for i in range(n_flows):
        if group[i] >= 0:
            gw_of[i] = group_weight[i]
            g_index[i] = group[i]
            unfrozen_g[group[i]] += group_weight[i]
        for k in range(width):
            n_unfrozen[links[i, k]] += weight[i, k]
    for g in range(n_groups):
        for link in range(n_ext):
            n_unfrozen[link] += unfrozen_g[g] * mask[g, link]
    n_unfrozen[sentinel] = 0.0
    headroom = cap_ext.astype(np.float64)
    headroom[sentinel] = np.inf
    frozen = np.zeros(n_flows, dtype=np.bool_)
    fill = np.empty(n_ext)
    sat = np.zeros(n_ext, dtype=np.bool_)
    group_sat = np.zeros(n_groups)
    moved = np.zeros(n_groups)
    newly = np.empty(n_flows, dtype=np.int64)
    n_frozen = 0
    level = 0.0
    while n_frozen < n_flows:
        t_link = np.inf
        for link in range(n_ext):
            if n_unfrozen[link] > residue:
                fill[link] = headroom[link] / n_unfrozen[link]
                if fill[link] < t_link:
                    t_link = fill[link]
            else:
                fill[link] = np.inf
        if t_link >= bound or t_link == np.inf:
            break
        if t_link > level:
            level = t_link
        threshold = level * (1.0 + rtol)
        for link in range(n_ext):
            sat[link] = fill[link] <= threshold
        for g in range(n_groups):
            s = 0.0
            for link in range(n_ext):
                if sat[link]:
                    s += mask[g, link]
            group_sat[g] = s
        n_new = 0
        for i in range(n_flows):
            if frozen[i]:
                continue
            net = gw_of[i] * group_sat[g_index[i]]
            for k in range(width):
                if sat[links[i, k]]:
                    net += weight[i, k]
            if net > residue:
                newly[n_new] = i
                n_new += 1
        new_rate = min(level, bound)
        for j in range(n_new):
            rate[newly[j]] = new_rate
        n_frozen += n_new
        if n_frozen == n_flows:
            break
        moved[:] = 0.0
        for j in range(n_new):
            i = newly[j]
            frozen[i] = True
            for k in range(width):
                headroom[links[i, k]] -= weight[i, k] * new_rate
                n_unfrozen[links[i, k]] -= weight[i, k]
            moved[g_index[i]] += gw_of[i]
        for g in range(n_groups):
            if moved[g] != 0.0:
                for link in range(n_ext):
                    headroom[link] -= moved[g] * new_rate * mask[g, link]
                    n_unfrozen[link] -= moved[g] * mask[g, link]
        for link in range(n_ext):
            if sat[link]:
                headroom[link] = np.inf
                n_unfrozen[link] = 0.0
        n_unfrozen[sentinel] = 0.0
        headroom[sentinel] = np.inf
    return rate


@cache
def compiled() -> Callable[..., FloatArray] | None:
    """The compiled kernel, or None where numba is missing, the reference is asked for, or the
    kernel cannot be built here (no writable cache location, say: the reference answers the
    same, so a warning says so and predictions go on)."""
    if os.environ.get("SIMSCALE_SOLVER", "") == "reference":
        return None
    try:
        import numba
    except ImportError:
        return None
    kernel = numba.njit(cache=True)(_kernel)
    try:  # compile (or load from the cache) now, on a one-link problem, rather than mid-run
        kernel(
            np.array([1.0, 0.0]),
            np.zeros((1, 1), dtype=np.int64),
            np.ones((1, 1)),
            np.full(1, -1, dtype=np.int64),
            np.ones(1),
            np.zeros((1, 2)),
            math.inf,
            WEIGHT_RESIDUE,
            LEVEL_RTOL,
        )
    except Exception as e:  # any failure to build leaves the reference in charge
        warnings.warn(
            f"simscale: the compiled fair-share solver is unavailable ({e}); using the numpy "
            "reference (SIMSCALE_SOLVER=reference silences this)",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    return kernel  # type: ignore[no-any-return]


def solve_grouped_compiled(
    cap_ext: FloatArray,
    links: IntArray,
    weight: FloatArray,
    group: IntArray,
    group_weight: FloatArray,
    group_links: Any,
    bound: float = math.inf,
) -> FloatArray | None:
    """``solve_grouped``'s rates from the compiled kernel, or None where it does not apply (too
    few links to gain, numba missing, or ``SIMSCALE_SOLVER=reference``)."""
    if cap_ext.shape[0] < MIN_LINKS:
        return None
    kernel = compiled()
    if kernel is None:
        return None
    return kernel(  # type: ignore[no-any-return]
        np.ascontiguousarray(cap_ext, dtype=np.float64),
        np.ascontiguousarray(links, dtype=np.int64),
        np.ascontiguousarray(weight, dtype=np.float64),
        np.ascontiguousarray(group, dtype=np.int64),
        np.ascontiguousarray(group_weight, dtype=np.float64),
        np.ascontiguousarray(group_links, dtype=np.float64),
        float(bound),
        WEIGHT_RESIDUE,
        LEVEL_RTOL,
    )
