#!/usr/bin/env python
"""Our TFLA forward at the Fig. 4 configuration, a few calls, for Nsight Compute to profile (GPU).

`tflabench sweep` (scripts/bench_tfla_vs_reference.py) says how long a forward pass takes; this says how
its launches (gate sums, chunk states, outputs) share it, and why. Run it under ncu, which replays the
profiled launch once per counter pass (leave the clocks alone, as the device library's METHOD.md says):

    ncu --clock-control none --kernel-name regex:chunk_ --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats python scripts/profile_forward.py --variant sig --tiling default

B 8, T 8192, 16 heads, Dqk 128 / Dv 256, bf16, at the chunk size and tiling given (a tiling of
`tflabench/kernels/mlstm/tilings.py`: a name or FIELD=VALUE,... overrides).
"""

from __future__ import annotations

import argparse

import torch

from tflabench.kernels.mlstm.tilings import launch_options
from tflabench.kernels.mlstm.xl_chunk import mlstm_xl_chunk

CONFIG = dict(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256)


def make_inputs(batch, seq_len, heads, head_dim_qk, head_dim_v, seed=0):
    """Random bf16 inputs [B, T, H, D] and gates [B, T, H], the forget gates mostly open."""
    gen = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)

    q, k = randn(batch, seq_len, heads, head_dim_qk), randn(batch, seq_len, heads, head_dim_qk)
    v, i = randn(batch, seq_len, heads, head_dim_v), randn(batch, seq_len, heads)
    f = (randn(batch, seq_len, heads).float() + 3.0).to(torch.bfloat16)
    return q, k, v, i, f


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", choices=("sig", "exp"), default="sig")
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--tiling", default="default")
    parser.add_argument("--calls", type=int, default=3, help="forward calls (the first compiles)")
    args = parser.parse_args()
    options = {} if args.tiling == "default" else launch_options(
        "xl_chunk", args.tiling, chunk=args.chunk, head_dim_qk=CONFIG["head_dim_qk"],
        head_dim_v=CONFIG["head_dim_v"], variant=args.variant)
    inputs = make_inputs(**CONFIG)
    with torch.no_grad():
        for _ in range(args.calls):
            mlstm_xl_chunk(*inputs, variant=args.variant, chunk_size=args.chunk, normalize=False, eps=1e-6,
                           **options)
    torch.cuda.synchronize()
    print(f"{args.calls} forward calls of {args.variant} L={args.chunk} tiling {args.tiling}: {CONFIG}")


if __name__ == "__main__":
    main()
