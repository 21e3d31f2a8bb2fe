"""Machinery shared by the adapters: availability probes and the `KernelSpec` builder that ties a peer's
layout mapping to its family's float64 reference (docs/reference/peers.md#conventions-of-the-adapters).

An adapter describes its peer by a `PeerMapping`: how layout-neutral inputs (`tflabench.bench.references`)
become the peer's call arguments, the call itself, and how the peer's output goes back to [B, T, H, Dv].
`peer_spec` builds the benchmark inputs and the reference check from that one description, so the check
exercises exactly the mapping that is timed. Layout conversions happen in ``make_inputs``, outside the timed
``run``.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from tflabench.bench import references
from tflabench.bench.registry import Availability, CheckResult, KernelSpec
from tflabench.core import MODES, SweepPoint

NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"

#: Size of every reference check unless an adapter needs another (Dqk != Dv on purpose).
CHECK_POINT = SweepPoint(batch=2, seq_len=128, heads=2, head_dim_qk=64, head_dim_v=32, chunk_size=64)

NeutralInputs = Callable[[SweepPoint, torch.device], dict]


@dataclass(frozen=True)
class PeerMapping:
    """How a kernel is called, in terms of the layout-neutral inputs of its family.

    to_native: (neutral inputs, point) -> call arguments in the kernel's layout and gate convention;
    call: call arguments -> the kernel's output in its own layout;
    to_neutral: that output -> [B, T, H, Dv];
    grad_inputs: names of the call arguments that are differentiable leaves in mode ``fwdbw``;
    family_view: for kernels whose inputs are a structured special case of their family's (Mamba-1 as
    GLA), the family's reference inputs computed from the kernel's own; only the check calls it.
    """

    to_native: Callable[[dict, SweepPoint], dict]
    call: Callable[[dict], torch.Tensor]
    to_neutral: Callable[[torch.Tensor], torch.Tensor]
    grad_inputs: tuple[str, ...]
    family_view: Callable[[dict], dict] | None = None


def describe(exc: BaseException, limit: int = 240) -> str:
    """``"ExceptionType: first line of the message"``, shortened to ``limit`` characters."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def installed_version(distribution: str | None) -> str | None:
    """Version of an installed distribution, None if it is not installed (or no name is given)."""
    if distribution is None:
        return None
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def is_installed(module: str) -> bool:
    """Whether the top-level package of ``module`` can be found, without importing (running) it."""
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def peer_availability(
    module: str, distribution: str | None, load: Callable[[], Any] | None = None
) -> Callable[[], Availability]:
    """Availability of a peer: installed, a CUDA device, and the entry module imports (``load`` instead of a
    plain import where the peer needs one). Never raises: every failure becomes the reason."""

    def availability() -> Availability:
        version = installed_version(distribution)
        if not is_installed(module):
            reason = f"{distribution or module} is not installed (no module {module.split('.')[0]})"
            return Availability(False, reason, version)
        if not torch.cuda.is_available():
            return Availability(False, NO_CUDA, version)
        try:
            (load or (lambda: importlib.import_module(module)))()
        except Exception as exc:
            return Availability(False, f"importing {module} failed: {describe(exc)}", version)
        return Availability(True, "", version)

    return availability


def check_mapping(
    family: str, mapping: PeerMapping, make_neutral: NeutralInputs, point: SweepPoint, device: torch.device
) -> CheckResult:
    """Run ``mapping`` on fresh neutral inputs at ``point`` and compare its output [B, T, H, Dv] with the
    family's float64 reference of the same inputs; then once more on a fresh copy of the same inputs: two
    calls that differ by more than the tolerance fail the check as not deterministic (a race or a read of
    uninitialized memory; mlstm_kernels' chunkwise kernels at Dv 32, L 64 on Triton 3.6,
    results/gpu-tests/2026-11-22-mlstm-kernels-probes/README.md)."""
    neutral_values = make_neutral(point, device)

    def call() -> torch.Tensor:
        arguments = _prepared(mapping.to_native(neutral_values, point), mapping.grad_inputs, "fwd")
        with torch.no_grad():
            return mapping.to_neutral(mapping.call(arguments))

    output = call()
    view = mapping.family_view(neutral_values) if mapping.family_view else neutral_values
    reference = references.reference_output(family, view)
    error = references.relative_error(output, reference)
    tolerance = references.TOLERANCES[point.dtype]
    detail = f"{point.key()} on {device}"
    if tuple(output.shape) != tuple(reference.shape):
        return CheckResult(False, error, tolerance,
                           f"{detail}; output shape {tuple(output.shape)}, expected {tuple(reference.shape)}")
    if not error <= tolerance:
        detail += f"; {references.mismatch_summary(output, reference)}"
    repeat_difference = references.relative_error(call(), output)
    if not repeat_difference <= tolerance:
        detail += f"; not deterministic: a second call on the same inputs differs by {repeat_difference:.3g}"
    passed = error <= tolerance and repeat_difference <= tolerance
    return CheckResult(passed=passed, rel_error=error, tolerance=tolerance, detail=detail)


