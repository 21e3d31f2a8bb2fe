"""The float64 reference check's parts: the reference output of a family for layout-neutral inputs, random
inputs, the error measure and its tolerances.

The references and inputs themselves are the families' (`tflabench.families`); every reference computes in
float64 from the inputs as given (low-precision inputs are widened exactly), so a kernel and its reference
see the same numbers. The forms are chosen to be independent of each other, so that the cross-check
mappings of docs/reference/peers.md#cross-checks compare different computations.

Tolerances (`TOLERANCES`): the relative error is ||out - ref||_F / ||ref||_F over the whole output. bf16
keeps 8 significant bits (one output rounding alone is up to 2^-9 relative), and kernels round their
intermediate matmul operands too, so 3e-2 in bf16; 1e-2 in fp16 (11 bits); 5e-3 in fp32, which admits
TF32 tensor-core matmuls (10-bit mantissa) that some peers use on GPUs. Every error this check exists for
(wrong layout, missing causal mask, wrong scale, gates in the wrong space, a dropped inter-chunk state, the
batch element 0 returned instead of the output) gives errors of order 0.1 to 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from tflabench.core import SweepPoint
from tflabench.families import family as get_family
from tflabench.families.tensors import InputSampler

#: Largest accepted relative error (Frobenius norm of the difference over that of the reference), by dtype.
TOLERANCES = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 5e-3, "float64": 1e-9}


def reference_output(family: str, inputs: Mapping[str, Any]) -> Tensor:
    """The float64 output of `family` for layout-neutral `inputs` (extra entries are ignored)."""
    kernel_family = get_family(family)
    missing = [name for name in kernel_family.reference_inputs if name not in inputs]
    if missing:
        raise KeyError(f"{family} reference needs input(s) {', '.join(missing)}")
    return kernel_family.reference(**{name: inputs[name] for name in kernel_family.reference_inputs})


def relative_error(output: Tensor, reference: Tensor) -> float:
    """||output - reference||_F / ||reference||_F in float64; inf for a shape mismatch, nan if not finite."""
    if tuple(output.shape) != tuple(reference.shape):
        return math.inf
    reference = reference.to(torch.float64)
    difference = output.detach().to(torch.float64) - reference
    return float(torch.linalg.vector_norm(difference) / torch.linalg.vector_norm(reference))


def mismatch_summary(output: Tensor, reference: Tensor) -> str:
    """What a failed check's output looks like next to the reference [B, T, H, D]: norm ratio, non-finite
    entries, and the first time step whose relative error exceeds 10 % (garbage from some position on,
    a wrong mask, or scaled but otherwise right)."""
    output, reference = output.detach().to(torch.float64), reference.to(torch.float64)
    finite = torch.isfinite(output)
    norm_ratio = torch.linalg.vector_norm(output[finite]) / torch.linalg.vector_norm(reference)
    parts = [f"|out|/|ref| {norm_ratio:.3g}"]
    if not finite.all():
        parts.append(f"{int((~finite).sum())} non-finite entries")
    difference = torch.where(finite, output - reference, torch.zeros_like(output))
    def step_norms(x: Tensor) -> Tensor:  # [T]: the norm over everything but the time axis
        return x.transpose(0, 1).flatten(1).norm(dim=1)

    per_step = step_norms(difference) / step_norms(reference)
    wrong_steps = torch.nonzero(per_step > 0.1).flatten()
    if len(wrong_steps):
        parts.append(f"wrong from t = {int(wrong_steps[0])} of {output.shape[1]} ({len(wrong_steps)} steps)")
    return ", ".join(parts)


def random_inputs(
    family: str, point: SweepPoint, device: torch.device | str = "cpu", *, seed: int | None = None,
    **fixed: Any,
) -> dict[str, Any]:
    """Fresh random layout-neutral inputs of `family` at the sizes of `point` (never zeros).

    Tensors entering matmuls (q, k, v, x, B, C) are in ``point.dtype``; gates, steps and decays are float32.
    ``fixed`` sets family constants and overrides defaults: ``scale`` (default Dqk^-1/2; lightning 1.0),
    ``log_decay`` [H] (lightning; default -ALiBi slopes), ``degree`` (power attention; default 2),
    ``ngroups`` (Mamba2 SSD; default 1), ``normalize`` / ``eps`` / ``formulation`` (mLSTM).
    """
    kernel_family = get_family(family)
    sampler = InputSampler(point, torch.device(device), seed)
    return {**kernel_family.random_inputs(sampler, fixed), **fixed}
