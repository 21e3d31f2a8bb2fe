"""Mamba2's state-space duality (mamba_ssm mamba_chunk_scan_combined): reference, inputs and model.

Sizes: state dim N = head_dim_qk, head dim P = head_dim_v, chunk Q_c = chunk_size.
docs/reference/peers.md#mamba2
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.errors import InputError
from tflabench.families.base import Cost, Family, Problem, check_positive_int

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler


def reference(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, *, D: Tensor | None = None) -> Tensor:
    """Recurrent form per head (heads grouped contiguously over B and C):
    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = C_t^T h_t (+ D x_t).

    x [B, T, H, P]; dt [B, T, H] (the step, already positive); A [H] (< 0); B, C [B, T, G, N] with G dividing
    H; D [H] or None -> y [B, T, H, P].
    """
    import torch

    from tflabench.families.tensors import f64

    x, dt, A, B, C = f64(x, dt, A, B, C)
    batch, seq_len, heads, head_dim = x.shape
    heads_per_group = heads // B.shape[2]
    B, C = (m.repeat_interleave(heads_per_group, dim=2) for m in (B, C))
    state = x.new_zeros(batch, heads, B.shape[-1], head_dim)
    outputs = []
    for t in range(seq_len):
        step = dt[:, t, :, None, None]
        state = torch.exp(step * A[:, None, None]) * state + step * B[:, t, :, :, None] * x[:, t, :, None, :]
        outputs.append(torch.einsum("bhn,bhnp->bhp", C[:, t], state))
    y = torch.stack(outputs, dim=1)
    if D is not None:
        y = y + D.to(torch.float64)[:, None] * x
    return y


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """x, the step dt = softplus(N(-1, 1)), A = -exp(N(0.5, 1) / 2), and B, C of ``fixed["ngroups"]``
    groups (default 1)."""
    import torch
    import torch.nn.functional as F

    p = sample.point
    B, T, H = p.batch, p.seq_len, p.heads
    groups = fixed.get("ngroups", 1)
    N = p.head_dim_qk
    return {"x": sample.operand(B, T, H, p.head_dim_v), "dt": F.softplus(sample.per_token(mean=-1.0)),
            "A": -torch.exp(sample.normal(H, mean=0.5) * 0.5),
            "B": sample.operand(B, T, groups, N), "C": sample.operand(B, T, groups, N)}


def cost(problem: Problem, ngroups: int = 1) -> Cost:
    """FLOPs per batch element: H(4TNP + 2 F_c T Q_c P) + g 2 T Q_c N (C B^T over the full tile).

    Bytes: x, dt, B, C, y; fp32 dA_cumsum and C B^T written and read; chunk states written and read in
    `state_bytes` (fp32) by the chunk-state and state-passing kernels, then in the input dtype.
    """
    p = problem
    g = check_positive_int("ngroups", ngroups)
    if p.heads % g:
        raise InputError(f"heads ({p.heads}) must be a multiple of ngroups ({g})")
    T, H, N, P, Qc = p.seq_len, p.heads, p.head_dim_qk, p.head_dim_v, p.chunk_size
    s = p.dtype_bytes
    flops = H * (4 * T * N * P + 2 * p.causal_factor * T * Qc * P) + g * 2 * T * Qc * N
    nbytes = (
        2 * T * H * P * s
        + T * H * s
        + 2 * T * g * N * s
        + 2 * 4 * T * H
        + 2 * 4 * g * T * Qc
        + (T / Qc) * H * P * N * (2 * p.state_bytes + 2 * s)
    )
    return Cost(p.batch * flops, p.batch * nbytes)


FAMILY = Family(
    name="mamba2_ssd",
    reference=reference,
    reference_inputs=("x", "dt", "A", "B", "C"),
    random_inputs=random_inputs,
    cost=cost,
    default_chunk_size=256,
)
