"""Measure one (kernel, point) in the current process.

Order per point (docs/reference/paper-numbers.md#measurement-method, avoiding the reference harness's pitfalls
of docs/reference/peers.md#pitfalls-of-the-reference-harness):

1. correctness gate: ``spec.reference_check`` once per worker and configuration (dtype, heads, head dims,
   chunk size, tiling) at a small batch and length, or with check size "full" at the point's own size;
   a failed check ends the point with status ``failed_check`` and nothing is timed;
2. fresh random inputs from ``spec.make_inputs``;
3. warm-up calls (compile and autotune happen here), their wall time recorded as ``warmup_s``;
4. timed calls: on CUDA one pair of CUDA events per call, a 256 MB buffer zeroed before each call to
   flush the L2, gradients set to None between calls outside the timed region, the allocator kept warm
   (no ``empty_cache``); on the CPU interpreter ``time.perf_counter``. Median and interquartile range.
   On CUDA a round of timed calls whose interquartile range exceeds `MAX_SPREAD` of its median is timed
   again, up to `TIMING_ROUNDS` rounds, and the steadiest round is kept (`steadiest_round`), with the median
   CPU time of issuing a call (``issue_cpu_ms``: where it nears the call's time, the row may time the CPU,
   `schema.launch_bound`). NVML samples clocks, temperature and power meanwhile;
5. peak memory in a separate call: ``max_memory_allocated`` after ``reset_peak_memory_stats`` minus
   the memory allocated before the call (inputs, flush buffer and upstream gradient excluded). Empty on CPU.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tflabench.bench.registry import CheckResult, KernelSpec
from tflabench.core import SweepPoint
from tflabench.nvml import NvmlSampler
from tflabench.schema import MAX_SPREAD

CUDA = "cuda"
CPU_INTERPRETER = "cpu-interpreter"

#: The reference harness zeroes a 256 MB buffer before every timed call
#: (docs/reference/paper-numbers.md#measurement-method).
L2_FLUSH_BYTES = 256 * 10**6
#: Rounds of timed calls at most per point on CUDA: the first and, while unsteady, up to two more.
TIMING_ROUNDS = 3
#: A round whose calls took longer than this in all (ms) is not timed again: the point's time limit
#: (`--timeout`, warm-up included) was set for one round.
RETIME_ROUND_MS = 10_000.0


@dataclass(frozen=True)
class MeasureSettings:
    warmup: int = 10
    repeats: int = 30


def detect_device() -> str:
    """``"cuda"`` when a GPU is usable, else ``"cpu-interpreter"`` (Triton kernels on CPU tensors)."""
    return CUDA if torch.cuda.is_available() else CPU_INTERPRETER


def prepare_device() -> str:
    """`detect_device`; without CUDA, Triton kernels must run under the interpreter, which has to be
    switched on before any @triton.jit module is imported (callers import the adapters next)."""
    device = detect_device()
    if device == CPU_INTERPRETER:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def torch_device(device: str) -> torch.device:
    return torch.device("cuda") if device == CUDA else torch.device("cpu")


def check_dtype(device: str, dtype: str) -> str:
    """The dtype of the correctness gate: the point's, except bf16 under the Triton interpreter, which
    computes on the raw bits (cpu-and-gpu-environments.md), so the gate runs in float32 there."""
    return "float32" if device == CPU_INTERPRETER and dtype == "bfloat16" else dtype


def summarize_times(times_ms: list[float]) -> tuple[float, float, float]:
    """(median, 25th percentile, 75th percentile) in ms."""
    if len(times_ms) == 1:
        return times_ms[0], times_ms[0], times_ms[0]
    q25, median, q75 = statistics.quantiles(times_ms, n=4, method="inclusive")
    return median, q25, q75


def spread(times_ms: list[float]) -> float:
    """Interquartile range over median of a round of timed calls."""
    median, q25, q75 = summarize_times(times_ms)
    return (q75 - q25) / median if median > 0 else 0.0


@dataclass(frozen=True)
class TimedRound:
    """One round of timed calls: each call's time in ms and, on CUDA, the CPU time in ms it took to issue
    the call (the kernel's Python and its launches, no synchronization; None on the CPU interpreter)."""

    times_ms: list[float]
    issue_ms: list[float] | None = None


def steadiest_round(time_round: Callable[[], TimedRound], rounds: int) -> tuple[TimedRound, int]:
    """Time rounds (``time_round``) until one has a `spread` of at most `MAX_SPREAD`, ``rounds`` were timed
    or a round took more than `RETIME_ROUND_MS`; returns the round of the smallest spread and the number of
    rounds timed. A disturbance of a few calls (another process, a clock change) widens one round; a kernel
    whose times are spread by nature stays spread, and its row shows it."""
    timed = [time_round()]
    while (spread(timed[-1].times_ms) > MAX_SPREAD and len(timed) < rounds
           and sum(timed[-1].times_ms) <= RETIME_ROUND_MS):
        timed.append(time_round())
    return min(timed, key=lambda round_: spread(round_.times_ms)), len(timed)


class KernelStep:
    """One call of a kernel on fixed inputs: forward under no_grad, or forward + backward with a fixed
    random upstream gradient (created at the first call, i.e. during warm-up)."""

    def __init__(self, spec: KernelSpec, inputs: dict, mode: str) -> None:
        self._run = spec.run
        self._inputs = inputs
        self._backward = mode == "fwdbw"
        self._leaves = [t for t in inputs.values() if isinstance(t, torch.Tensor) and t.requires_grad]
        self._grad_out: torch.Tensor | None = None

    def reset(self) -> None:
        """Drop the input gradients of the previous call (kept outside the timed region)."""
        for tensor in self._leaves:
            tensor.grad = None

    def __call__(self) -> torch.Tensor:
        if not self._backward:
            with torch.no_grad():
                return _primary_output(self._run(self._inputs))
        out = _primary_output(self._run(self._inputs))
        if self._grad_out is None:
            self._grad_out = torch.randn_like(out)
        out.backward(self._grad_out)
        return out


def _primary_output(result: Any) -> torch.Tensor:
    return result[0] if isinstance(result, (tuple, list)) else result


def _synchronize(device: str) -> None:
    if device == CUDA:
        torch.cuda.synchronize()


def warm_up(step: KernelStep, calls: int, device: str) -> float:
    """Run ``calls`` untimed calls; returns their wall time in seconds (compile + autotune included)."""
    start = time.perf_counter()
    for _ in range(calls):
        step.reset()
        step()
    _synchronize(device)
    return time.perf_counter() - start


_flush_buffer: torch.Tensor | None = None


def _l2_flush_buffer() -> torch.Tensor:
    global _flush_buffer
    if _flush_buffer is None:
        _flush_buffer = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda")
    return _flush_buffer


def time_calls_cuda(step: KernelStep, repeats: int) -> TimedRound:
    """Per-call times in ms from CUDA events, the L2 flushed before every call, and the CPU time of issuing
    each call (`schema.launch_bound`: where it nears the call's time, the row may time the CPU)."""
    flush = _l2_flush_buffer()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(repeats)]
    issue_ms = []
    for start, end in zip(starts, ends, strict=True):
        step.reset()
        flush.zero_()
        start.record()
        issued = time.perf_counter()
        step()
        issue_ms.append((time.perf_counter() - issued) * 1e3)
        end.record()
    torch.cuda.synchronize()
    return TimedRound([start.elapsed_time(end) for start, end in zip(starts, ends, strict=True)], issue_ms)


