"""Where the structural model is known to miss: classes of configurations (`WEAK_POINTS`) a prediction falls
into, read from the launches the model builds, and what the committed runs of each class measured against it
(``model_limits.json`` beside this module: per GPU and class, the predicted / measured ratios of the
committed rows; written by ``python scripts/model_limits.py`` after a model or calibration change).

`tflabench predict` names the classes of each prediction with those ratios, so a prediction in a class the
model misses says so (docs/performance-model.md#known-weak-points).
"""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path

from tflabench.analysis import structural

#: class -> what it is; a prediction is in a class when one of its launches is
WEAK_POINTS = {
    "spills_8w": "an 8-warp launch that spills registers in its loop (compiled resources)",
    "spills_4w": "a 4-warp launch that spills registers in its loop (compiled resources)",
    "masked": "our head-dim blocks do not divide the head dims (masked tiles)",
    "narrow": "our head-dim blocks are narrower than 64 over a wider head dim",
    "no_compiled": "no compiled resources for this tiling: registers, occupancy and spills by a rule",
}
#: the class of predictions in none of `WEAK_POINTS` (the ratios the model reaches elsewhere)
COVERED = "covered"
LIMITS_FILE = "model_limits.json"
#: loop spills (bytes per thread per trip) below which a launch is not counted as spilling: a few registers
#: (the reference's output kernel spills 16 at Dqk 128, a row the model meets)
SPILL_BYTES = 64
#: the narrowest head-dim block the model's calibration times products of without a miss (32-wide blocks:
#: results/h100/launch-times-32-wide-blocks)
NARROW_BLOCK = 64


def weak_points(problem: structural.Problem, algorithm: str, chunk: int, tiling=None) -> tuple[str, ...]:
    """The `WEAK_POINTS` classes of one (algorithm, chunk size) prediction with ``tiling`` (as in
    `structural.launches`), in the order of `WEAK_POINTS`; () where it is in none."""
    fields = structural.tiling_fields(tiling) if algorithm != "reference" else None
    found = set()
    compiled_kernels = set(structural.REFERENCE_KERNELS.values()) if algorithm == "reference" else None
    for launch in structural.launches(problem, algorithm, chunk, fields):
        if not launch.kernel or (compiled_kernels is not None and launch.kernel not in compiled_kernels):
            continue  # PyTorch ops, and the reference's gate cumsums the model stands in for
        if launch.compiled is None:
            found.add("no_compiled")
        elif launch.compiled["loop_local_bytes"] >= SPILL_BYTES:
            found.add("spills_8w" if launch.warps >= 8 else "spills_4w")
    for dim, block in structural.head_dim_blocks(problem, algorithm, chunk, fields):
        if dim % block:
            found.add("masked")
        if block < NARROW_BLOCK and dim > block:
            found.add("narrow")
    return tuple(name for name in WEAK_POINTS if name in found)


def ratio_summary(ratios: list[float]) -> dict:
    """rows, min, 10th percentile, median, 90th percentile and max of predicted / measured ratios."""
    ordered = sorted(ratios)
    deciles = statistics.quantiles(ordered, n=10, method="inclusive") if len(ordered) > 1 else ordered * 9
    return {"rows": len(ordered), "min": ordered[0], "p10": deciles[0], "median": statistics.median(ordered),
            "p90": deciles[-1], "max": ordered[-1]}


@functools.cache
def _limits() -> dict:
    path = Path(__file__).with_name(LIMITS_FILE)
    return json.loads(path.read_text()) if path.exists() else {}


def measured_ratios(gpu_key: str, name: str) -> dict | None:
    """`ratio_summary` of the committed rows of class ``name`` (a `WEAK_POINTS` key or `COVERED`) on a GPU,
    or None where the committed runs have none."""
    return _limits().get("gpus", {}).get(gpu_key, {}).get(name)


def description(name: str) -> str:
    """What the class ``name`` (a `WEAK_POINTS` key or `COVERED`) is."""
    return WEAK_POINTS.get(name, "in none of the known weak points")


def describe(gpu_key: str, name: str) -> str:
    """One line: what the class is and what its committed rows measured against the model on the GPU."""
    what = description(name)
    ratios = measured_ratios(gpu_key, name)
    if ratios is None:
        return f"{name}: {what}; no committed row of it on {gpu_key}"
    return (f"{name}: {what}; committed rows on {gpu_key}: predicted / measured {ratios['p10']:.2f}-"
            f"{ratios['p90']:.2f} (10th-90th percentile, median {ratios['median']:.2f}, "
            f"{ratios['rows']} rows)")
