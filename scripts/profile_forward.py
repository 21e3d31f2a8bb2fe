#!/usr/bin/env python
"""Our TFLA or fused-chunk forward (or forward and backward) at a shape, a few calls, for Nsight Compute to
profile (GPU).

`tflabench sweep` (scripts/bench_tfla_vs_reference.py) says how long a forward pass takes; this says how
its launches (gate sums, chunk states, outputs) share it, and why. Run it under ncu, which replays the
profiled launch once per counter pass (leave the clocks alone, as the device library's METHOD.md says):

    ncu --clock-control none --kernel-name regex:chunk_ --launch-skip 2 --launch-count 2 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \\
        --section WarpStateStats python scripts/profile_forward.py --variant sig --tiling default

By default B 8, T 8192, 16 heads, Dqk 128 / Dv 256 (Fig. 4), bf16, at the chunk size and tiling given (a
tiling of `tflabench/kernels/mlstm/tilings.py`: a name or FIELD=VALUE,... overrides); ``--mode fwdbw`` adds
the backward of each call (its dQ, dK and dV kernels), ``--algorithm fused_chunk`` runs the fused-chunk
kernels (`fused_forward_kernel`) instead of TFLA's, and the shape options set another shape:

    ncu --clock-control none --kernel-name regex:"chunk_(outputs|dq|dk)_kernel" --launch-skip 6 \\
        --launch-count 3 --section WarpStateStats python scripts/profile_forward.py --mode fwdbw \\
        --batch 16 --seq-len 4096 --heads 24 --head-dim-qk 96 --head-dim-v 96 --chunk 64
"""

from __future__ import annotations

import argparse

import torch

from tflabench.bench.references import random_inputs
from tflabench.core import SweepPoint
from tflabench.kernels.mlstm.fused_chunk import mlstm_fused_chunk
from tflabench.kernels.mlstm.tilings import launch_options
from tflabench.kernels.mlstm.xl_chunk import mlstm_xl_chunk

LAUNCHERS = {"xl_chunk": mlstm_xl_chunk, "fused_chunk": mlstm_fused_chunk}

CONFIG = dict(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256)


def make_inputs(batch, seq_len, heads, head_dim_qk, head_dim_v, seed=0):
    """q, k [B, T, H, Dqk] and v [B, T, H, Dv] in bf16 and the gate pre-activations i, f [B, T, H] in fp32 on
    the GPU, drawn as the harness draws them (`bench.references.random_inputs`; the gates' dtype changes the
    compiled kernels): f ~ N(3, 1), the forget gates mostly open."""
    point = SweepPoint(batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size=None)
    inputs = random_inputs("mlstm_sig", point, "cuda", seed=seed)
    return tuple(inputs[name] for name in ("q", "k", "v", "i", "f"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in CONFIG.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--variant", choices=("sig", "exp"), default="sig")
    parser.add_argument("--algorithm", choices=tuple(LAUNCHERS), default="xl_chunk")
    parser.add_argument("--mode", choices=("fwd", "fwdbw"), default="fwd")
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--tiling", default="default")
    parser.add_argument("--calls", type=int, default=3, help="calls (the first compiles)")
    args = parser.parse_args()
    shape = {name: getattr(args, name) for name in CONFIG}
    options = {} if args.tiling == "default" else launch_options(
        args.algorithm, args.tiling, chunk=args.chunk, head_dim_qk=shape["head_dim_qk"],
        head_dim_v=shape["head_dim_v"], variant=args.variant)
    backward = args.mode == "fwdbw"
    inputs = tuple(x.requires_grad_(backward) for x in make_inputs(**shape))
    with torch.set_grad_enabled(backward):
        for _ in range(args.calls):
            h = LAUNCHERS[args.algorithm](*inputs, variant=args.variant, chunk_size=args.chunk,
                                          normalize=False, eps=1e-6, **options)
            if backward:
                torch.autograd.grad(h, inputs, torch.ones_like(h))
    torch.cuda.synchronize()
    print(f"{args.calls} {args.mode} calls of {args.algorithm} {args.variant} L={args.chunk} "
          f"tiling {args.tiling}: {shape}")


if __name__ == "__main__":
    main()
