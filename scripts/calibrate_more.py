"""Measure building blocks a committed calibration lacks, on this GPU, and add them to the file: the
spill-loop rates (``--spill-loops``: `calibrate_blocks.measure_spill_loops`, one and two 8-warp programs per
SM, stacks from L1-sized to larger than L2), the walks of `calibrate_blocks.WALK_SHAPES` (``--walks``) and the
tile products of `calibrate_blocks.DOT_SHAPES` (``--dots``) the file does not have, and the steps of every
walk of the file with one to four programs per SM (``--walk-levels``: `calibrate_blocks.walk_levels`, the
median of ``--passes`` passes, one program per SM among them so that a walk's levels come from one machine),
and, without a GPU, the spilled loads of the file's spill loops (``--spill-load-bytes``:
`add_spill_load_bytes`).
The rest of the file (the median of several machines) is left as it is; each addition's provenance (commit,
versions, command, GPU) is appended to the file's ``provenance.additions``. On the GPU machine, in the
repository root:

    python scripts/calibrate_more.py results/calibration/h100-sxm.json --walks --out $OUT/h100-sxm.json

About 20 s per block on an H100, most of it compiling.
"""

import argparse
import dataclasses
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from tflabench.analysis import calibrate_blocks
from tflabench.analysis.commands import calibration_provenance, spill_rate_row, walk_step_row

WALK_NAME = ("kind", "l", "dqk", "dv", "num_warps", "num_stages")
DOT_NAME = ("m", "n", "k", "num_warps")


def missing(entries: list[dict], names: tuple[str, ...], shapes: tuple) -> tuple:
    """The ``shapes`` without an entry in ``entries`` (named by the fields ``names``)."""
    have = {tuple(entry[name] for name in names) for entry in entries}
    return tuple(shape for shape in shapes if shape not in have)


def add_walk_levels(walks: list[dict], sizes: calibrate_blocks.BlockSizes, limits, timer,
                    passes: int) -> None:
    """Each walk's ``levels`` (`calibrate_blocks.walk_levels` at 1-4 programs per SM), per level the median
    step of ``passes`` passes (each pass times every walk once, so a slow moment of the GPU falls into one
    pass of each level, not into every pass of one walk)."""
    sizes = dataclasses.replace(sizes, walk_programs_per_sm=(1, *calibrate_blocks.WALK_PROGRAMS_PER_SM))
    shapes = [tuple(walk[name] for name in WALK_NAME) for walk in walks]
    runs = [[calibrate_blocks.walk_levels(shape, sizes, limits, timer) for shape in shapes]
            for _ in range(passes)]
    for index, walk in enumerate(walks):
        levels = [dict(level) for level in runs[0][index]]
        for number, level in enumerate(levels):
            level["step_s"] = statistics.median(run[index][number]["step_s"] for run in runs)
        walk["levels"] = levels


