"""Softmax attention (FlashAttention, PyTorch SDPA): reference, inputs and model.

docs/reference/peers.md#softmax-attention
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.families.base import Cost, Family, Problem

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler


def reference(q: Tensor, k: Tensor, v: Tensor, *, scale: float, causal: bool = True) -> Tensor:
    """softmax(scale q k^T + mask) v, the masked softmax of the full score matrix.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv] -> [B, T, H, Dv].
    """
    import torch

    from tflabench.families.tensors import causal_mask, f64

    q, k, v = f64(q, k, v)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        scores = scores.masked_fill(~causal_mask(q.shape[1], q.device), -math.inf)
    return torch.einsum("bhij,bjhv->bihv", scores.softmax(dim=-1), v)


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """q, k, v and the scale Dqk^-1/2."""
    return {**sample.qkv(), "scale": sample.point.head_dim_qk**-0.5}


def cost(problem: Problem) -> Cost:
    """2 S (F_c S) (d_qk + d_v) FLOPs (F_c = 0.5 causal, 1 non-causal); Q, K, V, O and fp32 LSE bytes."""
    p = problem
    S, K, V = p.seq_len, p.head_dim_qk, p.head_dim_v
    flops = 2 * S * (p.causal_factor * S) * (K + V)
    nbytes = S * (2 * K + 2 * V) * p.dtype_bytes + 4 * S
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


FAMILY = Family(
    name="softmax_attention",
    reference=reference,
    reference_inputs=("q", "k", "v", "scale"),
    random_inputs=random_inputs,
    cost=cost,
    default_chunk_size=None,
)
