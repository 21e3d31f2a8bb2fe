"""Shared by the mLSTM families (`mlstm_exp`, `mlstm_sig`): their float64 reference hookup, random
inputs and FLOP/byte model; `mlstm_family` builds either family.

FLOP/byte model (TFLA paper App. F; docs/reference/mlstm-math.md#flop-and-byte-counts). Chunkwise FLOPs
are Table 17 **as printed** by default (``flop_table="printed"``), which is what the paper's Eqs.
111/116/118/121 use; ``flop_table="corrected"`` uses coefficient 2 instead of 4 for the mLSTMexp T*d_hv
term (the sum of the Table 14 rows and the reference code agree on 2). The mLSTMsig row is the same in
both tables (the reference code counts the printed row). Bytes: Table 9 (chunkwise), Table 11 (parallel),
Table 13 with the corrected total (recurrent). The chunkwise
formulas count T/L chunks (exact when L divides T). Limits of the chunkwise count, exactly (polynomial
identities, tested in tests/test_analysis_models.py):

* ``L = 1`` versus the recurrent count: the state terms agree (6 T d_qk d_hv in both); the chunkwise count
  is larger by T(d_qk + d_hv + 15 + F_c(2(d_qk + d_hv) + 6)) for sig and
  T(d_qk + 3 d_hv + 7 + F_c(2(d_qk + d_hv) + 10)) for exp (printed table) -- terms linear in the head dims:
  at L = 1 the chunkwise form still runs its 1x1 intra-chunk attention and the output combination.
* ``L = T`` versus the parallel count: the attention terms agree (2 F_c T^2 (d_qk + d_hv) in both); the
  chunkwise count differs by T^2 (4 F_c - 5.5) + T(4 d_qk d_hv + 2 d_qk + d_hv + 6.5) + 2 d_qk d_hv + 5
  for sig and T^2 (2 F_c - 5.5) + T(4 d_qk d_hv + 6 d_qk + 4 d_hv + 10.5) + 2 d_qk d_hv + 2 d_qk + 5 for
  exp: the one chunk still builds its inter-chunk state, and the gate-matrix bookkeeping differs
  (F_c-scaled in Table 8, unscaled in Table 10).

So Fig. 15's "L = 1 matches recurrent, L = T matches parallel" holds for the leading terms only. At its
shapes (T = 8192, F_c = 0.5) the chunkwise count exceeds the recurrent one by 0.2-1.3% at L = 1, and differs
from the parallel one at L = T by +7.7-7.8% for (d_qk, d_hv) = (256, 512), +3.0-3.2% for (128, 256) and
-0.2-0.3% for (64, 128).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tflabench.families.base import Cost, Family, Problem, check_choice, check_positive, make_problem

if TYPE_CHECKING:
    from torch import Tensor

    from tflabench.families.tensors import InputSampler

FORMULATIONS = ("chunkwise", "parallel", "recurrent")
FLOP_TABLES = ("printed", "corrected")
MLSTM_VARIANTS = {"mlstm_exp": "exp", "mlstm_sig": "sig"}
#: the xl_chunk kernels' default chunk size
DEFAULT_CHUNK_SIZE = 128


def mlstm_chunk_flop_coefficients(
    variant: str,
    head_dim_qk: float,
    head_dim_v: float,
    causal_factor: float = 0.5,
    flop_table: str = "printed",
) -> tuple[float, float, float]:
    """(c2, c1, c0) with per-chunk, per-head FLOPs c2 L^2 + c1 L + c0 (Table 17 chunkwise row times L/T)."""
    check_choice("variant", variant, MLSTM_VARIANTS.values())
    check_choice("flop_table", flop_table, FLOP_TABLES)
    dqk, dhv, fc = head_dim_qk, head_dim_v, causal_factor
    dd = dqk * dhv
    if variant == "sig":
        return fc * (2 * (dqk + dhv) + 6) + 1, 4 * dd + 2 * dqk + dhv + 11, 2 * dd + 5
    dhv_coefficient = 4 if flop_table == "printed" else 2
    return (
        fc * (2 * (dqk + dhv) + 8) + 1,
        2 * fc + 4 * dd + 6 * dqk + dhv_coefficient * dhv + 13,
        2 * dd + 2 * dqk + 5,
    )


def mlstm_chunk_byte_coefficients(
    variant: str,
    head_dim_qk: float,
    head_dim_v: float,
    qkv_bytes: float = 2,
    gate_bytes: float = 2,
    state_bytes: float = 4,
) -> tuple[float, float]:
    """(m1, m0) with per-chunk, per-head bytes m1 L + m0 (Table 9 totals)."""
    check_choice("variant", variant, MLSTM_VARIANTS.values())
    dqk, dhv = head_dim_qk, head_dim_v
    m1 = 4 * gate_bytes + 3 * (dqk + dhv) * qkv_bytes
    if variant == "sig":
        return m1, 2 * dqk * dhv * state_bytes
    return m1 + 2 * state_bytes, 2 * (dqk * dhv + dqk + 1) * state_bytes


def mlstm_flops_per_head(
    variant: str,
    formulation: str,
    seq_len: float,
    head_dim_qk: float,
    head_dim_v: float,
    chunk_size: float | None = None,
    causal_factor: float = 0.5,
    flop_table: str = "printed",
) -> float:
    """Forward FLOPs of one head and one sequence (Table 17); chunk_size is used by "chunkwise" only."""
    check_choice("variant", variant, MLSTM_VARIANTS.values())
    check_choice("formulation", formulation, FORMULATIONS)
    T, dqk, dhv, fc = seq_len, head_dim_qk, head_dim_v, causal_factor
    dd = dqk * dhv
    if formulation == "chunkwise":
        c2, c1, c0 = mlstm_chunk_flop_coefficients(variant, dqk, dhv, fc, flop_table)
        L = chunk_size
        return T / L * (c2 * L * L + c1 * L + c0)
    if formulation == "parallel":
        if variant == "sig":
            return T * T * fc * (2 * (dqk + dhv) + 2) + 6.5 * T * T + 4.5 * T
        return T * T * fc * (2 * (dqk + dhv) + 6) + 2 * T * fc + 6.5 * T * T + 2.5 * T
    if variant == "sig":
        return T * (6 * dd + dqk + 2)
    return T * (6 * dd + 7 * dqk + dhv + 12)


def mlstm_bytes_per_head(
    variant: str,
    formulation: str,
    seq_len: float,
    head_dim_qk: float,
    head_dim_v: float,
    chunk_size: float | None = None,
    qkv_bytes: float = 2,
    gate_bytes: float = 2,
    state_bytes: float = 4,
) -> float:
    """Forward HBM bytes of one head and one sequence (Tables 9, 11, 13); chunk_size for "chunkwise" only."""
    check_choice("variant", variant, MLSTM_VARIANTS.values())
    check_choice("formulation", formulation, FORMULATIONS)
    T, dqk, dhv = seq_len, head_dim_qk, head_dim_v
    io = (dqk + dhv) * qkv_bytes
    exp_states = 0 if variant == "sig" else 1
    if formulation == "chunkwise":
        m1, m0 = mlstm_chunk_byte_coefficients(variant, dqk, dhv, qkv_bytes, gate_bytes, state_bytes)
        return T / chunk_size * (m1 * chunk_size + m0)
    if formulation == "parallel":
        return 2 * T * (gate_bytes + io + exp_states * state_bytes)
    state = dqk * dhv + exp_states * (dqk + 1)
    return T * (2 * gate_bytes + 2 * io + 2 * state * state_bytes)


def mlstm_forward_memory_bytes(
    variant: str,
    *,
    batch: int,
    seq_len: int,
    heads: int,
    head_dim_qk: int,
    head_dim_v: int,
    chunk_size: int,
    dtype_bytes: int = 2,
    state_bytes: int = 4,
) -> float:
    """Forward peak memory of the chunkwise (xl_chunk) kernels in bytes
    (docs/reference/mlstm-math.md#memory).

    q, k, v, i, f and the output h in the input dtype, plus the materialized states C_0..C_Nc (and for
    mLSTMexp n, m and the per-step denominator and m_comb) in `state_bytes`. A benchmark's absolute peak
    adds its own buffers (the reference harness flushes L2 with a 256 MB buffer, Table R7).
    """
    check_choice("variant", variant, MLSTM_VARIANTS.values())
    problem = make_problem(
        batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size, dtype_bytes, state_bytes, 0.5
    )
    T, dqk, dhv = problem.seq_len, problem.head_dim_qk, problem.head_dim_v
    inputs_outputs = T * (2 * dqk + 2 * dhv + 2) * dtype_bytes
    n_states = math.ceil(T / problem.chunk_size) + 1
    if variant == "sig":
        states = n_states * dqk * dhv * state_bytes
    else:
        states = n_states * (dqk * dhv + dqk + 1) * state_bytes + 2 * T * state_bytes
    return float(problem.batch_heads * (inputs_outputs + states))


def mlstm_cost(
    problem: Problem,
    variant: str,
    formulation: str,
    gate_bytes: float | None = None,
    flop_table: str = "printed",
) -> Cost:
    p = problem
    gate_bytes = p.dtype_bytes if gate_bytes is None else check_positive("gate_bytes", gate_bytes)
    flops = mlstm_flops_per_head(variant, formulation, p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size,
                                 p.causal_factor, flop_table)
    nbytes = mlstm_bytes_per_head(variant, formulation, p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size,
                                  p.dtype_bytes, gate_bytes, p.state_bytes)
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


# ---------------------------------------------------------------------------------------------- reference
def reference(
    q: Tensor, k: Tensor, v: Tensor, i: Tensor, f: Tensor, *, variant: str, normalize: bool | None = None,
    eps: float = 1e-6, formulation: str = "recurrent",
) -> Tensor:
    """mLSTM cell output h-tilde by `tflabench.kernels.mlstm.reference` in float64.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H] gate pre-activations -> [B, T, H, Dv].
    formulation "recurrent" (m_0 = 0, the chunkwise kernels' convention) or "parallel" (m_0 = -inf).
    """
    from tflabench.families.tensors import f64
    from tflabench.kernels.mlstm import reference as mlstm_reference

    q, k, v, i, f = f64(q, k, v, i, f)
    if formulation == "parallel":
        return mlstm_reference.mlstm_parallel(q, k, v, i, f, variant=variant, normalize=normalize, eps=eps)
    return mlstm_reference.mlstm_recurrent(q, k, v, i, f, variant=variant, normalize=normalize, eps=eps)


def random_inputs(sample: InputSampler, fixed: Mapping[str, Any]) -> dict[str, Any]:
    """q, k, v, the input gate i ~ N(0, 1), the forget gate f ~ N(3, 1) (pre-activations), and the
    reference's defaults: normalize None, eps 1e-6, the recurrent formulation."""
    return {**sample.qkv(), "i": sample.per_token(), "f": sample.per_token(mean=3.0), "normalize": None,
            "eps": 1e-6, "formulation": "recurrent"}


def mlstm_family(name: str) -> Family:
    """The family `name` ("mlstm_exp" or "mlstm_sig"); only mLSTMsig takes ``normalize``."""
    variant = MLSTM_VARIANTS[name]

    def variant_reference(**inputs: Any) -> Tensor:
        return reference(**inputs, variant=variant)

    def cost(problem: Problem, formulation: str = "chunkwise", gate_bytes: float | None = None,
             flop_table: str = "printed") -> Cost:
        return mlstm_cost(problem, variant, formulation, gate_bytes, flop_table)

    normalize = ("normalize",) if variant == "sig" else ()
    return Family(
        name=name,
        reference=variant_reference,
        reference_inputs=("q", "k", "v", "i", "f", *normalize, "eps", "formulation"),
        random_inputs=random_inputs,
        cost=cost,
        default_chunk_size=DEFAULT_CHUNK_SIZE,
    )
