"""FLOP and HBM-byte models of every kernel family of the suite.

Counting convention (mlstm-tfla.md §9.1, baselines.md §0.3): a multiply-accumulate is 2 FLOPs; elementwise
and scan work is counted but does not run on tensor cores; bytes are compulsory HBM traffic. `kernel_cost`
returns the whole problem (batch and heads included).

mLSTM (TFLA paper App. F). Chunkwise FLOPs are Table 17 **as printed** by default (``flop_table="printed"``),
which is what the paper's Eqs. 111/116/118/121 use; ``flop_table="corrected"`` uses coefficient 2 instead of
4 for the mLSTMexp T*d_hv term (the sum of the Table 14 rows and the reference code agree on 2). The
mLSTMsig row is the same in both tables (the reference code counts the printed row, §9.6). Bytes:
Table 9 (chunkwise), Table 11 (parallel), Table 13 with the corrected total (recurrent). The chunkwise
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

Peers: the forward models of baselines.md §11.1 (details in §2-§9 there).

Forward+backward (mode ``"fwdbw"``), one convention for every family so that nominal TFLOP/s compare
across families: FLOPs = 3.5 x forward (FlashAttention's backward = 2.5 x forward, baselines.md §0.3/§2.2;
for the chunkwise kernels this is nominal -- TFLA's three gradient kernels each recompute the intra-chunk
logits); bytes = 3 x forward (the backward reads the forward inputs and dO and writes their gradients, and
touches the materialized states twice, recompute and state gradient: about 2 x the forward traffic, which is
exactly the attention byte model of baselines.md §2.3 without the log-sum-exp).
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass

from tflabench.core import FAMILIES, MODES
from tflabench.errors import InputError

FORMULATIONS = ("chunkwise", "parallel", "recurrent")
FLOP_TABLES = ("printed", "corrected")
MLSTM_VARIANTS = {"mlstm_exp": "exp", "mlstm_sig": "sig"}

BACKWARD_FLOP_FACTOR = 2.5
BACKWARD_BYTE_FACTOR = 2.0

#: chunk size a family's model uses when `chunk_size` is None (the kernels' defaults)
DEFAULT_CHUNK_SIZE = {
    "mlstm_exp": 128,
    "mlstm_sig": 128,
    "gla": 64,
    "simple_gla": 64,
    "lightning": 64,
    "mamba2_ssd": 256,
    "power_attention": 128,
}

#: expanded dimension of power attention: "tpow" d^p, "spow" C(d+p-1, p), "tspow" (tile 8 for p=2, 4 for
#: p=3), "retention" (the `retention` 1.0.7 Triton path: tile 16 for every p)
POWER_EXPANSIONS = ("retention", "tspow", "spow", "tpow")
_TSPOW_TILE = {2: 8, 3: 4}
_RETENTION_TILE = 16
MAX_SIZE = 2**31 - 1
MAX_POWER_DEGREE = 16
#: forms of a power attention kernel: the chunked state form, or the quadratic attention form
POWER_FORMS = ("chunked", "attention")


@dataclass(frozen=True)
class Cost:
    """FLOPs and HBM bytes of one kernel call (whole problem: batch and heads included)."""

    flops: float
    bytes: float

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP/byte."""
        return self.flops / self.bytes


@dataclass(frozen=True)
class Problem:
    """Validated shape and precision of one call; T = seq_len, K = head_dim_qk, V = head_dim_v, C = chunk."""

    batch: int
    seq_len: int
    heads: int
    head_dim_qk: int
    head_dim_v: int
    chunk_size: int
    dtype_bytes: int
    state_bytes: int
    causal_factor: float

    @property
    def batch_heads(self) -> int:
        return self.batch * self.heads


