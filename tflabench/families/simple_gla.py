"""Linear attention with a scalar decay per step (FLA chunk_simple_gla): reference, inputs and model.

docs/reference/peers.md#fla
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.families.base import Cost, Family, Problem, check_positive
from tflabench.families.linear_attention import chunked_bytes, scalar_decay_flops

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler


def reference(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float) -> Tensor:
    """Quadratic form with the decay matrix exp(sum of g over (j, i]):
    o_i = scale sum_{j<=i} exp(sum_{l=j+1..i} g_l) (q_i.k_j) v_j.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; g [B, T, H] log decay (<= 0) -> [B, T, H, Dv].
    """
    import torch

    from tflabench.families.tensors import causal_mask, f64

    q, k, v, g = f64(q, k, v, g)
    cumulative = g.cumsum(dim=1).transpose(1, 2)  # [B, H, T]
    log_decay = cumulative[..., :, None] - cumulative[..., None, :]
    log_decay = log_decay.masked_fill(~causal_mask(q.shape[1], q.device), -math.inf)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale * log_decay.exp()
    return torch.einsum("bhij,bjhv->bihv", scores, v)


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """q, k, v, the log decay g = logsigmoid(N(1, 1)) per step and head, and the scale Dqk^-1/2."""
    import torch.nn.functional as F

    return {**sample.qkv(), "g": F.logsigmoid(sample.per_token(mean=1.0)),
            "scale": sample.point.head_dim_qk**-0.5}


def cost(problem: Problem, gate_bytes: float = 4) -> Cost:
    """FLA chunk_simple_gla: 4TKV + 2 F_c T C (K+V); one scalar gate per step (fp32 by default)."""
    nbytes = chunked_bytes(problem, 1, check_positive("gate_bytes", gate_bytes))
    return Cost(problem.batch_heads * scalar_decay_flops(problem), problem.batch_heads * nbytes)


FAMILY = Family(
    name="simple_gla",
    reference=reference,
    reference_inputs=("q", "k", "v", "g", "scale"),
    random_inputs=random_inputs,
    cost=cost,
    default_chunk_size=64,
)
