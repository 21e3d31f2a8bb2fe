#!/usr/bin/env python
"""HBM and L2 read rates of token tiles [64, cols] of a [B, T, 16, D] bf16 tensor at column widths 128, 64 and
32 (GPU): whether the narrow head-dim blocks of a kernel read their tiles more slowly than the calibration's
whole-row tiles (`calibrate_blocks._token_pattern`, `_l2_pattern`, the same kernel and timer). Rates in
useful bytes (D columns per row) per second; at D = 96 a 64-wide block reads a masked-width tile past the
row (as the kernels' loads would without the mask).

    python scripts/l2_tile_widths.py
"""

from __future__ import annotations

from dataclasses import replace

import torch

from tflabench.analysis import calibrate_blocks as blocks

WIDTHS = ((128, 128), (128, 64), (128, 32), (96, 32), (96, 64))


def main() -> None:
    sizes = blocks.BlockSizes()
    limits = blocks.DeviceLimits.of(sizes.device)
    timer = blocks.Timer.of(sizes)
    element_bytes = 2
    print(f"{torch.cuda.get_device_name()}: token tiles [64, cols] of [B, T, 16, D] bf16, useful TB/s")
    for dim, cols in WIDTHS:
        shaped = replace(sizes, token_shape=(16, dim))
        patterns = (("hbm", blocks._token_pattern(shaped, element_bytes)),
                    ("l2", blocks._l2_pattern(shaped, element_bytes, limits)))
        for name, pattern in patterns:
            col_blocks = -(-dim // cols)
            walk = replace(pattern, cols=cols, col_blocks=col_blocks, dim=col_blocks * cols)  # no mask
            extent = max(walk.outer * walk.outer_stride, walk.tiles * walk.tile_stride) + 64 * 16 * dim
            buffer = torch.zeros(extent, device="cuda", dtype=torch.bfloat16)
            blocks._stream_seconds(walk, walk.programs, False, buffer, timer)  # compiles, warms the clocks
            seconds = blocks._stream_seconds(walk, walk.programs, False, buffer, timer)
            useful = walk.programs // col_blocks * walk.tiles * walk.rows * dim * element_bytes
            rate = useful / seconds / 1e12
            print(f"D {dim:4d} cols {cols:4d} {name:4s} {rate:6.2f}  ({walk.programs} programs)")


if __name__ == "__main__":
    main()
