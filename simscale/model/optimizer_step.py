"""The optimizer step on the GPU: memory-bound, the bytes it streams over the memory's bandwidth.

Under PyTorch DDP and ZeRO/FSDP every rank runs the optimizer itself once the gradients are
reduced, before the next forward: DDP on all the parameters, ZeRO (every stage) on its shard of
the optimizer state (1/N of it, N the ranks a shard spans, ``Scenario.shard_ranks``). An Adam or
LAMB step does a handful of FLOPs per parameter against tens of bytes (torch's fused and
foreach kernels, apex's FusedAdam and FusedLAMB), so its time is the bytes it reads and writes
over the device memory's peak bandwidth (``GPUSpec.memory_gbytes_per_s``, data-sheet figures):
a lower bound, as fused kernels reach most of it. Per parameter, with the memory model's bytes
(simscale.zoo.memory.BYTES_PER_PARAM):

- SGD and Adam, one fused pass: the gradient read once; the optimizer state read and written
  (Adam's two moments; SGD's momentum; in bf16 and fp8 also the fp32 master weights, which the
  state holds); the weights read and written where the optimizer updates them in place (fp32,
  tf32, amp, fp16), or only written (the 16-bit working copy cast from the master weights, bf16
  and fp8). Adam in fp32 thus streams 4 + 2 x 8 + 2 x 4 = 28 bytes per parameter, as in bf16
  (2 + 2 x 12 + 2).
- LAMB, as NVIDIA's BERT pre-training runs it (``FusedLAMBAMP``, NVIDIA/DeepLearningExamples
  PyTorch/LanguageModeling/BERT/lamb_amp_opt at a07d20a124b2b7187fc81029250da043d266e58d:
  fused_lamb/fused_lamb.py ``step`` and csrc/multi_tensor_lamb.cu ``multi_tensor_lamb_cuda``):
  six passes over every parameter (``LAMB_PASSES``). The trust ratio needs each tensor's
  parameter norm and update norm before any weight moves, so the update is written out (into
  the gradient's memory) and read back. fp32 parameters (fp32, tf32, amp) are updated in place;
  fp16 ones (the model cast with ``model.half()``) through fp32 master copies
  (``setup_fp32_params``), and the moments are fp32 either way (``state['exp_avg']`` of
  ``torch.float`` for a half parameter). With loss scaling (amp, fp16) the step first runs
  torch's GradScaler inf check, which rewrites every gradient in place (``_check_inf_per_device``
  with a unit scale: ``_amp_foreach_non_finite_check_and_unscale_``, aten AmpKernels.cu, a
  ``UnaryOpFunctor`` whose result goes back to the gradient). LAMB in fp32 and tf32 streams 52
  bytes per parameter, in fp16 50, in amp 60. FusedLAMBAMP takes only fp16 and fp32 parameters
  (``RuntimeError('FusedLAMB only support fp16 and fp32.')``), so bf16 and fp8 have no LAMB
  here (simscale.spec.scenario refuses them). The bias and LayerNorm parameters NVIDIA groups
  with weight decay 0 skip the weight read of stage 1 (about 0.1% of BERT's parameters): not
  counted.

The parameter-server modes update on the servers (their own cost, simscale.comm.ps), Horovod's
all-reduce mode is left as it was calibrated on the CNN set, and a CPU rank (``gpu: cpu``) has
no stated bandwidth of its own: none of these pays it here.
"""

from __future__ import annotations

from dataclasses import dataclass

from simscale.spec.hardware import GPUSpec
from simscale.spec.scenario import Scenario
from simscale.zoo.memory import BYTES_PER_PARAM, state_bytes_per_param

