"""CPU time of a call of our mLSTM kernels against its GPU time (GPU): where a call's launches take the CPU
longer than the GPU takes to run them, the harness's timed call (`measure.time_calls_cuda`: the L2 flushed,
then the call between two CUDA events) includes the CPU's pace, and its rounds are as steady as the CPU.

Per chunk size three figures, medians over ``--calls`` calls after a warm-up, in microseconds:
``cpu_us`` the wall time of issuing one call (no synchronization: the launcher's Python and the launches);
``harness_us`` the harness's timing (and ``harness_spread``, its interquartile range over its median),
``harness_nvml_us`` / ``harness_nvml_spread`` the same with the harness's NVML sampler running beside it, as a
sweep's worker runs it; ``queued_us`` the same call timed between CUDA events while the GPU is
held busy by a sleep kernel queued before it, so that all of the call's launches are queued before the GPU
reaches them (the GPU's own time of the call). Writes the rows to a JSON file:

    python scripts/call_overhead.py --batch 16 --seq-len 4096 --heads 16 --head-dim-qk 64 --head-dim-v 128 \\
        --variant sig --chunk-sizes 64,128 --json $OUT/overhead.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from profile_forward import make_inputs

from tflabench.bench import measure
from tflabench.kernels import mlstm
from tflabench.nvml import NvmlSampler

#: GPU cycles of the sleep queued before a call in ``queued_us`` (about 5 ms at 1.98 GHz: longer than any
#: call's launches take the CPU)
SLEEP_CYCLES = 10_000_000


def cpu_us(call, calls: int) -> float:
    """Median wall time of issuing ``call`` (each followed by a synchronization outside the timed part)."""
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def queued_us(call, calls: int) -> float:
    """Median GPU time of ``call`` between CUDA events with the GPU held busy before it."""
    times = []
    for _ in range(calls):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


class _Step:
    """The minimal `measure.KernelStep` the harness's timer needs: a forward call, nothing to reset."""

    def __init__(self, call):
        self.call = call

    def reset(self) -> None:
        pass

    def __call__(self):
        return self.call()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("batch", "seq-len", "heads", "head-dim-qk", "head-dim-v"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--variant", choices=("sig", "exp"), default="sig")
    parser.add_argument("--chunk-sizes", default="64,128")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    inputs = make_inputs(args.batch, args.seq_len, args.heads, args.head_dim_qk, args.head_dim_v)
    rows = []
    for chunk in map(int, args.chunk_sizes.split(",")):
        def call(chunk=chunk):
            return mlstm(*inputs, variant=args.variant, algorithm="xl_chunk", chunk_size=chunk)
        for _ in range(10):
            call()
        harness = measure.time_calls_cuda(_Step(call), args.calls)
        with NvmlSampler():
            sampled = measure.time_calls_cuda(_Step(call), args.calls)
        row = {"chunk_size": chunk, "cpu_us": cpu_us(call, args.calls),
               "harness_us": statistics.median(harness) * 1e3, "harness_spread": measure.spread(harness),
               "harness_nvml_us": statistics.median(sampled) * 1e3,
               "harness_nvml_spread": measure.spread(sampled),
               "queued_us": queued_us(call, args.calls)}
        rows.append(row)
        print(vars(args) | row, flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"args": vars(args), "rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
