#!/usr/bin/env python
"""Check every available kernel adapter on a GPU machine against its float64 reference (issue 5).

1. prints `tflabench kernels` (availability, package versions, reasons);
2. runs the reference check of every available kernel, in bf16 at its small check size, each in its own
   process with a time limit (`tflabench.bench.isolated_checks`), several at a time, plus the
   deliberately wrong adapter (SDPA FLASH without the causal mask), which the check must reject;
3. prints a summary table and a verdict.

Everything printed is also written to ``--out``. Exit status 0 when every checked kernel passed (known
toolchain failures excepted, and marked) and the wrong adapter was rejected, else 1.

    python scripts/gpu_adapters_check.py --out results/gpu_adapters_check.txt
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
from pathlib import Path

from tflabench.bench.isolated_checks import (
    CRASHED,
    FAILED,
    PASSED,
    CheckOutcome,
    is_known_failure,
    known_failure,
    run_checks,
)

WRONG_KERNEL = "wrong.sdpa_flash_non_causal"
WRONG_KERNEL_NEEDS = "torch.sdpa.flash"


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="text file receiving the whole output")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (set TRITON_INTERPRET=1)")
    parser.add_argument("--kernels", default="*", help="comma list of kernel-name globs (default: all)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per check (compile included)")
    parser.add_argument("--jobs", type=int, default=6, help="checks running at the same time")
    parser.add_argument("--deadline", type=float, default=540.0,
                        help="all checks end within this many seconds (fits a 10-minute device command)")
    return parser.parse_args()


class Output:
    """Prints lines and keeps them for the --out file."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        print(text, flush=True)
        self.lines.append(text)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(self.lines) + "\n")


def _tflabench(*arguments: str) -> str:
    command = [sys.executable, "-m", "tflabench", *arguments]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


def _selected(rows: list[dict], patterns: list[str]) -> list[str]:
    return [row["name"] for row in rows
            if row["available"] and any(fnmatch.fnmatchcase(row["name"], pattern) for pattern in patterns)]


def _expected(outcome: CheckOutcome) -> bool:
    """The wrong adapter must fail its check; every other kernel must pass it."""
    return outcome.status == FAILED if outcome.kernel == WRONG_KERNEL else outcome.status == PASSED


def _note(outcome: CheckOutcome) -> str:
    if outcome.kernel == WRONG_KERNEL:
        return "wrong adapter caught" if outcome.status == FAILED else "WRONG ADAPTER NOT CAUGHT"
    known = known_failure(outcome)
    if known is not None:
        return f"known: {known.note}"
    return "" if _expected(outcome) else "UNEXPECTED"


def _summary(outcomes: list[CheckOutcome]) -> list[str]:
    header = ("kernel", "status", "rel error", "tolerance", "seconds", "note", "detail")
    rows = [(o.kernel, o.status, f"{o.rel_error:.2e}" if o.rel_error is not None else "-",
             f"{o.tolerance:.0e}" if o.tolerance is not None else "-",
             f"{o.seconds:.0f}" if o.seconds is not None else "-", _note(o), o.detail) for o in outcomes]
    table = (header, *rows)
    widths = [max(len(row[column]) for row in table) for column in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
            for row in table]


def main() -> int:
    args = _arguments()
    output = Output()
    output("$ tflabench kernels")
    output(_tflabench("kernels").rstrip())
    rows = json.loads(_tflabench("kernels", "--json"))["kernels"]
    names = _selected(rows, args.kernels.split(","))
    if WRONG_KERNEL_NEEDS in names:
        names.append(WRONG_KERNEL)
    output()
    output(f"reference checks in {args.dtype} of {len(names)} kernels ({args.jobs} at a time, at most "
           f"{args.timeout:.0f} s each, all within {args.deadline:.0f} s):")
    outcomes = run_checks(
        names, args.dtype, args.device, timeout_s=args.timeout, jobs=args.jobs, deadline_s=args.deadline,
        report=lambda outcome: output(f"  {outcome.kernel}: {outcome.status} ({outcome.seconds:.0f} s)"),
    )
    output()
    for line in _summary(outcomes):
        output(line)
    unexpected = [o.kernel for o in outcomes if not _expected(o) and not is_known_failure(o)]
    known = [o.kernel for o in outcomes if is_known_failure(o)]
    passed = sum(o.status == PASSED for o in outcomes)
    crashed = sum(o.status == CRASHED for o in outcomes)
    output()
    output(f"{passed} passed, {crashed} crashed, {len(known)} known failures, {len(unexpected)} unexpected"
           + (f": {', '.join(unexpected)}" if unexpected else ""))
    output.save(args.out)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
