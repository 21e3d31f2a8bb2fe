"""Where the fused forward's chunk step and the calibration's fused walk part: per walk shape (variant, L,
Dqk, BV, warps), at one and two programs per SM, the seconds per step of

- the walk (`calibrate_blocks._walk_kernel`, the fused kernels' own step code) over L2-resident tiles (the
  calibration's) and over tiles read once from HBM (``walk_slots`` 0);
- the fused forward kernel itself (`mlstm_fused_chunk`, its default tiling with ``block_v`` = Dv and the
  walk's warps) over T = 256 L tokens of the harness's inputs (`profile_forward.make_inputs`), one value
  block per program, with its programs as heads of one sequence (B = 1, H = programs: q, k, v rows and gates
  strided by H) and as sequences of one head (B = programs, H = 1: contiguous rows and gates);

each timed with its launch's CPU time hidden behind a GPU sleep queued before the start event
(`calibrate_blocks.Timer` with ``hide_launch``, as the harness hides it behind its L2 flush), the walks and
the B = 1 kernel also with the calibration's timer (``*_calibration_timer*``: the CPU time of the launch
included where the GPU waits for it); and the structural model's step for the kernel at each layout
(`structural.launch_time`'s terms divided by the steps of one program). Writes a JSON list (GPU):

    python scripts/fused_walk_gap.py $OUT/fused-walk-gap.json
"""

import dataclasses
import json
import math
import sys

import torch
from profile_forward import make_inputs

from tflabench.analysis import calibrate_blocks, structural
from tflabench.kernels.mlstm.fused_chunk import FusedTiling, mlstm_fused_chunk

#: (kind, L, Dqk, BV, num_warps) timed: the fused forwards' walk shapes at 4 warps (mLSTMsig, and mLSTMexp at
#: head dims <= 64) and mLSTMexp's 8-warp ones at 16 x 128 and 64 x 64
SHAPES = (("fused", 16, 64, 64, 4), ("fused", 32, 64, 64, 4), ("fused", 64, 64, 64, 4),
          ("fused", 16, 128, 64, 4), ("fused", 32, 128, 64, 4), ("fused", 16, 256, 32, 4),
          ("fused_exp", 16, 64, 64, 4), ("fused_exp", 32, 64, 64, 4), ("fused_exp", 64, 64, 64, 4),
          ("fused_exp", 16, 128, 64, 8), ("fused_exp", 64, 64, 64, 8))
PROGRAMS_PER_SM = (1, 2)
STEPS = 256


def kernel_step(timer, kind: str, chunk: int, dqk: int, dv: int, warps: int, batch: int, heads: int) -> float:
    """Seconds per chunk step of the fused forward with B = ``batch``, H = ``heads`` (one program each)."""
    variant = "exp" if kind == "fused_exp" else "sig"
    tiling = dataclasses.replace(FusedTiling.default(chunk, dqk, dv, variant=variant), block_v=dv,
                                 num_warps=warps)
    q, k, v, i, f = make_inputs(batch, STEPS * chunk, heads, dqk, dv)
    with torch.no_grad():
        seconds = timer(lambda: mlstm_fused_chunk(q, k, v, i, f, variant=variant, chunk_size=chunk,
                                                  normalize=None, eps=1e-6, tiling=tiling))
    return seconds / STEPS


def model_step(rates: structural.Rates, kind: str, chunk: int, dqk: int, dv: int, warps: int,
               batch: int, heads: int) -> dict:
    """The structural model's terms of the fused forward launch, per step of one program's round."""
    variant = "exp" if kind == "fused_exp" else "sig"
    problem = structural.Problem(batch, STEPS * chunk, heads, dqk, dv, variant, "fwd")
    tiling = f"block_v={dv},num_warps={warps}"
    (launch,) = structural.launches(problem, "fused_chunk", chunk, tiling)
    time = structural.launch_time(launch, rates)
    rounds = math.ceil(math.ceil(launch.programs / rates.sm_count) / time.concurrency)
    per_step = rounds * STEPS
    return {"model_step_s": time.seconds / per_step, "model_compute_step_s": time.compute_s / per_step,
            "model_issue_step_s": time.issue_s / per_step, "model_concurrency": time.concurrency}


def main(path: str) -> None:
    base = calibrate_blocks.BlockSizes()
    limits = calibrate_blocks.DeviceLimits.of(base.device)
    calibration_timer = calibrate_blocks.Timer.of(base)
    timer = dataclasses.replace(calibration_timer, hide_launch=True)
    rates = structural.load_rates(sys.argv[2]) if len(sys.argv) > 2 else None
    rows = []
    for kind, chunk, dqk, dv, warps in SHAPES:
        walk = (kind, chunk, dqk, dv, warps, 2)
        for per_sm in PROGRAMS_PER_SM:
            programs = per_sm * limits.sm_count
            row = {"kind": kind, "l": chunk, "dqk": dqk, "dv": dv, "num_warps": warps,
                   "programs_per_sm": per_sm}
            for name, slots in (("walk_l2_step_s", 64), ("walk_hbm_step_s", 0)):
                sizes = dataclasses.replace(base, walk_slots=slots)
                launch = calibrate_blocks._walk_launch(walk, programs, sizes)
                compiled = launch()
                row[name] = timer(launch) / sizes.walk_steps
                calibration_step = calibration_timer(launch) / sizes.walk_steps
                row[name.removesuffix("_s") + "_calibration_timer_s"] = calibration_step
                row["walk_registers"] = compiled.n_regs
            row["kernel_strided_step_s"] = kernel_step(timer, kind, chunk, dqk, dv, warps, 1, programs)
            row["kernel_contiguous_step_s"] = kernel_step(timer, kind, chunk, dqk, dv, warps, programs, 1)
            row["kernel_strided_calibration_timer_step_s"] = kernel_step(calibration_timer, kind, chunk, dqk,
                                                                         dv, warps, 1, programs)
            if rates is not None:
                row |= model_step(rates, kind, chunk, dqk, dv, warps, 1, programs)
            rows.append(row)
            print(json.dumps(row), flush=True)
            torch.cuda.empty_cache()
    with open(path, "w") as file:
        json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
