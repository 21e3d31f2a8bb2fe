"""Gated linear attention with a per-key-channel decay (FLA chunk_gla): reference, inputs and model.

docs/reference/peers.md#fla
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.families.base import Cost, Family, Problem, check_positive, check_positive_int
from tflabench.families.linear_attention import chunked_bytes

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler


def reference(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float) -> Tensor:
    """Recurrent form: S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t, o_t = scale q_t S_t.

    q, k, g [B, T, H, Dqk] (g: log decay per key channel, <= 0); v [B, T, H, Dv] -> [B, T, H, Dv].
    """
    import torch

    from tflabench.families.tensors import f64

    q, k, v, g = f64(q, k, v, g)
    batch, seq_len, heads, head_dim_qk = q.shape
    state = q.new_zeros(batch, heads, head_dim_qk, v.shape[-1])
    outputs = []
    for t in range(seq_len):
        state = g[:, t].exp()[..., None] * state + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    return torch.stack(outputs, dim=1)


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """q, k, v, the log decay g = logsigmoid(N(1, 1)) per key channel and the scale Dqk^-1/2."""
    import torch.nn.functional as F

    K = sample.point.head_dim_qk
    return {**sample.qkv(), "g": F.logsigmoid(sample.per_token(K, mean=1.0)), "scale": K**-0.5}


def cost(problem: Problem, sub_chunk_size: int = 16, gate_bytes: float = 4,
         intra_matrix_bytes: float = 4) -> Cost:
    """FLA chunk_gla: 4TKV + T(C+c)(K+V) (sub-chunk causal skipping replaces F_c); fp32 intra matrix A."""
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    c = min(check_positive_int("sub_chunk_size", sub_chunk_size), C)
    flops = 4 * T * K * V + T * (C + c) * (K + V)
    nbytes = chunked_bytes(p, K, check_positive("gate_bytes", gate_bytes))
    nbytes += 2 * T * C * check_positive("intra_matrix_bytes", intra_matrix_bytes)
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


FAMILY = Family(
    name="gla",
    reference=reference,
    reference_inputs=("q", "k", "v", "g", "scale"),
    random_inputs=random_inputs,
    cost=cost,
    default_chunk_size=64,
)
