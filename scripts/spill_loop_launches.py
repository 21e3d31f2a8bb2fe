#!/usr/bin/env python
"""Launch the calibration's spill loop (`calibrate_blocks._spill_loop_kernel`) at each spilling width, as
`measure_spill_loops` launches it (one 8-warp program per SM, its default `BlockSizes`), twice each and
nothing else, so that Nsight Compute can profile the loops the calibration times:

    ncu --kernel-name _spill_loop_kernel ... python3 scripts/spill_loop_launches.py [--widths 512,1024,2048]
"""

import argparse

import torch

from tflabench.analysis import calibrate_blocks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default="512,1024,2048", help="carried widths, comma-separated")
    parser.add_argument("--num-warps", type=int, default=8)
    args = parser.parse_args()
    sizes = calibrate_blocks.BlockSizes()
    programs = calibrate_blocks.DeviceLimits.of("cuda").sm_count
    a, b, out = calibrate_blocks.spill_loop_operands(sizes, args.num_warps, programs)
    for width in (int(text) for text in args.widths.split(",")):
        for _ in range(2):
            calibrate_blocks.launch_spill_loop(sizes, a, b, out, programs, args.num_warps, width)
        torch.cuda.synchronize()
        print(f"width {width}: launched twice on {programs} programs", flush=True)


if __name__ == "__main__":
    main()