def configuration_check_point(check_point: SweepPoint, point: SweepPoint) -> SweepPoint:
    """The check point with the head count, head dims, chunk size and tiling of ``point`` (the chunk size
    when both have one): the gate checks the configuration that is about to be timed, at the check's small
    batch and a length of at least two chunks. Peers that autotune per head count and head dims (FLA) then
    tune once, in the check, for the timed points too. The dtype and mode stay the check point's."""
    chunk_size = point.chunk_size if check_point.chunk_size is not None else None
    seq_len = max(check_point.seq_len, 2 * chunk_size) if chunk_size else check_point.seq_len
    return replace(check_point, heads=point.heads, head_dim_qk=point.head_dim_qk, head_dim_v=point.head_dim_v,
                   chunk_size=chunk_size, seq_len=seq_len, tiling=point.tiling)


def family_inputs(family: str, **fixed: Any) -> NeutralInputs:
    """`references.random_inputs` of ``family`` with the constants ``fixed``."""

    def make_neutral(point: SweepPoint, device: torch.device) -> dict:
        return references.random_inputs(family, point, device, **fixed)

    return make_neutral


def _prepared(arguments: dict, grad_inputs: tuple[str, ...], mode: str) -> dict:
    """Tensors made contiguous leaves (the layout conversion happens here, not in the timed call);
    ``grad_inputs`` require gradients in mode fwdbw."""
    prepared = {}
    for name, value in arguments.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().contiguous().requires_grad_(mode == "fwdbw" and name in grad_inputs)
        prepared[name] = value
    return prepared


def peer_spec(
    name: str,
    family: str,
    mapping: PeerMapping,
    availability: Callable[[], Availability],
    *,
    package: str | None,
    uses_chunk_size: bool,
    unsupported: Callable[[SweepPoint], str | None] = lambda point: None,
    neutral_inputs: NeutralInputs | None = None,
    check_point: SweepPoint = CHECK_POINT,
    params: dict | None = None,
    mode_reasons: dict | None = None,
    first_call_s: float = 0.0,
    point_params: Callable[[SweepPoint, Any], dict] | None = None,
    uses_tiling: bool = False,
    resolved_tiling: Callable[[SweepPoint], Any] | None = None,
) -> KernelSpec:
    """A `KernelSpec` whose inputs and reference check both come from ``mapping``.

    neutral_inputs: the layout-neutral inputs, by default ``family_inputs(family)``; pass
    ``family_inputs(family, **constants)`` for a kernel's constants (scale, log_decay, degree, ...), or
    another generator where the kernel's inputs have more structure than its family's (with
    ``mapping.family_view``).
    check_point: the size of the reference check (its dtype is the checked one; chunk_size is dropped when
    the chunk axis does not apply). Given the point about to be timed, the check takes that point's heads,
    head dims, chunk size and tiling (`configuration_check_point`), unless ``unsupported`` rejects the
    result; with ``full_size``, the point itself (in mode fwd).
    uses_tiling: the sweep's tilings apply (see `KernelSpec`); resolved_tiling: what the kernel runs for a
    point's tiling (see `KernelSpec`).
    mode_reasons: the modes this kernel refuses, with the reason.
    first_call_s: typical compile + autotune time of the first call on a GPU (see `KernelSpec`).
    point_params: parameters the kernel decides per point on the device (see `KernelSpec`).
    """
    make_neutral = neutral_inputs or family_inputs(family)
    if not uses_chunk_size:
        check_point = replace(check_point, chunk_size=None)

    def make_inputs(point: SweepPoint, device: Any) -> dict:
        neutral_values = make_neutral(point, torch.device(device))
        return _prepared(mapping.to_native(neutral_values, point), mapping.grad_inputs, point.mode)

    def reference_check(device: Any, dtype: str, configuration: SweepPoint | None = None,
                        full_size: bool = False) -> CheckResult:
        point = replace(check_point, dtype=dtype, mode="fwd")
        if configuration is not None and full_size:
            point = replace(configuration, dtype=dtype, mode="fwd")
        elif configuration is not None:
            shrunk = configuration_check_point(point, configuration)
            point = point if unsupported(shrunk) else shrunk
        return check_mapping(family, mapping, make_neutral, point, torch.device(device))

    mode_reasons = mode_reasons or {}
    return KernelSpec(
        name=name,
        family=family,
        package=package,
        uses_chunk_size=uses_chunk_size,
        availability=availability,
        unsupported=unsupported,
        make_inputs=make_inputs,
        run=mapping.call,
        reference_check=reference_check,
        params=params or {},
        modes=tuple(mode for mode in MODES if mode not in mode_reasons),
        mode_reasons=mode_reasons,
        first_call_s=first_call_s,
        point_params=point_params,
        uses_tiling=uses_tiling,
        resolved_tiling=resolved_tiling,
    )


def tokens_first(tensor: torch.Tensor) -> torch.Tensor:
    """[B, H, T, ...] <-> [B, T, H, ...] (the same swap both ways)."""
    return tensor.transpose(1, 2)


def is_power_of_two(value: int) -> bool:
    return value > 0 and value & (value - 1) == 0
