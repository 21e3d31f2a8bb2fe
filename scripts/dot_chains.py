#!/usr/bin/env python
"""Tile-product throughput of one dependent chain against independent chains (GPU).

The calibration times `tl.dot` as one chain (acc += a b each iteration, `calibrate_blocks._dot_kernel`); the
gradient kernels issue independent products (the dK/dV kernel's scores and score gradients). This times the
same number of [M, K] x [K, N] products per program as one chain and as CHAINS independent accumulators, at
one and two programs of 4 warps per SM, operands from L2 as in the calibration:

    python scripts/dot_chains.py [--shape 64,64,64] [--json FILE]
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl

SLOTS = 64
ITERS = 512


@triton.jit
def _tile(ptr, slot, ROWS: tl.constexpr, COLS: tl.constexpr):
    offsets = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    return tl.load(ptr + slot * ROWS * COLS + offsets)


@triton.jit
def _chains_kernel(a_ptr, b_ptr, out_ptr, ITERS, SLOTS, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
                   CHAINS: tl.constexpr):
    """ITERS products per program: one accumulator (CHAINS = 1) or two fed alternately (CHAINS = 2)."""
    pid = tl.program_id(0)
    first = tl.zeros([M, N], dtype=tl.float32)
    second = tl.zeros([M, N], dtype=tl.float32)
    for it in tl.range(0, ITERS // CHAINS, num_stages=2):
        slot = (pid + it) % SLOTS
        first = tl.dot(_tile(a_ptr, slot, M, K), _tile(b_ptr, slot, K, N), first)
        if CHAINS == 2:
            other = (slot + 1) % SLOTS
            second = tl.dot(_tile(a_ptr, other, M, K), _tile(b_ptr, other, K, N), second)
    tl.store(out_ptr + pid, tl.sum(tl.sum(first + second, 1), 0))


def measure(m: int, n: int, k: int) -> list[dict]:
    """TFLOP/s (whole GPU) per (programs per SM, chains)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    a = torch.randn(SLOTS, m, k, device="cuda").to(torch.bfloat16)
    b = torch.randn(SLOTS, k, n, device="cuda").to(torch.bfloat16)
    rows = []
    for per_sm in (1, 2):
        out = torch.empty(per_sm * sms, device="cuda")
        for chains in (1, 2):
            def launch(per_sm=per_sm, chains=chains, out=out):
                _chains_kernel[(per_sm * sms,)](a, b, out, ITERS, SLOTS, M=m, N=n, K=k, CHAINS=chains,
                                                num_warps=4)
            seconds = triton.testing.do_bench(launch) * 1e-3
            flops = 2 * m * n * k * ITERS * per_sm * sms
            rows.append({"shape": [m, n, k], "programs_per_sm": per_sm, "chains": chains,
                         "tflops": flops / seconds / 1e12})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="64,64,64", help="M,N,K of the products")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    m, n, k = (int(part) for part in args.shape.split(","))
    rows = measure(m, n, k)
    print(torch.cuda.get_device_name(0))
    for row in rows:
        print(f"{row['programs_per_sm']} per SM, {row['chains']} chain(s): {row['tflops']:.0f} TFLOP/s")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"device": torch.cuda.get_device_name(0), "rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
