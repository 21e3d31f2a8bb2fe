#!/usr/bin/env python
"""tl.dot rates by where the operands come from (GPU): each product shape of the calibration
(`calibrate_blocks.DOT_SHAPES`) with both operands loaded from L2 for every product, with the left operand
loaded once, and with both loaded once; whole-GPU FLOP/s at 4 programs per SM and at 1.

    python scripts/dot_operands.py FILE.json

How much of a calibrated product rate is its operand loads (results/h100/dot-operands/).
"""

from __future__ import annotations

import functools
import json
import sys

import torch

from tflabench.analysis import calibrate_blocks

#: operand placements: (name, left operand loaded once, right operand loaded once)
PLACEMENTS = (("streamed", False, False), ("a_resident", True, False), ("resident", True, True))
SLOTS = 64


def measure(sizes: calibrate_blocks.BlockSizes) -> list[dict]:
    """One row per product shape: ``<placement>_full`` and ``<placement>_one`` FLOP/s."""
    limits = calibrate_blocks.DeviceLimits.of(sizes.device)
    timer = calibrate_blocks.Timer.of(sizes)
    grids = dict(zip(("full", "one"), calibrate_blocks._grid_programs(sizes, limits), strict=True))
    rows = []
    for m, n, k, warps in sizes.dot_shapes:
        a = torch.randn(SLOTS, m, k, device="cuda").to(sizes.dtype)
        b = torch.randn(SLOTS, k, n, device="cuda").to(sizes.dtype)
        out = torch.empty(grids["full"], device="cuda")
        row = {"m": m, "n": n, "k": k, "num_warps": warps}
        for name, a_once, b_once in PLACEMENTS:
            for grid, programs in grids.items():
                launch = functools.partial(calibrate_blocks._dot_kernel[(programs,)], a, b, out,
                                           sizes.dot_iters, SLOTS, M=m, N=n, K=k, NUM_STAGES=sizes.dot_stages,
                                           A_RESIDENT=a_once, B_RESIDENT=b_once, num_warps=warps)
                row[f"{name}_{grid}"] = 2 * m * n * k * sizes.dot_iters * programs / timer(launch)
        rows.append(row)
        print(m, n, k, warps, " ".join(f"{key} {value / 1e12:.0f}" for key, value in row.items()
                                       if key.endswith(("_full", "_one"))), flush=True)
    return rows


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    rows = measure(calibrate_blocks.BlockSizes())
    with open(sys.argv[1], "w") as file:
        json.dump(rows, file, indent=1)


if __name__ == "__main__":
    main()
