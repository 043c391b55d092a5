"""Peak GPU memory of one data-parallel rank: weights, gradients, optimizer state, activations.

The accounting of Rajbhandari et al. 2020 ("ZeRO: Memory Optimizations Toward Training Trillion
Parameter Models", section 3.1): with Ψ parameters, mixed-precision training holds 2Ψ bytes of
16-bit weights, 2Ψ of 16-bit gradients and KΨ of optimizer state, K = 12 for Adam (fp32 master
weights, momentum and variance). Here, per precision (simscale.spec.scenario.TrainingConfig):

- fp32, tf32, amp: fp32 weights (4Ψ) and gradients (4Ψ, amp's too, as torch autocast keeps
  them); state 8Ψ for Adam, 4Ψ for SGD's momentum; no master copy.
- fp16 (the network cast): 2Ψ weights and gradients, state in fp16 (Adam 4Ψ, SGD 2Ψ).
- bf16, fp8: 2Ψ bf16 weights and gradients, state 4Ψ master weights plus Adam's 8Ψ (SGD's 4Ψ).

LAMB keeps Adam's two moments, and so Adam's state, with one exception that its source states:
NVIDIA's FusedLAMBAMP (DeepLearningExamples PyTorch/LanguageModeling/BERT/lamb_amp_opt/
fused_lamb/fused_lamb.py at a07d20a) keeps the moments of a half parameter in fp32 and an fp32
copy of it (``setup_fp32_params``), so fp16 LAMB holds 4Ψ + 8Ψ = 12Ψ, as bf16's Adam does.

ZeRO stage 1 keeps 1/N of the optimizer state, stage 2 also of the gradients, stage 3 also of
the weights, N the data-parallel ranks; a stage-3 rank also holds the units it has gathered
(the one computing and ``prefetch`` ahead, FSDP's unsharded parameters) and one unit's full
gradient before it is reduce-scattered. PyTorch DDP copies gradients into its buckets (the
default ``gradient_as_bucket_view=False``; torch's docs: turning it on saves "the total
gradients size"), so DDP holds the gradients twice.

Activations are the zoo layers' stored bytes per sample (simscale.zoo.spec.Layer), less what
activation checkpointing recomputes (simscale.zoo.checkpointing), times the micro-batch,
doubled when the network computes in fp32 or tf32. Not counted: the CUDA context
and library workspaces (a few hundred MB to a GB, varying by version) and allocator
fragmentation; so "fits" means the model's own state fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from simscale.zoo import ModelSpec
from simscale.zoo.checkpointing import stored_activation_bytes

GIB = 2**30

# Bytes per parameter: (weights, gradients, optimizer state for "sgd", for "adam").
BYTES_PER_PARAM = {
    "fp32": (4, 4, 4, 8),
    "tf32": (4, 4, 4, 8),
    "amp": (4, 4, 4, 8),
    "fp16": (2, 2, 2, 4),
    "bf16": (2, 2, 4 + 4, 4 + 8),
    "fp8": (2, 2, 4 + 4, 4 + 8),
}
FP32_ACTIVATIONS = ("fp32", "tf32")
# FusedLAMBAMP's state for a half parameter: its fp32 copy and two fp32 moments (module doc).
LAMB_FP16_STATE = 4 + 8


def state_bytes_per_param(precision: str, optimizer: str) -> float:
    """Optimizer state bytes per parameter of ``optimizer`` ("sgd", "adam", "lamb")."""
    _, _, sgd, adam = BYTES_PER_PARAM[precision]
    if optimizer == "lamb":
        return LAMB_FP16_STATE if precision == "fp16" else adam
    return adam if optimizer == "adam" else sgd


@dataclass(frozen=True)
class MemoryUse:
    """One rank's peak memory by term, in bytes, and the GPU's capacity."""

    weights: float
    gradients: float
    optimizer_state: float
    activations: float
    gathered: float  # stage 3: units gathered in full; DDP: its gradient buckets
    capacity: float
    gathered_what: str = ""

    @property
    def total(self) -> float:
        return (
            self.weights + self.gradients + self.optimizer_state + self.activations + self.gathered
        )

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def terms(self) -> dict[str, float]:
        """Each term in GiB, and the total and capacity."""
        out = {
            "weights_gib": self.weights / GIB,
            "gradients_gib": self.gradients / GIB,
            "optimizer_state_gib": self.optimizer_state / GIB,
            "activations_gib": self.activations / GIB,
        }
        if self.gathered:
            out[f"{self.gathered_what.replace(' ', '_')}_gib"] = self.gathered / GIB
        out["total_gib"] = self.total / GIB
        out["capacity_gib"] = self.capacity / GIB
        return out

    def describe(self) -> str:
        """ "needs X GiB of Y (weights a + gradients b + ...)" for a refusal or a report."""
        parts = [
            f"weights {self.weights / GIB:.1f}",
            f"gradients {self.gradients / GIB:.1f}",
            f"optimizer state {self.optimizer_state / GIB:.1f}",
            f"activations {self.activations / GIB:.1f}",
        ]
        if self.gathered:
            parts.append(f"{self.gathered_what} {self.gathered / GIB:.1f}")
        return (
            f"needs {self.total / GIB:.1f} GiB of {self.capacity / GIB:.0f} "
            f"({' + '.join(parts)} GiB)"
        )


def memory_use(
    model: ModelSpec,
    *,
    precision: str,
    optimizer: str,
    batch_per_gpu: int,
    ranks: int,
    mode: str,
    stage: int,
    prefetch: int,
    capacity_gib: float,
    flash_attention: bool = False,
    checkpointing: str = "none",
) -> MemoryUse:
    """Peak bytes one rank holds (module doc) for ``mode`` "ddp", "zero" (at ``stage``) or any
    other (unsharded, no bucket copies)."""
    psi = float(model.params)
    w_b, g_b, _, _ = BYTES_PER_PARAM[precision]
    state_b = state_bytes_per_param(precision, optimizer)
    weights, grads, state = psi * w_b, psi * g_b, psi * state_b
    gathered, what = 0.0, ""
    if mode == "zero":
        n = float(ranks)
        state /= n
        if stage >= 2:
            grads /= n
        if stage >= 3:
            weights /= n
            unit = max((sum(a.elements for a in layer.arrays) for layer in model.layers), default=0)
            gathered = float(unit) * ((1 + prefetch) * w_b + g_b)
            what = "gathered units"
    elif mode == "ddp":
        gathered, what = psi * g_b, "DDP buckets"
    act_scale = 2.0 if precision in FP32_ACTIVATIONS else 1.0
    stored = stored_activation_bytes(model, checkpointing, flash_attention)
    activations = stored * batch_per_gpu * act_scale
    return MemoryUse(weights, grads, state, activations, gathered, capacity_gib * GIB, what)
