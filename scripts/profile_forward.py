#!/usr/bin/env python
"""Our TFLA forward at the Fig. 4 configuration, a few calls, for Nsight Compute to profile (GPU).

The bench script says how long each forward launch takes; this says why. Run it under ncu, which replays
the profiled launch once per counter pass (leave the clocks alone, as the device library's METHOD.md says):

    ncu --clock-control none --kernel-name regex:chunk_ --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats python scripts/profile_forward.py --variant sig --tiling default

Inputs and tilings are the bench script's (`bench_tfla_vs_reference.make_inputs`, `TILINGS`): B 8, T 8192,
16 heads, Dqk 128 / Dv 256, bf16, at the chunk size given.
"""

from __future__ import annotations

import argparse

import torch
from bench_tfla_vs_reference import CONFIG, TILINGS, make_inputs, ours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("sig", "exp"), default="sig")
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--tiling", choices=tuple(TILINGS), default="default")
    parser.add_argument("--calls", type=int, default=3, help="forward calls (the first compiles)")
    args = parser.parse_args()
    run = ours(args.variant, args.chunk, args.tiling)
    inputs = make_inputs("bthd", **CONFIG)
    with torch.no_grad():
        for _ in range(args.calls):
            run(*inputs)
    torch.cuda.synchronize()
    print(f"{args.calls} forward calls of {args.variant} L={args.chunk} tiling {args.tiling}: {CONFIG}")


if __name__ == "__main__":
    main()
