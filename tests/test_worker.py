"""Measurement in-process and in worker processes: gate, statistics, crash / hang / error isolation."""

import time
from dataclasses import replace

import pytest
import torch

from tflabench import nvml
from tflabench.bench.measure import (
    MeasureSettings,
    ReferenceGate,
    TimedRound,
    check_dtype,
    measure_point,
    spread,
    steadiest_round,
    summarize_times,
)
from tflabench.bench.registry import Availability, CheckResult, KernelSpec
from tflabench.bench.worker import POINT_HEADER, classify_failure, measure_kernel_points, one_line
from tflabench.core import SweepPoint

FAKES = ("sweep_fake_kernels",)
POINT = SweepPoint(batch=1, seq_len=16, heads=2, head_dim_qk=8, head_dim_v=8, chunk_size=8, dtype="float32")
POINTS = (POINT, replace(POINT, seq_len=32, mode="fwdbw"))


def prefix_sum_kernel(run, check_passes=True) -> KernelSpec:
    """A prefix-sum kernel on v [B, T, H, Dv] whose check result is given (the gate itself is tested
    end to end with the fakes of sweep_fake_kernels)."""

    def make_inputs(point, device):
        v = torch.randn(point.batch, point.seq_len, point.heads, point.head_dim_v, device=device)
        return {"v": v.requires_grad_(point.mode == "fwdbw")}

    check = CheckResult(check_passes, 0.0 if check_passes else 0.7, 1e-5)
    return KernelSpec(
        name="local.prefix_sum", family="simple_gla", package=None, uses_chunk_size=True,
        availability=lambda: Availability(True), unsupported=lambda point: None, make_inputs=make_inputs,
        run=run, reference_check=lambda device, dtype, configuration=None: check,
    )


def measure_fake(kernel, points=POINTS, timeout_s=30.0, log_path=None):
    return [result for _, result in measure_kernel_points(
        kernel, points, device="cpu-interpreter", timeout_s=timeout_s, warmup=1, repeats=3, modules=FAKES,
        log_path=log_path)]


def test_measure_point_times_forward_and_backward_on_cpu():
    calls = []

    def run(inputs):
        calls.append(inputs["v"].requires_grad)
        return torch.cumsum(inputs["v"], dim=1)

    spec = prefix_sum_kernel(run)
    settings = MeasureSettings(warmup=2, repeats=5)
    for point in POINTS:
        result = measure_point(spec, point, "cpu-interpreter", settings, ReferenceGate("cpu-interpreter"))
        assert result["status"] == "ok" and result["repeats"] == 5 and result["peak_mem_mib"] is None
        assert result["timing_rounds"] == 1  # the interpreter's times are not re-timed
        assert result["issue_cpu_ms"] is None  # nor is a CPU time of issuing a call kept apart
        assert 0 < result["time_ms_q25"] <= result["time_ms"] <= result["time_ms_q75"]
        assert result["warmup_s"] > 0 and result["check_rel_error"] == 0.0
    assert calls == [False] * 7 + [True] * 7


def test_failed_check_is_reported_and_nothing_is_timed():
    spec = prefix_sum_kernel(run=lambda inputs: pytest.fail("a kernel that failed its check was timed"),
                             check_passes=False)
    gate = ReferenceGate("cpu-interpreter")
    result = measure_point(spec, POINT, "cpu-interpreter", MeasureSettings(), gate)
    assert result == {"check_rel_error": 0.7, "status": "failed_check",
                      "reason": "reference check failed: rel error 0.7 > tolerance 1e-05"}


def test_summary_statistics_and_gate_dtype():
    assert summarize_times([4.0, 1.0, 3.0, 2.0, 5.0]) == (3.0, 2.0, 4.0)
    assert summarize_times([2.5]) == (2.5, 2.5, 2.5)
    assert spread([4.0, 1.0, 3.0, 2.0, 5.0]) == pytest.approx(2 / 3)
    assert check_dtype("cpu-interpreter", "bfloat16") == "float32"
    assert check_dtype("cuda", "bfloat16") == "bfloat16"


