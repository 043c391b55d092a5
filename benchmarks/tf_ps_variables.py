"""An experiment, not a model path: how much TensorFlow's own variable layout moves its PS points.

The dataset mirrors TensorFlow's parameter servers (tf_cnn_benchmarks) with the zoo's torchvision
arrays and MXNet's key hash. Read at the source (tensorflow/benchmarks, fd87986 of 2017-05-03,
the version the 2017 campaigns ran), TensorFlow differs in three ways:

- its Inception v3 has no auxiliary head (``inception_model.py``; MXNet's
  ``symbols/inception-v3.py`` has none either), while the zoo's is torchvision's, with it: its
  ``AuxLogits.conv1.weight`` (9.8 MB) is the largest single array, so whole-variable placement
  makes its server the hot one;
- ``--variable_update parameter_server`` places each variable on the least-loaded PS by bytes
  (``variable_mgr.py``, ``GreedyLoadBalancingStrategy``), ``distributed_replicated`` round-robin
  in creation order (``replica_device_setter``'s default), neither by MXNet's hash;
- a convolution with batch norm has a kernel and the norm's beta only
  (``tf.contrib.layers.batch_norm``'s ``scale=False``), not torchvision's weight, gamma and beta.

This prints (1) the egress the hottest PS host of ETH's p2.xlarge rows must have carried per
second to reach the published throughput (its variables' replies to every worker plus its own
worker's push) under greedy placement, a lower bound on that instance's unstated network (at 128
GPUs under any placement, the hottest server holding at least the 8.2 MB fc layer); and
(2) the held-out-free sensitivity of a few TensorFlow PS points, with the shipped real-hardware
profile, to the first two differences, one at a time and together (greedy for every row, though
ETH's 8- and 16-GPU rows and TensorFlow's K80 table ran ``distributed_replicated``). The third
difference needs TensorFlow's own array lists in the zoo and is not tried here.

    python benchmarks/tf_ps_variables.py      # about 6 minutes on one core
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import simscale.simulator as simulator_module
import simscale.symmetry as symmetry_module
from calibration.published import PublishedPoint, load_published
from simscale import zoo
from simscale.profile import REAL_PROFILE, load_profile
from simscale.sharding import Slice, assign_key
from simscale.simulator import Simulation
from simscale.zoo.spec import ModelSpec

NO_AUX = "inception_v3_noaux"
ETH_STEPS = {"p2x-32gpu": 32, "p2x-64gpu": 64, "p2x-128gpu": 128}  # workers (one K80 each)
PROBES = (
    "p2x-8gpu",
    "p2x-16gpu",
    "p2x-32gpu",
    "k80-inception_v3-b64-64gpu",
    "k80-inception_v3-b32-64gpu",
    "c64-tfps-inception_v3",
    "c64-tfps_cpuvars-inception_v3",
)


def _without_aux() -> ModelSpec:
    m = zoo.get("inception_v3")
    layers = tuple(lyr for lyr in m.layers if not lyr.name.startswith("AuxLogits"))
    return ModelSpec(NO_AUX, layers, m.source + "; auxiliary head left out", m.input_shape)


def greedy_owners(elements: list[int], servers: int) -> list[int]:
    """TensorFlow's GreedyLoadBalancingStrategy by bytes: each variable, in creation order, to
    the PS holding the fewest elements so far (the lowest index on a tie)."""
    loads = [0] * servers
    owners = []
    for n in elements:
        s = min(range(servers), key=loads.__getitem__)
        loads[s] += n
        owners.append(s)
    return owners


def hot_host_bound() -> None:
    points = {p.name: p for p in load_published()}
    print("(1) ETH p2.xlarge, parameter_server rows: egress the hottest PS host needed per second")
    for aux in (True, False):
        m = zoo.get("inception_v3") if aux else _without_aux()
        elements = [a.elements for a in m.arrays]
        model_bytes = 4 * sum(elements)
        for name, workers in ETH_STEPS.items():
            loads = [0] * workers
            for n, s in zip(elements, greedy_owners(elements, workers), strict=True):
                loads[s] += n
            hot_bytes = 4 * max(loads)
            step_s = 64 * workers / points[name].value
            egress = hot_bytes * workers + model_bytes
            print(
                f"  {'with' if aux else 'no'} aux head, {name}: hottest PS {hot_bytes / 1e6:.1f} MB"
                f" x {workers} replies + {model_bytes / 1e6:.1f} MB push in {step_s:.2f} s"
                f" -> {egress * 8 / step_s / 1e9:.2f} Gbit/s"
            )


def _predict(p: PublishedPoint, aux: bool, greedy: bool) -> float:
    s = p.scenario
    if not aux:
        s = dataclasses.replace(s, model=dataclasses.replace(s.model, name=NO_AUX))
    place: Callable[..., tuple[Slice, ...]] = assign_key
    if greedy:
        arrays = zoo.get(s.model.name).arrays
        owners = greedy_owners([a.elements for a in arrays], s.kvstore.servers or 1)

        def place(key: int, elements: int, num_servers: int, bound: int) -> tuple[Slice, ...]:
            if elements >= bound and num_servers > 1:
                return assign_key(key, elements, num_servers, bound)
            return (Slice(owners[key], 0, elements),)

    # Both model paths import the placement function by name; swap it for this one prediction.
    saved = simulator_module.assign_key, symmetry_module.assign_key
    simulator_module.assign_key = symmetry_module.assign_key = place
    try:
        costs = load_profile(REAL_PROFILE).costs
        return Simulation(s, costs=costs).run().throughput_samples_per_s
    finally:
        simulator_module.assign_key, symmetry_module.assign_key = saved


def sensitivity() -> None:
    points = {p.name: p for p in load_published()}
    print("(2) TensorFlow PS points, error against the published figure (shipped profile)")
    print(f"  {'point':32s} {'as shipped':>11s} {'no aux':>8s} {'greedy':>8s} {'both':>8s}")
    for name in PROBES:
        p = points[name]
        row = [
            _predict(p, aux, greedy) / p.value - 1
            for aux, greedy in ((True, False), (False, False), (True, True), (False, True))
        ]
        print(f"  {name:32s} {row[0]:+11.1%} {row[1]:+8.1%} {row[2]:+8.1%} {row[3]:+8.1%}")


def main() -> None:
    zoo.register(NO_AUX)(_without_aux)
    hot_host_bound()
    sensitivity()


if __name__ == "__main__":
    main()
