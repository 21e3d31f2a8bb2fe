"""The plain-PyTorch mLSTM references (the oracles of the Triton kernels) and the `mlstm` entry point.

All reference checks run in float64 on fresh random inputs. The independent oracle is
`unstabilized_mlstm`: the cell written with explicit products of sigmoids and exponentials, no log space
and no max states, valid for moderate gates.
"""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch

from tflabench.kernels import mlstm
from tflabench.kernels.mlstm.api import validate_inputs
from tflabench.kernels.mlstm.reference import (
    mlstm_chunkwise,
    mlstm_parallel,
    mlstm_recurrent,
    parallel_form_initial_state,
)

F64 = torch.float64
CELLS = [
    pytest.param("exp", None, id="exp"),
    pytest.param("sig", False, id="sig"),
    pytest.param("sig", True, id="sig-normalized"),
]


def make_inputs(
    seed,
    batch=2,
    seq_len=8,
    heads=2,
    head_dim_qk=4,
    head_dim_v=3,
    *,
    input_gate=(0.0, 1.0),
    forget_gate=(2.0, 1.0),
    dtype=F64,
):
    """q, k [B, T, H, Dqk], v [B, T, H, Dv], i, f [B, T, H]; gates ~ mean + std * N(0, 1)."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, dtype=F64).to(dtype)

    gates = (batch, seq_len, heads)
    return dict(
        q=randn(batch, seq_len, heads, head_dim_qk),
        k=randn(batch, seq_len, heads, head_dim_qk),
        v=randn(batch, seq_len, heads, head_dim_v),
        i=input_gate[0] + input_gate[1] * randn(*gates),
        f=forget_gate[0] + forget_gate[1] * randn(*gates),
    )


def make_state(seed, inputs):
    """A random initial state (C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H]) matching ``inputs``."""
    gen = torch.Generator().manual_seed(seed)
    batch, _, heads, head_dim_qk = inputs["q"].shape
    head_dim_v = inputs["v"].shape[-1]
    return (
        torch.randn(batch, heads, head_dim_qk, head_dim_v, generator=gen, dtype=F64),
        torch.randn(batch, heads, head_dim_qk, generator=gen, dtype=F64),
        torch.randn(batch, heads, generator=gen, dtype=F64),
    )


def assert_matches(actual, expected, rel=1e-10):
    """Max-norm relative agreement; ``expected`` must be finite and not all zero (so the check can fail)."""
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert torch.isfinite(expected).all() and torch.isfinite(actual).all()
    scale = expected.abs().max()
    assert scale > 0
    error = (actual - expected).abs().max()
    assert error <= rel * scale, f"max error {error:.3e} > {rel:.0e} * {scale:.3e}"


def assert_states_match(actual, expected, rel=1e-10):
    for actual_part, expected_part in zip(actual, expected, strict=True):
        if expected_part.abs().max() == 0:
            assert actual_part.abs().max() == 0
        else:
            assert_matches(actual_part, expected_part, rel)


def unstabilized_mlstm(q, k, v, i, f, *, variant, normalized, eps, m0, detach_denominator=False):
    """Independent oracle (no initial state): h_t = sum_j s_tj w_tj v_j / den_t with s = q k^T / sqrt(Dqk),
    w_tj = gate(i_j) * prod_{j < l <= t} sigmoid(f_l), den_t = max(|sum_j s_tj w_tj|, 1) + eps * exp(m_t).

    In unstabilized terms the lower bound exp(-m_t) becomes 1 and eps is scaled by exp(m_t), where
    exp(m_t) = max(max_j w_tj, exp(m0) * prod_{l <= t} sigmoid(f_l)) for exp, and 1 for sig.
    """
    seq_len = q.shape[1]
    input_weight = torch.exp(i) if variant == "exp" else torch.sigmoid(i)
    rows = []
    for t in range(seq_len):
        weights = [
            input_weight[:, j] * torch.prod(torch.sigmoid(f[:, j + 1 : t + 1]), dim=1) for j in range(t + 1)
        ]
        weights = torch.stack(weights, dim=1)  # [B, t+1, H]
        scores = torch.einsum("bhd,bjhd->bjh", q[:, t], k[:, : t + 1]) / math.sqrt(q.shape[-1]) * weights
        numerator = torch.einsum("bjh,bjhv->bhv", scores, v[:, : t + 1])
        if normalized:
            bound = torch.ones_like(scores[:, 0])
            if variant == "exp":
                decayed_m0 = math.exp(m0) * torch.prod(torch.sigmoid(f[:, : t + 1]), dim=1)
                bound = torch.maximum(weights.amax(dim=1), decayed_m0)
            denominator = torch.maximum(scores.sum(dim=1).abs(), torch.ones_like(bound)) + eps * bound
            if detach_denominator:
                denominator = denominator.detach()
            numerator = numerator / denominator[..., None]
        rows.append(numerator)
    return torch.stack(rows, dim=1)


def grads(function, inputs, leaves, upstream):
    """Gradients w.r.t. ``leaves`` of sum(output * upstream) over h and the final state's parts, in that
    order, as far as ``upstream`` goes."""
    output = function(**inputs)
    h, state = output if isinstance(output, tuple) else (output, ())
    loss = sum((x * up).sum() for x, up in zip([h, *state], upstream, strict=False))
    return torch.autograd.grad(loss, leaves)


# --- forward -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("chunk_size", [1, 2, 4, 8])
def test_chunkwise_equals_recurrent_with_initial_state(variant, normalize, chunk_size):
    inputs = make_inputs(seed=1)
    initial = make_state(seed=2, inputs=inputs)
    cell = dict(variant=variant, normalize=normalize, initial_state=initial, return_final_state=True)
    h_rec, state_rec = mlstm_recurrent(**inputs, **cell)
    h_chunk, state_chunk = mlstm_chunkwise(**inputs, **cell, chunk_size=chunk_size)
    assert_matches(h_chunk, h_rec)
    assert_states_match(state_chunk, state_rec)


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_parallel_equals_recurrent_and_chunkwise_from_parallel_form_initial_state(variant, normalize):
    inputs = make_inputs(seed=3, input_gate=(-1.0, 2.0))
    initial = parallel_form_initial_state(2, 2, 4, 3, dtype=F64)
    cell = dict(variant=variant, normalize=normalize, eps=1e-2)
    h_parallel = mlstm_parallel(**inputs, **cell)
    assert_matches(mlstm_recurrent(**inputs, **cell, initial_state=initial), h_parallel)
    assert_matches(mlstm_chunkwise(**inputs, **cell, initial_state=initial, chunk_size=4), h_parallel)


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("m0", [0.0, -math.inf], ids=["m0=0", "m0=-inf"])
def test_forward_equals_unstabilized_closed_form(variant, normalize, m0):
    inputs = make_inputs(seed=4, seq_len=4, input_gate=(0.0, 2.0), forget_gate=(0.0, 2.0))
    eps = 0.1  # large, so that the eps * exp(m_t) term is checked too
    expected = unstabilized_mlstm(
        **inputs, variant=variant, normalized=bool(normalize) or variant == "exp", eps=eps, m0=m0
    )
    initial = None if m0 == 0.0 else parallel_form_initial_state(2, 2, 4, 3, dtype=F64)
    cell = dict(variant=variant, normalize=normalize, eps=eps, initial_state=initial)
    assert_matches(mlstm_recurrent(**inputs, **cell), expected)
    for chunk_size in (1, 2, 4):
        assert_matches(mlstm_chunkwise(**inputs, **cell, chunk_size=chunk_size), expected)
    if m0 == -math.inf:
        assert_matches(mlstm_parallel(**inputs, variant=variant, normalize=normalize, eps=eps), expected)


def test_exp_m0_convention_matters_only_through_eps():
    """m_0 = 0 (recurrent default) and m_0 = -inf (parallel) agree for eps = 0 and differ through eps."""
    inputs = make_inputs(seed=5, input_gate=(-10.0, 1.0), forget_gate=(0.0, 1.0))
    without_eps = dict(variant="exp", eps=0.0)
    assert_matches(mlstm_recurrent(**inputs, **without_eps), mlstm_parallel(**inputs, **without_eps))
    with_eps = dict(variant="exp", eps=1e-2)
    expected = mlstm_parallel(**inputs, **with_eps)
    assert (mlstm_recurrent(**inputs, **with_eps) - expected).abs().max() > 1e-3 * expected.abs().max()


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("algorithm", ["recurrent", "chunkwise"])
def test_state_passing_equals_full_run(variant, normalize, algorithm):
    inputs = make_inputs(seed=6, seq_len=16)
    initial = make_state(seed=7, inputs=inputs)
    run = mlstm_recurrent if algorithm == "recurrent" else mlstm_chunkwise
    cell = dict(variant=variant, normalize=normalize, return_final_state=True)
    if algorithm == "chunkwise":
        cell["chunk_size"] = 4
    h_full, state_full = run(**inputs, **cell, initial_state=initial)
    first = {name: x[:, :8] for name, x in inputs.items()}
    second = {name: x[:, 8:] for name, x in inputs.items()}
    h_first, state_mid = run(**first, **cell, initial_state=initial)
    h_second, state_end = run(**second, **cell, initial_state=state_mid)
    assert_matches(torch.cat([h_first, h_second], dim=1), h_full)
    assert_states_match(state_end, state_full)


def test_sig_ignores_the_max_state_and_unused_normalizer_of_the_initial_state():
    inputs = make_inputs(seed=8)
    C0, n0, m0 = make_state(seed=9, inputs=inputs)
    expected, state = mlstm_recurrent(
        **inputs, variant="sig", initial_state=(C0, None, None), return_final_state=True
    )
    assert_matches(mlstm_recurrent(**inputs, variant="sig", initial_state=(C0, n0, m0)), expected)
    assert (state[1] == 0).all() and (state[2] == 0).all()


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize(
    "input_gate, forget_gate",
    [((-10.0, 0.5), (10.0, 0.5)), ((-10.0, 0.5), (-10.0, 0.5)), ((-10.0, 0.5), (0.0, 10.0))],
    ids=["forget~1", "forget~0", "forget-mixed"],
)
def test_extreme_gates_stay_finite_and_agree(variant, normalize, input_gate, forget_gate):
    inputs = make_inputs(seed=10, seq_len=32, input_gate=input_gate, forget_gate=forget_gate)
    initial = parallel_form_initial_state(2, 2, 4, 3, dtype=F64)
    cell = dict(variant=variant, normalize=normalize)
    expected = mlstm_parallel(**inputs, **cell)
    assert_matches(mlstm_recurrent(**inputs, **cell, initial_state=initial), expected, rel=1e-9)
    assert_matches(mlstm_chunkwise(**inputs, **cell, initial_state=initial, chunk_size=8), expected, rel=1e-9)
    for detach in (False, True):
        leaves = {name: x.requires_grad_() for name, x in inputs.items()}
        upstream = [torch.randn(expected.shape, generator=torch.Generator().manual_seed(11), dtype=F64)]
        options = dict(**cell, detach_normalizer=detach)
        grad_rec = grads(partial(mlstm_recurrent, **options), leaves, list(leaves.values()), upstream)
        grad_chunk = grads(
            partial(mlstm_chunkwise, **options, chunk_size=8), leaves, list(leaves.values()), upstream
        )
        for actual, reference_grad in zip(grad_chunk, grad_rec, strict=True):
            assert_matches(actual, reference_grad, rel=1e-9)


# --- gradients ---------------------------------------------------------------------------------------------


def _leaves_and_upstream(variant, normalized, detach, seed):
    inputs = {name: x.requires_grad_() for name, x in make_inputs(seed=seed).items()}
    C0, n0, m0 = (x.requires_grad_() for x in make_state(seed=seed + 1, inputs=inputs))
    leaves = [*inputs.values(), C0]
    if normalized:
        leaves.append(n0)
    if variant == "exp" and not detach:
        leaves.append(m0)
    gen = torch.Generator().manual_seed(seed + 2)
    upstream = [torch.randn(shape, generator=gen, dtype=F64) for shape in ((2, 8, 2, 3), C0.shape, n0.shape)]
    if variant == "exp" and not detach:
        upstream.append(torch.randn(m0.shape, generator=gen, dtype=F64))
    return dict(inputs, initial_state=(C0, n0, m0)), leaves, upstream


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("detach", [False, True], ids=["exact", "kernel-convention"])
def test_chunkwise_gradients_equal_recurrent(variant, normalize, detach):
    normalized = bool(normalize) or variant == "exp"
    arguments, leaves, upstream = _leaves_and_upstream(variant, normalized, detach, seed=20)
    cell = dict(variant=variant, normalize=normalize, detach_normalizer=detach, return_final_state=True)
    expected = grads(partial(mlstm_recurrent, **cell), arguments, leaves, upstream)
    for chunk_size in (2, 8):
        actual = grads(partial(mlstm_chunkwise, **cell, chunk_size=chunk_size), arguments, leaves, upstream)
        for actual_grad, expected_grad in zip(actual, expected, strict=True):
            assert_matches(actual_grad, expected_grad)


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("detach", [False, True], ids=["exact", "kernel-convention"])
def test_parallel_gradients_equal_unstabilized_closed_form(variant, normalize, detach):
    inputs = {name: x.requires_grad_() for name, x in make_inputs(seed=30, seq_len=5).items()}
    leaves = list(inputs.values())
    upstream = [torch.randn(2, 5, 2, 3, generator=torch.Generator().manual_seed(31), dtype=F64)]
    normalized = bool(normalize) or variant == "exp"
    oracle = partial(
        unstabilized_mlstm,
        variant=variant,
        normalized=normalized,
        eps=1e-2,
        m0=-math.inf,
        detach_denominator=detach,
    )
    expected = grads(oracle, inputs, leaves, upstream)
    cell = dict(variant=variant, normalize=normalize, eps=1e-2, detach_normalizer=detach)
    actual = grads(partial(mlstm_parallel, **cell), inputs, leaves, upstream)
    for actual_grad, expected_grad in zip(actual, expected, strict=True):
        assert_matches(actual_grad, expected_grad)


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_exact_gradients_pass_gradcheck(variant, normalize):
    inputs = make_inputs(seed=40, batch=1, seq_len=4, heads=1, head_dim_qk=2, head_dim_v=2)
    initial = make_state(seed=41, inputs=inputs)
    names = list(inputs)

    def chunkwise_output(*tensors):
        return mlstm_chunkwise(
            **dict(zip(names, tensors, strict=True)),
            variant=variant,
            normalize=normalize,
            eps=1e-2,
            chunk_size=2,
            initial_state=initial,
        )

    assert torch.autograd.gradcheck(chunkwise_output, [x.requires_grad_() for x in inputs.values()])


@pytest.mark.parametrize("variant, normalize", [("exp", None), ("sig", True)], ids=["exp", "sig-normalized"])
def test_kernel_convention_differs_from_exact_gradient_when_normalized(variant, normalize):
    inputs = {name: x.requires_grad_() for name, x in make_inputs(seed=50).items()}
    leaves = list(inputs.values())
    upstream = [torch.randn(2, 8, 2, 3, generator=torch.Generator().manual_seed(51), dtype=F64)]
    exact, kernel = (
        grads(
            partial(mlstm_recurrent, variant=variant, normalize=normalize, detach_normalizer=detach),
            inputs,
            leaves,
            upstream,
        )
        for detach in (False, True)
    )
    for name, exact_grad, kernel_grad in zip(inputs, exact, kernel, strict=True):
        if name == "v":  # h is linear in v and the denominator does not depend on v
            assert_matches(kernel_grad, exact_grad)
        else:
            assert (kernel_grad - exact_grad).abs().max() > 1e-3 * exact_grad.abs().max(), name


def test_kernel_convention_equals_exact_gradient_for_sig_without_normalizer():
    inputs = {name: x.requires_grad_() for name, x in make_inputs(seed=52).items()}
    leaves = list(inputs.values())
    upstream = [torch.randn(2, 8, 2, 3, generator=torch.Generator().manual_seed(53), dtype=F64)]
    exact, kernel = (
        grads(
            partial(mlstm_chunkwise, variant="sig", chunk_size=4, detach_normalizer=detach),
            inputs,
            leaves,
            upstream,
        )
        for detach in (False, True)
    )
    for exact_grad, kernel_grad in zip(exact, kernel, strict=True):
        assert_matches(kernel_grad, exact_grad, rel=0.0)


# --- reference argument errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(variant="exp", normalize=False), "always normalizes"),
        (dict(variant="tanh"), "unknown variant"),
        (dict(variant="sig", chunk_size=3), "positive divisor of the sequence length 8"),
        (dict(variant="sig", chunk_size=0), "positive divisor"),
    ],
)
def test_reference_rejects_bad_options(options, message):
    options = {"chunk_size": 4, **options}
    with pytest.raises(ValueError, match=message):
        mlstm_chunkwise(**make_inputs(seed=60), **options)


# --- public entry point ------------------------------------------------------------------------------------


def api_inputs(dtype=torch.float32, seq_len=32, head_dim_qk=16, head_dim_v=32):
    return make_inputs(
        seed=70,
        batch=1,
        seq_len=seq_len,
        heads=2,
        head_dim_qk=head_dim_qk,
        head_dim_v=head_dim_v,
        dtype=dtype,
    )


@pytest.mark.parametrize("algorithm", ["recurrent", "parallel"])
@pytest.mark.parametrize("variant, normalize", CELLS)
def test_mlstm_references_use_the_kernel_gradient_convention(algorithm, variant, normalize):
    inputs = {name: x.requires_grad_() for name, x in api_inputs(dtype=F64, seq_len=8).items()}
    leaves = list(inputs.values())
    upstream = [torch.randn(1, 8, 2, 32, generator=torch.Generator().manual_seed(71), dtype=F64)]
    run = mlstm_recurrent if algorithm == "recurrent" else mlstm_parallel
    cell = dict(variant=variant, normalize=normalize)
    expected = grads(partial(run, **cell, detach_normalizer=True), inputs, leaves, upstream)
    actual = grads(partial(mlstm, **cell, algorithm=algorithm), inputs, leaves, upstream)
    for actual_grad, expected_grad in zip(actual, expected, strict=True):
        assert_matches(actual_grad, expected_grad, rel=0.0)


def test_mlstm_returns_dtype_of_q_and_float32_states_for_low_precision():
    inputs = api_inputs(dtype=torch.bfloat16, seq_len=4)
    h, (C, n, m) = mlstm(**inputs, algorithm="recurrent", return_final_state=True)
    assert h.dtype == torch.bfloat16 and h.shape == (1, 4, 2, 32)
    assert C.dtype == n.dtype == m.dtype == torch.float32
    assert (C.shape, n.shape, m.shape) == ((1, 2, 16, 32), (1, 2, 16), (1, 2))
    expected = mlstm_recurrent(**{name: x.float() for name, x in inputs.items()}, variant="exp")
    assert (h.float() - expected).abs().max() <= 1e-2 * expected.abs().max()


@pytest.mark.parametrize("algorithm", ["xl_chunk", "limit_chunk"])
def test_mlstm_passes_every_option_to_the_chunked_kernels(monkeypatch, algorithm):
    from tflabench.kernels.mlstm import xl_chunk

    calls = []

    def recorder(name):
        return lambda *args, **kwargs: calls.append((name, args, kwargs)) or "h"

    for name in ("mlstm_xl_chunk", "mlstm_limit_chunk"):
        monkeypatch.setattr(xl_chunk, name, recorder(name))
    inputs = api_inputs()
    initial = (torch.zeros(1, 2, 16, 32), None, None)
    result = mlstm(
        **inputs,
        variant="sig",
        algorithm=algorithm,
        chunk_size=16,
        normalize=True,
        eps=1e-5,
        initial_state=initial,
        return_final_state=True,
        recompute_states_in_bw=False,
    )
    assert result == "h"
    ((name, args, kwargs),) = calls
    assert name == f"mlstm_{algorithm}"
    assert all(a is b for a, b in zip(args, inputs.values(), strict=True))
    assert kwargs == dict(
        variant="sig", chunk_size=16, normalize=True, eps=1e-5, initial_state=initial,
        return_final_state=True, recompute_states_in_bw=False,
    )


def _replace(name, make):
    def mutate(inputs, options):
        inputs[name] = make(inputs[name])

    return mutate


def _head_dims(head_dim_qk, head_dim_v):
    def mutate(inputs, options):
        inputs.update(api_inputs(head_dim_qk=head_dim_qk, head_dim_v=head_dim_v))

    return mutate


def _option(**changes):
    def mutate(inputs, options):
        options.update(changes)

    return mutate


def _initial_state(C_shape=(1, 2, 16, 32), n_shape=None, m_shape=None, length=3):
    def mutate(inputs, options):
        parts = [torch.zeros(C_shape), n_shape and torch.zeros(n_shape), m_shape and torch.zeros(m_shape)]
        options["initial_state"] = tuple(parts[:length])

    return mutate


@pytest.mark.parametrize(
    "mutate, message",
    [
        pytest.param(_replace("q", lambda x: x[0]), r"q must have rank 4 \[B, T, H, Dqk\]", id="q-rank"),
        pytest.param(_replace("i", lambda x: x[..., None]), r"i must have rank 3", id="i-rank"),
        pytest.param(_replace("k", lambda x: x[:, :16]), r"mismatched B, T, H.*k has \(1, 16, 2\)", id="k-T"),
        pytest.param(
            _replace("v", lambda x: x.expand(2, -1, -1, -1)), r"mismatched B, T, H.*v has", id="v-B"
        ),
        pytest.param(_replace("f", lambda x: x[:, :, :1]), r"mismatched B, T, H.*f has", id="f-H"),
        pytest.param(
            _replace("k", lambda x: torch.cat([x, x], -1)), r"same head dim Dqk, got 16 and 32", id="k-Dqk"
        ),
        pytest.param(_head_dims(8, 32), r"unsupported head dim Dqk=8", id="Dqk-small"),
        pytest.param(_replace("v", lambda x: x[..., :24]), r"unsupported head dim Dv=24", id="Dv-not-16x"),
        pytest.param(
            _replace("v", lambda x: x.repeat(1, 1, 1, 64)), r"unsupported head dim Dv=2048", id="Dv-large"
        ),
        pytest.param(
            _replace("q", lambda x: x.to(torch.int32)), r"unsupported dtype torch.int32 of q", id="q-int"
        ),
        pytest.param(
            _replace("f", lambda x: x.to(torch.complex64)),
            r"unsupported dtype torch.complex64",
            id="f-complex",
        ),
        pytest.param(_replace("v", lambda x: x.half()), r"q, k and v must have the same dtype", id="v-dtype"),
        pytest.param(
            _replace("f", lambda x: x.to("meta")), r"one device: q is on cpu, f on meta", id="f-device"
        ),
        pytest.param(_option(variant="tanh"), r"unknown variant 'tanh'", id="variant"),
        pytest.param(_option(algorithm="flash"), r"unknown algorithm 'flash'", id="algorithm"),
        pytest.param(
            _option(normalize=False),
            r"normalize=False is not supported with variant 'exp'",
            id="exp-unnormalized",
        ),
        pytest.param(_option(eps=-1e-6), r"eps must be a finite number >= 0", id="eps"),
        pytest.param(
            _option(algorithm="xl_chunk", chunk_size=48),
            r"chunk_size must be a power of two",
            id="chunk-not-pow2",
        ),
        pytest.param(_option(algorithm="xl_chunk", chunk_size=8), r"power of two >= 16, got 8", id="chunk-8"),
        pytest.param(
            _option(algorithm="limit_chunk", chunk_size=0), r"power of two >= 16, got 0", id="chunk-0"
        ),
        pytest.param(
            _option(algorithm="xl_chunk", chunk_size=64),
            r"T=32 is not divisible by chunk_size=64",
            id="chunk-not-dividing",
        ),
        pytest.param(
            _option(algorithm="parallel", return_final_state=True),
            r"'parallel' has no states",
            id="parallel-state",
        ),
        pytest.param(
            _initial_state(C_shape=(1, 2, 32, 16)),
            r"initial_state C must have shape \(1, 2, 16, 32",
            id="state-C",
        ),
        pytest.param(
            _initial_state(m_shape=(1, 2, 1)), r"initial_state m must have shape \(1, 2\)", id="state-m"
        ),
        pytest.param(_initial_state(length=2), r"initial_state must be a tuple \(C, n, m\)", id="state-len"),
        pytest.param(
            _option(recompute_states_in_bw=1),
            r"recompute_states_in_bw must be True or False, got 1",
            id="recompute",
        ),
    ],
)
def test_mlstm_rejects_bad_input(mutate, message):
    inputs = api_inputs()
    options = dict(algorithm="recurrent")
    mutate(inputs, options)
    with pytest.raises(ValueError, match=message):
        mlstm(**inputs, **options)


@pytest.mark.parametrize("head_dim_qk, head_dim_v", [(16, 16), (48, 1024), (128, 256)])
def test_mlstm_accepts_head_dims_that_are_multiples_of_16(head_dim_qk, head_dim_v):
    inputs = api_inputs(seq_len=16, head_dim_qk=head_dim_qk, head_dim_v=head_dim_v)
    options = dict(
        variant="exp",
        algorithm="xl_chunk",
        chunk_size=16,
        normalize=None,
        eps=1e-6,
        initial_state=None,
        return_final_state=False,
    )
    validate_inputs(**inputs, **options)
