"""Measure the spill-loop rates (`calibrate_blocks.measure_spill_loops`: one and two 8-warp programs per SM,
stacks from L1-sized to larger than L2) on this GPU and add them to a calibration file as its
``blocks.spill_loops``, with their own provenance (the rest of the file, the median of several machines, is
left as it is). On the GPU machine, in the repository root:

    python scripts/calibrate_spill_loops.py results/calibration/h100-sxm.json --out $OUT/h100-sxm.json

About half a minute on an H100 (12 loops of 512 trips, most of it compiling).
"""

import argparse
import json
import time
from pathlib import Path

from tflabench.analysis import calibrate_blocks
from tflabench.nvml import device_info
from tflabench.provenance import command_line, git_state, software_versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calibration", type=Path, help="the calibration file to add the figures to")
    parser.add_argument("--out", type=Path, help="where to write the file (default: in place)")
    args = parser.parse_args()
    record = json.loads(args.calibration.read_text())
    sizes = calibrate_blocks.BlockSizes()
    limits = calibrate_blocks.DeviceLimits.of(sizes.device)
    started = time.perf_counter()
    timer = calibrate_blocks._Timer(sizes.device, sizes.repeats)
    measured = calibrate_blocks.measure_spill_loops(sizes, limits, timer)
    measured["seconds"] = time.perf_counter() - started
    measured["provenance"] = {"git": git_state(), "versions": software_versions([]),
                              "command": command_line(), "gpu": device_info()}
    record["blocks"]["spill_loops"] = measured
    (args.out or args.calibration).write_text(json.dumps(record, indent=2) + "\n")
    print(f"{measured['provenance']['gpu'].get('name', '?')}: {measured['seconds']:.1f} s")
    for rate in measured["rates"]:
        print("{num_warps} warps x {programs_per_sm} per SM, width {width}: stack {kb:.0f} KB per SM, "
              "{gbs:.1f} GB/s per SM".format(kb=rate["stack_bytes_per_sm"] / 1024,
                                              gbs=rate["bytes_per_s_per_sm"] / 1e9, **rate))


if __name__ == "__main__":
    main()
