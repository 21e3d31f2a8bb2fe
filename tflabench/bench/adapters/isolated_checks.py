"""Run kernels' reference checks each in its own process with a time limit.

A peer can abort the interpreter while compiling (mlstm_kernels' mLSTMexp xl_chunk on Hopper with Triton
3.6) or autotune for minutes (FLA, retention): each check runs in a child process, ``python -m
tflabench.bench.adapters.isolated_checks KERNEL DTYPE DEVICE``, which prints its `CheckResult` as one JSON
line. Children run concurrently (compilation is CPU-bound; the checks are tiny on the GPU), and all end
before a deadline. Used by ``scripts/gpu_adapters_check.py`` and the GPU tests.

`WRONG_KERNELS` are deliberately wrong adapters that the reference check must reject (SDPA without the
causal mask); they are not registered, only known to this runner.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

MODULE = "tflabench.bench.adapters.isolated_checks"
#: outcome statuses
PASSED, FAILED, CRASHED, TIMED_OUT, ERROR = "passed", "failed", "crash", "timeout", "error"
NOT_RUN = "not run"
#: name of the wrong adapter -> (SDPA backend, causal)
WRONG_KERNELS = {
    "wrong.sdpa_flash_non_causal": ("flash", False),
    "wrong.sdpa_math_non_causal": ("math", False),
}
#: known crashes on the measured toolchain (baselines.md §13): kernel -> note. Only a crash is excused: on
#: an H200 (2026-11-22) this kernel compiled, and a wrong result must still fail.
KNOWN_FAILURES = {
    "mlstm_kernels.mlstm_exp.xl_chunk": "aborts the Triton 3.6 compiler on Hopper (LLVM SLPVectorizer)",
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


def is_known_failure(outcome: CheckOutcome) -> bool:
    """A crash of a kernel listed in `KNOWN_FAILURES`."""
    return outcome.status == CRASHED and outcome.kernel in KNOWN_FAILURES


def load_kernel(name: str):
    """A registered kernel, or one of `WRONG_KERNELS`."""
    if name in WRONG_KERNELS:
        from tflabench.bench.adapters.flash_attention import sdpa_spec

        backend, causal = WRONG_KERNELS[name]
        return sdpa_spec(backend, causal=causal, name=name)
    from tflabench.bench.registry import get_kernel

    return get_kernel(name)


def _child_main(name: str, dtype: str, device: str) -> int:
    """Run one check in this process and print its result as a JSON line (exit 0 even if it failed)."""
    result = load_kernel(name).reference_check(device, dtype)
    print(json.dumps(asdict(result)), flush=True)
    return 0


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def run_isolated(name: str, dtype: str, device: str, timeout_s: float) -> CheckOutcome:
    """Run the check of ``name`` in a child process; a crash, timeout or exception becomes the outcome."""
    command = [sys.executable, "-m", MODULE, name, dtype, device]
    start = time.perf_counter()
    try:
        child = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return CheckOutcome(name, TIMED_OUT, seconds=timeout_s, detail=f"no result within {timeout_s:.0f} s")
    seconds = time.perf_counter() - start
    if child.returncode < 0:
        signal_name = signal.Signals(-child.returncode).name
        return CheckOutcome(name, CRASHED, seconds=seconds,
                            detail=f"{signal_name}: {_last_line(child.stderr) or 'no message'}")
    if child.returncode:
        return CheckOutcome(name, ERROR, seconds=seconds, detail=_last_line(child.stderr) or "no message")
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
) -> list[CheckOutcome]:
    """Checks of ``names`` in at most ``jobs`` concurrent children, all ending within ``deadline_s`` of the
    call: a check gets at most the time left (checks not started in time are NOT_RUN). ``report`` sees
    every outcome as it arrives. Returns the outcomes in the order of ``names``."""
    names = list(names)
    end = time.monotonic() + deadline_s

    def check(name: str) -> CheckOutcome:
        left = end - time.monotonic()
        if left <= 0:
            return CheckOutcome(name, NOT_RUN, detail=f"deadline of {deadline_s:.0f} s reached")
        outcome = run_isolated(name, dtype, device, min(timeout_s, left))
        report(outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(check, names))


if __name__ == "__main__":
    sys.exit(_child_main(*sys.argv[1:4]))
