#!/usr/bin/env python
"""Why do mlstm_kernels' chunkwise kernels fail the harness's bf16 gate? (GPU diagnostic)

Observed on an H200 (Triton 3.6): through the harness (`KernelSpec.reference_check`, in the sweep worker or
in `isolated_checks`) the mLSTMsig xl_chunk, mLSTMexp xl_chunk and mLSTMexp limit_chunk kernels fail the
gate at B2 T128 H2 dqk64 dv32 L64 with relative errors 1.1 to 1.2 (mLSTMexp limit_chunk sometimes hits an
illegal memory access instead), while the same check written out here (`check_mapping` with the same
mapping and input generator) passed 16 of 16 configurations, the check size included, in a process that
had compiled the kernels itself. Both paths run the same Python code, so the probes vary what differs
between the processes:

  path   "spec"   `get_kernel(name).reference_check(...)`, the harness's call
         "direct" `check_mapping(...)` with the adapter's mapping, the diagnostic's call (the adapter
                  module imported before the registry loads the others)
         "registry-direct" the same after `all_kernels()` (the registry's import order, as in "spec")
         "...-dirty" the same after filling blocks of the caching allocator with NaN and freeing them:
                  a kernel that reads outside its inputs or leaves part of its output unwritten then sees NaN
                  instead of the zeros of fresh device memory
  and first the harness's own isolated check process (`python -m tflabench.bench.isolated_checks`).
  cache  "shared" Triton's default cache directory (kernels compiled by earlier processes are loaded)
         "fresh"  an empty TRITON_CACHE_DIR (the process compiles everything itself)

--repeat runs instead, after the isolated check, the kernel five times in one process (three calls on one
set of inputs, two on another) with the error per (batch, head), in the shared cache, with
TRITON_ALWAYS_COMPILE=1 and with CUDA_LAUNCH_BLOCKING=1; kernels of other packages (ours: the harness's
check failed for them at the check size before the fix in
results/gpu-tests/2026-11-22-grid-miscompile-and-fix/README.md) run the harness's check three times instead.

Each probe runs in its own child process; --shapes also repeats the direct check over operand dtype, gate
dtype, head dims and sequence length.

    python scripts/diagnose_mlstm_kernels.py [--kernels ...] [--shapes] > log.txt
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, replace

KERNELS = ["mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_kernels.mlstm_exp.xl_chunk",
           "mlstm_kernels.mlstm_exp.limit_chunk"]
PROBES = [("spec", "shared"), ("direct", "shared"), ("registry-direct", "shared"), ("spec-dirty", "shared"),
          ("direct-dirty", "shared"), ("spec", "fresh"), ("direct", "fresh")]
#: (batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size); the first is the harness's check size
SHAPES = [(2, 128, 2, 64, 32, 64), (2, 128, 2, 64, 64, 64), (2, 256, 2, 128, 256, 128),
          (1, 8192, 2, 128, 256, 128)]
#: --repeat: environment -> variables of the repeat probe's child
REPEAT_ENVIRONMENTS = {"shared": {}, "always-compile": {"TRITON_ALWAYS_COMPILE": "1"},
                       "launch-blocking": {"CUDA_LAUNCH_BLOCKING": "1"}}
DTYPES = ["bfloat16", "float32"]
GATE_DTYPES = ["float32", "operand"]


def _direct_check(kernel: str, shape: tuple[int, ...], dtype: str, gate_dtype: str, device: str) -> dict:
    """The gate written out: fresh inputs of the kernel's family, its mapping, the float64 reference."""
    import torch

    from tflabench.bench import references
    from tflabench.bench.adapters import mlstm_kernels as adapter
    from tflabench.bench.adapters._common import check_mapping
    from tflabench.bench.registry import get_kernel
    from tflabench.core import SweepPoint

    family = get_kernel(kernel).family
    fixed = {"normalize": False} if family == "mlstm_sig" else {}

    def make_neutral(point, device):
        inputs = references.random_inputs(family, point, device, **fixed)
        if gate_dtype == "operand":
            inputs["i"], inputs["f"] = (inputs[name].to(getattr(torch, dtype)) for name in ("i", "f"))
        return inputs

    point = replace(SweepPoint(*shape), dtype=dtype, mode="fwd")
    mapping = adapter.MAPPINGS[kernel.removeprefix("mlstm_kernels.")]
    result = check_mapping(family, mapping, make_neutral, point, torch.device(device))
    return {"rel_error": result.rel_error, "passed": result.passed}