def time_calls_cpu(step: KernelStep, repeats: int) -> TimedRound:
    """Per-call wall times in ms (CPU tensors, Triton interpreter)."""
    times = []
    for _ in range(repeats):
        step.reset()
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return TimedRound(times)


def peak_memory_mib(step: KernelStep) -> float:
    """Peak CUDA memory of one call above what was allocated before it, in MiB."""
    step.reset()
    gc.collect()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    step.reset()
    return peak / 2**20


class ReferenceGate:
    """Runs each kernel's reference check once per configuration (dtype, heads, head dims, chunk size,
    tiling) and remembers the outcome: every configuration that is timed has been checked (a peer can be
    right at one chunk size and head dim and wrong at another).

    check_at: "small" checks each configuration at the kernel's small check size; "full" at the size of
    the point, once per batch and length too (a peer can be wrong at the small size only, or at the timed
    size only; the float64 reference then needs the memory and time of the full size)."""

    def __init__(self, device: str, check_at: str = "small") -> None:
        self._device = device
        self._full_size = check_at == "full"
        self._results: dict[tuple, CheckResult] = {}

    def check(self, spec: KernelSpec, point: SweepPoint) -> CheckResult:
        dtype = check_dtype(self._device, point.dtype)
        key = (spec.name, dtype, point.heads, point.head_dim_qk, point.head_dim_v, point.chunk_size,
               point.tiling)
        if self._full_size:
            key += (point.batch, point.seq_len)
        if key not in self._results:
            device = torch_device(self._device)
            full = {"full_size": True} if self._full_size else {}
            self._results[key] = spec.reference_check(device, dtype, point, **full)
        return self._results[key]


def failed_check_reason(check: CheckResult) -> str:
    reason = f"reference check failed: rel error {check.rel_error:.3g} > tolerance {check.tolerance:.3g}"
    return f"{reason} ({check.detail})" if check.detail else reason


def measure_point(spec: KernelSpec, point: SweepPoint, device: str, settings: MeasureSettings,
                  gate: ReferenceGate) -> dict[str, Any]:
    """Gate, warm up, time and measure one point; returns the measured columns of the results table.

    Exceptions (OOM, compiler errors, ...) propagate: the worker turns them into the row's status.
    """
    check = gate.check(spec, point)
    measured: dict[str, Any] = {"check_rel_error": check.rel_error}
    if spec.point_params is not None:
        measured["point_params"] = spec.point_params(point, torch_device(device))
    if not check.passed:
        return {**measured, "status": "failed_check", "reason": failed_check_reason(check)}
    step = KernelStep(spec, spec.make_inputs(point, torch_device(device)), point.mode)
    measured["warmup_s"] = warm_up(step, settings.warmup, device)
    time_calls = time_calls_cuda if device == CUDA else time_calls_cpu
    rounds = TIMING_ROUNDS if device == CUDA else 1
    with NvmlSampler() as sampler:
        kept, timed = steadiest_round(lambda: time_calls(step, settings.repeats), rounds)
    median, q25, q75 = summarize_times(kept.times_ms)
    issue = statistics.median(kept.issue_ms) if kept.issue_ms else None
    peak = peak_memory_mib(step) if device == CUDA else None
    return {**measured, "status": "ok", "reason": "", "time_ms": median, "time_ms_q25": q25,
            "time_ms_q75": q75, "repeats": len(kept.times_ms), "timing_rounds": timed, "issue_cpu_ms": issue,
            "peak_mem_mib": peak, **sampler.summary()}
