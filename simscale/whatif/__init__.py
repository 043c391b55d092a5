"""What-if analysis on top of ``simulate(scenario, costs)``: sweeps, comparisons, cost, advice
and uncertainty intervals.

Everything here treats the simulator as a function from a validated scenario to a ``Result``;
nothing reaches into its internals, so the model can change underneath. Charts live in
``chart.py`` and import matplotlib only when called.
"""

from simscale.whatif.errors import WhatIfError

__all__ = ["WhatIfError"]
