"""`tflabench.kernels.mlstm.choice`: the default algorithm and chunk size, from the measured table or the
rule, with its reason; and that every choice is one `mlstm` accepts (auto never picks what then fails)."""

from __future__ import annotations

import itertools

import pytest
import torch

from tflabench.kernels.mlstm import choice
from tflabench.kernels.mlstm.api import validate_inputs
from tflabench.kernels.mlstm.choice import Shape, choose

FIG4 = Shape(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256)
H100_SMS = 132


def test_rule_takes_fused_chunk_when_its_programs_fill_the_gpu():
    """8 x 32 heads x Dv 64 in one value block: 256 programs >= 1.5 per SM of an H100."""
    picked = choose(Shape(8, 4096, 32, 64, 64), sm_count=H100_SMS)
    assert (picked.algorithm, picked.chunk_size) == ("fused_chunk", choice.FUSED_CHUNK_DEFAULT)
    assert "256 programs" in picked.reason and "rule" in picked.reason


def test_rule_takes_the_fused_forward_of_mlstmexp_at_small_head_dims_only():
    """mLSTMexp: at Dqk 64 the rule of mLSTMsig (its fused forward at 4 warps beat TFLA at 64/64 and 64/128);
    above, never (its fused forward lost every measured group), however full the GPU."""
    for shape in (Shape(8, 4096, 32, 64, 64), Shape(16, 4096, 16, 64, 128)):
        small = choose(shape, variant="exp", sm_count=H100_SMS)
        assert (small.algorithm, small.chunk_size) == ("fused_chunk", choice.FUSED_CHUNK_DEFAULT)
    picked = choose(Shape(64, 1024, 32, 128, 128), variant="exp", sm_count=H100_SMS)
    assert (picked.algorithm, picked.chunk_size) == ("xl_chunk", choice.XL_CHUNK_DEFAULT)
    assert "mLSTMexp fused forward lost" in picked.reason


def test_rule_takes_tfla_when_the_gpu_would_be_under_filled():
    """1 x 16 heads x 4 value blocks = 64 fused programs < 198."""
    picked = choose(Shape(1, 65536, 16, 128, 256), sm_count=H100_SMS)
    assert (picked.algorithm, picked.chunk_size) == ("xl_chunk", choice.XL_CHUNK_DEFAULT)
    assert "under-filled" in picked.reason


def test_rule_takes_tfla_above_dqk_128():
    picked = choose(Shape(64, 1024, 8, 256, 512), sm_count=H100_SMS)
    assert picked.algorithm == "xl_chunk" and "Dqk above 128" in picked.reason


def test_explicit_algorithm_gets_its_default_chunk_size():
    assert choose(FIG4, algorithm="fused_chunk").chunk_size == choice.FUSED_CHUNK_DEFAULT
    assert choose(FIG4, algorithm="xl_chunk").chunk_size == choice.XL_CHUNK_DEFAULT
    assert choose(FIG4, algorithm="xl_chunk", chunk_size=256).chunk_size == 256


def test_a_short_sequence_takes_the_largest_chunk_that_divides_it():
    picked = choose(Shape(64, 48, 8, 64, 64), sm_count=H100_SMS)
    assert picked.chunk_size == 16


def test_without_triton_the_recurrent_reference_runs():
    picked = choose(FIG4, triton_runs=False)
    assert picked == choice.Choice("recurrent", None, picked.reason) and "Triton" in picked.reason


def test_sequence_without_a_power_of_two_divisor_takes_the_recurrent_form():
    picked = choose(Shape(2, 24, 4, 16, 16))
    assert picked.algorithm == "recurrent" and "T=24" in picked.reason


@pytest.fixture
def uncached_choices():
    """`choose` caches its answers: clear them around a test that replaces the table."""
    choose.cache_clear()
    yield
    choose.cache_clear()


def test_the_measured_table_decides_on_the_gpu_it_was_measured_on(monkeypatch, uncached_choices):
    row = dict(gpu="h100", variant="sig", mode="fwdbw", shape=vars(FIG4), algorithm="xl_chunk",
               chunk_size=256, median_ms=5.5)
    slower = dict(row, algorithm="fused_chunk", chunk_size=64, median_ms=6.0)
    monkeypatch.setattr(choice, "_table", lambda: {"source": "test table", "rows": [slower, row]})
    picked = choose(FIG4, gpu="NVIDIA H100 80GB HBM3", training=True)
    assert (picked.algorithm, picked.chunk_size) == ("xl_chunk", 256)
    assert "measured" in picked.reason and "test table" in picked.reason
    assert choose(FIG4, gpu="NVIDIA H100 80GB HBM3", algorithm="fused_chunk").chunk_size == 64
    assert "model" in choose(FIG4, gpu="NVIDIA H100", training=False).reason  # no forward rows: calibrated
    assert "rule" in choose(FIG4, gpu="NVIDIA A100-SXM4-80GB").reason  # a GPU the table has not seen