STEADY = [1.00, 1.00, 1.01, 1.00, 1.00]  # spread 0
DISTURBED = [1.00, 1.20, 1.00, 1.30, 1.10]  # spread 0.2
WIDER = [1.00, 1.50, 1.00, 1.60, 1.10]  # spread 0.5


@pytest.mark.parametrize(("rounds_timed", "limit", "kept", "count"), [
    ([STEADY], 3, STEADY, 1),  # steady at once: one round
    ([DISTURBED, STEADY], 3, STEADY, 2),  # timed again until steady
    ([WIDER, DISTURBED, WIDER], 3, DISTURBED, 3),  # never steady: the steadiest of the three
    ([DISTURBED], 1, DISTURBED, 1),  # one round allowed
    ([[x * 1000 for x in DISTURBED], STEADY], 3, STEADY, 2),  # 5.6 s of calls: timed again
    ([[x * 2000 for x in DISTURBED]], 3, [x * 2000 for x in DISTURBED], 1),  # 11.2 s: not timed again
])
def test_an_unsteady_round_is_timed_again_and_the_steadiest_kept(rounds_timed, limit, kept, count):
    queue = [TimedRound(times) for times in rounds_timed]
    round_, timed = steadiest_round(lambda: queue.pop(0), limit)
    assert (round_.times_ms, timed) == (kept, count)
    assert not queue


@pytest.mark.parametrize(("exc", "expected"), [
    (torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"), ("oom", False)),
    (RuntimeError("CUDA error: an illegal memory access was encountered"), ("crash", True)),
    (RuntimeError("Triton Error [CUDA]: misaligned address"), ("crash", True)),
    (ValueError("head dim 2048 not supported"), ("error", False)),
])
def test_failures_are_classified(exc, expected):
    assert classify_failure(exc) == expected


def test_messages_become_one_bounded_line():
    assert one_line("a\n  b\tc\n") == "a b c"
    assert len(one_line("x" * 2000)) == 500


def test_abort_is_a_crash_and_the_point_is_not_retried(tmp_path):
    log = tmp_path / "abort.log"
    results = measure_fake("fake.abort", log_path=log)
    assert [r["status"] for r in results] == ["crash", "crash"]
    assert all("SIGABRT" in r["reason"] for r in results)
    headers = [line for line in log.read_text().splitlines() if line.startswith(POINT_HEADER)]
    assert len(headers) == 2 and headers[0] != headers[1]


def test_hang_times_out_and_the_kernel_continues_with_a_fresh_worker():
    start = time.monotonic()
    results = measure_fake("fake.hang", timeout_s=1.0)
    assert [r["status"] for r in results] == ["timeout", "timeout"]
    assert "no result within 1 s" in results[0]["reason"]
    assert time.monotonic() - start < 15


def test_exceptions_become_error_and_oom_rows_and_the_worker_survives():
    assert [r["status"] for r in measure_fake("fake.raise")] == ["error", "error"]
    oom = measure_fake("fake.oom")
    assert [r["status"] for r in oom] == ["oom", "oom"]
    assert oom[0]["reason"].startswith("OutOfMemoryError: CUDA out of memory")


def test_a_worker_that_cannot_start_fails_every_point_once():
    results = measure_fake("fake.does_not_exist")
    assert [r["status"] for r in results] == ["crash", "crash"]
    assert all("worker could not start" in r["reason"] and "unknown kernel" in r["reason"] for r in results)


@pytest.mark.skipif(nvml.device_info() != {}, reason="NVML and a GPU are present")
def test_without_nvml_there_are_no_samples_and_no_error():
    with nvml.NvmlSampler() as sampler:
        time.sleep(0.02)
    assert set(sampler.summary().values()) == {None}