def _spec_check(kernel: str, dtype: str, device: str) -> dict:
    from tflabench.bench.registry import get_kernel

    result = get_kernel(kernel).reference_check(device, dtype)
    return {"rel_error": result.rel_error, "passed": result.passed, "detail": result.detail}


def _dirty_device_memory(device: str) -> None:
    """Leave NaN in the caching allocator's free blocks, small (1 KiB to 1 MiB, 16 each) and large (1 GiB):
    later allocations reuse them."""
    import torch

    if device == "cuda":
        sizes = [1 << 28] + [1 << exponent for exponent in range(8, 19) for _ in range(16)]
        blocks = [torch.full((size,), float("nan"), device=device) for size in sizes]
        del blocks


def _repeat_check(kernel: str, device: str, shape: tuple[int, ...] | None) -> None:
    """Within one process: the kernel three times on the same inputs, then on fresh ones; per call the
    relative error, the largest difference to the first call's output, and the error per (batch, head).
    shape: (batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size), by default the check size."""
    import torch

    from tflabench.bench import references
    from tflabench.bench.adapters import mlstm_kernels as adapter
    from tflabench.bench.adapters._common import CHECK_POINT, _prepared
    from tflabench.bench.registry import get_kernel
    from tflabench.core import SweepPoint

    family = get_kernel(kernel).family
    fixed = {"normalize": False} if family == "mlstm_sig" else {}
    point = replace(SweepPoint(*shape) if shape else CHECK_POINT, mode="fwd",
                    dtype="bfloat16" if device == "cuda" else "float32")
    mapping = adapter.MAPPINGS[kernel.removeprefix("mlstm_kernels.")]
    first = None
    for call in range(5):
        if call in (0, 3):
            neutral = references.random_inputs(family, point, device, **fixed)
            reference = references.reference_output(family, neutral)
        arguments = _prepared(mapping.to_native(neutral, point), mapping.grad_inputs, "fwd")
        with torch.no_grad():
            output = mapping.to_neutral(mapping.call(arguments)).double()
        torch.cuda.synchronize() if device == "cuda" else None
        first = output if call == 0 else first
        per_head = ((output - reference).transpose(1, 2).flatten(2).norm(dim=-1)
                    / reference.transpose(1, 2).flatten(2).norm(dim=-1))  # [B, H]
        row = {"kernel": kernel, "path": "repeat", "point": point.key(), "call": call,
               "rel_error": references.relative_error(output, reference),
               "max_diff_to_call0": float((output - first).abs().max()) if call < 3 else None,
               "per_batch_head": [[round(float(value), 4) for value in batch] for batch in per_head]}
        print(json.dumps(row), flush=True)


def _spec_repeat_check(kernel: str, device: str, shape: tuple[int, ...] | None) -> None:
    """Within one process: the harness's check (two calls each, on fresh inputs) three times, at the check
    size or at ``shape``'s heads, head dims and chunk size; for any registered kernel (the repeat probe
    needs mlstm_kernels' mappings)."""
    from tflabench.bench.registry import get_kernel
    from tflabench.core import SweepPoint

    configuration = SweepPoint(*shape) if shape else None
    dtype = "bfloat16" if device == "cuda" else "float32"
    for call in range(3):
        result = get_kernel(kernel).reference_check(device, dtype, configuration)
        print(json.dumps({"kernel": kernel, "path": "spec-repeat", "call": call, "passed": result.passed,
                          "rel_error": result.rel_error, "detail": result.detail}), flush=True)


def _child(kernel: str, path: str, device: str, shapes: bool, repeat_shape: tuple[int, ...] | None) -> None:
    if path == "repeat":
        _repeat_check(kernel, device, repeat_shape)
        return
    if path == "spec-repeat":
        _spec_repeat_check(kernel, device, repeat_shape)
        return
    dtype = "bfloat16" if device == "cuda" else "float32"
    configurations = (itertools.product(SHAPES if device == "cuda" else SHAPES[:2], DTYPES, GATE_DTYPES)
                      if shapes else [(SHAPES[0], dtype, "float32")])
    for shape, dtype, gate_dtype in configurations:
        row = {"kernel": kernel, "path": path, "shape": shape, "dtype": dtype, "gates": gate_dtype}
        try:
            if path.endswith("-dirty"):
                _dirty_device_memory(device)
            if path.startswith("spec"):
                row |= _spec_check(kernel, dtype, device)
            else:
                if path == "registry-direct":
                    from tflabench.bench.registry import all_kernels

                    all_kernels()
                row |= _direct_check(kernel, shape, dtype, gate_dtype, device)
        except Exception as exc:  # one configuration failing must not hide the others
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps(row), flush=True)


