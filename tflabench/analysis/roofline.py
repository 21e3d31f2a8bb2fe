"""Roofline bound and runtime models (TFLA paper App. G, Eqs. 112-114 and 119;
docs/reference/mlstm-math.md#runtime-model).

With alpha = peak FLOP/s and beta = bandwidth of the chosen ceilings (datasheet or measured):
attainable FLOP/s = min(alpha, beta I); additive runtime F/alpha + B/beta (no compute/memory overlap, the
model behind Eq. 116 and the optimal chunk size); overlapped runtime max(F/alpha, B/beta) (perfect overlap).
"""

from __future__ import annotations

from dataclasses import dataclass

from tflabench.analysis.hardware import Ceilings
from tflabench.analysis.models import Cost, kernel_cost


def attainable_flops(ceilings: Ceilings, intensity: float) -> float:
    """Roofline bound min(alpha, beta * I) in FLOP/s (Eq. 119)."""
    return min(ceilings.flops, ceilings.bandwidth * intensity)


def runtime_additive(cost: Cost, ceilings: Ceilings) -> float:
    """F / alpha + B / beta in seconds (Eq. 113; summed over a problem this is Eq. 116)."""
    return cost.flops / ceilings.flops + cost.bytes / ceilings.bandwidth


def runtime_overlap(cost: Cost, ceilings: Ceilings) -> float:
    """max(F / alpha, B / beta) in seconds (Eq. 114)."""
    return max(cost.flops / ceilings.flops, cost.bytes / ceilings.bandwidth)


def bound(cost: Cost, ceilings: Ceilings) -> str:
    """ "compute" if the intensity reaches the ridge alpha / beta, else "memory"."""
    return "compute" if cost.intensity >= ceilings.ridge else "memory"


@dataclass(frozen=True)
class RooflinePoint:
    """Model of one call at one chunk size (None for kernels without one); times in seconds."""

    chunk_size: int | None
    cost: Cost
    attainable_flops: float
    runtime_additive: float
    runtime_overlap: float
    bound: str


def roofline_point(family: str, ceilings: Ceilings, chunk_size: int | None, **cost_kwargs) -> RooflinePoint:
    """Cost, roofline bound and both runtime models of one `kernel_cost(family, ...)` call."""
    cost = kernel_cost(family, chunk_size=chunk_size, **cost_kwargs)
    return RooflinePoint(
        chunk_size=chunk_size,
        cost=cost,
        attainable_flops=attainable_flops(ceilings, cost.intensity),
        runtime_additive=runtime_additive(cost, ceilings),
        runtime_overlap=runtime_overlap(cost, ceilings),
        bound=bound(cost, ceilings),
    )
