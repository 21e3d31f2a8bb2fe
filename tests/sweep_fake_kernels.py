"""Test doubles for the sweep harness: importing this module registers kernels named ``fake.*``.

Loaded by the sweep's worker processes through ``--kernel-module sweep_fake_kernels`` (never imported by
the pytest process itself, so the real registry stays clean). Every fake computes (or pretends to) a
causal prefix sum h_t = sum_{s<=t} v_s of v [B, T, H, Dv]; its reference check compares the kernel at a
small size against the float64 prefix sum, so the wrong-function fake fails the gate.
"""

from __future__ import annotations

import os
import time

import torch

from tflabench.bench.registry import Availability, CheckResult, KernelSpec, register
from tflabench.core import SweepPoint

#: Seconds the slow fake sleeps per call (resume tests kill the sweep while it runs).
SLOW_CALL_S = 0.1


def random_inputs(point: SweepPoint, device) -> dict:
    """v [B, T, H, Dv] ~ N(0, 1) in the point's dtype; requires grad for mode fwdbw."""
    v = torch.randn(point.batch, point.seq_len, point.heads, point.head_dim_v, device=device,
                    dtype=getattr(torch, point.dtype))
    return {"v": v.requires_grad_(point.mode == "fwdbw")}


def prefix_sum(inputs: dict) -> torch.Tensor:
    return torch.cumsum(inputs["v"], dim=1)


def total_sum(inputs: dict) -> torch.Tensor:
    """The wrong function: every position sees the whole sequence (a missing causal mask)."""
    return inputs["v"].sum(dim=1, keepdim=True).expand_as(inputs["v"])


def aborting(inputs: dict) -> torch.Tensor:
    os.abort()


def hanging(inputs: dict) -> torch.Tensor:
    time.sleep(3600)
    return prefix_sum(inputs)


def raising(inputs: dict) -> torch.Tensor:
    raise RuntimeError("fake kernel failure\nsecond line of the message")


def out_of_memory(inputs: dict) -> torch.Tensor:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")


def slow(inputs: dict) -> torch.Tensor:
    time.sleep(SLOW_CALL_S)
    return prefix_sum(inputs)


def check_against_prefix_sum(run):
    """reference_check: ``run`` on v [2, 16, 2, 8] against the float64 prefix sum (whatever the
    configuration)."""

    def reference_check(device, dtype: str, configuration=None) -> CheckResult:
        tolerance = 1e-5 if dtype == "float32" else 2e-2
        v = torch.randn(2, 16, 2, 8, device=device, dtype=getattr(torch, dtype))
        reference = torch.cumsum(v.double(), dim=1)
        error = ((run({"v": v}).double() - reference).norm() / reference.norm()).item()
        return CheckResult(error <= tolerance, error, tolerance)

    return reference_check


def fake_kernel(name: str, run, **overrides) -> KernelSpec:
    fields = dict(
        name=name, family="simple_gla", package=None, uses_chunk_size=True,
        availability=lambda: Availability(True, version="0.0-test"),
        unsupported=lambda point: None, make_inputs=random_inputs, run=run,
        reference_check=check_against_prefix_sum(run),
    )
    return KernelSpec(**(fields | overrides))


FAKE_KERNELS = (
    fake_kernel("fake.correct", prefix_sum),
    fake_kernel("fake.wrong", total_sum),
    fake_kernel("fake.abort", aborting),
    fake_kernel("fake.hang", hanging, modes=("fwd",), mode_reasons={"fwdbw": "backward refused by the fake"}),
    fake_kernel("fake.raise", raising),
    fake_kernel("fake.oom", out_of_memory),
    fake_kernel("fake.slow", slow),
)

for _spec in FAKE_KERNELS:
    register(_spec)
