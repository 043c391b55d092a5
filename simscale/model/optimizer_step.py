"""The optimizer step on the GPU: memory-bound, the bytes it streams over the memory's bandwidth.

Under PyTorch DDP and ZeRO/FSDP every rank runs the optimizer itself once the gradients are
reduced, before the next forward: DDP on all the parameters, ZeRO (every stage) on its shard of
the optimizer state (1/N of it, N the ranks a shard spans, ``Scenario.shard_ranks``). An Adam or
LAMB step does a handful of FLOPs per parameter against tens of bytes (torch's fused and
foreach kernels, apex's FusedAdam and FusedLAMB), so its time is the bytes it reads and writes
over the device memory's peak bandwidth (``GPUSpec.memory_gbytes_per_s``, data-sheet figures):
a lower bound, as fused kernels reach most of it. Per parameter, with the memory model's bytes
(simscale.zoo.memory.BYTES_PER_PARAM):

- the gradient read once;
- the optimizer state read and written (Adam's two moments; SGD's momentum; in bf16 and fp8
  also the fp32 master weights, which the state holds);
- the weights read and written where the optimizer updates them in place (fp32, tf32, amp,
  fp16), or only written (the 16-bit working copy cast from the master weights, bf16 and fp8).

Adam in fp32 thus streams 4 + 2 x 8 + 2 x 4 = 28 bytes per parameter, as in bf16 (2 + 2 x 12
+ 2). LAMB's second pass (the trust ratio's norms) is not counted: the scenario says adam for
it (its state is Adam's). The parameter-server modes update on the servers (their own cost,
simscale.comm.ps), Horovod's all-reduce mode is left as it was calibrated on the CNN set, and
a CPU rank (``gpu: cpu``) has no stated bandwidth of its own: none of these pays it here.
"""

from __future__ import annotations

from simscale.spec.hardware import GBPS_BYTES, GPUSpec
from simscale.spec.scenario import Scenario
from simscale.zoo.memory import BYTES_PER_PARAM

# Precisions whose optimizer state holds fp32 master weights (simscale.zoo.memory).
MASTER_WEIGHTS = ("bf16", "fp8")
STEPPED_MODES = ("ddp", "zero")


def step_bytes_per_param(precision: str, optimizer: str) -> float:
    """Bytes one parameter's update reads and writes (module doc)."""
    weights, grads, sgd, adam = BYTES_PER_PARAM[precision]
    state = adam if optimizer == "adam" else sgd
    weight_traffic = weights if precision in MASTER_WEIGHTS else 2 * weights
    return grads + 2 * state + weight_traffic


def optimizer_step_s(scenario: Scenario, gpu: GPUSpec) -> float:
    """Seconds of one optimizer step on a rank of ``gpu`` (0 outside DDP and ZeRO, and where
    the device states no memory bandwidth)."""
    kv, training = scenario.kvstore, scenario.training
    if kv.mode not in STEPPED_MODES or gpu.memory_gbytes_per_s <= 0:
        return 0.0
    params = float(scenario.model_spec().params)
    if kv.mode == "zero":
        params /= scenario.shard_ranks
    nbytes = params * step_bytes_per_param(training.precision, training.optimizer.type)
    return nbytes / (gpu.memory_gbytes_per_s * GBPS_BYTES)
