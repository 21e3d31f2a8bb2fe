#!/usr/bin/env python
"""The backward's gate-gradient kernel per segment length, beside the PyTorch ops it replaced (GPU).

`triton_bwd.gate_grads_kernel` runs one program per segment of `xl_chunk.GATE_GRADS_SEGMENT` tokens of a
(batch, head) row: it sums the row sums after its segment, then walks the segment in dependent steps. Shorter
segments mean more programs and fewer dependent steps, but more re-read tokens. This times the kernel alone
(`xl_chunk._gate_grads` on bf16 gates and fp32 row sums as the dQ and dK kernels leave them) per segment
length, and `launch.gate_grads` (the PyTorch ops), on tfla-grid's shapes:

    python scripts/gate_grads_segments.py [--segments 1024,2048,4096,8192] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from functools import partial

import torch
import triton

from tflabench.kernels.mlstm import xl_chunk
from tflabench.kernels.mlstm.launch import gate_grads

#: (B, T, H, row-sum blocks of q.dq, of k.dk): tfla-grid's head counts at T = 8192 and 65,536 (blocks: 1 at
#: head dims 64, where dQ and dK come whole from the fused kernels; 2 at Dqk 128 and 256 in 128-wide blocks)
SHAPES = ((8, 8192, 32, 1, 1), (8, 8192, 16, 2, 2), (8, 8192, 8, 2, 2),
          (1, 65536, 32, 1, 1), (1, 65536, 16, 2, 2), (1, 65536, 8, 2, 2))


def _inputs(batch: int, seq_len: int, heads: int, q_blocks: int, k_blocks: int):
    """Row sums [blocks, B*H, T] fp32, gates [B, T, H] bf16, final states [B*H, 128, 256] fp32."""
    rows = batch * heads
    q_dq = torch.randn(q_blocks, rows, seq_len, device="cuda")
    k_dk = torch.randn(k_blocks, rows, seq_len, device="cuda")
    i, f = (torch.randn(batch, seq_len, heads, device="cuda").to(torch.bfloat16) for _ in range(2))
    c_last, dc_last = (torch.randn(rows, 128, 256, device="cuda") for _ in range(2))
    return q_dq, k_dk, i, f, c_last, dc_last


def measure(segments: list[int]) -> list[dict]:
    """Microseconds per call of the kernel at each segment length and of the PyTorch ops, per shape; the
    kernel's df checked against the ops' first."""
    rows = []
    for batch, seq_len, heads, q_blocks, k_blocks in SHAPES:
        q_dq, k_dk, *gates_and_states = _inputs(batch, seq_len, heads, q_blocks, k_blocks)
        ops = partial(gate_grads, q_dq.sum(0), k_dk.sum(0), *gates_and_states, True)
        row = {"batch": batch, "seq_len": seq_len, "heads": heads,
               "torch_ops_us": triton.testing.do_bench(ops) * 1e3}
        expected = ops()[1].float()
        for segment in segments:
            xl_chunk.GATE_GRADS_SEGMENT = segment
            kernel = partial(xl_chunk._gate_grads, q_dq, k_dk, *gates_and_states, True)
            error = (kernel()[1].float() - expected).norm() / expected.norm()
            assert error < 1e-2, f"df off by {error:.2e} at segment {segment}"
            row[f"segment_{segment}_us"] = triton.testing.do_bench(kernel) * 1e3
        rows.append(row)
        print(row, flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", default="1024,2048,4096,8192")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = measure([int(value) for value in args.segments.split(",")])
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
