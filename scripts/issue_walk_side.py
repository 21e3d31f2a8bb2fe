"""How many independent instructions a chain of waits absorbs: the calibration's issue walk (the state
recurrence's step, `calibrate_blocks.measure_issue`) with SIDE rounds per step of pointwise work that waits
for the step's gate load but not for the state (`calibrate_blocks._walk_kernel`'s SIDE: 32 FMAs per thread
per round at 64 x 64 with four warps), at one, two, four and six programs per SM (the calibration's
levels). Per side count: seconds per step and the warp instructions of the walk's loop body. Writes them
to a JSON file (GPU):

    python scripts/issue_walk_side.py $OUT/issue-walk-side.json
"""

import dataclasses
import json
import math
import sys

from tflabench.analysis import calibrate_blocks

#: SIDE rounds per step timed
SIDE_ROUNDS = (0, 1, 2, 4, 8, 16, 32)


def main(path: str) -> None:
    base = calibrate_blocks.BlockSizes()
    limits = calibrate_blocks.DeviceLimits.of(base.device)
    timer = calibrate_blocks.Timer.of(base)
    measured = {}
    for rounds in SIDE_ROUNDS:
        sizes = dataclasses.replace(base, walk_side_rounds=rounds)
        issue = calibrate_blocks.measure_issue(sizes, limits, timer)
        for level in issue["levels"]:
            level["step_seconds"] = level["seconds"] / math.ceil(
                level["programs_per_sm"] / level["resident"]) / sizes.walk_steps
        measured[str(rounds)] = issue
        print(rounds, [(level["warps_per_scheduler"], level["loop_instructions"],
                        round(level["step_seconds"] * 1e9, 1)) for level in issue["levels"]], flush=True)
    with open(path, "w") as file:
        json.dump(measured, file, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
