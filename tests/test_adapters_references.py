"""The float64 family references (tflabench.bench.references): first-token values by hand, causality, and
the families against each other through the cross-check mappings of
docs/reference/peers.md#cross-checks."""

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from tflabench import families
from tflabench.bench import references
from tflabench.core import FAMILIES, SweepPoint
from tflabench.families import (
    gla,
    lightning,
    mamba2_ssd,
    power_attention,
    simple_gla,
    softmax_attention,
)

B, T, H, K, V = 2, 24, 3, 8, 5
POINT = SweepPoint(batch=B, seq_len=T, heads=H, head_dim_qk=K, head_dim_v=V, chunk_size=8, dtype="float64")


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def qkv(seed=0, head_dim_qk=K):
    return randn(B, T, H, head_dim_qk, seed=seed), randn(B, T, H, head_dim_qk, seed=seed + 1), randn(
        B, T, H, V, seed=seed + 2)


def log_gate(*shape, seed):
    return F.logsigmoid(randn(*shape, seed=seed) + 1.0)


def close(a, b, tol=1e-10):
    return references.relative_error(a, b) < tol


# ------------------------------------------------------------------------------------- first token by hand
def test_first_token_of_every_linear_family_is_scaled_qk_times_v():
    q, k, v = qkv()
    qk0 = (q[:, 0] * k[:, 0]).sum(-1, keepdim=True)  # [B, H, 1]
    expected = 0.5 * qk0 * v[:, 0]
    g = log_gate(B, T, H, seed=5)
    outputs = {
        "gla": gla.reference(q, k, v, log_gate(B, T, H, K, seed=6), scale=0.5),
        "simple_gla": simple_gla.reference(q, k, v, g, scale=0.5),
        "lightning": lightning.reference(q, k, v, -torch.rand(H, dtype=torch.float64), scale=0.5),
    }
    for family, output in outputs.items():
        assert torch.allclose(output[:, 0], expected), family


def test_first_token_of_softmax_and_power_attention_is_v0():
    q, k, v = qkv()
    assert torch.allclose(softmax_attention.reference(q, k, v, scale=K**-0.5)[:, 0], v[:, 0])
    power = power_attention.reference(q, k, v, log_gate(B, T, H, seed=3), degree=2, scale=K**-0.5)
    assert torch.allclose(power[:, 0], v[:, 0])


def test_second_token_of_simple_gla_decays_the_first_by_exp_g():
    q, k, v = qkv()
    g = log_gate(B, T, H, seed=4)
    out = simple_gla.reference(q, k, v, g, scale=1.0)
    dot = lambda i, j: (q[:, i] * k[:, j]).sum(-1, keepdim=True)  # noqa: E731
    expected = g[:, 1, :, None].exp() * dot(1, 0) * v[:, 0] + dot(1, 1) * v[:, 1]
    assert torch.allclose(out[:, 1], expected)


def test_first_step_of_mamba2_ssd():
    x, dt, A = randn(B, T, H, V, seed=0), F.softplus(randn(B, T, H, seed=1)), -randn(H, seed=2).exp()
    Bm, Cm = randn(B, T, 1, K, seed=3), randn(B, T, 1, K, seed=4)
    y = mamba2_ssd.reference(x, dt, A, Bm, Cm)
    expected = (Cm[:, 0] * Bm[:, 0]).sum(-1, keepdim=True) * dt[:, 0, :, None] * x[:, 0]
    assert torch.allclose(y[:, 0], expected)


def test_softmax_attention_matches_torch_sdpa_in_float64_with_dqk_not_dv():
    q, k, v = qkv()
    expected = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
    expected = expected.transpose(1, 2)
    assert close(softmax_attention.reference(q, k, v, scale=K**-0.5), expected)
    assert not close(softmax_attention.reference(q, k, v, scale=K**-0.5, causal=False), expected, tol=1e-2)