def add_spill_load_bytes(spill_loops: dict) -> None:
    """Each spill loop's ``loop_load_bytes`` (the LDL part of its ``loop_local_bytes``), from the same loop
    compiled for sm_90 here (`kernel_resources.spill_loop_resources`, no GPU needed), and each rate's
    ``load_bytes_per_s_per_sm``: its ``bytes_per_s_per_sm`` x the loop's load / local bytes, what
    `calibrate_blocks.spill_loop_rates` gives where the loops record their loads (a calibration's rates are
    medians over machines that ran the same compiled loops). A loop whose compile gives other stack or local
    bytes than it recorded (another compiler) is an error."""
    import kernel_resources

    for loop in spill_loops["loops"]:
        compiled = kernel_resources.spill_loop_resources(loop["num_warps"], loop["width"])
        if (compiled["stack_bytes"], compiled["loop_local_bytes"]) != (loop["stack_bytes"],
                                                                     loop["loop_local_bytes"]):
            raise SystemExit(f"error: the spill loop of {loop['num_warps']} warps, width {loop['width']}, "
                             f"compiles to {compiled['stack_bytes']} stack / {compiled['loop_local_bytes']} "
                             f"local bytes here, not the {loop['stack_bytes']} / {loop['loop_local_bytes']} "
                             "it was timed with")
        loop["loop_load_bytes"] = compiled["loop_load_bytes"]
    loops = {(loop["num_warps"], loop["programs_per_sm"], loop["width"]): loop
             for loop in spill_loops["loops"]}
    for rate in spill_loops["rates"]:
        loop = loops[rate["num_warps"], rate["programs_per_sm"], rate["width"]]
        rate["load_bytes_per_s_per_sm"] = (rate["bytes_per_s_per_sm"] * loop["loop_load_bytes"]
                                           / loop["loop_local_bytes"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("calibration", type=Path, help="the calibration file to add the figures to")
    parser.add_argument("--spill-loops", action="store_true", help="measure (again) the spill-loop rates")
    parser.add_argument("--issue", action="store_true",
                        help="measure (again) the seconds per issued instruction of a walk")
    parser.add_argument("--walks", action="store_true", help="measure the walk shapes the file lacks")
    parser.add_argument("--dots", action="store_true", help="measure the tile products the file lacks")
    parser.add_argument("--walk-levels", action="store_true",
                        help="measure every walk's steps with 1-4 programs per SM")
    parser.add_argument("--passes", type=int, default=3, help="passes of --walk-levels (median kept)")
    parser.add_argument("--spill-load-bytes", action="store_true",
                        help="add the spill loops' loads, compiled without a GPU (nothing else is measured)")
    parser.add_argument("--out", type=Path, help="where to write the file (default: in place)")
    args = parser.parse_args()
    record = json.loads(args.calibration.read_text())
    blocks = record["blocks"]
    if args.spill_load_bytes:
        add_spill_load_bytes(blocks["spill_loops"])
        _write(record, {"blocks": ["spill load bytes"], "compiled_for": "sm_90",
                        **calibration_provenance(command=shlex.join(["python", *sys.argv]))},
               args.out or args.calibration)
        for rate in blocks["spill_loops"]["rates"]:
            print("{}: {}".format(*spill_rate_row(rate)))
        return
    shapes = missing(blocks["walk"], WALK_NAME, calibrate_blocks.WALK_SHAPES) if args.walks else ()
    dots = missing(blocks["dot"], DOT_NAME, calibrate_blocks.DOT_SHAPES) if args.dots else ()
    sizes = dataclasses.replace(calibrate_blocks.BlockSizes(), walk_shapes=shapes, dot_shapes=dots)
    limits = calibrate_blocks.DeviceLimits.of(sizes.device)
    timer = calibrate_blocks.Timer.of(sizes)
    started = time.perf_counter()
    added = []
    if args.spill_loops:
        blocks["spill_loops"] = calibrate_blocks.measure_spill_loops(sizes, limits, timer)
        added.append("spill_loops")
    if args.issue:
        blocks["issue"] = calibrate_blocks.measure_issue(sizes, limits, timer)
        added.append("issue")
    if shapes:
        blocks["walk"] = blocks["walk"] + calibrate_blocks.measure_walks(sizes, limits, timer)
        added.append("walk")
    if dots:
        blocks["dot"] = blocks["dot"] + calibrate_blocks.measure_dot(sizes, limits, timer)
        added.append("dot")
    if args.walk_levels:
        add_walk_levels(blocks["walk"], sizes, limits, timer, args.passes)
        added.append("walk levels")
    provenance = {"blocks": added, "walk_shapes": [list(shape) for shape in shapes],
                  "dot_shapes": [list(shape) for shape in dots], "seconds": time.perf_counter() - started,
                  **calibration_provenance(command=shlex.join(["python", *sys.argv]))}
    _write(record, provenance, args.out or args.calibration)
    name, seconds = provenance["gpu"].get("name", "?"), provenance["seconds"]
    print(f"{name}: {', '.join(added) or 'nothing'}, {seconds:.0f} s")
    for line in _report(blocks, args.spill_loops, args.issue, len(shapes), len(dots), args.walk_levels):
        print(line)


def _write(record: dict, provenance: dict, path: Path) -> None:
    """Append ``provenance`` to the record's ``provenance.additions`` and write the record to ``path``."""
    record.setdefault("provenance", {}).setdefault("additions", []).append(provenance)
    path.write_text(json.dumps(record, indent=2) + "\n")


def _report(blocks: dict, spill_loops: bool, issue: bool, walks: int, dots: int, walk_levels: bool
            ) -> list[str]:
    """One line per measured spill-loop rate, issue level, added walk, added tile product and walk's
    levels."""
    lines = []
    for level in blocks["issue"]["levels"] if issue else []:
        lines.append("issue, {programs_per_sm} programs per SM ({resident} resident): ".format(**level)
                     + f"{level['seconds_per_instruction'] * 1e9:.2f} ns per instruction of a warp")
    for rate in blocks["spill_loops"]["rates"] if spill_loops else []:
        lines.append("{}: {}".format(*spill_rate_row(rate)))
    for walk in blocks["walk"][len(blocks["walk"]) - walks:]:
        lines.append("{}: {}, ".format(*walk_step_row(walk))
                     + f"{walk['spill_bytes_per_thread']} spilled bytes per thread")
    for walk in blocks["walk"] if walk_levels else []:
        steps = ", ".join(f"{level['programs_per_sm']} ({level['resident']}): {level['step_s'] * 1e6:.3f}"
                          for level in walk["levels"])
        lines.append("{}: {}; per programs per SM (resident), us: ".format(*walk_step_row(walk)) + steps)
    for dot in blocks["dot"][len(blocks["dot"]) - dots:]:
        rates = ", ".join(f"{name.removesuffix('flops_per_s') or 'two-stage '}{value / 1e12:.0f}"
                          for name, value in dot.items() if name.endswith("flops_per_s"))
        lines.append("dot {m} x {n} x {k}, {num_warps} warps, TFLOP/s: ".format(**dot) + rates)
    return lines


if __name__ == "__main__":
    main()
