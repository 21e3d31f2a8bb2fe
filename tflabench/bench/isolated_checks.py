"""Run kernels' reference checks each in its own process with a time limit.

A peer can abort the interpreter while compiling (mlstm_kernels' mLSTMexp xl_chunk on Hopper with Triton
3.6) or autotune for minutes (FLA, retention): each check runs in a child process, ``python -m
tflabench.bench.isolated_checks KERNEL DTYPE DEVICE``, which prints its `CheckResult` as one JSON
line. Children run concurrently (compilation is CPU-bound; the checks are tiny on the GPU), and all end
before a deadline. Used by ``scripts/gpu_adapters_check.py`` and the GPU tests.

`WRONG_KERNELS` are deliberately wrong adapters that the reference check must reject (SDPA without the
causal mask); they are not registered, only known to this runner.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from tflabench.core import SweepPoint

MODULE = "tflabench.bench.isolated_checks"
#: outcome statuses
PASSED, FAILED, CRASHED, TIMED_OUT, ERROR = "passed", "failed", "crash", "timeout", "error"
NOT_RUN = "not run"
#: name of the wrong adapter -> (SDPA backend, causal)
WRONG_KERNELS = {
    "wrong.sdpa_flash_non_causal": ("flash", False),
    "wrong.sdpa_math_non_causal": ("math", False),
}


@dataclass(frozen=True)
class KnownFailure:
    """A peer's defect on the measured toolchain: the outcome status it excuses, a text the outcome's
    detail must contain (empty: any), and the note shown for it. Anything else still fails."""

    status: str
    detail_contains: str
    note: str


#: kernel -> its known defects (docs/reference/peers.md#known-failures; the H200 adapter GPU-test logs under
#: results/gpu-tests/, results/gpu-tests/2026-11-22-mlstm-kernels-probes/README.md). The ones at Dv 32 fit
#: Triton's sm_90 defect with 32-wide dot blocks (triton-lang/triton #10573, #11366).
KNOWN_FAILURES = {
    "mlstm_kernels.mlstm_exp.xl_chunk": (
        KnownFailure(CRASHED, "", "aborts the Triton 3.6 compiler on Hopper (LLVM SLPVectorizer)"),
        KnownFailure(FAILED, "-dv32-",
                     "where it compiles, at Dv 32, L 64 wrong from t = 16 on in 2 of 3 runs (Triton 3.6, "
                     "H100, results/gpu-tests/2026-11-26-v12-kernel-suites)"),
    ),
    "mlstm_kernels.mlstm_exp.limit_chunk": (
        KnownFailure(ERROR, "illegal memory access",
                     "at Dqk 64, Dv 32, L 64 an illegal memory access (Triton 3.6, H200; wrong output in an "
                     "earlier run); correct at its Fig. 4 configuration (Dqk 128, Dv 256, L 64)"),
    ),
    "mlstm_kernels.mlstm_sig.xl_chunk": (
        KnownFailure(FAILED, "not deterministic",
                     "at Dv 32, L 64 two calls on the same inputs differ (Triton 3.6, H200); correct and "
                     "deterministic at Dqk 128, Dv 256, L 128"),
    ),
}


@dataclass(frozen=True)
class CheckOutcome:
    """One kernel's check: status, the check's numbers when it ran, seconds, and a one-line detail."""

    kernel: str
    status: str
    rel_error: float | None = None
    tolerance: float | None = None
    seconds: float | None = None
    detail: str = ""


def known_failure(outcome: CheckOutcome) -> KnownFailure | None:
    """The defect of its kernel listed in `KNOWN_FAILURES` that the outcome is (status and detail), or
    None."""
    return next((known for known in KNOWN_FAILURES.get(outcome.kernel, ())
                 if outcome.status == known.status and known.detail_contains in outcome.detail), None)


def is_known_failure(outcome: CheckOutcome) -> bool:
    """The outcome is one of its kernel's defects listed in `KNOWN_FAILURES`."""
    return known_failure(outcome) is not None


