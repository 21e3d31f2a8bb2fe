"""The IO floor (docs/reference/io-floor.md) and the per-group comparison of the report."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from tflabench.analysis.io_floor import io_floor_bytes, io_floor_ms, mlstm_groups, row_configuration

FIG4 = dict(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256, dtype="bfloat16")
H100_COPY_BANDWIDTH = 2.97e12


def test_fig4_floor_matches_the_documented_example():
    assert io_floor_bytes(8, 8192, 16, 128, 256, "fwd", 2) / 1e9 == pytest.approx(1.615, abs=1e-3)
    assert io_floor_bytes(8, 8192, 16, 128, 256, "fwdbw", 2) / 1e9 == pytest.approx(4.31, abs=0.01)
    assert io_floor_ms(FIG4 | {"mode": "fwd"}, H100_COPY_BANDWIDTH) == pytest.approx(0.54, abs=0.005)
    assert io_floor_ms(FIG4 | {"mode": "fwdbw"}, H100_COPY_BANDWIDTH) == pytest.approx(1.45, abs=0.005)


def measured_row(kernel, family, time_ms, chunk_size=128, memory=100.0, params=""):
    return FIG4 | dict(kernel=kernel, family=family, mode="fwd", time_ms=time_ms, chunk_size=chunk_size,
                       peak_mem_mib=memory, params=params, status="ok")


def test_groups_compare_the_best_rows_of_each_side():
    choice = json.dumps({"choice": {"algorithm": "fused_chunk", "chunk_size": 64, "reason": "rule"}})
    table = pd.DataFrame([
        measured_row("tflabench.mlstm_sig.xl_chunk", "mlstm_sig", 1.5),
        measured_row("tflabench.mlstm_sig.xl_chunk", "mlstm_sig", 1.2, chunk_size=256, memory=50.0),
        measured_row("tflabench.mlstm_sig.auto", "mlstm_sig", 1.26, chunk_size=math.nan, params=choice),
        measured_row("tflabench.mlstm_exp.xl_chunk", "mlstm_exp", 1.8),
        measured_row("mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_sig", 3.0, memory=200.0),
        measured_row("mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_sig", 2.4, chunk_size=256, memory=100.0),
        measured_row("fla.chunk_simple_gla", "simple_gla", 2.0, chunk_size=64),
    ])
    (group,) = mlstm_groups(table, H100_COPY_BANDWIDTH).itertuples()
    assert group.ours == "mlstm_sig.xl_chunk L=256" and group.ours_ms == 1.2
    assert group.ours_over_reference == pytest.approx(0.5)
    assert group.exp_over_sig == pytest.approx(1.5)
    assert group.auto_over_best_sig == pytest.approx(1.05)
    assert math.isnan(group.auto_over_best_exp)
    assert group.over_fla == pytest.approx(0.6)
    assert group.memory_over_reference == pytest.approx(0.5)
    assert group.ours_x_floor == pytest.approx(1.2 / 0.5438, rel=1e-3)
    auto_row = table.iloc[2]
    assert row_configuration(auto_row) == "fused_chunk L=64"
