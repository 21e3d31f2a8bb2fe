"""FLOPs and HBM bytes of one kernel call of any family: `kernel_cost`.

Each family's forward model is in its module (`tflabench.families`), under the counting convention of
docs/reference/mlstm-math.md#flop-and-byte-counts. This module adds the backward.

Forward+backward (mode ``"fwdbw"``), one convention for every family so that nominal TFLOP/s compare
across families (docs/reference/mlstm-math.md#forward-and-backward): FLOPs = 3.5 x forward (FlashAttention's
backward = 2.5 x forward; for the chunkwise kernels this is nominal -- TFLA's three gradient kernels each
recompute the intra-chunk logits); bytes = 3 x forward (the backward reads the forward inputs and dO and
writes their gradients, and touches the materialized states twice, recompute and state gradient: about
2 x the forward traffic, which is exactly the attention byte model without the log-sum-exp).
"""

from __future__ import annotations

import inspect

from tflabench.core import MODES
from tflabench.errors import InputError
from tflabench.families import family as get_family
from tflabench.families.base import Cost, check_choice, make_problem
from tflabench.families.mlstm import FORMULATIONS

BACKWARD_FLOP_FACTOR = 2.5
BACKWARD_BYTE_FACTOR = 2.0


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
    chunk_size None means the family's kernel default (`Family.default_chunk_size`); softmax attention and the
    mLSTM parallel/recurrent formulations ignore it. formulation applies to the mLSTM families only.
    family_params: mLSTM ``gate_bytes`` (default dtype_bytes), ``flop_table``; gla ``sub_chunk_size``,
    ``gate_bytes``, ``intra_matrix_bytes``; simple_gla ``gate_bytes``; lightning ``implementation``;
    mamba2_ssd ``ngroups``; power_attention ``degree``, ``expansion``, ``form`` ("chunked" or "attention").
    """
    kernel_family = get_family(family)
    check_choice("mode", mode, MODES)
    check_choice("formulation", formulation, FORMULATIONS)
    problem = make_problem(batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size, dtype_bytes,
                           state_bytes, causal_factor, default_chunk_size=kernel_family.default_chunk_size)
    parameters = set(inspect.signature(kernel_family.cost).parameters)
    if "formulation" in parameters:
        fixed = {"formulation": formulation}
    elif formulation != "chunkwise":
        raise InputError(f"formulation {formulation!r} applies to the mLSTM families only, not {family!r}")
    else:
        fixed = {}
    allowed = parameters - {"problem", *fixed}
    unknown = sorted(set(family_params) - allowed)
    if unknown:
        raise InputError(
            f"unknown parameter(s) {', '.join(unknown)} for family {family!r} "
            f"(known: {', '.join(sorted(allowed)) or 'none'})"
        )
    cost = kernel_family.cost(problem, **fixed, **family_params)
    if mode == "fwdbw":
        return Cost((1 + BACKWARD_FLOP_FACTOR) * cost.flops, (1 + BACKWARD_BYTE_FACTOR) * cost.bytes)
    return cost
