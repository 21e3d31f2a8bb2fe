"""The calibration's walks (`calibrate_blocks.measure_walks`) with their tiles L2-resident (64 slots, the
calibration's setting) and streamed from HBM (each tile read once): does a walk step wait for HBM?

    python scripts/walk_slots.py OUT.json      (on a GPU; prints one line per walk)
"""

import dataclasses
import json
import sys

from tflabench.analysis import calibrate_blocks


def main() -> None:
    sizes = calibrate_blocks.BlockSizes()
    limits = calibrate_blocks.DeviceLimits.of(sizes.device)
    timer = calibrate_blocks.Timer.of(sizes)
    walks = {name: calibrate_blocks.measure_walks(dataclasses.replace(sizes, walk_slots=slots), limits, timer)
             for name, slots in (("l2", 64), ("hbm", 0))}
    for l2, hbm in zip(walks["l2"], walks["hbm"], strict=True):
        shape = " ".join(str(l2[key]) for key in ("kind", "l", "dqk", "dv", "num_warps", "num_stages"))
        print(f"{shape}: L2 {l2['step_s'] * 1e6:.2f} us, HBM {hbm['step_s'] * 1e6:.2f} us, "
              f"spills {l2['spill_bytes_per_thread']} B/thread")
    with open(sys.argv[1], "w") as out:
        json.dump(walks, out, indent=1)


if __name__ == "__main__":
    main()
