"""Roofline bound and the additive / overlapped runtime models."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tflabench.analysis import optimal_chunk as oc
from tflabench.analysis.hardware import Ceilings, datasheet_ceilings, get_gpu
from tflabench.analysis.models import Cost
from tflabench.analysis.roofline import (
    attainable_flops,
    bound,
    roofline_point,
    runtime_additive,
    runtime_overlap,
)

H100 = datasheet_ceilings(get_gpu("h100"))
FIG19 = {"batch": 8, "seq_len": 8192, "heads": 8, "head_dim_qk": 256, "head_dim_v": 512}


def test_attainable_flops_is_the_roofline():
    assert attainable_flops(H100, 10.0) == pytest.approx(10.0 * 3.35e12)
    assert attainable_flops(H100, 1000.0) == 989e12
    assert attainable_flops(H100, H100.ridge) == pytest.approx(989e12)


def test_runtime_models():
    cost = Cost(flops=989e12 * 2e-3, bytes=3.35e12 * 1e-3)  # 2 ms of compute, 1 ms of memory traffic
    assert runtime_additive(cost, H100) == pytest.approx(3e-3)
    assert runtime_overlap(cost, H100) == pytest.approx(2e-3)
    assert bound(cost, H100) == "compute"
    assert bound(Cost(1.0, 1.0), H100) == "memory"


@given(st.floats(1e6, 1e18), st.floats(1e6, 1e18), st.floats(1e12, 1e16), st.floats(1e11, 1e13))
def test_overlap_bounds_additive(flops, nbytes, alpha, beta):
    cost, ceilings = Cost(flops, nbytes), Ceilings(alpha, beta, "test")
    overlap, additive = runtime_overlap(cost, ceilings), runtime_additive(cost, ceilings)
    assert overlap <= additive <= 2 * overlap * (1 + 1e-12)
    assert cost.flops / attainable_flops(ceilings, cost.intensity) == pytest.approx(overlap)


def test_fig19_memory_bound_below_the_crossover_and_compute_bound_above():
    crossover = oc.intensity_crossover_chunk("sig", H100, 512, 0.5)  # Table R5: ~1376
    for chunk_size in (64, 256, 1024, 2048, 4096):
        point = roofline_point("mlstm_sig", H100, chunk_size, **FIG19)
        assert point.bound == ("memory" if chunk_size < crossover else "compute")
        assert point.runtime_overlap <= point.runtime_additive


def test_roofline_point_without_chunk_size():
    point = roofline_point("softmax_attention", H100, None, **FIG19)
    assert point.chunk_size is None
    assert point.cost.intensity == pytest.approx(8192 / 4, rel=0.01)  # S / (2 s) in bf16 (peers.md)