def _run_child(arguments: list[str], env: dict, timeout_s: float, label: str) -> None:
    try:
        child = subprocess.run([sys.executable, __file__, *arguments], capture_output=True, text=True,
                               timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:
        print(f"{label}: timeout after {timeout_s:.0f} s; partial output: {exc.stdout or ''}", flush=True)
        return
    for line in child.stdout.splitlines():
        print(f"{label}: {line}", flush=True)
    if child.returncode:
        print(f"{label}: child exited {child.returncode}: {child.stderr.strip()[-400:]}", flush=True)


def _isolated_probe(kernel: str, device: str, timeout_s: float) -> None:
    """The harness's own isolated check (`python -m ...isolated_checks`, the working directory first on
    sys.path), exactly as the GPU test runs it."""
    from tflabench.bench.isolated_checks import run_isolated

    dtype = "bfloat16" if device == "cuda" else "float32"
    outcome = run_isolated(kernel, dtype, device, timeout_s)
    print(f"probe isolated/shared: {json.dumps(asdict(outcome))}", flush=True)


def _concurrent_probe(kernels: list[str], device: str, timeout_s: float, copies: int) -> None:
    """The harness's isolated check of every kernel, ``copies`` times each, in that many concurrent processes
    on one GPU, as the adapter GPU test runs them (six at once): does a check fail only beside others?"""
    from tflabench.bench.isolated_checks import run_checks

    dtype = "bfloat16" if device == "cuda" else "float32"
    names = [kernel for kernel in kernels for _ in range(copies)]
    outcomes = run_checks(names, dtype, device, timeout_s=timeout_s, jobs=copies, deadline_s=3 * timeout_s)
    for outcome in outcomes:
        print(f"concurrent/{copies}: {json.dumps(asdict(outcome))}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernels", default=",".join(KERNELS))
    parser.add_argument("--device", default="cuda", help="cuda, or cpu (TRITON_INTERPRET=1, small shapes)")
    parser.add_argument("--shapes", action="store_true", help="also the direct check over shapes and dtypes")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per child process")
    parser.add_argument("--repeat", action="store_true",
                        help="only the repeat probe (three calls on the same inputs, per-head errors) in the "
                             "environments of REPEAT_ENVIRONMENTS")
    parser.add_argument("--repeat-shape", help="B,T,H,DQK,DV,L of the repeat probe (default: the check size)")
    parser.add_argument("--processes", type=int, default=1,
                        help="--repeat: children per environment (the failure differs between processes)")
    parser.add_argument("--concurrent", type=int, default=0, metavar="N",
                        help="only the harness's isolated check of each kernel, N copies at once")
    parser.add_argument("--child", nargs=2, metavar=("KERNEL", "PATH"))
    arguments = parser.parse_args()
    repeat_shape = tuple(int(size) for size in arguments.repeat_shape.split(",")) if arguments.repeat_shape \
        else None
    if arguments.child:
        _child(*arguments.child, arguments.device, arguments.shapes, repeat_shape)
        return
    if arguments.concurrent:
        _concurrent_probe(arguments.kernels.split(","), arguments.device, arguments.timeout,
                          arguments.concurrent)
        return
    common = ["--device", arguments.device]
    if repeat_shape:
        common += ["--repeat-shape", arguments.repeat_shape]
    for kernel in arguments.kernels.split(","):
        _isolated_probe(kernel, arguments.device, arguments.timeout)
        if arguments.repeat:
            for (name, variables), number in itertools.product(REPEAT_ENVIRONMENTS.items(),
                                                                range(arguments.processes)):
                path = "repeat" if kernel.startswith("mlstm_kernels.") else "spec-repeat"
                _run_child(["--child", kernel, path, *common], {**os.environ, **variables},
                           arguments.timeout, f"repeat/{name}/{number}")
            continue
        for number, (path, cache) in enumerate(PROBES):
            env = dict(os.environ)
            if cache == "fresh":
                env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-fresh-")
            label = f"probe {number} {path}/{cache}"
            _run_child(["--child", kernel, path, *common], env, arguments.timeout, label)
        if arguments.shapes:
            _run_child(["--child", kernel, "direct", "--shapes", *common], dict(os.environ),
                       arguments.timeout, "shapes direct/shared")


if __name__ == "__main__":
    main()
