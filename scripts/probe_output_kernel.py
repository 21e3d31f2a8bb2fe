#!/usr/bin/env python
"""Which launch of our forward output kernel reads shared memory out of bounds? (GPU diagnostic)

H200, Triton 3.6 (results/gpu-tests/2026-11-22-grid-miscompile-and-fix/README.md): at the harness's
check size (B 2, T 128, H 2, Dqk 64, Dv 32, L 64, bf16) our
mLSTMsig xl_chunk hit an illegal memory access and mLSTMexp limit_chunk gave wrong, changing outputs
from t = 16 on; compute-sanitizer's memcheck put an out-of-bounds shared-memory read of 1024 bytes at the
store of h in `chunk_outputs_kernel`. The same kernels passed this check before the chunk
programs moved onto a 1-D grid: since then, at Dv <= 128 (one value block) and L = block_q (one query
block), the tile indices decode to compile-time zeros and the key/value loop gets a constant trip count.

Each probe runs the forward at one shape and tiling in its own process (a fault ends the process), twice
on the same inputs, against the float64 parallel reference:

    python scripts/probe_output_kernel.py > log.txt
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys

#: (name, variant, algorithm, (B, T, H, Dqk, Dv, L), tiling changes)
PROBES = [
    ("check-size sig xl", "sig", "xl_chunk", (2, 128, 2, 64, 32, 64), {}),
    ("check-size sig xl num_stages=1", "sig", "xl_chunk", (2, 128, 2, 64, 32, 64), {"out_num_stages": 1}),
    ("check-size sig xl block_q=32", "sig", "xl_chunk", (2, 128, 2, 64, 32, 64),
     {"block_q": 32, "block_kv": 32, "out_block_kv": 32}),
    ("check-size sig xl out_num_warps=8", "sig", "xl_chunk", (2, 128, 2, 64, 32, 64), {"out_num_warps": 8}),
    ("sig xl Dv 64", "sig", "xl_chunk", (2, 128, 2, 64, 64, 64), {}),
    ("sig xl Dv 128", "sig", "xl_chunk", (2, 128, 2, 64, 128, 64), {}),
    ("sig xl Dv 256 (two value blocks)", "sig", "xl_chunk", (2, 128, 2, 64, 256, 64), {}),
    ("sig xl Dqk 32 Dv 32", "sig", "xl_chunk", (2, 128, 2, 32, 32, 64), {}),
    ("sig xl L 128 (two query blocks)", "sig", "xl_chunk", (2, 256, 2, 64, 32, 128), {}),
    ("check-size exp limit", "exp", "limit_chunk", (2, 128, 2, 64, 32, 64), {}),
    ("check-size exp limit num_stages=1", "exp", "limit_chunk", (2, 128, 2, 64, 32, 64),
     {"out_num_stages": 1}),
    ("check-size exp xl", "exp", "xl_chunk", (2, 128, 2, 64, 32, 64), {}),
]


def _probe(index: int) -> dict:
    import torch

    from tflabench.kernels.mlstm.reference import mlstm_parallel
    from tflabench.kernels.mlstm.xl_chunk import Tiling, mlstm_chunkwise_triton

    name, variant, algorithm, (B, T, H, DQK, DV, L), changes = PROBES[index]
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: TRITON_INTERPRET=1, float32
    generator = torch.Generator(device=device).manual_seed(index)

    def randn(*dims, mean=0.0):
        return mean + torch.randn(*dims, generator=generator, device=device)

    inputs = dict(q=randn(B, T, H, DQK), k=randn(B, T, H, DQK), v=randn(B, T, H, DV), i=randn(B, T, H),
                  f=randn(B, T, H, mean=3.0))
    normalize = None if variant == "exp" else False
    reference = mlstm_parallel(**{n: x.double() for n, x in inputs.items()}, variant=variant,
                               normalize=normalize)
    default = Tiling.default(L, DQK, DV, variant=variant, limit=algorithm == "limit_chunk")
    tiling = dataclasses.replace(default, **changes)
    operand_dtype = torch.bfloat16 if device == "cuda" else torch.float32
    operands = {n: x.to(operand_dtype) if n in "qkv" else x for n, x in inputs.items()}
    outputs = [mlstm_chunkwise_triton(**operands, variant=variant, chunk_size=L, normalize=normalize or False,
                                      eps=1e-6, tiling=tiling).double() for _ in range(2)]
    error = float((outputs[0] - reference).norm() / reference.norm())
    return {"probe": name, "rel_error": error, "repeat_diff": float((outputs[1] - outputs[0]).abs().max()),
            "ok": error < 0.03 and bool(torch.equal(outputs[0], outputs[1]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", type=int)
    parser.add_argument("--timeout", type=float, default=60.0)
    arguments = parser.parse_args()
    if arguments.child is not None:
        print(json.dumps(_probe(arguments.child)), flush=True)
        return
    for index, probe in enumerate(PROBES):
        try:
            child = subprocess.run([sys.executable, __file__, "--child", str(index)], capture_output=True,
                                   text=True, timeout=arguments.timeout)
            line = child.stdout.strip() or json.dumps(
                {"probe": probe[0], "error": f"exit {child.returncode}: {child.stderr.strip()[-200:]}"})
        except subprocess.TimeoutExpired:
            line = json.dumps({"probe": probe[0], "error": f"timeout after {arguments.timeout:.0f} s"})
        print(line, flush=True)


if __name__ == "__main__":
    main()
