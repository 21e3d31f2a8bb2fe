#!/usr/bin/env python
"""Per-launch GPU time of our mLSTM kernels beside the structural model's prediction of each launch (GPU).

`tflabench model-check` compares whole calls; where it ranks chunk sizes wrong, this says which launch the
model miscounts. torch.profiler times every CUDA kernel of a few calls of `tflabench.kernels.mlstm` after
their warm-up; the model's launches (`structural.launches`, timed with the GPU's calibration) are summed per
Triton kernel they run. Kernels of torch operations (the gate gradients, casts) are one row, "torch ops".

    python scripts/launch_times.py --gpu h100 --batch 8 --seq-len 8192 --heads 16 --head-dim-qk 128 \\
        --head-dim-v 256 --variant sig --mode fwdbw --chunk-sizes 128,256 [--algorithm reference] \\
        [--tiling TEXT] [--json FILE]

A chunk size the tiling does not fit (two query tiles of 64 rows at L = 64) is reported as skipped, with the
reason, and the others still run.

``--algorithm reference`` times mlstm_kernels' mLSTMsig xl_chunk instead (on contiguous head-first copies, as
the harness calls it), beside the model of the reference's launches.

Inputs: bf16 randn q, k, v and fp32 gates, forget-gate pre-activations shifted by +3
(`profile_forward.make_inputs`; the per-launch times committed before fp32 gates were measured with bf16
gates, which change only TFLA's `gate_cumsum_kernel`: results/perf-log.md).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Callable

from tflabench.analysis import structural
from tflabench.bench.sweep import DEFAULT_TILING
from tflabench.errors import InputError

#: the row of every kernel that no model launch names (torch operations)
TORCH_OPS = "torch ops"


def predicted_kernel_us(problem: structural.Problem, algorithm: str, chunk: int, rates: structural.Rates,
                        tiling: str | None = None) -> dict[str, float]:
    """Microseconds per call of each kernel the model launches (with ``tiling``), its launches of one
    kernel summed; the launches that name no Triton kernel under `TORCH_OPS`."""
    per_kernel: dict[str, float] = defaultdict(float)
    for launch in structural.launches(problem, algorithm, chunk, tiling):
        per_kernel[launch.kernel or TORCH_OPS] += structural.launch_time(launch, rates).seconds * 1e6
    return dict(per_kernel)


def compare(measured: dict[str, float], predicted: dict[str, float]) -> list[dict]:
    """One row per kernel, in the model's launch order: measured and predicted microseconds per call and
    their ratio (None where one side lacks the kernel). Measured kernels that the model does not name
    are summed under `TORCH_OPS`."""
    grouped: dict[str, float] = defaultdict(float)
    for name, us in measured.items():
        grouped[name if name in predicted else TORCH_OPS] += us
    names = list(predicted) + [name for name in grouped if name not in predicted]
    rows = []
    for name in names:
        measured_us, predicted_us = grouped.get(name), predicted.get(name)
        ratio = predicted_us / measured_us if measured_us and predicted_us is not None else None
        rows.append({"kernel": name, "measured_us": measured_us, "predicted_us": predicted_us,
                     "predicted_over_measured": ratio})
    return rows


def measure_kernel_us(call: Callable[[], None], calls: int) -> dict[str, float]:
    """Microseconds per call of each CUDA kernel that ``call`` launches, over ``calls`` profiled calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as profiler:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    per_kernel = {}
    for event in profiler.key_averages():
        device_us = getattr(event, "device_time_total", None) or getattr(event, "cuda_time_total", 0.0)
        if device_us > 0:
            per_kernel[event.key] = device_us / calls
    return per_kernel


def _timed_call(forward: Callable[[], object], leaves: tuple, mode: str) -> Callable[[], tuple | None]:
    """A call of ``forward`` (no autograd with mode fwd), and with mode fwdbw of its backward: the gradients
    of ``leaves`` (which must require them) are returned, not accumulated into ``.grad``, as the harness
    drops them between calls."""
    import torch

    if mode == "fwd":
        def call():
            with torch.no_grad():
                forward()
        return call
    grad = torch.randn_like(leaves[2])

    def call():
        return torch.autograd.grad(forward(), leaves, grad)
    return call