def test_choices_are_cached_per_shape_and_gpu(uncached_choices):
    first = choose(FIG4, gpu="NVIDIA H100 80GB HBM3", training=True)
    assert choose(FIG4, gpu="NVIDIA H100 80GB HBM3", training=True) is first
    assert choose.cache_info().hits == 1
    assert choose(FIG4, gpu="NVIDIA H200", training=True) is not first


def test_the_shipped_table_is_well_formed():
    table = choice._table()
    assert table["source"]
    for row in table["rows"]:
        assert row["gpu"] in ("h100", "h200") and row["mode"] in ("fwd", "fwdbw")
        assert row["algorithm"] in ("xl_chunk", "limit_chunk", "fused_chunk") and row["median_ms"] > 0
        Shape(**row["shape"])


SEQ_LENS = (16, 48, 64, 96, 1000, 2048, 65536)
HEAD_DIMS = ((16, 16), (48, 80), (64, 64), (128, 256), (256, 512), (1024, 1024))


@pytest.mark.parametrize("seq_len, head_dims", itertools.product(SEQ_LENS, HEAD_DIMS))
@pytest.mark.parametrize("algorithm", ["auto", "xl_chunk", "limit_chunk", "fused_chunk"])
def test_every_choice_passes_the_input_validation(seq_len, head_dims, algorithm):
    """The chunk size chosen for any shape is one the algorithm accepts (shapes are meta tensors)."""
    head_dim_qk, head_dim_v = head_dims
    shape = Shape(2, seq_len, 4, head_dim_qk, head_dim_v)
    if algorithm != "auto" and not choice._chunk_sizes(seq_len):
        with pytest.raises(ValueError, match=f"T={seq_len} has no power-of-two chunk size"):
            choose(shape, algorithm=algorithm)
        return
    picked = choose(shape, algorithm=algorithm, sm_count=H100_SMS)
    q = torch.empty(2, seq_len, 4, head_dim_qk, device="meta")
    v = torch.empty(2, seq_len, 4, head_dim_v, device="meta")
    gates = torch.empty(2, seq_len, 4, device="meta")
    validate_inputs(q, q, v, gates, gates, variant="sig", algorithm=picked.algorithm,
                    chunk_size=picked.chunk_size, normalize=None, eps=1e-6, initial_state=None,
                    return_final_state=False)


def test_a_calibrated_gpu_takes_the_models_choice_where_the_table_has_no_rows():
    """On an H100 (calibrated), a shape the table has not measured gets the structural model's fastest
    (algorithm, chunk size), within the algorithm or chunk size asked; a GPU without a calibration, the
    rule; a measured shape, the table."""
    from tflabench.analysis import structural

    shape, h100 = Shape(4, 16384, 24, 96, 96), "NVIDIA H100 80GB HBM3"
    picked = choose(shape, variant="sig", training=False, gpu=h100, sm_count=H100_SMS)
    problem = structural.Problem(4, 16384, 24, 96, 96, variant="sig", mode="fwd")
    best = structural.predict_all(problem, structural.load_rates("h100"))[0]
    assert (picked.algorithm, picked.chunk_size) == (best.algorithm, best.chunk)
    assert picked.reason.startswith("model:")
    fused = choose(shape, variant="sig", training=False, gpu=h100, sm_count=H100_SMS, algorithm="fused_chunk")
    assert fused.algorithm == "fused_chunk" and fused.reason.startswith("model:")
    at_256 = choose(shape, variant="sig", training=False, gpu=h100, sm_count=H100_SMS, chunk_size=256)
    assert at_256.chunk_size == 256 and at_256.algorithm == "xl_chunk"
    assert choose(shape, variant="sig", training=False, gpu="NVIDIA A100-SXM4-80GB",
                  sm_count=108).reason.startswith("rule:")
    measured = choose(Shape(8, 8192, 16, 128, 256), variant="sig", gpu=h100, sm_count=H100_SMS)
    assert measured.reason.startswith("measured:")