# ---------------------------------------------------------------------------------------------- mLSTM
def mlstm_chunk_flop_coefficients(
    variant: str,
    head_dim_qk: float,
    head_dim_v: float,
    causal_factor: float = 0.5,
    flop_table: str = "printed",
) -> tuple[float, float, float]:
    """(c2, c1, c0) with per-chunk, per-head FLOPs c2 L^2 + c1 L + c0 (Table 17 chunkwise row times L/T)."""
    _check_choice("variant", variant, MLSTM_VARIANTS.values())
    _check_choice("flop_table", flop_table, FLOP_TABLES)
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
    _check_choice("variant", variant, MLSTM_VARIANTS.values())
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
    _check_choice("variant", variant, MLSTM_VARIANTS.values())
    _check_choice("formulation", formulation, FORMULATIONS)
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
    _check_choice("variant", variant, MLSTM_VARIANTS.values())
    _check_choice("formulation", formulation, FORMULATIONS)
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
    """Forward peak memory of the chunkwise (xl_chunk) kernels in bytes (mlstm-tfla.md §4.8).

    q, k, v, i, f and the output h in the input dtype, plus the materialized states C_0..C_Nc (and for
    mLSTMexp n, m and the per-step denominator and m_comb) in `state_bytes`. A benchmark's absolute peak
    adds its own buffers (the reference harness flushes L2 with a 256 MB buffer, Table R7).
    """
    _check_choice("variant", variant, MLSTM_VARIANTS.values())
    problem = _problem(
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


def _mlstm(
    problem: Problem,
    variant: str,
    formulation: str,
    gate_bytes: float | None = None,
    flop_table: str = "printed",
) -> Cost:
    p = problem
    gate_bytes = p.dtype_bytes if gate_bytes is None else _check_positive("gate_bytes", gate_bytes)
    flops = mlstm_flops_per_head(
        variant,
        formulation,
        p.seq_len,
        p.head_dim_qk,
        p.head_dim_v,
        p.chunk_size,
        p.causal_factor,
        flop_table,
    )
    nbytes = mlstm_bytes_per_head(
        variant,
        formulation,
        p.seq_len,
        p.head_dim_qk,
        p.head_dim_v,
        p.chunk_size,
        p.dtype_bytes,
        gate_bytes,
        p.state_bytes,
    )
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


# ---------------------------------------------------------------------------------------------- peers
def _softmax_attention(problem: Problem) -> Cost:
    """2 S (F_c S) (d_qk + d_v) FLOPs (F_c = 0.5 causal, 1 non-causal); Q, K, V, O and fp32 LSE bytes."""
    p = problem
    S, K, V = p.seq_len, p.head_dim_qk, p.head_dim_v
    flops = 2 * S * (p.causal_factor * S) * (K + V)
    nbytes = S * (2 * K + 2 * V) * p.dtype_bytes + 4 * S
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


def _linear_attention_bytes(problem: Problem, gate_elements_per_token: int, gate_bytes: float) -> float:
    """q, k, v in, o out, gates, and the chunk states written once and read once (baselines.md §1)."""
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    return (
        T * (2 * K + V) * p.dtype_bytes
        + T * gate_elements_per_token * gate_bytes
        + T * V * p.dtype_bytes
        + 2 * (T / C) * K * V * p.state_bytes
    )


def _gla(
    problem: Problem, sub_chunk_size: int = 16, gate_bytes: float = 4, intra_matrix_bytes: float = 4
) -> Cost:
    """FLA chunk_gla: 4TKV + T(C+c)(K+V) (sub-chunk causal skipping replaces F_c); fp32 intra matrix A."""
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    c = min(_check_positive_int("sub_chunk_size", sub_chunk_size), C)
    flops = 4 * T * K * V + T * (C + c) * (K + V)
    nbytes = _linear_attention_bytes(p, K, _check_positive("gate_bytes", gate_bytes))
    nbytes += 2 * T * C * _check_positive("intra_matrix_bytes", intra_matrix_bytes)
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


def _simple_gla_flops(problem: Problem) -> float:
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    return 4 * T * K * V + 2 * p.causal_factor * T * C * (K + V)


def _simple_gla(problem: Problem, gate_bytes: float = 4) -> Cost:
    """FLA chunk_simple_gla: 4TKV + 2 F_c T C (K+V); one scalar gate per step (fp32 by default)."""
    nbytes = _linear_attention_bytes(problem, 1, _check_positive("gate_bytes", gate_bytes))
    return Cost(problem.batch_heads * _simple_gla_flops(problem), problem.batch_heads * nbytes)


def _lightning(problem: Problem, implementation: str = "fla") -> Cost:
    """implementation "fla": chunk_lightning_attn = simple GLA without a gate tensor (fixed decay).

    "lightning2": the LightningAttention-2 package: dense C x C intra blocks (F_c = 1), no state traffic,
    q and k re-read once per 32-wide value block (baselines.md §6.2).
    """
    _check_choice("implementation", implementation, ("fla", "lightning2"))
    p = problem
    T, K, V, C = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    if implementation == "fla":
        flops, nbytes = _simple_gla_flops(p), _linear_attention_bytes(p, 0, 0)
    else:
        flops = 4 * T * K * V + 2 * T * C * (K + V)
        nbytes = 2 * T * K * p.dtype_bytes * math.ceil(V / 32) + 2 * T * V * p.dtype_bytes
    return Cost(p.batch_heads * flops, p.batch_heads * nbytes)


def _mamba2_ssd(problem: Problem, ngroups: int = 1) -> Cost:
    """Mamba2 SSD with state dim N = head_dim_qk, head dim P = head_dim_v, chunk Q_c (baselines.md §7.2).

    FLOPs per batch element: H(4TNP + 2 F_c T Q_c P) + g 2 T Q_c N (C B^T over the full tile).
    Bytes: x, dt, B, C, y; fp32 dA_cumsum and C B^T written and read; chunk states written and read in
    `state_bytes` (fp32) by the chunk-state and state-passing kernels, then in the input dtype.
    """
    p = problem
    g = _check_positive_int("ngroups", ngroups)
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


def power_expanded_dim(head_dim: int, degree: int, expansion: str = "retention") -> int:
    """Expanded feature dimension D of power attention (baselines.md §9.2)."""
    _check_choice("expansion", expansion, POWER_EXPANSIONS)
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


def power_state_size(head_dim: int, value_dim: int, degree: int, expansion: str = "retention") -> int:
    """Elements of the per-head state of power attention: D (v + 1) (state S plus key-sum normalizer)."""
    return power_expanded_dim(head_dim, degree, expansion) * (value_dim + 1)


def _power_attention(problem: Problem, degree: int = 2, expansion: str = "retention",
                     form: str = "chunked") -> Cost:
    """Power attention, chunked: 4tDv + 2 F_c t c (d+v) FLOPs (baselines.md §9.4); in its attention form
    (``form="attention"``, retention's path for degrees without a chunked kernel): the causal attention
    matmuls 2 F_c t^2 (d+v), the power an elementwise op like softmax's exp.

    Bytes, chunked: inputs/outputs t(2d+2v)s, intra outputs Y and zeta written and re-read 2t(v+1)s, states
    written by update-state, read and written by discumsum, read by query-state 4(t/c)Dv s_h; attention
    form: inputs/outputs and the fp32 log gate and row normalizer.
    """
    p = problem
    degree = _check_positive_int("degree", degree)
    if degree > MAX_POWER_DEGREE:
        raise InputError(f"degree must be at most {MAX_POWER_DEGREE}, got {degree}")
    _check_choice("form", form, POWER_FORMS)
    t, d, v, c = p.seq_len, p.head_dim_qk, p.head_dim_v, p.chunk_size
    if form == "attention":
        flops = 2 * p.causal_factor * t * t * (d + v)
        nbytes = t * (2 * d + 2 * v) * p.dtype_bytes + 2 * 4 * t
        return Cost(p.batch_heads * float(flops), p.batch_heads * float(nbytes))
    D = power_expanded_dim(d, degree, expansion)
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


_PEER_MODELS = {
    "softmax_attention": _softmax_attention,
    "gla": _gla,
    "simple_gla": _simple_gla,
    "lightning": _lightning,
    "mamba2_ssd": _mamba2_ssd,
    "power_attention": _power_attention,
}


# ---------------------------------------------------------------------------------------------- entry point
def kernel_cost(
    family: str,
    *,
    batch: int,
    seq_len: int,
    heads: int,
    head_dim_qk: int,
    head_dim_v: int,
    chunk_size: int | None = None,
    mode: str = "fwd",
    dtype_bytes: int = 2,
    state_bytes: int = 4,
    causal_factor: float = 0.5,
    formulation: str = "chunkwise",
    **family_params,
) -> Cost:
    """FLOPs and HBM bytes of one call of a `family` kernel (see the module docstring for conventions).

    Shapes: q, k [batch, seq_len, heads, head_dim_qk], v and output [batch, seq_len, heads, head_dim_v].
    chunk_size None means the family's kernel default (`DEFAULT_CHUNK_SIZE`); softmax attention and the
    mLSTM parallel/recurrent formulations ignore it. formulation applies to the mLSTM families only.
    family_params: mLSTM ``gate_bytes`` (default dtype_bytes), ``flop_table``; gla ``sub_chunk_size``,
    ``gate_bytes``, ``intra_matrix_bytes``; simple_gla ``gate_bytes``; lightning ``implementation``;
    mamba2_ssd ``ngroups``; power_attention ``degree``, ``expansion``, ``form`` ("chunked" or "attention").
    """
    if family not in FAMILIES:
        raise InputError(f"unknown kernel family {family!r} (known: {', '.join(FAMILIES)})")
    _check_choice("mode", mode, MODES)
    _check_choice("formulation", formulation, FORMULATIONS)
    problem = _problem(
        batch,
        seq_len,
        heads,
        head_dim_qk,
        head_dim_v,
        chunk_size,
        dtype_bytes,
        state_bytes,
        causal_factor,
        default_chunk_size=DEFAULT_CHUNK_SIZE.get(family),
    )
    if family in MLSTM_VARIANTS:
        model, fixed = _mlstm, {"variant": MLSTM_VARIANTS[family], "formulation": formulation}
    elif formulation != "chunkwise":
        raise InputError(f"formulation {formulation!r} applies to the mLSTM families only, not {family!r}")
    else:
        model, fixed = _PEER_MODELS[family], {}
    allowed = set(inspect.signature(model).parameters) - {"problem", *fixed}
    unknown = sorted(set(family_params) - allowed)
    if unknown:
        raise InputError(
            f"unknown parameter(s) {', '.join(unknown)} for family {family!r} "
            f"(known: {', '.join(sorted(allowed)) or 'none'})"
        )
    cost = model(problem, **fixed, **family_params)
    if mode == "fwdbw":
        return Cost((1 + BACKWARD_FLOP_FACTOR) * cost.flops, (1 + BACKWARD_BYTE_FACTOR) * cost.bytes)
    return cost


# ---------------------------------------------------------------------------------------------- validation
def _problem(
    batch,
    seq_len,
    heads,
    head_dim_qk,
    head_dim_v,
    chunk_size,
    dtype_bytes,
    state_bytes,
    causal_factor,
    default_chunk_size: int | None = None,
) -> Problem:
    """Validate sizes (positive integers); chunk_size None -> min(default_chunk_size, seq_len)."""
    if chunk_size is None:
        seq_len = _check_positive_int("seq_len", seq_len)
        chunk_size = min(default_chunk_size or seq_len, seq_len)
    sizes = {
        "batch": batch,
        "seq_len": seq_len,
        "heads": heads,
        "head_dim_qk": head_dim_qk,
        "head_dim_v": head_dim_v,
        "chunk_size": chunk_size,
        "dtype_bytes": dtype_bytes,
        "state_bytes": state_bytes,
    }
    for name, value in sizes.items():
        _check_positive_int(name, value)
    if chunk_size > seq_len:
        raise InputError(f"chunk_size ({chunk_size}) must not exceed seq_len ({seq_len})")
    if not (isinstance(causal_factor, numbers.Real) and 0.5 <= causal_factor <= 1):
        raise InputError(f"causal_factor must be in [0.5, 1], got {causal_factor!r}")
    return Problem(**sizes, causal_factor=float(causal_factor))


def _check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 < value <= MAX_SIZE:
        raise InputError(f"{name} must be a positive integer (at most {MAX_SIZE}), got {value!r}")
    return int(value)


def _check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise InputError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise InputError(f"unknown {name} {value!r} (known: {', '.join(choices)})")
