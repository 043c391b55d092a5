"""Path classes: the flow-level network's unit of sharing, and what every solver is handed.

Flows between the same two hosts always get the same rate, so the fair-share network
(simscale.network.flows) solves path classes, one per host pair, each loading its links once
per live flow: a worker pushing 20 keys to one server is one entry of weight 20, not 20
entries. This table keeps each class's links (padded to a common width for the vectorised
solvers), its per-link multiplicity (a symmetry-reduced cluster, simscale.model.symmetry), its
live flow count, and the link -> live classes incidence the incremental solver walks, all kept up
to date as flows come and go, so that a re-solve rebuilds none of them.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from simscale.network.fairshare import FloatArray, IntArray

INITIAL_CLASSES = 16  # rows allocated before the first class; doubled as needed


class Routes(Protocol):
    """Where a host pair's flows go and how many physical flows each one stands for per link
    (simscale.network.fairshare.solve_grouped explains the groups)."""

    @property
    def width(self) -> int:
        """The most links any route lists."""
        ...

    @property
    def group_links(self) -> np.ndarray:
        """(groups, links + 1) bool: the links each group's flows all load once more."""
        ...

    def route(self, src: int, dst: int) -> tuple[tuple[int, ...], tuple[float, ...], int]:
        """The links a ``src`` -> ``dst`` flow loads, its multiplicity on each (negative:
        cancels the group's load there), and its group (-1: none)."""
        ...


class PathClasses:
    """Every host pair that has carried a flow, its links, and which classes are live now.

    Links are numbered as the topology numbers them (egress of host h is 2h, its ingress
    2h + 1, the core after them); ``n_links`` is the sentinel that pads shorter paths.
    ``routes`` (None: each flow loads its physical path once) gives a reduced cluster's routes.
    """

    def __init__(
        self, n_links: int, core: int | None, routes: Routes | None = None, seed: int = 0
    ) -> None:
        self.n_links = n_links
        self.core = core
        self.routes = routes
        self.seed = seed
        # Links per inter-host path (shorter paths are padded with the sentinel link n_links).
        self.width = routes.width if routes is not None else 3 if core is not None else 2
        self.of: dict[tuple[int, int], int] = {}  # (src, dst) -> class
        self.paths: list[tuple[int, ...]] = []
        self.weights: list[tuple[float, ...]] = []  # flows per live flow, per link of the path
        self.count: list[int] = []  # live flows
        rows = INITIAL_CLASSES
        self.links: IntArray = np.zeros((rows, self.width), dtype=np.int_)
        self.link_weight: FloatArray = np.ones((rows, self.width))
        self.group: IntArray = np.full(rows, -1, dtype=np.int_)
        self.rate: FloatArray = np.zeros(rows)  # each live flow's rate, by class
        # Each class's flows' share weight (unequal TCP shares), and the host pair's own random
        # stream, so that the k-th busy period of a pair gets the same draw whatever else
        # changes (common random numbers: a fit that varies share_sigma sees a smooth response).
        self.share_weight: FloatArray = np.ones(rows)
        self.rng: dict[int, np.random.Generator] = {}  # made on a class's first draw
        self.live: dict[int, None] = {}  # insertion-ordered set
        # Classes whose flow count changed since the last re-solve: what it must not replay.
        self.dirty: set[int] = set()
        # The link -> live classes incidence and per-link live flow counts.
        self.members: list[dict[int, None]] = [{} for _ in range(n_links)]
        self.n_on_link = [0] * n_links

    def of_pair(self, src: int, dst: int) -> int:
        """The class of flows from host ``src`` to host ``dst``, made on first use."""
        cls = self.of.get((src, dst))
        return self._new(src, dst) if cls is None else cls

    def _new(self, src: int, dst: int) -> int:
        weights: tuple[float, ...]
        group = -1
        if self.routes is not None:
            path, weights, group = self.routes.route(src, dst)
        else:
            if self.core is None:
                path = (2 * src, 2 * dst + 1)
            else:
                path = (2 * src, self.core, 2 * dst + 1)
            weights = (1.0,) * len(path)
        cls = len(self.paths)
        self.of[(src, dst)] = cls
        self.paths.append(path)
        self.weights.append(weights)
        self.count.append(0)
        if cls >= self.links.shape[0]:
            size = 2 * cls
            self.links = np.resize(self.links, (size, self.width))
            self.link_weight = np.resize(self.link_weight, (size, self.width))
            self.group = np.resize(self.group, size)
            self.rate = np.resize(self.rate, size)
        pad = self.width - len(path)
        self.links[cls] = path + (self.n_links,) * pad
        self.link_weight[cls] = weights + (0.0,) * pad
        self.group[cls] = group
        if cls >= self.share_weight.shape[0]:
            self.share_weight = np.resize(self.share_weight, 2 * cls)
        self.share_weight[cls] = 1.0
        return cls

    def pair_rng(self, cls: int) -> np.random.Generator:
        """The seeded random stream of class ``cls``'s host pair (its path: egress of the
        sender 2*src, ingress of the receiver 2*dst + 1)."""
        rng = self.rng.get(cls)
        if rng is None:
            path = self.paths[cls]
            src, dst = path[0] // 2, (path[-1] - 1) // 2
            rng = self.rng[cls] = np.random.default_rng((self.seed, src, dst))
        return rng

    def counts(self, live: IntArray) -> FloatArray:
        """The live flow counts of classes ``live``, as floats."""
        return np.fromiter(map(self.count.__getitem__, live), dtype=np.float64, count=len(live))
