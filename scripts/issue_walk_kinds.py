"""The calibration's issue walk (`calibrate_blocks.measure_issue`) timed with other walk kinds on this GPU:
seconds per warp instruction at 1, 2, 4 and 6 programs per SM (fewer where the walk's registers allow fewer
resident), for the state recurrence's step (the calibration's), the fused forward's chunk steps and a loop
of the intra-chunk gradient kernels' form (`calibrate_blocks._gradient_walk_kernel`: two independent
products per trip into a carried accumulator). Writes the levels per walk to a JSON file (GPU):

    python scripts/issue_walk_kinds.py $OUT/issue-kinds.json
"""

import dataclasses
import json
import sys

from tflabench.analysis import calibrate_blocks

#: (kind, L, Dqk, Dv, num_warps, num_stages) of the walks timed
WALKS = (("state", 64, 64, 64, 4, 2), ("fused", 64, 64, 64, 4, 2), ("fused_exp", 64, 64, 64, 4, 2),
         ("fused", 64, 64, 128, 4, 2), ("gradient", 64, 64, 128, 4, 2), ("gradient", 64, 64, 64, 4, 2),
         ("gradient", 64, 128, 128, 4, 2))


def main(path: str) -> None:
    measured = {}
    for walk in WALKS:
        sizes = dataclasses.replace(calibrate_blocks.BlockSizes(), issue_walk=walk)
        limits = calibrate_blocks.DeviceLimits.of(sizes.device)
        timer = calibrate_blocks.Timer.of(sizes)
        measured["/".join(map(str, walk))] = levels = calibrate_blocks.measure_issue(sizes, limits, timer)
        print(walk, [(level["warps_per_scheduler"], round(level["seconds_per_instruction"] * 1e9, 3))
                     for level in levels["levels"]], flush=True)
    with open(path, "w") as file:
        json.dump(measured, file, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
