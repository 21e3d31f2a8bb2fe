"""How much each calibrated figure depends on how its samples are timed: the building blocks
(`calibrate_blocks.measure_blocks`) timed in one process with the calibration's timer (each sample starts on
an idle GPU, so it includes the launch's issue) and with `Timer.hide_launch` (a GPU sleep queued before the
start event); with ``--harness`` also as the harness times a call (`Timer.flush_bytes`: the harness's L2 flush
before each sample, the samples back to back). Writes every timer's ``blocks`` to a JSON file and prints, per
walk, issue level and product, each timer's step or rate over the calibration timer's, and with ``--harness``
every other figure too (pointwise, memory, spills, launch) (GPU):

    python scripts/timer_launch_effect.py $OUT/timer-launch-effect.json [--harness]

Each timer's pass prints its wall-clock start and end (Unix seconds), to align with a clock log taken beside
it (``nvidia-smi --query-gpu=timestamp,clocks.sm,... -lms 50``).
"""

import argparse
import json
import time

from tflabench.analysis import calibrate_blocks
from tflabench.bench.measure import L2_FLUSH_BYTES

#: the timers, by the name their blocks are stored under, and the `BlockSizes` that select them
TIMERS = {
    "calibration_timer": calibrate_blocks.BlockSizes(),
    "hidden_launch": calibrate_blocks.BlockSizes(hide_launch=True),
    "harness_flush": calibrate_blocks.BlockSizes(flush_bytes=L2_FLUSH_BYTES),
}
#: the flat figures `figure_ratios` compares: (block, key)
FLAT_FIGURES = (("pointwise", None), ("memory", None), ("spills", "local_bytes_per_s"),
                ("launch", "launch_s"), ("launch", "program_s"))


def _walk_key(walk: dict) -> tuple:
    return walk["kind"], walk["l"], walk["dqk"], walk["dv"], walk["num_warps"], walk["num_stages"]


def summary(timed: dict, other: dict) -> list[str]:
    """One line per walk (step ratio), issue level (seconds-per-instruction ratio) and product (one-per-SM
    and full-grid FLOP/s ratios): the other timer's figure / the calibration timer's."""
    lines = []
    walks = {_walk_key(walk): walk for walk in timed["walk"]}
    for walk in other["walk"]:
        lines.append(f"walk {_walk_key(walk)}: step {walk['step_s'] / walks[_walk_key(walk)]['step_s']:.3f}")
    for old, new in zip(timed["issue"]["levels"], other["issue"]["levels"], strict=True):
        ratio = new["seconds_per_instruction"] / old["seconds_per_instruction"]
        lines.append(f"issue, {old['warps_per_scheduler']:.0f} warps per scheduler: {ratio:.3f}")
    for old, new in zip(timed["dot"], other["dot"], strict=True):
        lines.append(f"dot {old['m']}x{old['n']}x{old['k']} {old['num_warps']}w: one per SM "
                     f"{new['one_per_sm_flops_per_s'] / old['one_per_sm_flops_per_s']:.3f}, full grid "
                     f"{new['flops_per_s'] / old['flops_per_s']:.3f}")
    return lines


def figure_ratios(timed: dict, other: dict) -> list[str]:
    """One line per pointwise and memory rate, the spills' local rate, the launch figures and each spill
    loop's rate: the other timer's figure / the calibration timer's."""
    lines = []
    for block, key in FLAT_FIGURES:
        keys = [key] if key else sorted(timed[block])
        for name in keys:
            lines.append(f"{block} {name}: {other[block][name] / timed[block][name]:.3f}")
    for old, new in zip(timed["spill_loops"]["rates"], other["spill_loops"]["rates"], strict=True):
        ratio = new["bytes_per_s_per_sm"] / old["bytes_per_s_per_sm"]
        launch = f"{old['num_warps']}w x {old['programs_per_sm']} per SM"
        lines.append(f"spill loop {launch}, width {old['width']}: {ratio:.3f}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="JSON file the blocks of every timer are written to")
    parser.add_argument("--harness", action="store_true", help="also time as the harness times a call")
    args = parser.parse_args()
    names = list(TIMERS) if args.harness else ["calibration_timer", "hidden_launch"]
    blocks = {}
    for name in names:
        started = time.time()
        blocks[name] = calibrate_blocks.measure_blocks(TIMERS[name])
        print(f"{name}: {started:.1f} - {time.time():.1f}", flush=True)
    with open(args.path, "w") as file:
        json.dump(blocks, file, indent=1)
    timed = blocks["calibration_timer"]
    for name in names[1:]:
        print(f"# {name} / calibration_timer")
        print("\n".join(summary(timed, blocks[name])))
        if args.harness:
            print("\n".join(figure_ratios(timed, blocks[name])))


if __name__ == "__main__":
    main()
