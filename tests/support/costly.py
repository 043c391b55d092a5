"""The checks too costly for every run of the suite, and the switch that includes them
(SIMSCALE_TEST_COSTLY=1; CI's whole suite must stay under 20 minutes on 2 cores).

- Published parameter-server points of 1,000 worker-keys or more (25 of 316): the golden
  predictions and the interval check leave them out. ETH's 32-128 single-GPU p2.xlarge hosts,
  a server on each with greedy placement, take the exact path: 24 CPU s for the 32-host point
  on a loaded 2-core machine, faster than linearly beyond; an interval simulates each point
  about 14 times. Smaller points run every path these do.
- The fuzzers' second thousand variants each (tests/simscale/cli/test_fuzz.py).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from simscale.spec.scenario import DIST_MODES

if TYPE_CHECKING:
    from calibration.published import PublishedPoint

COSTLY_PUBLISHED = (
    "ethz-tf-k80-ec2/p2x-32gpu",
    "ethz-tf-k80-ec2/p2x-64gpu",
    "ethz-tf-k80-ec2/p2x-128gpu",
)


# An interval simulates a point 14 times or so (nominal, a repeat, draws, and each input at both
# ends of its range). Parameter-server points of this many worker-keys or more
# (calibration.published_fit.fit_cost, the proxy validate uses) cost 15-50 CPU s each that way
# even at three iterations (TensorFlow's 64-GPU K80 rows: 39-50 CPU s, measured 2026-11-28), and
# made the check 860 of CI's 2,980 CPU s at 3,000. At 1,000 the suite leaves out 25 of the 316
# points' scenarios (the 84 other parameter-server points still run).
COSTLY_WORKER_KEYS = 1_000


def costly_checks() -> bool:
    """Whether this run includes the costly checks (SIMSCALE_TEST_COSTLY=1)."""
    return bool(os.environ.get("SIMSCALE_TEST_COSTLY"))


@functools.cache
def _costly_points() -> tuple[str, ...]:
    from calibration.published import PUBLISHED_DIR, load_published
    from calibration.published_fit import fit_cost

    points = load_published(sorted(PUBLISHED_DIR.glob("*.yaml")))
    heavy = tuple(
        f"{p.source}/{p.name}"
        for p in points
        if p.scenario.kvstore.mode in DIST_MODES and fit_cost(p) >= COSTLY_WORKER_KEYS
    )
    return tuple(dict.fromkeys(COSTLY_PUBLISHED + heavy))


def skipped_points() -> tuple[str, ...]:
    """The points ("source/name") this run leaves out of the golden predictions and of the
    interval check: none with SIMSCALE_TEST_COSTLY=1."""
    return () if costly_checks() else _costly_points()


def interval_too_costly(point: PublishedPoint) -> bool:
    """Whether the suite leaves ``point``'s interval out (never with SIMSCALE_TEST_COSTLY=1)."""
    return f"{point.source}/{point.name}" in skipped_points()
