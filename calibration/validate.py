"""Honest validation: fit on some cluster shapes, predict the others, report the error.

A shape (one configuration, all its repeats) is never in both the fit and the judgement.
Leave-one-shape-out fits once per shape on all the others; k-fold splits the shapes into k
seeded folds. Errors are absolute percentage errors of throughput against the mean of the
repeats, summarised overall and per group (sync/async, co-located/dedicated, link speed, model).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass

import numpy as np

from calibration.errors import CalibrationError
from calibration.fit import DEFAULT_FIT, fit, predict
from calibration.runs import Run, mean_by_shape
from simscale.lifetime import exit_with_parent
from simscale.spec.costs import CostModel
from simscale.spec.model_error import model_error_group
from simscale.spec.scenario import Scenario


@dataclass(frozen=True)
class Prediction:
    """One held-out shape: what was measured, what the fit on the other shapes predicted."""

    shape: str
    label: str
    groups: dict[str, str]
    measured: float
    measured_std: float
    repeats: int
    predicted: float

    @property
    def ape(self) -> float:
        return abs(self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class Report:
    method: str
    predictions: tuple[Prediction, ...]
    parameters: tuple[str, ...]

    @property
    def mape(self) -> float:
        return float(np.mean([p.ape for p in self.predictions]))

    @property
    def worst(self) -> float:
        return float(np.max([p.ape for p in self.predictions]))

    def by_group(self) -> dict[str, dict[str, tuple[float, float, int]]]:
        """group kind -> group value -> (mean APE, worst APE, shapes)."""
        out: dict[str, dict[str, list[float]]] = {}
        for p in self.predictions:
            for kind, value in p.groups.items():
                out.setdefault(kind, {}).setdefault(value, []).append(p.ape)
        return {
            kind: {v: (float(np.mean(a)), float(np.max(a)), len(a)) for v, a in sorted(g.items())}
            for kind, g in out.items()
        }

    def to_dict(self) -> dict[str, object]:
        return {
            "method": self.method,
            "parameters": list(self.parameters),
            "mape": self.mape,
            "worst_ape": self.worst,
            "by_group": self.by_group(),
            "predictions": [asdict(p) | {"ape": p.ape} for p in self.predictions],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format(self) -> str:
        lines = [
            f"{self.method}: {len(self.predictions)} held-out shapes, fitted parameters: "
            f"{', '.join(self.parameters) or '(none: defaults)'}",
            f"throughput error: mean {self.mape:.1%}, worst {self.worst:.1%}",
            "",
            f"  {'held-out shape':<52} {'measured':>10} {'predicted':>10} {'error':>7}",
        ]
        for p in sorted(self.predictions, key=lambda p: -p.ape):
            lines.append(f"  {p.label:<52} {p.measured:>10.1f} {p.predicted:>10.1f} {p.ape:>7.1%}")
        lines += ["", "  by group               mean    worst  shapes"]
        for kind, groups in self.by_group().items():
            for value, (mean, worst, n) in groups.items():
                lines.append(f"  {kind + '=' + value:<20} {mean:>7.1%} {worst:>8.1%} {n:>7}")
        return "\n".join(lines)


def groups_of(s: Scenario) -> dict[str, str]:
    """The groups a shape is reported under."""
    nic = s.cluster.hosts[0].resolved()[2]
    mode = s.kvstore.mode
    if mode == "allreduce":
        system, placement = "allreduce", "none"
    else:
        system, placement = ("async" if "async" in mode else "sync"), s.kvstore.placement
    return {
        "mode": system,
        "servers": servers_label(s),
        "placement": placement,
        "link": f"{nic * 1000:g}Mbit/s",
        "model": s.model.spec().name,
        "model_error": model_error_group(s),
    }


def servers_label(s: Scenario) -> str:
    """How the gradients move: "allreduce", "1 server", or servers per worker host ("1:1")."""
    if s.kvstore.mode == "allreduce":
        return "allreduce"
    if s.num_servers == 1:
        return "1 server"
    ratio = s.num_servers / s.num_worker_hosts
    return f"{ratio:g}:1" if ratio >= 1 else f"1:{1 / ratio:g}"


def label_of(s: Scenario) -> str:
    nic = s.cluster.hosts[0].resolved()[2]
    return (
        f"{s.model.spec().name} {s.num_workers}w/{s.num_servers}s {s.kvstore.placement[:5]} "
        f"{s.kvstore.mode} {nic * 1000:g}Mbit/s"
    )


def cross_validate(
    runs: Sequence[Run],
    names: Sequence[str] = DEFAULT_FIT,
    base: CostModel | None = None,
    *,
    folds: int | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    jobs: int | None = None,
) -> Report:
    """Leave-one-shape-out (``folds=None``) or k-fold over shapes; folds run in ``jobs``
    processes (default: one per core)."""
    base = base or CostModel()
    shapes = mean_by_shape(runs)
    keys = sorted(shapes)
    if len(keys) < 2:
        raise CalibrationError(
            f"cross-validation needs at least 2 distinct shapes, got {len(keys)}"
        )
    if folds is None:
        split = [[k] for k in keys]
        method = "leave-one-shape-out"
    else:
        if not 2 <= folds <= len(keys):
            raise CalibrationError(f"--kfold must be between 2 and {len(keys)} (the shapes)")
        order = np.random.default_rng(seed).permutation(len(keys))
        split = [[keys[i] for i in order[f::folds]] for f in range(folds)]
        method = f"{folds}-fold over shapes (seed {seed})"
    # Every fold is fitted from the defaults on its training shapes alone: starting it from a
    # fit on everything would let the held-out shape steer where the search ends.
    tasks = [
        ([r for r in runs if r.shape not in held], [shapes[k][0] for k in held]) for held in split
    ]
    predicted: dict[int, list[float]] = {}
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    if workers == 1:
        for i, (train, held_scenarios) in enumerate(tasks):
            predicted[i] = _fold(train, held_scenarios, names, base)
            if progress is not None:
                progress(i + 1, len(tasks))
    else:
        pool = ProcessPoolExecutor(
            workers,
            mp_context=mp.get_context("spawn"),
            initializer=_fold_process_init,
            initargs=(os.getpid(),),
        )
        try:
            futures = {
                pool.submit(_fold, train, held_scenarios, names, base): i
                for i, (train, held_scenarios) in enumerate(tasks)
            }
            for done, future in enumerate(as_completed(futures), 1):
                predicted[futures[future]] = future.result()
                if progress is not None:
                    progress(done, len(tasks))
        except BaseException:
            _stop_now(pool)  # Ctrl-C, SIGTERM or a failed fold: never wait for the others
            raise
        pool.shutdown()
    predictions: list[Prediction] = []
    for i, held in enumerate(split):
        for k, value in zip(held, predicted[i], strict=True):
            scenario, mean, std, n = shapes[k]
            predictions.append(
                Prediction(
                    shape=k,
                    label=label_of(scenario),
                    groups=groups_of(scenario),
                    measured=mean,
                    measured_std=std,
                    repeats=n,
                    predicted=value,
                )
            )
    return Report(method, tuple(predictions), tuple(names))


def _fold_process_init(parent: int) -> None:
    """In each fold process: Ctrl-C is the parent's to handle (it stops the pool), and the
    process ends by itself if the parent is killed outright."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent("validation fold", parent=parent)


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """Cancel what has not started and terminate the fold processes that are running:
    ``shutdown`` alone would wait for every running fit (tens of minutes each)."""
    # The executor keeps no public handle on its processes; _processes is {pid: Process}
    # in every CPython from 3.8 to 3.13.
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for proc in processes:
        proc.terminate()
    for proc in processes:
        proc.join(timeout=5)


def _fold(
    train: Sequence[Run], held: Sequence[Scenario], names: Sequence[str], base: CostModel
) -> list[float]:
    """One fold: fit ``names`` on ``train``, predict the held-out scenarios."""
    costs = fit(train, names, base).costs if names else base
    return [predict(s, costs) for s in held]
