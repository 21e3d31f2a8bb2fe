"""Kernel registry: every benchmarked kernel (ours and the peers') is one `KernelSpec`.

A spec knows how to build inputs for a sweep point, how to run the kernel forward (the harness does the
backward through autograd for mode ``fwdbw``), which FLOP/byte model family it belongs to, how to check
itself against that family's float64 reference, and whether it is available here (and why not).

Adapters live one module per peer in `tflabench.bench.adapters` and import their peer package lazily
inside functions; they call `register(spec)` at import time of the adapter module, which
`all_kernels()` triggers.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tflabench.core import FAMILIES, MODES, SweepPoint


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""
    version: str | None = None


@dataclass(frozen=True)
class CheckResult:
    """Outcome of a reference check: the kernel's output vs its family's float64 reference."""

    passed: bool
    rel_error: float
    tolerance: float
    detail: str = ""


@dataclass
class KernelSpec:
    """A benchmarkable kernel.

    Attributes:
        name: unique, e.g. ``"tflabench.mlstm_sig.xl_chunk"`` or ``"fla.chunk_simple_gla"``.
        family: one of FAMILIES.
        package: distribution name whose version is recorded (None for torch built-ins / our own).
        uses_chunk_size: whether the sweep's chunk_size axis applies.
        uses_tiling: whether the sweep's tilings apply (the point's ``tiling``; ``unsupported`` rejects a
            tiling that does not fit the point and raises `InputError` for one the kernel does not know).
        availability: () -> Availability (package importable, GPU present, ...). Must not raise.
        unsupported: (point) -> reason string if the point cannot run (head dim, divisibility), else None.
        make_inputs: (point, device) -> dict of tensors/args; fresh random (never zeros); tensors that need
            gradients have requires_grad set when point.mode == "fwdbw".
        run: (inputs) -> output tensor (or tuple whose first element is the output); the harness calls
            backward on it for mode fwdbw.
        reference_check: (device, dtype, configuration=None, full_size=False) -> CheckResult at a small
            size against the family's float64 reference; given a sweep point (``configuration``), at that
            point's heads, head dims, chunk size and tiling (the configuration that is timed) with a small
            batch and length, or with ``full_size`` at the point's own size.
        params: extra recorded parameters (e.g. {"variant": "sig", "normalize": False}).
        point_params: (point, device) -> parameters decided per point on the measuring device (the choice
            of a kernel that picks its algorithm by itself, with the reason), added to the row's params.
        resolved_tiling: (point) -> what the kernel runs for the point's tiling (compared with ==), so that
            a sweep can name the tilings that give it the same kernels at a point (`sweep.same_tilings`).
        modes: the modes this kernel supports; a mode outside it is skipped with ``mode_reasons[mode]``.
        first_call_s: typical first-call time on a GPU (compilation and autotuning), measured. The sweep
            runs kernels with the smallest value first and adds it to the per-point time limit, so that a
            peer that autotunes for minutes neither blocks the others nor times out by design.
    """

    name: str
    family: str
    package: str | None
    uses_chunk_size: bool
    availability: Callable[[], Availability]
    unsupported: Callable[[SweepPoint], str | None]
    make_inputs: Callable[[SweepPoint, Any], dict]
    run: Callable[[dict], Any]
    reference_check: Callable[..., CheckResult]
    params: dict = field(default_factory=dict)
    uses_tiling: bool = False
    point_params: Callable[[SweepPoint, Any], dict] | None = None
    resolved_tiling: Callable[[SweepPoint], Any] | None = None
    modes: tuple[str, ...] = MODES
    mode_reasons: dict = field(default_factory=dict)
    first_call_s: float = 0.0

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            known = ", ".join(FAMILIES)
            raise ValueError(f"kernel {self.name}: unknown family {self.family!r} (known: {known})")


_REGISTRY: dict[str, KernelSpec] = {}

#: Adapter modules imported by `all_kernels()`; each registers its specs at import (peers imported lazily).
ADAPTER_MODULES = (
    "tflabench.bench.adapters.tflabench_mlstm",
    "tflabench.bench.adapters.mlstm_kernels",
    "tflabench.bench.adapters.flash_attention",
    "tflabench.bench.adapters.fla",
    "tflabench.bench.adapters.lightning_attn",
    "tflabench.bench.adapters.mamba",
    "tflabench.bench.adapters.power_attention",
)


def register(spec: KernelSpec) -> KernelSpec:
    if spec.name in _REGISTRY:
        raise ValueError(f"kernel {spec.name!r} registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def _load_adapters() -> None:
    for module in ADAPTER_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise


def all_kernels() -> dict[str, KernelSpec]:
    _load_adapters()
    return dict(_REGISTRY)


def get_kernel(name: str) -> KernelSpec:
    kernels = all_kernels()
    if name not in kernels:
        from tflabench.errors import InputError

        raise InputError(f"unknown kernel {name!r} (see `tflabench kernels`)")
    return kernels[name]