def load_kernel(name: str):
    """A registered kernel, or one of `WRONG_KERNELS`."""
    if name in WRONG_KERNELS:
        from tflabench.bench.adapters.flash_attention import sdpa_spec

        backend, causal = WRONG_KERNELS[name]
        return sdpa_spec(backend, causal=causal, name=name)
    from tflabench.bench.registry import get_kernel

    return get_kernel(name)


def _child_main(name: str, dtype: str, device: str, configuration: str | None = None) -> int:
    """Run one check in this process and print its result as a JSON line (exit 0 even if it failed).
    configuration: a `SweepPoint` as JSON, whose heads, head dims and chunk size the check takes."""
    point = SweepPoint(**json.loads(configuration)) if configuration else None
    result = load_kernel(name).reference_check(device, dtype, point)
    print(json.dumps(asdict(result)), flush=True)
    return 0


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


#: a line that states an exception: "torch.AcceleratorError: CUDA error: ...", "RuntimeError: ..."
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception): ")


def _error_line(stderr: str) -> str:
    """The last line of a child's stderr that states an exception, else its last line: a CUDA error's
    message ends with advice lines ("Search for `cudaErrorIllegalAddress' ...", "Compile with
    `TORCH_USE_CUDA_DSA` ...") that do not say what went wrong."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    stated = [line for line in lines if _EXCEPTION_LINE.match(line)]
    return stated[-1] if stated else _last_line(stderr)


def run_isolated(name: str, dtype: str, device: str, timeout_s: float,
                 configuration: SweepPoint | None = None) -> CheckOutcome:
    """Run the check of ``name`` (at the heads, head dims and chunk size of ``configuration`` when given) in a
    child process; a crash, timeout or exception becomes the outcome."""
    command = [sys.executable, "-m", MODULE, name, dtype, device]
    if configuration is not None:
        command.append(json.dumps(asdict(configuration)))
    start = time.perf_counter()
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return CheckOutcome(name, TIMED_OUT, seconds=timeout_s, detail=f"no result within {timeout_s:.0f} s")
    seconds = time.perf_counter() - start
    if child.returncode < 0:
        signal_name = signal.Signals(-child.returncode).name
        return CheckOutcome(name, CRASHED, seconds=seconds,
                            detail=f"{signal_name}: {_error_line(child.stderr) or 'no message'}")
    if child.returncode:
        return CheckOutcome(name, ERROR, seconds=seconds, detail=_error_line(child.stderr) or "no message")
    try:
        result = json.loads(_last_line(child.stdout))
    except json.JSONDecodeError:
        detail = f"no result line: {_last_line(child.stdout)!r}"
        return CheckOutcome(name, ERROR, seconds=seconds, detail=detail)
    status = PASSED if result["passed"] else FAILED
    return CheckOutcome(name, status, result["rel_error"], result["tolerance"], seconds, result["detail"])


def run_checks(
    names: Iterable[str], dtype: str, device: str, *, timeout_s: float, jobs: int, deadline_s: float,
    report: Callable[[CheckOutcome], None] = lambda outcome: None,
    configurations: Mapping[str, SweepPoint] | None = None,
) -> list[CheckOutcome]:
    """Checks of ``names`` in at most ``jobs`` concurrent children, all ending within ``deadline_s`` of the
    call: a check gets at most the time left (checks not started in time are NOT_RUN). ``report`` sees
    every outcome as it arrives; ``configurations`` maps a name to the point whose heads, head dims and chunk
    size its check takes. Returns the outcomes in the order of ``names``."""
    configurations = configurations or {}
    names = list(names)
    end = time.monotonic() + deadline_s

    def check(name: str) -> CheckOutcome:
        left = end - time.monotonic()
        if left <= 0:
            return CheckOutcome(name, NOT_RUN, detail=f"deadline of {deadline_s:.0f} s reached")
        outcome = run_isolated(name, dtype, device, min(timeout_s, left), configurations.get(name))
        report(outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(check, names))


if __name__ == "__main__":
    sys.exit(_child_main(*sys.argv[1:5]))
