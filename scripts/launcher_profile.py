"""Where the CPU time of issuing one call of our mLSTM kernels goes (GPU): each Triton launch's CPU time
(the launcher's `JITFunction.run`, timed around it) per kernel, the rest of the call (the launcher's Python,
allocations, torch operations), and cProfile's top functions of the whole call, for the calls whose CPU
time nears their GPU time (results/h200/call-overhead). Run the variants interleaved in one process: the same
call's CPU time moves by up to 2x within a process (results/h200/launcher-profile):

    python scripts/launcher_profile.py --batch 16 --seq-len 4096 --heads 16 --head-dim-qk 64 \\
        --head-dim-v 128 --variants sig,exp --modes fwd,fwdbw --chunk 64 --json $OUT/launcher.json

Per (variant, mode): ``call_us`` the median wall time of issuing one call (no synchronization inside it);
``launch_us`` per kernel, the median CPU time of its launches in one call; ``other_us`` the call's time
outside the launches. Then cProfile's ten functions of most own time over ``--calls`` calls.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import pstats
import statistics
import time
from collections import defaultdict

import torch
from profile_forward import make_inputs
from triton.runtime.jit import JITFunction

from tflabench.kernels import mlstm


@contextlib.contextmanager
def timed_launches(seconds: dict[str, list[float]]):
    """Within the block, every Triton launch's CPU time is appended to ``seconds[kernel name]``."""
    original = JITFunction.run

    def run(self, *args, **kwargs):
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            seconds[self.fn.__name__].append(time.perf_counter() - start)

    JITFunction.run = run
    try:
        yield
    finally:
        JITFunction.run = original


def issue_once(call) -> tuple[float, dict[str, float]]:
    """(wall seconds of issuing ``call``, {kernel: CPU seconds of its launches in it})."""
    launches: dict[str, list[float]] = defaultdict(list)
    torch.cuda.synchronize()
    with timed_launches(launches):
        start = time.perf_counter()
        call()
        wall = time.perf_counter() - start
    torch.cuda.synchronize()
    return wall, {name: sum(times) for name, times in launches.items()}


def profile_row(call, calls: int) -> dict:
    """Medians over ``calls`` issued calls (`issue_once`) and cProfile's top functions."""
    samples = [issue_once(call) for _ in range(calls)]
    kernels = sorted({name for _, launches in samples for name in launches})
    launch_us = {name: statistics.median(launches.get(name, 0.0) for _, launches in samples) * 1e6
                 for name in kernels}
    call_us = statistics.median(wall for wall, _ in samples) * 1e6
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(10)
    return {"call_us": call_us, "launch_us": launch_us, "other_us": call_us - sum(launch_us.values()),
            "profile": text.getvalue()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("batch", "seq-len", "heads", "head-dim-qk", "head-dim-v"):
        parser.add_argument(f"--{name}", type=int, required=True)
    parser.add_argument("--variants", default="sig,exp")
    parser.add_argument("--modes", default="fwd,fwdbw")
    parser.add_argument("--chunk", type=int, default=64)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    inputs = make_inputs(args.batch, args.seq_len, args.heads, args.head_dim_qk, args.head_dim_v)
    rows = []
    for variant in args.variants.split(","):
        for mode in args.modes.split(","):
            leaves = [tensor.detach().requires_grad_(mode == "fwdbw") for tensor in inputs]

            def call(variant=variant, mode=mode, leaves=leaves):
                h = mlstm(*leaves, variant=variant, algorithm="xl_chunk", chunk_size=args.chunk)
                if mode == "fwdbw":
                    h.backward(torch.ones_like(h))

            for _ in range(5):
                call()
            row = {"variant": variant, "mode": mode, "chunk_size": args.chunk} | profile_row(call, args.calls)
            rows.append(row)
            launches = "  ".join(f"{name.removesuffix('_kernel')} {us:.0f}"
                                 for name, us in row["launch_us"].items())
            print(f"{variant} {mode} L{args.chunk}: call {row['call_us']:.0f} us, launches: {launches}, "
                  f"other {row['other_us']:.0f}\n{row['profile']}", flush=True)
    if args.json:
        with open(args.json, "w") as file:
            json.dump({"args": vars(args), "rows": rows}, file, indent=1)


if __name__ == "__main__":
    main()
