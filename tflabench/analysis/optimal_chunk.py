"""Optimal chunk size of the chunkwise mLSTM kernels (TFLA paper F.5 and G.4;
docs/reference/mlstm-math.md#optimal-chunk-size).

Per head and chunk, FLOPs are F(L) = c2 L^2 + c1 L + c0 (Table 17, printed) and bytes M(L) = m1 L + m0
(Table 9), so the additive runtime (Eq. 116) of a sequence is tau(L) = (T/L)(F(L)/alpha + M(L)/beta) and

    L* = sqrt((c0 + I_acc m0) / c2),    I_acc = alpha / beta.

With I_acc = 0 this is the FLOP-optimal chunk size (Eq. 111); for mLSTMsig it is Eq. 121, for mLSTMexp the
mLSTMexp variant of the same recipe. d_qk = qk_ratio * d_hv; gates and q/k/v are 2-byte (App. G:
b_if = b_qkv = 2). L* does not depend on T, batch or heads, and the closed form exists only under the
additive model.
"""

from __future__ import annotations

import math
import numbers

from tflabench.analysis.hardware import Ceilings
from tflabench.errors import InputError
from tflabench.families.mlstm import mlstm_chunk_byte_coefficients, mlstm_chunk_flop_coefficients

VARIANTS = ("sig", "exp")
QKV_BYTES = 2
GATE_BYTES = 2
MIN_RUNNABLE_CHUNK = 64
MAX_QK_RATIO = 4.0


def _coefficients(variant, head_dim_v, qk_ratio, state_bytes, causal_factor):
    """((c2, c1, c0), (m1, m0)) of one head and chunk, after validating the inputs."""
    if variant not in VARIANTS:
        raise InputError(f"unknown mLSTM variant {variant!r} (known: {', '.join(VARIANTS)})")
    _check_real("head_dim_v", head_dim_v, 0, math.inf)
    _check_real("qk_ratio", qk_ratio, 0, MAX_QK_RATIO)
    _check_real("state_bytes", state_bytes, 0, math.inf)
    if not (isinstance(causal_factor, numbers.Real) and 0.5 <= causal_factor <= 1):
        raise InputError(f"causal_factor must be in [0.5, 1], got {causal_factor!r}")
    head_dim_qk = qk_ratio * head_dim_v
    flop = mlstm_chunk_flop_coefficients(variant, head_dim_qk, head_dim_v, causal_factor)
    byte = mlstm_chunk_byte_coefficients(variant, head_dim_qk, head_dim_v, QKV_BYTES, GATE_BYTES, state_bytes)
    return flop, byte


def _check_real(name: str, value, low: float, high: float) -> None:
    """low < value <= high and finite (rejects nan, inf and bools)."""
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if not (is_real and math.isfinite(value) and low < value <= high):
        upper = "" if high == math.inf else f" and at most {high:g}"
        raise InputError(f"{name} must be greater than {low:g}{upper}, got {value!r}")


def flop_optimal_chunk(
    head_dim_v: float, qk_ratio: float, causal_factor: float = 0.5, *, variant: str = "sig"
) -> float:
    """FLOP-optimal chunk size: Eq. 111 for mLSTMsig, sqrt(c0 / c2) of the exp row for mLSTMexp."""
    (c2, _, c0), _ = _coefficients(variant, head_dim_v, qk_ratio, 4, causal_factor)
    return math.sqrt(c0 / c2)


def runtime_optimal_chunk(
    variant: str,
    ceilings: Ceilings,
    head_dim_v: float,
    qk_ratio: float,
    state_bytes: float = 4,
    causal_factor: float = 0.5,
) -> float:
    """Runtime-optimal chunk size L* under the additive model: Eq. 121 (sig) or its mLSTMexp variant."""
    (c2, _, c0), (_, m0) = _coefficients(variant, head_dim_v, qk_ratio, state_bytes, causal_factor)
    return math.sqrt((c0 + ceilings.ridge * m0) / c2)


