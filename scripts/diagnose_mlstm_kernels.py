#!/usr/bin/env python
"""Where does mlstm_kernels' mLSTMsig xl_chunk disagree with the float64 reference? (GPU diagnostic)

In the Fig. 4 sweep (results/fig4-s8192) the reference TFLA kernel failed the harness's bf16 correctness
gate at the gate's check size (B2 T128 H2 dqk64 dv32 L64: relative error 1.23), while it passes the same
check in float32 on the CPU interpreter. This script repeats the check over the axes that differ between
those runs: operand dtype, gate dtype (the harness passes float32 gates, the benchmark script bf16 ones),
head dims and sequence length. Each kernel runs in its own child process (a compiler abort stays there).

    python scripts/diagnose_mlstm_kernels.py [--kernels mlstm_kernels.mlstm_sig.xl_chunk,...] > log.txt
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
from dataclasses import replace

#: (batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size)
SHAPES = [(2, 128, 2, 64, 32, 64), (2, 128, 2, 64, 64, 64), (2, 256, 2, 128, 256, 128),
          (1, 8192, 2, 128, 256, 128)]
DTYPES = ["bfloat16", "float32"]
GATE_DTYPES = ["float32", "operand"]
KERNELS = ["mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_kernels.mlstm_exp.xl_chunk"]


def _check(kernel: str, shape: tuple[int, ...], dtype: str, gate_dtype: str, device: str) -> dict:
    import torch

    from tflabench.bench.adapters import mlstm_kernels as adapter
    from tflabench.bench.adapters._common import check_mapping
    from tflabench.bench.registry import SweepPoint, get_kernel

    spec = get_kernel(kernel)
    suffix = kernel.removeprefix("mlstm_kernels.")
    family = spec.family
    fixed = {"normalize": False} if family == "mlstm_sig" else {}
    operand = getattr(torch, dtype)

    def make_neutral(point, device):
        from tflabench.bench import references

        inputs = references.random_inputs(family, point, device, **fixed)
        if gate_dtype == "operand":
            inputs["i"], inputs["f"] = inputs["i"].to(operand), inputs["f"].to(operand)
        return inputs

    point = replace(SweepPoint(*shape), dtype=dtype, mode="fwd")
    result = check_mapping(family, adapter.MAPPINGS[suffix], make_neutral, point, torch.device(device))
    return {"kernel": kernel, "shape": shape, "dtype": dtype, "gates": gate_dtype,
            "rel_error": result.rel_error, "tolerance": result.tolerance, "passed": result.passed}


def _child(kernel: str, device: str, shapes: list[tuple[int, ...]]) -> None:
    for shape, dtype, gate_dtype in itertools.product(shapes, DTYPES, GATE_DTYPES):
        try:
            row = _check(kernel, shape, dtype, gate_dtype, device)
        except Exception as exc:  # one configuration failing must not hide the others
            row = {"kernel": kernel, "shape": shape, "dtype": dtype, "gates": gate_dtype,
                   "error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(row), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (TRITON_INTERPRET=1, small shapes)")
    parser.add_argument("--child")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per kernel")
    arguments = parser.parse_args()
    if arguments.child:
        shapes = SHAPES if arguments.device == "cuda" else SHAPES[:2]
        _child(arguments.child, arguments.device, shapes)
        return
    for kernel in arguments.kernels.split(","):
        try:
            child = subprocess.run([sys.executable, __file__, "--child", kernel,
                                    "--device", arguments.device], capture_output=True, text=True,
                                   timeout=arguments.timeout)
            print(child.stdout, end="", flush=True)
            if child.returncode:
                print(f"{kernel}: child exited {child.returncode}: {child.stderr.strip()[-400:]}", flush=True)
        except subprocess.TimeoutExpired as exc:
            print(f"{kernel}: timeout after {arguments.timeout:.0f} s; partial output:\n{exc.stdout or ''}")


if __name__ == "__main__":
    main()
