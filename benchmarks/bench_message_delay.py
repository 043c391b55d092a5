"""What a fixed per-message delay of realrun's stack would do to the probe profile's point
errors on runs/emulated-v2: a sensitivity, not a model (issue 35 item 4). CPU only.

realrun's own small push and ack (``realrun probe``'s psrtt step) take 1.5-1.9 ms at the median
between two emulated hosts where the simulator's same round trip is 1.0 ms (docs/probe.md).
Here every message of every connection arrives ``DELAY`` later (each way; divided by the
shape's dilation, as the stack's cost is in real time), with the probe profile of
``benchmarks/results/probe-emulated-profile.yaml``, and the 15 shapes' point errors are printed
for each delay: whether a fixed delay, the simplest form of that cost, moves the worst shape
(ResNet-18 1w/1s, whose mode is a race between the fc bias's ack and the next layer's post).

    python -m benchmarks.bench_message_delay [--delays-us 0,200,400]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from benchmarks.bench_probe_emulated import RUNS, mean_by_shape, simulate
from calibration.runs import load_runs
from calibration.validate import label_of
from simscale.network import stream
from simscale.spec.profile import load_profile

PROBE_PROFILE = Path("benchmarks/results/probe-emulated-profile.yaml")


def delayed_send(delay_s: float):
    """``Stream.send`` with every message's arrival ``delay_s`` later (0: unchanged)."""
    send = stream.Stream.send

    def send_later(self, nbytes, on_arrival, rank=None, tag=None):
        if delay_s <= 0:
            return send(self, nbytes, on_arrival, rank, tag)
        env = self.env

        def arrived() -> None:
            env.timeout(delay_s).callbacks.append(lambda _e: on_arrival())

        return send(self, nbytes, arrived, rank, tag)

    return send, send_later


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--delays-us", default="0,200,400", help="one-way delays per message, us")
    a = ap.parse_args()
    costs = load_profile(PROBE_PROFILE).costs
    shapes = sorted(mean_by_shape(load_runs([RUNS]).runs).items())
    for delay_us in (float(x) for x in a.delays_us.split(",")):
        errors = []
        for _, (scenario, measured, _, _) in shapes:
            dilation = scenario.realrun.dilation or 1.0
            original, patched = delayed_send(delay_us * 1e-6 / dilation)
            stream.Stream.send = patched
            try:
                predicted = simulate(scenario, costs).throughput_samples_per_s
            finally:
                stream.Stream.send = original
            errors.append(predicted / measured - 1)
            print(
                f"{delay_us:5.0f} us  {label_of(scenario):<48} measured {measured:9.2f} "
                f"predicted {predicted:9.2f} {errors[-1]:+.1%}",
                flush=True,
            )
        size = [abs(e) for e in errors]
        print(f"delay {delay_us:.0f} us: mean {sum(size) / len(size):.1%}, worst {max(size):.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
