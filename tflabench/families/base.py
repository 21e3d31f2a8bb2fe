"""What a kernel family is (`Family`) and the vocabulary of its FLOP/byte model (`Problem`, `Cost`).

Counting convention of every model (docs/reference/mlstm-math.md#flop-and-byte-counts): a
multiply-accumulate is 2 FLOPs; elementwise and scan work is counted but does not run on tensor cores;
bytes are compulsory HBM traffic; a `Cost` is the whole problem (batch and heads included), forward only
(`tflabench.analysis.models.kernel_cost` adds the backward).

Family modules import torch only inside the functions that need it (reference, random inputs), so that
the analysis commands, which use the models only, start without it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tflabench.errors import InputError

MAX_SIZE = 2**31 - 1


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


@dataclass(frozen=True)
class Family:
    """One kernel family: everything the harness and the analysis know about it, defined in its module
    ``tflabench.families.<name>`` as ``FAMILY``.

    Attributes:
        name: one of `tflabench.core.FAMILIES`.
        reference: the float64 reference; takes the layout-neutral inputs named in `reference_inputs` as
            keyword arguments and returns the output [B, T, H, Dv] in float64.
        reference_inputs: the names of the inputs `reference` takes.
        random_inputs: (sampler, fixed) -> fresh random layout-neutral inputs at ``sampler.point``
            (`tflabench.families.tensors.InputSampler`); ``fixed`` holds the caller's constants.
        cost: (problem, **family_params) -> forward `Cost`; its keyword parameters are the family's
            model parameters (``formulation`` for the families that have several).
        default_chunk_size: the chunk size of the model when none is given (the kernels' default);
            None for a family without chunks.
    """

    name: str
    reference: Callable[..., Any]
    reference_inputs: tuple[str, ...]
    random_inputs: Callable[[Any, Mapping[str, Any]], dict[str, Any]]
    cost: Callable[..., Cost]
    default_chunk_size: int | None


# ---------------------------------------------------------------------------------------------- validation
def make_problem(batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size, dtype_bytes, state_bytes,
                 causal_factor, default_chunk_size: int | None = None) -> Problem:
    """Validate sizes (positive integers); chunk_size None -> min(default_chunk_size, seq_len)."""
    if chunk_size is None:
        seq_len = check_positive_int("seq_len", seq_len)
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
        check_positive_int(name, value)
    if chunk_size > seq_len:
        raise InputError(f"chunk_size ({chunk_size}) must not exceed seq_len ({seq_len})")
    if not (isinstance(causal_factor, numbers.Real) and 0.5 <= causal_factor <= 1):
        raise InputError(f"causal_factor must be in [0.5, 1], got {causal_factor!r}")
    return Problem(**sizes, causal_factor=float(causal_factor))


def check_positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 < value <= MAX_SIZE:
        raise InputError(f"{name} must be a positive integer (at most {MAX_SIZE}), got {value!r}")
    return int(value)


def check_positive(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise InputError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise InputError(f"unknown {name} {value!r} (known: {', '.join(choices)})")