# ---------------------------------------------------------------------------------------------- causality
@pytest.mark.parametrize("family", FAMILIES)
def test_outputs_do_not_depend_on_future_tokens(family):
    if family.startswith("mlstm"):
        pytest.importorskip("tflabench.kernels.mlstm.reference")
    inputs = references.random_inputs(family, POINT, seed=1)
    output = references.reference_output(family, inputs)
    assert output.shape == (B, T, H, V) and output.dtype == torch.float64
    changed = dict(inputs)
    for name, value in inputs.items():
        if isinstance(value, torch.Tensor) and value.dim() >= 3 and value.shape[1] == T:
            changed[name] = value.clone()
            changed[name][:, T // 2:] = changed[name][:, T // 2:] * 0.5 - 0.1
    perturbed = references.reference_output(family, changed)
    assert torch.equal(perturbed[:, : T // 2], output[:, : T // 2])
    assert not torch.allclose(perturbed[:, T // 2:], output[:, T // 2:])


# ------------------------------------------------------------------------------------ cross-check mappings
def test_gla_with_a_gate_constant_over_keys_is_simple_gla():
    q, k, v = qkv()
    g = log_gate(B, T, H, seed=7)
    assert close(gla.reference(q, k, v, g[..., None].expand(-1, -1, -1, K), scale=0.3),
                 simple_gla.reference(q, k, v, g, scale=0.3))


def test_lightning_is_simple_gla_with_a_constant_gate():
    q, k, v = qkv()
    log_decay = -lightning.alibi_slopes(H)
    assert close(lightning.reference(q, k, v, log_decay, scale=1.0),
                 simple_gla.reference(q, k, v, log_decay.expand(B, T, H), scale=1.0))


def test_mamba2_ssd_is_simple_gla_with_q_c_k_b_v_dt_x_g_a_dt():
    heads, groups = 4, 2
    x, dt = randn(B, T, heads, V, seed=0), F.softplus(randn(B, T, heads, seed=1))
    A, Bm, Cm = -randn(heads, seed=2).exp(), randn(B, T, groups, K, seed=3), randn(B, T, groups, K, seed=4)
    per_head = lambda m: m.repeat_interleave(heads // groups, dim=2)  # noqa: E731
    expected = simple_gla.reference(per_head(Cm), per_head(Bm), dt[..., None] * x, A * dt, scale=1.0)
    assert close(mamba2_ssd.reference(x, dt, A, Bm, Cm), expected)


def tensor_power(x, degree):
    """x^(tensor degree), flattened: <tpow(q), tpow(k)> = (q.k)^degree."""
    out = x
    for _ in range(degree - 1):
        out = (out[..., :, None] * x[..., None, :]).flatten(-2)
    return out


@pytest.mark.parametrize("degree", [2, 4])
def test_power_attention_is_normalized_simple_gla_on_tensor_power_features(degree):
    q, k, v = qkv(head_dim_qk=4)
    g = log_gate(B, T, H, seed=8)
    scale = 0.7
    features_q, features_k = tensor_power(q, degree), tensor_power(k, degree)
    numerator = simple_gla.reference(features_q, features_k, v, g, scale=scale**degree)
    denominator = simple_gla.reference(features_q, features_k, torch.ones_like(v[..., :1]), g,
                                        scale=scale**degree)
    assert close(power_attention.reference(q, k, v, g, degree=degree, scale=scale), numerator / denominator)


def test_mlstm_sig_without_normalizer_is_simple_gla_with_k_times_sigmoid_i():
    pytest.importorskip("tflabench.kernels.mlstm.reference")
    inputs = references.random_inputs("mlstm_sig", POINT, seed=3, normalize=False)
    q, k, v, i, f = (inputs[name].double() for name in ("q", "k", "v", "i", "f"))
    expected = simple_gla.reference(q, k * torch.sigmoid(i)[..., None], v, F.logsigmoid(f), scale=K**-0.5)
    assert close(references.reference_output("mlstm_sig", inputs), expected)


def test_mlstm_exp_recurrent_and_parallel_forms_differ_only_through_eps():
    pytest.importorskip("tflabench.kernels.mlstm.reference")
    inputs = references.random_inputs("mlstm_exp", POINT, seed=4, eps=0.0)
    recurrent = references.reference_output("mlstm_exp", inputs)
    parallel = references.reference_output("mlstm_exp", {**inputs, "formulation": "parallel"})
    assert close(recurrent, parallel, tol=1e-9)


# -------------------------------------------------------------------------------- inputs, errors, helpers
@pytest.mark.parametrize("family", FAMILIES)
def test_random_inputs_are_fresh_nonzero_and_in_the_point_dtype(family):
    point = SweepPoint(1, 16, 2, 8, 4, 8, dtype="bfloat16")
    first, second = references.random_inputs(family, point), references.random_inputs(family, point)
    tensors = [name for name, value in first.items() if isinstance(value, torch.Tensor)]
    assert tensors
    for name in tensors:
        assert torch.count_nonzero(first[name]) == first[name].numel(), name
    assert any(not torch.equal(first[name], second[name]) for name in tensors)
    for name in ("q", "k", "v", "x", "B", "C"):
        if name in first:
            assert first[name].dtype == torch.bfloat16, name
    for name in ("g", "log_g", "dt", "A", "i", "f", "log_decay"):
        if name in first:
            assert first[name].dtype == torch.float32, name
    for name in ("g", "log_g", "A", "log_decay"):
        if name in first:
            assert (first[name] < 0).all(), name


def test_random_inputs_with_a_seed_are_reproducible_and_fixed_constants_override():
    a = references.random_inputs("power_attention", POINT, seed=9, degree=4)
    b = references.random_inputs("power_attention", POINT, seed=9, degree=4)
    assert a["degree"] == 4 and torch.equal(a["q"], b["q"])


def test_every_family_has_a_reference():
    assert {families.family(name).name for name in FAMILIES} == set(FAMILIES)


def test_reference_output_names_missing_inputs():
    with pytest.raises(KeyError, match="needs input"):
        references.reference_output("simple_gla", {"q": torch.zeros(1)})


def test_relative_error_is_inf_for_a_shape_mismatch_and_nan_for_nan():
    ref = randn(2, 3, seed=0)
    assert references.relative_error(ref[:1], ref) == math.inf
    assert math.isnan(references.relative_error(ref * float("nan"), ref))
    assert references.relative_error(ref.float(), ref) < 1e-7


def test_alibi_slopes_of_a_power_of_two_and_of_six_heads():
    assert torch.allclose(lightning.alibi_slopes(8), torch.tensor([2.0**-h for h in range(1, 9)],
                                                                     dtype=torch.float64))
    six = lightning.alibi_slopes(6)
    four, eight = lightning.alibi_slopes(4), lightning.alibi_slopes(8)
    assert torch.equal(six, torch.cat([four, eight[0::2][:2]]))


def test_tolerances_cover_every_benchmark_dtype():
    assert set(references.TOLERANCES) >= {"bfloat16", "float16", "float32"}
    assert all(a > b for a, b in itertools.pairwise(references.TOLERANCES.values()))


def test_mismatch_summary_names_the_norm_ratio_non_finite_entries_and_the_first_wrong_step():
    generator = torch.Generator().manual_seed(7)
    reference = torch.randn(2, 16, 2, 8, dtype=torch.float64, generator=generator)
    garbage_from_5 = reference.clone()
    garbage_from_5[:, 5:] = torch.randn(2, 11, 2, 8, dtype=torch.float64, generator=generator)
    assert "wrong from t = 5 of 16 (11 steps)" in references.mismatch_summary(garbage_from_5, reference)
    doubled = 2 * reference
    doubled[0, 3, 0, 0] = math.nan
    summary = references.mismatch_summary(doubled, reference)
    ratio = float(summary.split(",")[0].removeprefix("|out|/|ref| "))
    assert ratio == pytest.approx(2.0, rel=0.05) and "1 non-finite entries" in summary
    assert "wrong from t = 0 of 16 (16 steps)" in summary