def _mlstm_call(inputs, variant: str, chunk: int, mode: str,
                tiling: str | None = None) -> Callable[[], tuple | None]:
    """`_timed_call` of our xl_chunk kernel on ``inputs`` (q, k, v, i, f), with a tiling text (a named
    candidate or FIELD=VALUE overrides, `kernels.mlstm.tilings`) instead of the default where given."""
    from tflabench.kernels import mlstm
    from tflabench.kernels.mlstm import tilings
    from tflabench.kernels.mlstm.xl_chunk import mlstm_xl_chunk

    if tiling is None:
        return _timed_call(lambda: mlstm(*inputs, variant=variant, algorithm="xl_chunk", chunk_size=chunk),
                           inputs, mode)
    q, _, v, _, _ = inputs
    options = tilings.launch_options("xl_chunk", tiling, chunk=chunk, head_dim_qk=q.shape[-1],
                                     head_dim_v=v.shape[-1], variant=variant)
    return _timed_call(lambda: mlstm_xl_chunk(*inputs, variant=variant, chunk_size=chunk, normalize=False,
                                              eps=1e-6, **options), inputs, mode)


def _reference_call(inputs, chunk: int, mode: str) -> Callable[[], tuple | None]:
    """The same for mlstm_kernels' mLSTMsig xl_chunk (the reference), no normalizer, on contiguous
    head-first copies of the inputs made before the timed calls (as the harness's adapter makes them)."""
    from tflabench.bench.adapters import mlstm_kernels
    from tflabench.bench.adapters._common import tokens_first

    kernel = mlstm_kernels._entry("mlstm_sig.xl_chunk")
    head_first = tuple(tokens_first(x).detach().contiguous().requires_grad_(mode == "fwdbw") for x in inputs)

    def forward():
        q, k, v, i, f = head_first
        return kernel(q=q, k=k, v=v, i=i, f=f, chunk_size=chunk, normalize=False)

    return _timed_call(forward, head_first, mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", required=True, help="GPU key of the calibration (tflabench gpus)")
    for name in ("batch", "seq-len", "heads", "head-dim-qk", "head-dim-v"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--variant", choices=("sig", "exp"), default="sig")
    parser.add_argument("--algorithm", choices=("xl_chunk", "reference"), default="xl_chunk",
                        help="ours, or mlstm_kernels' mLSTMsig xl_chunk (sig only)")
    parser.add_argument("--mode", choices=("fwd", "fwdbw"), default="fwdbw")
    parser.add_argument("--chunk-sizes", default="128,256", help="comma list")
    parser.add_argument("--warmup", type=int, default=3, help="unprofiled calls first (the first compiles)")
    parser.add_argument("--calls", type=int, default=5, help="profiled calls")
    parser.add_argument("--tiling", help="our kernels with this tiling (a name or FIELD=VALUE,...; "
                                         "'default' or none: the default tiling)")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    if args.tiling == DEFAULT_TILING:
        args.tiling = None
    if args.algorithm == "reference" and (args.variant != "sig" or args.tiling):
        parser.error("the reference is mLSTMsig only (--variant sig), at its own tiling")

    from profile_forward import make_inputs

    shape = dict(batch=args.batch, seq_len=args.seq_len, heads=args.heads, head_dim_qk=args.head_dim_qk,
                 head_dim_v=args.head_dim_v)
    problem = structural.Problem(**shape, variant=args.variant, mode=args.mode)
    rates = structural.load_rates(args.gpu)
    inputs = make_inputs(**shape)
    if args.mode == "fwdbw":
        inputs = tuple(x.requires_grad_() for x in inputs)
    report = []
    for chunk in (int(size) for size in args.chunk_sizes.split(",")):
        try:
            call = (_reference_call(inputs, chunk, args.mode) if args.algorithm == "reference"
                    else _mlstm_call(inputs, args.variant, chunk, args.mode, args.tiling))
        except InputError as error:  # a tiling that does not fit this chunk size: the others still run
            print(f"L = {chunk}: skipped: {error}")
            report.append({"chunk_size": chunk, "skipped": str(error)})
            continue
        for _ in range(args.warmup):
            call()
        predicted = predicted_kernel_us(problem, args.algorithm, chunk, rates, args.tiling)
        rows = compare(measure_kernel_us(call, args.calls), predicted)
        report.append({"chunk_size": chunk, "rows": rows})
        print(f"L = {chunk}: {args.algorithm} {args.variant} {args.mode} {shape}, calibration {args.gpu}")
        for row in rows:
            cells = [f"{row[key]:10.1f}" if row[key] is not None else f"{'-':>10}"
                     for key in ("measured_us", "predicted_us")]
            ratio = row["predicted_over_measured"]
            print(f"  {row['kernel']:28s}{cells[0]}{cells[1]}  {'-' if ratio is None else f'{ratio:.2f}'}")
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"problem": shape | {"variant": args.variant, "mode": args.mode},
                       "algorithm": args.algorithm, "tiling": args.tiling, "gpu": args.gpu,
                       "chunks": report}, file, indent=2)


if __name__ == "__main__":
    main()
