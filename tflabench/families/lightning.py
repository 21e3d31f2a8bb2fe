"""Linear attention with a fixed per-head decay (LightningAttention-2, FLA chunk_lightning_attn):
reference, inputs and model.

docs/reference/peers.md#lightningattention-2
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.families.base import Cost, Family, Problem, check_choice
from tflabench.families.linear_attention import chunked_bytes, scalar_decay_flops

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler

IMPLEMENTATIONS = ("fla", "lightning2")


def reference(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, *, scale: float) -> Tensor:
    """Quadratic form with the closed-form decay:
    o_i = scale sum_{j<=i} exp(log_decay_h (i - j)) (q_i.k_j) v_j.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; log_decay [H] (<= 0; minus LightningAttention-2's slope)
    -> [B, T, H, Dv].
    """
    import torch

    from tflabench.families.tensors import causal_mask, f64

    q, k, v, log_decay = f64(q, k, v, log_decay)
    positions = torch.arange(q.shape[1], device=q.device, dtype=torch.float64)
    distance = (positions[:, None] - positions[None, :]).clamp(min=0.0)
    decay = torch.exp(log_decay[:, None, None] * distance)
    decay = decay.masked_fill(~causal_mask(q.shape[1], q.device), 0.0)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale * decay
    return torch.einsum("bhij,bjhv->bihv", scores, v)


def alibi_slopes(heads: int) -> Tensor:
    """ALiBi slopes lambda_h (float64 [H]): 2^(-8 (h+1) / H) for H a power of two; otherwise those of the
    largest power of two below H followed by every other slope of twice that
    (docs/reference/peers.md#lightningattention-2)."""
    import torch

    def power_of_two_slopes(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    base = 2 ** int(math.floor(math.log2(heads)))
    slopes = power_of_two_slopes(base)
    if base < heads:
        slopes += power_of_two_slopes(2 * base)[0::2][: heads - base]
    return torch.tensor(slopes, dtype=torch.float64)


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """q, k, v, the log decay -ALiBi slopes [H] (float32) and the scale 1."""
    import torch

    log_decay = -alibi_slopes(sample.point.heads).to(sample.device, torch.float32)
    return {**sample.qkv(), "log_decay": log_decay, "scale": 1.0}


def cost(problem: Problem, implementation: str = "fla") -> Cost:
    """implementation "fla": chunk_lightning_attn = simple GLA without a gate tensor (fixed decay).

    "lightning2": the LightningAttention-2 package: dense C x C intra blocks (F_c = 1), no state traffic,
    q and k re-read once per 32-wide value block (docs/reference/peers.md#lightningattention-2).
    """
    check_choice("implementation", implementation, IMPLEMENTATIONS)
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    if implementation == "fla":
        flops, nbytes = scalar_decay_flops(p), chunked_bytes(p, 0, 0)
    else:
        flops = 4 * T * K * V + 2 * T * C * (K + V)
        nbytes = 2 * T * K * p.dtype_bytes * math.ceil(V / 32) + 2 * T * V * p.dtype_bytes
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


FAMILY = Family(
    name="lightning",
    reference=reference,
    reference_inputs=("q", "k", "v", "log_decay", "scale"),
    random_inputs=random_inputs,
    cost=cost,
    default_chunk_size=64,
)
