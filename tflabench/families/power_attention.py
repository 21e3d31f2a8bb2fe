"""Gated, normalized power attention (the `retention` package): reference, inputs and model.

docs/reference/peers.md#power-attention
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.errors import InputError
from tflabench.families.base import MAX_SIZE, Cost, Family, Problem, check_choice, check_positive_int

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler

#: expanded dimension of power attention: "tpow" d^p, "spow" C(d+p-1, p), "tspow" (tile 8 for p=2, 4 for
#: p=3), "retention" (the `retention` 1.0.7 Triton path: tile 16 for every p)
EXPANSIONS = ("retention", "tspow", "spow", "tpow")
_TSPOW_TILE = {2: 8, 3: 4}
_RETENTION_TILE = 16
MAX_DEGREE = 16
#: forms of a power attention kernel: the chunked state form, or the quadratic attention form
FORMS = ("chunked", "attention")


def reference(
    q: Tensor, k: Tensor, v: Tensor, log_g: Tensor | None, *, degree: int, scale: float
) -> Tensor:
    """Quadratic normalized form: w_ij = exp(G_i - G_j) (scale q_i.k_j)^p for j <= i with G the
    cumulative sum of log_g, and o_i = sum_j w_ij v_j / sum_j w_ij.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; log_g [B, T, H] (<= 0) or None; even degree p -> [B, T, H, Dv].
    """
    import torch

    from tflabench.families.tensors import causal_mask, f64

    q, k, v = f64(q, k, v)
    weights = (torch.einsum("bihd,bjhd->bhij", q, k) * scale) ** degree
    mask = causal_mask(q.shape[1], q.device)
    if log_g is not None:
        cumulative = log_g.detach().to(torch.float64).cumsum(dim=1).transpose(1, 2)
        gaps = (cumulative[..., :, None] - cumulative[..., None, :]).masked_fill(~mask, -math.inf)
        weights = weights * gaps.exp()
    weights = weights.masked_fill(~mask, 0.0)
    return torch.einsum("bhij,bjhv->bihv", weights, v) / weights.sum(dim=-1).transpose(1, 2)[..., None]


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """q, k, v, the log gate logsigmoid(N(3, 1)) per step and head, degree 2 and the scale Dqk^-1/2."""
    import torch.nn.functional as F

    return {**sample.qkv(), "log_g": F.logsigmoid(sample.per_token(mean=3.0)), "degree": 2,
            "scale": sample.point.head_dim_qk**-0.5}


def expanded_dim(head_dim: int, degree: int, expansion: str = "retention") -> int:
    """Expanded feature dimension D of power attention (docs/reference/peers.md#power-attention)."""
    check_choice("expansion", expansion, EXPANSIONS)
    d, p = head_dim, degree
    if expansion == "tpow":
        return d**p
    if expansion == "spow":
        return math.comb(d + p - 1, p)
    tile = _RETENTION_TILE if expansion == "retention" else _TSPOW_TILE.get(p)
    if tile is None:
        raise InputError(f"tspow expansion is defined for degree 2 and 3, not {p}")
    if d % tile:
        raise InputError(
            f"{expansion} expansion of degree {p} needs head_dim_qk divisible by {tile}, got {d}"
        )
    return math.comb(d // tile + p - 1, p) * tile**p


def state_size(head_dim: int, value_dim: int, degree: int, expansion: str = "retention") -> int:
    """Elements of the per-head state of power attention: D (v + 1) (state S plus key-sum normalizer)."""
    return expanded_dim(head_dim, degree, expansion) * (value_dim + 1)


def cost(problem: Problem, degree: int = 2, expansion: str = "retention", form: str = "chunked") -> Cost:
    """Chunked: 4tDv + 2 F_c t c (d+v) FLOPs (docs/reference/peers.md#power-attention); in its attention
    form (``form="attention"``, retention's path for degrees without a chunked kernel): the causal attention
    matmuls 2 F_c t^2 (d+v), the power an elementwise op like softmax's exp.

    Bytes, chunked: inputs/outputs t(2d+2v)s, intra outputs Y and zeta written and re-read 2t(v+1)s, states
    written by update-state, read and written by discumsum, read by query-state 4(t/c)Dv s_h; attention
    form: inputs/outputs and the fp32 log gate and row normalizer.
    """
    p = problem
    degree = check_positive_int("degree", degree)
    if degree > MAX_DEGREE:
        raise InputError(f"degree must be at most {MAX_DEGREE}, got {degree}")
    check_choice("form", form, FORMS)
    t, d, v, c = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    if form == "attention":
        flops = 2 * p.causal_factor * t * t * (d + v)
        nbytes = t * (2 * d + 2 * v) * p.dtype_bytes + 2 * 4 * t
        return Cost(p.batch_heads * float(flops), p.batch_heads * float(nbytes))
    D = expanded_dim(d, degree, expansion)
    if D > MAX_SIZE**4:
        raise InputError(
            f"expanded dimension of power attention too large ({expansion}, degree {degree}, d={d})"
        )
    flops = 4 * t * D * v + 2 * p.causal_factor * t * c * (d + v)
    nbytes = (
        t * (2 * d + 2 * v) * p.dtype_bytes
        + 2 * t * (v + 1) * p.dtype_bytes
        + 4 * (t / c) * D * v * p.state_bytes
    )
    return Cost(p.batch_heads * float(flops), p.batch_heads * float(nbytes))


FAMILY = Family(
    name="power_attention",
    reference=reference,
    reference_inputs=("q", "k", "v", "log_g", "degree", "scale"),
    random_inputs=random_inputs,
    cost=cost,
    default_chunk_size=128,
)
