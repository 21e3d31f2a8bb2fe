"""Measure the current GPU's achievable ceilings: bf16 matmul FLOP/s and device-copy bandwidth.

* matmul: C = A B with A, B [n, n] bf16 (default n = 8192), 2 n^3 FLOPs per call;
* bandwidth: `dst.copy_(src)` of a device buffer (default 1 GiB), read + write bytes counted (2 x size).

Each is timed with CUDA events after warm-up; the median over the repeats is reported (robust against
clock ramps and outliers, slightly below a best-of figure). Importable without a GPU; measuring without
one raises InputError("no CUDA GPU").
"""

from __future__ import annotations

import datetime
import statistics
from collections.abc import Callable

from tflabench.analysis.hardware import Ceilings
from tflabench.errors import InputError

DEFAULT_MATMUL_SIZE = 8192
DEFAULT_COPY_BYTES = 2**30
DEFAULT_REPEATS = 20
WARMUP_CALLS = 3


def cuda_device_name() -> str:
    """Name of CUDA device 0; InputError("no CUDA GPU") when torch sees none."""
    import torch

    if not torch.cuda.is_available():
        raise InputError("no CUDA GPU here: calibrate measures the ceilings of a CUDA device")
    return torch.cuda.get_device_name(0)


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median CUDA-event time of `fn()` over `repeats` calls after `WARMUP_CALLS` warm-up calls."""
    import torch

    for _ in range(WARMUP_CALLS):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def measure_matmul_flops(size: int = DEFAULT_MATMUL_SIZE, repeats: int = DEFAULT_REPEATS) -> float:
    """Achieved bf16 matmul FLOP/s of a [size, size] x [size, size] product."""
    import torch

    cuda_device_name()
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    seconds = median_seconds(lambda: torch.matmul(a, b, out=out), repeats)
    return 2 * size**3 / seconds


def measure_copy_bandwidth(nbytes: int = DEFAULT_COPY_BYTES, repeats: int = DEFAULT_REPEATS) -> float:
    """Achieved device-to-device copy bandwidth in B/s, counting read + write (2 * nbytes per copy)."""
    import torch

    cuda_device_name()
    src = torch.randint(0, 256, (nbytes,), device="cuda", dtype=torch.uint8)
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src), repeats)
    return 2 * nbytes / seconds


def measure_ceilings(
    matmul_size: int = DEFAULT_MATMUL_SIZE,
    copy_bytes: int = DEFAULT_COPY_BYTES,
    repeats: int = DEFAULT_REPEATS,
) -> Ceilings:
    """Measured bf16 ceilings of CUDA device 0, source "measured <UTC date> <device name>"."""
    for name, value in (("matmul_size", matmul_size), ("copy_bytes", copy_bytes), ("repeats", repeats)):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    device = cuda_device_name()
    flops = measure_matmul_flops(matmul_size, repeats)
    bandwidth = measure_copy_bandwidth(copy_bytes, repeats)
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    return Ceilings(flops=flops, bandwidth=bandwidth, source=f"measured {date} {device}")
