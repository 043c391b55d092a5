"""An experiment, not a model path: the network ETH's p2.xlarge rows imply, from TensorFlow's own
variables.

ETH's report (calibration/published/ethz-tf-k80-ec2.yaml) states no network for p2.xlarge ("High"
in AWS's table; 1.25 Gbit/s in a placement group by AWS's 2017 P2 briefing, the preset's figure).
Its ``parameter_server`` rows place TensorFlow's Inception v3 variables (``inception_v3_tf``: no
auxiliary head, batch norms without gamma) whole on the least-loaded PS by bytes
(``kvstore.key_placement: greedy``, simscale.spec.sharding). Each step, the hottest PS host
sends its variables to every worker and its own worker's gradients to every other server; at the
published throughput that is a lower bound on the egress that host's NIC carried. This prints
it for the 32-, 64- and 128-GPU rows, beside the preset's rate.

It also prints what TensorFlow's step barrier asks of that link (the barrier lets no worker read
a variable before every worker's gradients are applied, tensorflow/benchmarks fd87986): with the
hot variable's replies sharing the link, all of them and then all the pushes back come one phase
after the other, so the link must carry 2 (W - 1) x hot bytes within a step; served one after
another, the last worker's reply is followed by its whole backward pass (its share of the
published single-GPU step, as simscale.model.compute splits it), so (W - 1) x hot bytes within the
step less that. Both leave out the compute that does not overlap and the worker's own traffic:
they are lower bounds on the usable rate.

    python benchmarks/tf_ps_variables.py      # a second
"""

from __future__ import annotations

from calibration.published import load_published
from simscale import zoo
from simscale.spec.hardware import INSTANCES
from simscale.spec.sharding import server_loads

ETH_ROWS = {"p2x-32gpu": 32, "p2x-64gpu": 64, "p2x-128gpu": 128}  # workers, one K80 and one PS each
BATCH = 64
BYTES = 4  # fp32
BACKWARD_SHARE = 2 / 3  # backward is twice forward (simscale.model.compute.BACKWARD_TO_FORWARD)


def main() -> None:
    points = {p.name: p for p in load_published()}
    elements = [a.elements for a in zoo.get("inception_v3_tf").arrays]
    model_bytes = BYTES * sum(elements)
    preset_gbps = INSTANCES["p2.xlarge"].nic_gbps
    print(f"ETH p2.xlarge parameter_server rows, greedy placement (preset: {preset_gbps} Gbit/s)")
    single_step_s = BATCH / points["p2x-1gpu"].value
    backward_s = BACKWARD_SHARE * single_step_s
    for name, workers in ETH_ROWS.items():
        hot_bytes = BYTES * max(server_loads(elements, workers, 10**9, "greedy"))
        step_s = BATCH * workers / points[name].value
        egress = hot_bytes * (workers - 1) + model_bytes - hot_bytes
        print(
            f"  {name}: hottest PS {hot_bytes / 1e6:.1f} MB x {workers - 1} remote replies"
            f" + {(model_bytes - hot_bytes) / 1e6:.1f} MB of its worker's pushes in {step_s:.2f} s"
            f" -> {egress * 8 / step_s / 1e9:.2f} Gbit/s"
        )
        replies = hot_bytes * (workers - 1)
        shared = 2 * replies / step_s
        in_turn = replies / (step_s - backward_s)
        print(
            f"    under the step barrier: replies sharing the link >= {shared * 8 / 1e9:.2f}"
            f" Gbit/s usable; one after another >= {in_turn * 8 / 1e9:.2f} Gbit/s"
            f" (backward {backward_s:.2f} s)"
        )


if __name__ == "__main__":
    main()
