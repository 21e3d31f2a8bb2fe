"""FLOP/byte models: spec reference values (Tables R4, R6, R7), exact limits, properties, validation."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tflabench.analysis.models import kernel_cost
from tflabench.core import FAMILIES
from tflabench.errors import InputError
from tflabench.families import mlstm, power_attention

FIG5 = {"batch": 8, "seq_len": 8192, "heads": 8, "head_dim_qk": 256, "head_dim_v": 512}
CHUNKS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)


def one_head(head_dim_qk, head_dim_v, seq_len=8192):
    return {"batch": 1, "heads": 1, "seq_len": seq_len, "head_dim_qk": head_dim_qk, "head_dim_v": head_dim_v}


@pytest.mark.parametrize(
    ("head_dim_v", "state_bytes", "expected"),
    [
        (512, 4, (7.9, 14.9, 27.6, 48.9, 83.1, 138.2, 233.4, 410.8, 756.9)),
        (512, 2, (14.8, 26.6, 45.2, 71.9, 108.6, 163.3, 256.7, 432.4, 777.3)),
        (256, 4, (7.6, 13.9, 24.6, 41.7, 69.3, 117.0, 206.0, 379.6, 724.3)),
    ],
)
def test_table_r4_intensity(head_dim_v, state_bytes, expected):
    shape = {**FIG5, "head_dim_qk": head_dim_v // 2, "head_dim_v": head_dim_v}
    got = [kernel_cost("mlstm_sig", **shape, chunk_size=L, state_bytes=state_bytes).intensity for L in CHUNKS]
    assert got == pytest.approx(expected, abs=0.05)


def test_table_r4_extra_check_causal_factor():
    cost = kernel_cost("mlstm_sig", **FIG5, chunk_size=128, causal_factor=0.66)
    assert cost.intensity == pytest.approx(51.36, abs=0.005)


def exp_excess_percent(d, chunk_size=None, formulation="chunkwise", flop_table="printed"):
    args = {**one_head(d, d), "chunk_size": chunk_size, "formulation": formulation}
    exp = kernel_cost("mlstm_exp", **args, flop_table=flop_table).flops
    return 100 * (exp / kernel_cost("mlstm_sig", **args).flops - 1)


def test_table_r6_exp_versus_sig_excess():
    assert exp_excess_percent(64, formulation="recurrent") == pytest.approx(1.86, abs=0.005)
    assert exp_excess_percent(512, formulation="recurrent") == pytest.approx(0.23, abs=0.005)
    rows = {
        (64, "corrected"): (1.55, 1.35, 1.15),
        (512, "corrected"): (0.24, 0.23, 0.21),
        (64, "printed"): (2.05, 1.73, 1.40),
        (512, "printed"): (0.33, 0.31, 0.29),
    }
    for (d, table), expected in rows.items():
        got = [exp_excess_percent(d, L, flop_table=table) for L in (64, 128, 256)]
        assert got == pytest.approx(expected, abs=0.005), (d, table)
    assert exp_excess_percent(512, 256, flop_table="corrected") == pytest.approx(0.2146, abs=5e-5)
    for formulation in ("parallel", "recurrent"):  # paper: < 2% at d = 64 for all formulations
        assert 0 < exp_excess_percent(64, 64, formulation) < 2


def test_table_r7_forward_memory():
    model_gb = (6.20, 4.05, 2.98, 2.44, 2.17, 2.04, 1.97)
    published_gb = (6.21, 4.06, 2.98, 2.44, 2.17, 2.04, 1.97)
    flush_buffer = 256e6
    for L, model, published in zip(CHUNKS[2:], model_gb, published_gb, strict=True):
        got = (mlstm.mlstm_forward_memory_bytes("sig", **FIG5, chunk_size=L) + flush_buffer) / 1e9
        assert got == pytest.approx(model, abs=0.005), L
        assert got == pytest.approx(published, abs=0.02), L
    exp = mlstm.mlstm_forward_memory_bytes("exp", **FIG5, chunk_size=64)
    sig = mlstm.mlstm_forward_memory_bytes("sig", **FIG5, chunk_size=64)
    # exp also stores n, m per state and the per-step denominator and m_comb (mlstm-math.md#memory)
    assert exp - sig == pytest.approx(8 * 8 * 4 * (129 * (256 + 1) + 2 * 8192))


# Exact limits of the chunkwise count (module docstring of tflabench.analysis.models). Dyadic causal factors
# and moderate sizes keep every float exact, so the identities are checked with ==.
seq_lens = st.integers(1, 2**14)
dims = st.integers(1, 1024)
dyadic_causal_factors = st.sampled_from((0.5, 0.625, 0.75, 0.875, 1.0))


def head_flops(family, T, dqk, dhv, fc, **kwargs):
    return kernel_cost(family, **one_head(dqk, dhv, T), causal_factor=fc, **kwargs).flops


@given(seq_lens, dims, dims, dyadic_causal_factors)
def test_chunk_size_one_matches_recurrent_up_to_linear_terms(T, dqk, dhv, fc):
    def excess(family, dqk, dhv):
        chunkwise = head_flops(family, T, dqk, dhv, fc, chunk_size=1)
        return chunkwise - head_flops(family, T, dqk, dhv, fc, formulation="recurrent")

    assert excess("mlstm_sig", dqk, dhv) == T * (dqk + dhv + 15 + fc * (2 * (dqk + dhv) + 6))
    assert excess("mlstm_exp", dqk, dhv) == T * (dqk + 3 * dhv + 7 + fc * (2 * (dqk + dhv) + 10))
    for family in ("mlstm_sig", "mlstm_exp"):  # the 6 T d_qk d_hv state terms agree exactly
        mixed = (
            excess(family, dqk + 1, dhv + 1)
            - excess(family, dqk + 1, dhv)
            - excess(family, dqk, dhv + 1)
            + excess(family, dqk, dhv)
        )
        assert mixed == 0


@given(seq_lens, dims, dims, dyadic_causal_factors)
def test_chunk_size_seq_len_matches_parallel_up_to_lower_order_terms(T, dqk, dhv, fc):
    def excess(family):
        chunkwise = head_flops(family, T, dqk, dhv, fc, chunk_size=T)
        return chunkwise - head_flops(family, T, dqk, dhv, fc, formulation="parallel")

    dd = dqk * dhv
    assert excess("mlstm_sig") == T * T * (4 * fc - 5.5) + T * (4 * dd + 2 * dqk + dhv + 6.5) + 2 * dd + 5
    assert excess("mlstm_exp") == (
        T * T * (2 * fc - 5.5) + T * (4 * dd + 6 * dqk + 4 * dhv + 10.5) + 2 * dd + 2 * dqk + 5
    )


@pytest.mark.parametrize(
    ("dqk", "dhv", "recurrent_excess", "parallel_excess"),
    # (sig, exp) relative excess of the chunkwise count at L = 1 over the recurrent and at L = T over the
    # parallel count; the L = T gap is the 4 T d_qk d_hv of the unused inter-chunk state
    [
        (256, 512, (0.0020, 0.0033), (0.0782, 0.0771)),
        (128, 256, (0.0040, 0.0065), (0.0321, 0.0298)),
        (64, 128, (0.0082, 0.0131), (0.0027, -0.0019)),
    ],
)
def test_chunkwise_limits_at_the_fig15_shapes(dqk, dhv, recurrent_excess, parallel_excess):
    for i, family in enumerate(("mlstm_sig", "mlstm_exp")):
        L1 = head_flops(family, 8192, dqk, dhv, 0.5, chunk_size=1)
        recurrent = head_flops(family, 8192, dqk, dhv, 0.5, formulation="recurrent")
        LT = head_flops(family, 8192, dqk, dhv, 0.5, chunk_size=8192)
        parallel = head_flops(family, 8192, dqk, dhv, 0.5, formulation="parallel")
        assert L1 / recurrent - 1 == pytest.approx(recurrent_excess[i], abs=5e-5)
        assert LT / parallel - 1 == pytest.approx(parallel_excess[i], abs=5e-5)


POWER_FAMILY_DIMS = st.sampled_from((16, 32, 64, 128))


@st.composite
def problems(draw):
    family = draw(st.sampled_from(FAMILIES))
    head_dim_qk = draw(POWER_FAMILY_DIMS if family == "power_attention" else st.integers(1, 512))
    seq_len = draw(st.integers(1, 2**15))
    kwargs = {
        "batch": draw(st.integers(1, 16)),
        "heads": draw(st.integers(1, 32)),
        "seq_len": seq_len,
        "head_dim_qk": head_dim_qk,
        "head_dim_v": draw(st.integers(1, 512)),
        "chunk_size": draw(st.integers(1, seq_len)),
        "mode": draw(st.sampled_from(("fwd", "fwdbw"))),
        "dtype_bytes": draw(st.sampled_from((2, 4))),
        "state_bytes": draw(st.sampled_from((2, 4))),
        "causal_factor": draw(st.floats(0.5, 1.0)),
    }
    if family.startswith("mlstm"):
        kwargs["formulation"] = draw(st.sampled_from(mlstm.FORMULATIONS))
    if family == "power_attention":
        kwargs["degree"] = draw(st.integers(1, 4))
    return family, kwargs


@given(problems(), st.integers(1, 2**15))
def test_costs_are_positive_and_grow_with_seq_len(problem, extra_tokens):
    family, kwargs = problem
    short = kernel_cost(family, **kwargs)
    longer = kernel_cost(family, **{**kwargs, "seq_len": kwargs["seq_len"] + extra_tokens})
    assert 0 < short.flops < longer.flops
    assert 0 < short.bytes < longer.bytes
    assert math.isfinite(short.intensity) and short.intensity > 0


@given(problems())
def test_forward_backward_convention(problem):
    family, kwargs = problem
    forward = kernel_cost(family, **{**kwargs, "mode": "fwd"})
    both = kernel_cost(family, **{**kwargs, "mode": "fwdbw"})
    assert both.flops == pytest.approx(3.5 * forward.flops)
    assert both.bytes == pytest.approx(3.0 * forward.bytes)


def test_softmax_attention_matches_flash_attention_convention():
    B, H, S, d = 8, 32, 8192, 128
    causal = kernel_cost("softmax_attention", batch=B, seq_len=S, heads=H, head_dim_qk=d, head_dim_v=d)
    assert causal.flops == 4 * B * S**2 * H * d / 2
    full = kernel_cost(
        "softmax_attention", batch=B, seq_len=S, heads=H, head_dim_qk=d, head_dim_v=d, causal_factor=1.0
    )
    assert full.flops == 4 * B * S**2 * H * d
    assert causal.bytes == B * H * (S * 4 * d * 2 + 4 * S)
    mixed = kernel_cost("softmax_attention", batch=1, seq_len=S, heads=1, head_dim_qk=64, head_dim_v=256)
    assert mixed.flops == 2 * S * (S / 2) * (64 + 256)


def test_cross_family_mappings():
    shape = {"batch": 2, "seq_len": 4096, "heads": 4, "head_dim_qk": 64, "head_dim_v": 128, "chunk_size": 64}
    simple = kernel_cost("simple_gla", **shape, causal_factor=1.0)
    # GLA with sub-chunk = chunk computes dense blocks: the simple-GLA count at F_c = 1
    assert kernel_cost("gla", **shape, sub_chunk_size=64).flops == simple.flops
    # Mamba2 SSD with one group per head and F_c = 1 is simple GLA with K = N, V = P (peers.md#cross-checks)
    assert kernel_cost("mamba2_ssd", **shape, causal_factor=1.0, ngroups=4).flops == simple.flops
    # FLA lightning = simple GLA without the gate tensor (fp32 scalar gate: 4 bytes per step)
    lightning = kernel_cost("lightning", **shape, causal_factor=1.0)
    assert lightning.flops == simple.flops
    assert simple.bytes - lightning.bytes == 2 * 4 * 4096 * 4
    lightning2 = kernel_cost("lightning", **shape, implementation="lightning2")
    assert lightning2.flops == simple.flops  # dense 64 x 64 intra block regardless of causal_factor
    T, K, V = 4096, 64, 128
    assert lightning2.bytes == 2 * 4 * (2 * T * K * 2 * 4 + 2 * T * V * 2)  # q, k re-read for 4 value blocks


@pytest.mark.parametrize(
    ("head_dim", "degree", "expansion", "expected"),
    [
        (64, 2, "tpow", 4096),
        (64, 3, "tpow", 262144),
        (64, 2, "spow", 2080),
        (64, 3, "spow", 45760),
        (64, 4, "spow", 766480),
        (64, 5, "spow", 10424128),
        (64, 6, "spow", 119877472),
        (32, 2, "tspow", 640),
        (64, 2, "tspow", 2304),
        (128, 2, "tspow", 8704),
        (64, 3, "tspow", 52224),
        (128, 3, "tspow", 382976),
        (64, 2, "retention", 2560),
    ],
)
def test_power_attention_expanded_dimension(head_dim, degree, expansion, expected):
    assert power_attention.expanded_dim(head_dim, degree, expansion) == expected


def test_power_attention_state_size_and_cost():
    assert power_attention.state_size(64, 64, 2, "spow") == 2080 * 65
    cost = kernel_cost(
        "power_attention",
        batch=1,
        seq_len=8192,
        heads=1,
        head_dim_qk=64,
        head_dim_v=64,
        chunk_size=128,
        degree=2,
    )
    D = 2560
    assert cost.flops == 4 * 8192 * D * 64 + 8192 * 128 * 128
    degree4 = kernel_cost(
        "power_attention",
        batch=1,
        seq_len=8192,
        heads=1,
        head_dim_qk=64,
        head_dim_v=64,
        chunk_size=128,
        degree=4,
    )
    assert degree4.flops > 100 * cost.flops  # the state grows with the degree


def test_power_attention_in_its_attention_form_costs_causal_attention_matmuls():
    """retention runs degree 4 as quadratic attention: its cost is the attention matmuls, whatever the
    degree (the chunked model gave a 'roofline fraction' of 275 on the H200, results/h200/tfla-fig4)."""
    shape = dict(batch=2, seq_len=8192, heads=4, head_dim_qk=64, head_dim_v=64)
    attention = kernel_cost("softmax_attention", **shape)
    for degree in (2, 4):
        power = kernel_cost("power_attention", **shape, degree=degree, form="attention")
        assert power.flops == attention.flops
    with pytest.raises(InputError, match="form"):
        kernel_cost("power_attention", **shape, form="recurrent")


@pytest.mark.parametrize(
    ("family", "overrides", "message"),
    [
        ("mlstm_cos", {}, "unknown kernel family"),
        ("mlstm_sig", {"head_dim_v": 0}, "head_dim_v must be a positive integer"),
        ("mlstm_sig", {"seq_len": 64.5}, "seq_len must be a positive integer"),
        ("mlstm_sig", {"batch": True}, "batch must be a positive integer"),
        ("mlstm_sig", {"chunk_size": 256}, "must not exceed seq_len"),
        ("mlstm_sig", {"causal_factor": 0.4}, "causal_factor"),
        ("mlstm_sig", {"mode": "bwd"}, "unknown mode"),
        ("mlstm_sig", {"formulation": "tiled"}, "unknown formulation"),
        ("mlstm_sig", {"degree": 2}, "unknown parameter"),
        ("mlstm_exp", {"flop_table": "guessed"}, "unknown flop_table"),
        ("gla", {"formulation": "recurrent"}, "mLSTM families only"),
        ("mamba2_ssd", {"ngroups": 3}, "multiple of ngroups"),
        ("power_attention", {"head_dim_qk": 24}, "divisible by 16"),
        ("power_attention", {"expansion": "tspow", "degree": 4}, "degree 2 and 3"),
        ("lightning", {"implementation": "cuda"}, "unknown implementation"),
    ],
)
def test_bad_inputs_are_input_errors(family, overrides, message):
    kwargs = {"batch": 1, "seq_len": 128, "heads": 4, "head_dim_qk": 64, "head_dim_v": 64, **overrides}
    with pytest.raises(InputError, match=message):
        kernel_cost(family, **kwargs)


def test_default_chunk_size_is_clipped_to_short_sequences():
    short = kernel_cost("mlstm_sig", batch=1, seq_len=32, heads=1, head_dim_qk=16, head_dim_v=16)
    assert short == kernel_cost(
        "mlstm_sig", batch=1, seq_len=32, heads=1, head_dim_qk=16, head_dim_v=16, chunk_size=32
    )
