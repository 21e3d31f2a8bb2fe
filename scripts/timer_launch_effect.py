"""How much of each calibrated figure is the CPU's issue of its launches: the building blocks
(`calibrate_blocks.measure_blocks`) timed twice in one process, with the calibration's timer (each sample
starts on an idle GPU, so it includes the launch's issue) and with `Timer.hide_launch` (a GPU sleep queued
before the start event). Writes both ``blocks`` to a JSON file and prints, per walk, issue level and product,
the second's step or rate over the first's (GPU):

    python scripts/timer_launch_effect.py $OUT/timer-launch-effect.json
"""

import json
import sys

from tflabench.analysis import calibrate_blocks


def _walk_key(walk: dict) -> tuple:
    return walk["kind"], walk["l"], walk["dqk"], walk["dv"], walk["num_warps"], walk["num_stages"]


def summary(timed: dict, hidden: dict) -> list[str]:
    """One line per walk (step ratio), issue level (seconds-per-instruction ratio) and product (one-per-SM
    and full-grid FLOP/s ratios): hidden-launch figure / calibration-timer figure."""
    lines = []
    walks = {_walk_key(walk): walk for walk in timed["walk"]}
    for walk in hidden["walk"]:
        lines.append(f"walk {_walk_key(walk)}: step {walk['step_s'] / walks[_walk_key(walk)]['step_s']:.3f}")
    for old, new in zip(timed["issue"]["levels"], hidden["issue"]["levels"], strict=True):
        ratio = new["seconds_per_instruction"] / old["seconds_per_instruction"]
        lines.append(f"issue, {old['warps_per_scheduler']:.0f} warps per scheduler: {ratio:.3f}")
    for old, new in zip(timed["dot"], hidden["dot"], strict=True):
        lines.append(f"dot {old['m']}x{old['n']}x{old['k']} {old['num_warps']}w: one per SM "
                     f"{new['one_per_sm_flops_per_s'] / old['one_per_sm_flops_per_s']:.3f}, full grid "
                     f"{new['flops_per_s'] / old['flops_per_s']:.3f}")
    return lines


def main(path: str) -> None:
    timed = calibrate_blocks.measure_blocks(calibrate_blocks.BlockSizes())
    hidden = calibrate_blocks.measure_blocks(calibrate_blocks.BlockSizes(hide_launch=True))
    with open(path, "w") as file:
        json.dump({"calibration_timer": timed, "hidden_launch": hidden}, file, indent=1)
    print("\n".join(summary(timed, hidden)))


if __name__ == "__main__":
    main(sys.argv[1])