# Precisions whose optimizer state holds fp32 master weights (simscale.zoo.memory).
MASTER_WEIGHTS = ("bf16", "fp8")
STEPPED_MODES = ("ddp", "zero")
# Precisions that train with a loss scaler (torch's GradScaler enabled: NVIDIA's run_pretraining.py
# builds it ``enabled=args.fp16``, for its fp16 and amp configurations alike).
LOSS_SCALED = ("amp", "fp16")
FP32 = 4  # bytes of an fp32 parameter, master copy or moment


@dataclass(frozen=True)
class Pass:
    """One pass of a step over every parameter: the tensors it reads and writes, each
    ``"gradient"`` (the gradient's dtype), ``"fp32 param"`` (the weight or its fp32 master
    copy), ``"moments"`` (two fp32 moments) or ``"fp16 param"`` (the half model's weight)."""

    name: str
    reads: tuple[str, ...]
    writes: tuple[str, ...] = ()
    loss_scaled_only: bool = False  # runs only where a loss scaler does (LOSS_SCALED)


# FusedLAMBAMP.step (module doc), in the order it runs; ``update`` lives in the gradient's memory.
LAMB_PASSES = (
    Pass("GradScaler inf check", ("gradient",), ("gradient",), loss_scaled_only=True),
    Pass("global gradient norm (multi_tensor_l2norm)", ("gradient",)),
    Pass("per-tensor parameter norms (multi_tensor_l2norm)", ("fp32 param",)),
    Pass(
        "stage 1: moments and update (LAMBStage1Functor)",
        ("gradient", "fp32 param", "moments"),
        ("gradient", "moments"),
    ),
    Pass("per-tensor update norms (multi_tensor_l2norm)", ("gradient",)),
    # The aligned path of LAMBStage2Functor<.., 3, ..> also loads the fp16 copy it overwrites.
    Pass(
        "stage 2: weights by the trust ratio (LAMBStage2Functor)",
        ("gradient", "fp32 param", "fp16 param"),
        ("fp32 param", "fp16 param"),
    ),
)


def lamb_tensor_bytes(precision: str) -> dict[str, float]:
    """Bytes per parameter of each tensor LAMB_PASSES names, at ``precision`` (fp32, tf32, amp:
    fp32 parameters, no fp16 copy; fp16: a half model with fp32 master copies)."""
    weights, grads, _, _ = BYTES_PER_PARAM[precision]
    return {
        "gradient": grads,
        "fp32 param": FP32,
        "moments": 2 * FP32,
        "fp16 param": weights if weights < FP32 else 0,
    }


def lamb_bytes_per_param(precision: str) -> float:
    """Bytes one parameter's LAMB step reads and writes: LAMB_PASSES summed, the inf check only
    where a loss scaler runs."""
    size = lamb_tensor_bytes(precision)
    total = 0.0
    for p in LAMB_PASSES:
        if not p.loss_scaled_only or precision in LOSS_SCALED:
            total += sum(size[t] for t in p.reads) + sum(size[t] for t in p.writes)
    return total


def step_bytes_per_param(precision: str, optimizer: str) -> float:
    """Bytes one parameter's update reads and writes (module doc)."""
    if optimizer == "lamb":
        return lamb_bytes_per_param(precision)
    weights, grads, _, _ = BYTES_PER_PARAM[precision]
    state = state_bytes_per_param(precision, optimizer)
    weight_traffic = weights if precision in MASTER_WEIGHTS else 2 * weights
    return grads + 2 * state + weight_traffic


def optimizer_step_s(scenario: Scenario, gpu: GPUSpec) -> float:
    """Seconds of one optimizer step on a rank of ``gpu`` (0 outside DDP and ZeRO, and where
    the device states no memory bandwidth)."""
    kv, training = scenario.kvstore, scenario.training
    if kv.mode not in STEPPED_MODES:
        return 0.0
    params = float(scenario.model_spec().params)
    if kv.mode == "zero":
        params /= scenario.shard_ranks
    nbytes = params * step_bytes_per_param(training.precision, training.optimizer.type)
    return gpu.memory_stream_s(nbytes)
