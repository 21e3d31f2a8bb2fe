"""Shared by the chunked linear-attention families (gla, simple_gla, lightning): their byte model and
the FLOPs of a scalar decay.

docs/reference/mlstm-math.md#flop-and-byte-counts
"""

from __future__ import annotations

from tflabench.families.base import Problem


def chunked_bytes(problem: Problem, gate_elements_per_token: int, gate_bytes: float) -> float:
    """Bytes of one head: q, k, v in, o out, gates, and the chunk states written once and read once."""
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    return (
        T * (2 * K + V) * p.dtype_bytes
        + T * gate_elements_per_token * gate_bytes
        + T * V * p.dtype_bytes
        + 2 * (T / C) * K * V * p.state_bytes
    )


def scalar_decay_flops(problem: Problem) -> float:
    """FLOPs of one head with a scalar decay per step: 4TKV + 2 F_c T C (K+V)."""
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    return 4 * T * K * V + 2 * p.causal_factor * T * C * (K + V)