def runtime_per_head(
    variant: str,
    ceilings: Ceilings,
    chunk_size: float,
    seq_len: float,
    head_dim_v: float,
    qk_ratio: float,
    state_bytes: float = 4,
    causal_factor: float = 0.5,
) -> float:
    """Eq. 116 for one head and one sequence in seconds: (T/L)(F(L)/alpha + M(L)/beta).

    Multiply by batch * heads for Eq. 116 itself; for mLSTMexp the same model with the exp counts.
    """
    (c2, c1, c0), (m1, m0) = _coefficients(variant, head_dim_v, qk_ratio, state_bytes, causal_factor)
    L = chunk_size
    flops = c2 * L * L + c1 * L + c0
    nbytes = m1 * L + m0
    return seq_len / L * (flops / ceilings.flops + nbytes / ceilings.bandwidth)


def intensity_crossover_chunk(
    variant: str,
    ceilings: Ceilings,
    head_dim_v: float,
    qk_ratio: float,
    state_bytes: float = 4,
    causal_factor: float = 0.5,
) -> float:
    """Chunk size where the intensity F(L)/M(L) (Eq. 118) equals the ridge alpha/beta.

    Solves c2 L^2 + (c1 - r m1) L + (c0 - r m0) = 0 for its positive root (r = ridge); below it the kernel
    is memory-bound, above it compute-bound.
    """
    (c2, c1, c0), (m1, m0) = _coefficients(variant, head_dim_v, qk_ratio, state_bytes, causal_factor)
    r = ceilings.ridge
    b, c = c1 - r * m1, c0 - r * m0
    return (-b + math.sqrt(b * b - 4 * c2 * c)) / (2 * c2)


def admissible_chunk_sizes(seq_len: int) -> list[int]:
    """Chunk sizes the TFLA kernels run: powers of two >= 64 that divide seq_len
    (docs/reference/mlstm-math.md#optimal-chunk-size)."""
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len <= 0:
        raise InputError(f"seq_len must be a positive integer, got {seq_len!r}")
    sizes = []
    size = MIN_RUNNABLE_CHUNK
    while size <= seq_len and seq_len % size == 0:
        sizes.append(size)
        size *= 2
    return sizes


def runnable_chunk(
    variant: str,
    ceilings: Ceilings,
    head_dim_v: float,
    qk_ratio: float,
    seq_len: int,
    state_bytes: float = 4,
    causal_factor: float = 0.5,
) -> tuple[int, str]:
    """The admissible chunk size next to L* with the smaller modelled runtime, and why it was chosen.

    Evaluates Eq. 116 (exp counts for mLSTMexp) at the admissible sizes just below and just above L*.
    """
    sizes = admissible_chunk_sizes(seq_len)
    if not sizes:
        raise InputError(
            f"seq_len {seq_len} has no admissible chunk size (a multiple of {MIN_RUNNABLE_CHUNK})"
        )
    optimum = runtime_optimal_chunk(variant, ceilings, head_dim_v, qk_ratio, state_bytes, causal_factor)
    below = [L for L in sizes if L <= optimum]
    above = [L for L in sizes if L >= optimum]
    if not below:
        return sizes[0], f"L*={optimum:.1f} is below the smallest admissible chunk size {sizes[0]}"
    if not above:
        return sizes[-1], f"L*={optimum:.1f} is above the largest admissible chunk size {sizes[-1]}"
    low, high = below[-1], above[0]
    if low == high:
        return low, f"L*={optimum:.1f} is itself admissible"

    def modelled(L):
        return runtime_per_head(
            variant, ceilings, L, seq_len, head_dim_v, qk_ratio, state_bytes, causal_factor
        )

    chosen, other = (low, high) if modelled(low) <= modelled(high) else (high, low)
    excess = modelled(other) / modelled(chosen) - 1
    return chosen, (
        f"L*={optimum:.1f} lies between the admissible {low} and {high}; "
        f"the Eq. 116 model is {100 * excess:.1f}% slower at {other}"
    )
