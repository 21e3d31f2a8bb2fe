#!/usr/bin/env python
"""Our TFLA kernels side by side with mlstm_kernels' on a GPU, through the harness: `tflabench sweep` with
examples/tfla-vs-reference.toml (TFLA Fig. 4 at T = 8192, the float64 gate at the timed size), then
`tflabench report` of the run.

Usage: python scripts/bench_tfla_vs_reference.py [--out results/h200] [--run-name NAME]
           [--tilings default,out-q1,...] [--fig14-head-dim 256] [any other `tflabench sweep` option]
For example ``--seq-len 65536`` (Fig. 4's long end: batch = 65536 / T), ``--chunk-size 128``,
``--kernels 'tflabench.*'``, ``--resume``.

Timing, the L2 flush, peak memory, the correctness gate (per tiling, here at the timed size) and process
isolation are the harness's (docs/methodology.md); the tilings are `tflabench/kernels/mlstm/tilings.py`'s.
The time of each forward launch (gate sums, chunk states, outputs) is a profiler's job:
scripts/profile_forward.py under Nsight Compute or Nsight Systems.
"""

from __future__ import annotations

import argparse
import datetime
import subprocess
import sys
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "examples" / "tfla-vs-reference.toml"


def fig14_options(head_dim: int) -> list[str]:
    """Sweep options of TFLA Fig. 14 at one head dim: B 4, T 8192, heads 4096 / d, Dqk = Dv = d."""
    return ["--batch", "4", "--seq-len", "8192", "--heads", str(4096 // head_dim),
            "--head-dim-qk", str(head_dim), "--head-dim-v", str(head_dim)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/h200")
    parser.add_argument("--run-name", default=f"tfla-vs-reference-{datetime.date.today():%Y%m%d}")
    parser.add_argument("--tilings", default="default", help="comma list of tilings (docs/sweep-toml.md)")
    parser.add_argument("--fig14-head-dim", type=int, help="TFLA Fig. 14's configuration at this head dim")
    args, sweep_options = parser.parse_known_args()
    tilings = [option for name in args.tilings.split(",") for option in ("--tiling", name)]
    shape = fig14_options(args.fig14_head_dim) if args.fig14_head_dim else []
    tflabench = [sys.executable, "-m", "tflabench"]
    sweep = [*tflabench, "sweep", "--config", str(CONFIG), "--out", args.out, "--run-name", args.run_name,
             *tilings, *shape, *sweep_options]
    if subprocess.run(sweep).returncode:
        return 1
    if "--dry-run" in sweep_options:
        return 0
    return subprocess.run([*tflabench, "report", str(Path(args.out) / args.run_name)]).returncode


if __name__ == "__main__":
    sys.exit(main())
