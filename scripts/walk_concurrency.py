"""The calibration's state walks (`calibrate_blocks._walk_kernel`, kind ``state``) with 1, 2, 3 and 4 programs
per SM on this GPU: seconds per step of each program (the launch's seconds / its rounds of resident programs
/ the walk's steps), beside the one-program step the calibration times (`measure_walks`). Does a program's
step take longer when programs of the same walk share the SM, and by how much at the recurrences' tiles?
Writes the levels per walk to a JSON file (GPU); other walks of `calibrate_blocks._walk_kernel` with --walk
KIND/L/DQK/DV/WARPS/STAGES (repeatable), e.g. the fused walks at Dqk 32, which no calibration times:

    python scripts/walk_concurrency.py $OUT/walk-concurrency.json
    python scripts/walk_concurrency.py $OUT/fused-32.json --walk fused/16/32/32/4/2 \\
        --walk fused_exp/16/32/32/4/2

``--slots 0`` reads every tile once from HBM (as the recurrences do) instead of cycling through 64
L2-resident ones (`BlockSizes.walk_slots`).
"""

import argparse
import dataclasses
import json
import math

from tflabench.analysis import calibrate_blocks

#: (kind, L, Dqk, Dv, num_warps, num_stages) of the walks timed: the state recurrences' tiles at 64- and
#: 128-row sub-chunks
WALKS = (("state", 64, 64, 64, 4, 2), ("state", 64, 64, 128, 4, 2), ("state", 128, 64, 64, 4, 2),
         ("state", 128, 64, 128, 4, 2))
PROGRAMS_PER_SM = (1, 2, 3, 4)


def _walk(text: str) -> tuple[str, int, int, int, int, int]:
    """A --walk value KIND/L/DQK/DV/WARPS/STAGES."""
    kind, *sizes = text.split("/")
    if len(sizes) != 5:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KIND/L/DQK/DV/WARPS/STAGES")
    return (kind, *map(int, sizes))


def main(path: str, walks: tuple[tuple[str, int, int, int, int, int], ...], slots: int) -> None:
    measured = {}
    for walk in walks:
        sizes = dataclasses.replace(calibrate_blocks.BlockSizes(), issue_walk=walk,
                                    issue_programs_per_sm=PROGRAMS_PER_SM, walk_slots=slots)
        limits = calibrate_blocks.DeviceLimits.of(sizes.device)
        timer = calibrate_blocks.Timer.of(sizes)
        levels = calibrate_blocks.measure_issue(sizes, limits, timer)["levels"]
        for level in levels:
            rounds = math.ceil(level["programs_per_sm"] / level["resident"])
            level["step_s"] = level["seconds"] / rounds / sizes.walk_steps
        measured["/".join(map(str, walk))] = levels
        one = levels[0]["step_s"]
        print(walk, [(level["programs_per_sm"], level["resident"], round(level["step_s"] * 1e9),
                      round(level["step_s"] / one, 2)) for level in levels], flush=True)
    with open(path, "w") as file:
        json.dump(measured, file, indent=1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="the JSON file to write")
    parser.add_argument("--walk", action="append", type=_walk,
                        help="a walk to time instead of the default ones")
    parser.add_argument("--slots", type=int, default=calibrate_blocks.BlockSizes.walk_slots,
                        help="distinct tiles the walks cycle through (0: every tile read once, from HBM)")
    args = parser.parse_args()
    main(args.path, tuple(args.walk or WALKS), args.slots)
