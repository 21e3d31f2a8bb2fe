"""The Triton kernels (algorithms "xl_chunk", "limit_chunk", "fused_chunk" and "auto") against the float64
references, on CPU.

The kernels run under the Triton interpreter (tests/conftest.py sets TRITON_INTERPRET=1 when there is no
CUDA) in float32 on tiny shapes, through the public `tflabench.kernels.mlstm` (and `mlstm_xl_chunk` for the
options the public entry point does not expose: a `Tiling`, ``recompute_states_in_bw``). The oracle is
`mlstm_recurrent` in float64 with the kernels' gradient convention (``detach_normalizer=True``: no gradient
through the max states and the denominator, docs/reference/mlstm-math.md#gradient-convention). Every test
draws fresh inputs from its own seeded generator; the loss is sum(h * dh) + sum(C_T * dC) with random
cotangents, so every gradient (dq, dk, dv, di, df and dC0, the gradient of the initial C) includes the path
through the final state.

Error measure: the relative Frobenius error ||x - x_ref|| / ||x_ref|| of each tensor (h, the final state
C, n, m, and the gradients; the absolute error where x_ref = 0). Measured in float32 over all tests: h
1.0e-5, dq 1.1e-5, dk 1.0e-5, dv 9.8e-6, di 6.6e-6, df 1.9e-5 (a reverse cumulative sum of differences;
worst with forget gates near 0), C, n, m and dC0 below 1e-6. TOLERANCE is 1e-4 for everything (5x above
the worst); test_a_perturbed_reference_is_detected shows that the comparisons can fail.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from functools import partial

import pytest
import torch
import triton
import triton.language as tl
from torch import Tensor

from tflabench.kernels import mlstm
from tflabench.kernels.mlstm import fused_chunk, tilings, xl_chunk
from tflabench.kernels.mlstm.choice import Shape
from tflabench.kernels.mlstm.fused_chunk import FusedTiling, mlstm_fused_chunk
from tflabench.kernels.mlstm.launch import gate_grads, head_dim_block, least_padded_block
from tflabench.kernels.mlstm.reference import mlstm_parallel, mlstm_recurrent, parallel_form_initial_state
from tflabench.kernels.mlstm.triton_fwd import chunk_program
from tflabench.kernels.mlstm.xl_chunk import Tiling, _chunk_launch, _gate_cumsums, mlstm_xl_chunk

pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="CPU tensors need the Triton interpreter (TRITON_INTERPRET=1; conftest.py sets it without CUDA); "
    "the GPU checks are in test_mlstm_triton_gpu.py",
)

TOLERANCE = 1e-4
EPS = 1e-6
F32, F64 = torch.float32, torch.float64

CELLS = [
    pytest.param("exp", None, id="exp"),
    pytest.param("sig", False, id="sig"),
    pytest.param("sig", True, id="sig-normalized"),
]
ALGORITHMS = ["xl_chunk", "limit_chunk", "fused_chunk"]

# (mean, std) of the gate pre-activations (i, f): log-space extremes of the input gate and both ends of
# the forget gate (sigmoid(-5) = 0.007, sigmoid(8) = 0.9997).
GATES = {
    "moderate": ((0.0, 2.0), (2.0, 2.0)),
    "input-gate-near-minus-10": ((-10.0, 1.0), (2.0, 2.0)),
    "forget-gate-near-0": ((0.0, 2.0), (-5.0, 1.0)),
    "forget-gate-near-1": ((0.0, 2.0), (8.0, 1.0)),
}
EXTREME_GATES = [name for name in GATES if name != "moderate"]


#: the CPU suite's shape; tests change single fields with `replace`
SMALL = Shape(batch=1, seq_len=64, heads=2, head_dim_qk=16, head_dim_v=32)


@dataclass(frozen=True)
class Problem:
    """Inputs q, k [B, T, H, Dqk], v [B, T, H, Dv], i, f [B, T, H] (float32); an optional initial state
    (C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H]); the cotangents dh [B, T, H, Dv] of h and dc [B, H, Dqk, Dv]
    of the final C."""

    inputs: dict[str, Tensor]
    initial_state: tuple[Tensor, Tensor, Tensor] | None
    dh: Tensor
    dc: Tensor


@dataclass(frozen=True)
class Result:
    """h [B, T, H, Dv], the final state (C, n, m) or None, and the gradients dq, dk, dv, di, df (and dC0)."""

    h: Tensor
    final_state: tuple[Tensor, Tensor, Tensor] | None
    grads: dict[str, Tensor]


def make_problem(seed: int, shape: Shape = SMALL, gates: str = "moderate", initial_state: bool = False):
    """A `Problem` drawn from a generator seeded with ``seed``; gates as in GATES[gates]."""
    gen = torch.Generator().manual_seed(seed)

    def randn(*dims, mean=0.0, std=1.0):
        return mean + std * torch.randn(*dims, generator=gen)

    B, T, H, DQK, DV = shape.batch, shape.seq_len, shape.heads, shape.head_dim_qk, shape.head_dim_v
    (i_mean, i_std), (f_mean, f_std) = GATES[gates]
    inputs = dict(
        q=randn(B, T, H, DQK),
        k=randn(B, T, H, DQK),
        v=randn(B, T, H, DV),
        i=randn(B, T, H, mean=i_mean, std=i_std),
        f=randn(B, T, H, mean=f_mean, std=f_std),
    )
    state = (randn(B, H, DQK, DV), randn(B, H, DQK), randn(B, H)) if initial_state else None
    return Problem(inputs, state, dh=randn(B, T, H, DV), dc=randn(B, H, DQK, DV))


def identity(x: Tensor) -> Tensor:
    return x


def run(function, problem: Problem, dtype: torch.dtype, loss_on=("h", "C"), layout=identity) -> Result:
    """Run ``function(q, k, v, i, f, initial_state=, return_final_state=)`` on copies of the problem in
    ``dtype`` and backpropagate the sum of sum(h * dh) and sum(C_T * dc) over ``loss_on``.

    layout maps each input leaf to the (differentiable) view passed to ``function``. Gradients that
    autograd leaves at None (an input the loss does not depend on) are zeros.
    """
    leaves = {name: x.to(dtype, copy=True).requires_grad_() for name, x in problem.inputs.items()}
    initial = None
    if problem.initial_state is not None:
        c0, n0, m0 = (x.to(dtype, copy=True) for x in problem.initial_state)
        leaves["C0"] = c0.requires_grad_()
        initial = (c0, n0, m0)
    with_state = "C" in loss_on
    inputs = {name: layout(leaves[name]) for name in "qkvif"}
    output = function(**inputs, initial_state=initial, return_final_state=with_state)
    h, final_state = output if with_state else (output, None)
    loss = torch.zeros((), dtype=dtype)
    if "h" in loss_on:
        loss = loss + (h * problem.dh.to(dtype)).sum()
    if "C" in loss_on:
        loss = loss + (final_state[0] * problem.dc.to(dtype)).sum()
    loss.backward()
    grads = {f"d{name}": x.grad if x.grad is not None else torch.zeros_like(x) for name, x in leaves.items()}
    if final_state is not None:
        final_state = tuple(part.detach() for part in final_state)
    return Result(h.detach(), final_state, grads)


def run_kernel(
    problem: Problem, *, variant, normalize, eps=EPS, loss_on=("h", "C"), layout=identity, **options
):
    """The public `mlstm` in float32; options: algorithm, chunk_size."""
    function = partial(mlstm, variant=variant, normalize=normalize, eps=eps, **options)
    return run(function, problem, F32, loss_on, layout)


def run_reference(
    problem: Problem, *, variant, normalize, eps=EPS, loss_on=("h", "C"), detach_normalizer=True
):
    function = partial(
        mlstm_recurrent, variant=variant, normalize=normalize, eps=eps, detach_normalizer=detach_normalizer
    )
    return run(function, problem, F64, loss_on)


def relative_error(actual: Tensor, expected: Tensor) -> float:
    """||actual - expected|| / ||expected|| (Frobenius, float64); the absolute error where expected is 0.
    NaN if anything is not finite."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    difference = (actual.double() - expected.double()).norm()
    scale = expected.double().norm()
    return (difference / scale).item() if scale > 0 else difference.item()


def relative_errors(actual: Result, expected: Result) -> dict[str, float]:
    """Relative error of h, the final state's C, n, m and every gradient of ``expected``."""
    pairs = {"h": (actual.h, expected.h)}
    if expected.final_state is not None:
        pairs.update(zip("Cnm", zip(actual.final_state, expected.final_state, strict=True), strict=True))
    pairs.update((name, (actual.grads[name], grad)) for name, grad in expected.grads.items())
    return {name: relative_error(*pair) for name, pair in pairs.items()}


def assert_close(actual: Result, expected: Result, tolerance: float = TOLERANCE) -> None:
    assert actual.h.dtype == F32
    if actual.final_state is not None:
        assert all(part.dtype == F32 for part in actual.final_state)
    errors = relative_errors(actual, expected)
    failed = {name: error for name, error in errors.items() if not error <= tolerance}
    summary = ", ".join(f"{name} {error:.1e}" for name, error in errors.items())
    assert not failed, f"relative error above {tolerance:.0e} in {sorted(failed)}; all: {summary}"


# --- forward, final state and every gradient against the float64 recurrence ---------------------------------


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("chunk_size", [16, 32, 64])
def test_matches_reference_for_each_chunk_size(variant, normalize, algorithm, chunk_size):
    """T = 64, so chunk_size 64 is a single chunk (L = T)."""
    problem = make_problem(seed=chunk_size)
    cell = dict(variant=variant, normalize=normalize)
    kernel = run_kernel(problem, **cell, algorithm=algorithm, chunk_size=chunk_size)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("gates", EXTREME_GATES)
def test_matches_reference_for_extreme_gates(variant, normalize, algorithm, gates):
    problem = make_problem(seed=1, gates=gates)
    cell = dict(variant=variant, normalize=normalize)
    kernel = run_kernel(problem, **cell, algorithm=algorithm, chunk_size=16)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("gates", list(GATES))
@pytest.mark.parametrize("prefix_max", [True, False], ids=["prefix-max", "online-max"])
def test_exp_output_kernel_stabilizer(gates, prefix_max):
    """mLSTMexp's output kernel with m_comb from the gate kernel's prefix max (the default) and with the
    online max over key/value tiles (`out_prefix_max=False`), two key/value tiles per query tile, the gate
    kernel's prefix max carried across two sub-chunks (block_state 16) and an initial state (m_0 enters
    the max): every output and gradient against the float64 reference."""
    problem = make_problem(seed=3, shape=replace(SMALL, batch=2), gates=gates, initial_state=True)
    tiling = replace(Tiling.default(32, SMALL.head_dim_qk, SMALL.head_dim_v, variant="exp"), out_block_kv=16,
                     block_state=16, out_prefix_max=prefix_max)
    cell = dict(variant="exp", normalize=None, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=32, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("gates", ["moderate", "forget-gate-near-0"])
def test_exp_stabilizer_from_the_prefix_max_equals_the_online_max(gates):
    """The gate kernel's prefix max g is the running max of ig - b within each chunk (over four sub-chunks
    of 8), and the output kernel's m_comb built from it equals the online max's m_comb (the outputs alone
    cannot tell: the stabilizer cancels in h)."""
    problem = make_problem(seed=4, shape=replace(SMALL, batch=2), gates=gates, initial_state=True)
    q, k, v, i, f = (problem.inputs[name] for name in "qkvif")
    B, T, H, _ = q.shape
    chunk = 32
    tiling = replace(Tiling.default(chunk, SMALL.head_dim_qk, SMALL.head_dim_v, variant="exp"), block_state=8)
    b, ig, g, _ = _gate_cumsums(i, f, tiling, sig=False, prefix_max=True)
    running_max = (ig - b).view(B * H, T // chunk, chunk).cummax(-1).values.view(B * H, T)
    torch.testing.assert_close(g, running_max, rtol=0, atol=0)
    initial = tuple(state.float() for state in problem.initial_state)
    m_combs = [
        xl_chunk._forward(q, k, v, i, f, initial, replace(tiling, out_prefix_max=prefix_max), False, True,
                          EPS, torch.float32).m_comb
        for prefix_max in (True, False)
    ]
    torch.testing.assert_close(m_combs[0], m_combs[1], rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("block_state", [8, 32])
def test_exp_chunk_max_is_the_largest_log_weight_of_each_chunk(block_state):
    """The gate kernel's a_k, which the state recurrence's max state m_{k+1} = max(b[L-1] + m_k, a_k) takes,
    is max_t (b[L-1] - b[t] + ig[t]) over chunk k: rounded so where the chunk is one block, and as
    b[L-1] + max_t (ig[t] - b[t]) over four sub-chunks of 8; the max states then follow the recurrence."""
    problem = make_problem(seed=5, shape=replace(SMALL, batch=2), gates="moderate", initial_state=True)
    q, k, v, i, f = (problem.inputs[name] for name in "qkvif")
    B, T, H, _ = q.shape
    chunk = 32
    tiling = replace(Tiling.default(chunk, SMALL.head_dim_qk, SMALL.head_dim_v, variant="exp"),
                     block_state=block_state)
    b, ig, _, chunk_max = _gate_cumsums(i, f, tiling, sig=False)
    b, ig = (x.view(B * H, T // chunk, chunk) for x in (b, ig))
    b_end = b[..., -1:]
    if block_state == chunk:
        expected = (b_end - b + ig).amax(-1)
    else:
        expected = b_end[..., 0] + (ig - b).amax(-1)
    torch.testing.assert_close(chunk_max, expected, rtol=0, atol=0)
    initial = tuple(state.float() for state in problem.initial_state)
    maxes = xl_chunk._forward(q, k, v, i, f, initial, tiling, False, True, EPS, torch.float32).maxes
    expected_maxes = [initial[2].reshape(B * H)]
    for c in range(T // chunk):
        expected_maxes.append(torch.maximum(b_end[:, c, 0] + expected_maxes[-1], expected[:, c]))
    torch.testing.assert_close(maxes, torch.stack(expected_maxes, 1), rtol=0, atol=0)


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("gates", ["moderate", "input-gate-near-minus-10"])
def test_matches_reference_from_an_initial_state(variant, normalize, algorithm, gates):
    """Random (C_0, n_0, m_0), B = 2; with the input gate near -10 the initial state dominates h."""
    problem = make_problem(seed=2, shape=replace(SMALL, batch=2), gates=gates, initial_state=True)
    cell = dict(variant=variant, normalize=normalize)
    kernel = run_kernel(problem, **cell, algorithm=algorithm, chunk_size=32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("chunk_size, gates, initial_state", [
    (16, "forget-gate-near-0", False), (32, "input-gate-near-minus-10", True), (64, "moderate", True)])
def test_fused_chunk_with_its_own_backward_kernels(variant, normalize, chunk_size, gates, initial_state):
    """`fused_chunk`'s default backward is TFLA's (covered through ALGORITHMS); its own backward kernels
    (state gradients on chip), with a head dim that is not a power of two (Dqk 48: padded to 64)."""
    _fused_against_reference(variant, normalize, chunk_size, gates, initial_state, 14 + chunk_size,
                             backward="fused")


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("block_v", [32, 64])
def test_fused_forward_with_value_blocks_that_do_not_divide_dv(variant, normalize, block_v):
    """The fused forward's value blocks masked past Dv (48: a full and a half-masked block of 32, or one
    block of 64), from an initial state, with TFLA's backward: h, the final state and every gradient."""
    shape = replace(SMALL, head_dim_qk=32, head_dim_v=48)
    problem = make_problem(seed=15, shape=shape, initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    tiling = replace(FusedTiling.default(16, shape.head_dim_qk, shape.head_dim_v, variant=variant),
                     block_v=block_v)
    kernel = run(partial(mlstm_fused_chunk, **cell, chunk_size=16, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


def _fused_against_reference(variant, normalize, chunk_size, gates, initial_state, seed, **tiling_fields):
    """fused_chunk with its default tiling changed by ``tiling_fields`` against the float64 reference,
    every output and gradient, Dqk 48 padded to 64."""
    shape = replace(SMALL, head_dim_qk=48, batch=2)
    problem = make_problem(seed=seed, shape=shape, gates=gates, initial_state=initial_state)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    tiling = replace(FusedTiling.default(chunk_size, shape.head_dim_qk, shape.head_dim_v, variant=variant),
                     **tiling_fields)
    kernel = run(partial(mlstm_fused_chunk, **cell, chunk_size=chunk_size, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("lean_gate", [True, False], ids=["lean-gate", "masked-gate"])
@pytest.mark.parametrize("chunk_size, gates, initial_state", [
    (32, "input-gate-near-minus-10", True), (64, "moderate", True), (64, "moderate", False)])
def test_fused_chunk_with_either_gate_forward(variant, normalize, lean_gate, chunk_size, gates,
                                              initial_state):
    """The `lean_gate` forward (the running max as a scan over [L], no live [L, L] log-gate; mLSTMexp's
    default) and the masked [L, L] log-gate (mLSTMsig's): every gradient through TFLA's backward."""
    _fused_against_reference(variant, normalize, chunk_size, gates, initial_state, 31 + chunk_size,
                             lean_gate=lean_gate)


@pytest.mark.parametrize("lean_gate", [False, True])
@pytest.mark.parametrize("variant, normalize", CELLS)
def test_fused_chunk_df_at_forget_gates_near_0(variant, normalize, lean_gate):
    """df is a reverse cumulative sum that cancels most of its terms at forget gates near 0, so it shows any
    mismatch between the row statistics of the fused forward and the gates of TFLA's backward."""
    _fused_against_reference(variant, normalize, 16, "forget-gate-near-0", False, 47, lean_gate=lean_gate)


@pytest.mark.parametrize("lean_gate", [False, True])
@pytest.mark.parametrize("variant, normalize", CELLS)
def test_fused_forward_saves_the_row_statistics_of_the_tfla_forward(variant, normalize, lean_gate):
    """What the fused forward hands to TFLA's backward (max states m, m_comb, the final C) equals what the
    TFLA forward computes: m and m_comb to the bit (a separately rounded chunk decay or row max was an ulp
    of |b| away), C to rounding (the chunk decay's ulp was 7e-6 of it)."""
    shape = replace(SMALL, head_dim_qk=48, batch=2)
    problem = make_problem(seed=47, shape=shape, gates="forget-gate-near-0")
    q, k, v, i, f = (problem.inputs[name] for name in "qkvif")
    sig, normalize = variant == "sig", variant == "exp" or bool(normalize)
    tiling = replace(FusedTiling.default(16, shape.head_dim_qk, shape.head_dim_v, variant=variant),
                     lean_gate=lean_gate)
    _, _, m_comb, maxes, c_last, _ = fused_chunk._forward(
        q, k, v, i, f, None, fused_chunk._Config(tiling, sig, normalize, EPS, True))
    tfla = xl_chunk._forward(q, k, v, i, f, None, Tiling.default(16, shape.head_dim_qk, shape.head_dim_v,
                             variant=variant), sig, normalize, EPS, torch.float32)
    if not sig:
        torch.testing.assert_close(maxes, tfla.maxes, rtol=0, atol=0)
        torch.testing.assert_close(m_comb, tfla.m_comb, rtol=0, atol=0)
    assert relative_error(c_last, tfla.c_last) <= 1e-6


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_auto_matches_reference(variant, normalize):
    """algorithm "auto" with chunk_size None (the defaults) on the CPU: the rule's choice runs correctly."""
    problem = make_problem(seed=21, initial_state=True)
    cell = dict(variant=variant, normalize=normalize)
    assert_close(run_kernel(problem, **cell), run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("loss_on", [("h",), ("C",)], ids=["h-only-no-final-state", "final-state-only"])
def test_gradients_of_h_alone_and_of_the_final_state_alone(variant, normalize, loss_on):
    """("h",): return_final_state=False; ("C",): h is unused, so its cotangent is None in the backward."""
    problem = make_problem(seed=3, initial_state=True)
    cell = dict(variant=variant, normalize=normalize, loss_on=loss_on)
    kernel = run_kernel(problem, **cell, algorithm="xl_chunk", chunk_size=32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("head_dim_qk, head_dim_v", [(32, 16), (48, 32)])
def test_matches_reference_for_other_head_dims(variant, normalize, head_dim_qk, head_dim_v):
    """Dqk > Dv, and a head dim that is not a power of two (48: masked 64-wide blocks, split dK/dV
    kernels)."""
    problem = make_problem(seed=4, shape=replace(SMALL, head_dim_qk=head_dim_qk, head_dim_v=head_dim_v))
    cell = dict(variant=variant, normalize=normalize)
    kernel = run_kernel(problem, **cell, algorithm="xl_chunk", chunk_size=32)
    assert_close(kernel, run_reference(problem, **cell))


#: masked head-dim blocks at Dqk 48 / Dv 80: the default's (one 64-wide block over Dqk, one 128-wide block
#: over Dv) and 32-wide ones (a full block, then a masked one: the kernels' loops over head-dim blocks)
_MASKED_DEFAULT = Tiling.default(32, 48, 80)
MASKED_TILINGS = [
    pytest.param(_MASKED_DEFAULT, id="default-64-128"),
    pytest.param(replace(_MASKED_DEFAULT, block_qk=32, block_v=32, out_block_v=32, dv_block_v=32,
                         state_block_qk=32, state_block_v=32), id="32-wide"),
]


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("tiling", MASKED_TILINGS)
def test_masked_head_dim_blocks_match_the_reference(variant, normalize, tiling):
    """Head dims that no block divides (48 / 80): every output, gradient and state, from an initial state,
    with the blocks past the head dims masked; the loss on the final state catches a state row or column
    past them that leaks into it."""
    shape = replace(SMALL, head_dim_qk=48, head_dim_v=80)
    assert (tiling.block_qk, tiling.out_block_v) in ((64, 128), (32, 32))
    problem = make_problem(seed=13, shape=shape, initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=32, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


def test_value_dims_between_128_and_256_take_masked_output_and_dv_blocks():
    """At Dv 192 (64 divides it) the output kernel takes two masked 128-wide value blocks (pointer tiles)
    and the dV kernel one masked 256-wide block, the other gradient kernels 64-wide ones through tensor
    descriptors; mLSTMsig's output keeps 64 where Dqk > 128; the kernels before v17 took 64 throughout."""
    blocks = ("block_v", "out_block_v", "dv_block_v", "out_tma", "bwd_tma")
    for variant in ("sig", "exp"):
        tiling = Tiling.default(128, 64, 192, variant=variant)
        assert tuple(getattr(tiling, name) for name in blocks) == (64, 128, 256, False, True)
        former = Tiling.default(128, 64, 192, variant=variant, former_value_blocks=True)
        assert tuple(getattr(former, name) for name in blocks) == (64, 64, 64, True, True)
    assert Tiling.default(128, 192, 192, variant="sig").out_block_v == 64
    assert Tiling.default(128, 192, 192, variant="exp").out_block_v == 128
    v17 = Tiling.default(128, 64, 160, former_state_blocks="v17")
    assert v17 == Tiling.default(128, 64, 160, former_value_blocks=True, former_state_blocks="v17")
    forward = Tiling.default(128, 64, 192).head_dim_blocks(64, 192, backward=False)
    assert (192, 128) in forward and (192, 256) not in forward and (64, 64) in forward
    assert (192, 256) in Tiling.default(128, 64, 192).head_dim_blocks(64, 192)


def test_value_dims_144_to_176_over_wide_masked_query_key_blocks_take_64_wide_state_and_128_wide_dv_blocks():
    """At Dv 160 (and 144, 176) where Dqk > 128 is not a multiple of 64, the state recurrences and state
    gradients take three masked 64-wide value blocks and the dV kernel two 128-wide ones; the output, dQ and
    dK keep their masked 128-wide blocks; at other Dqk (128/176, 80/160, 192/160) and at Dv 192, 96 and 256
    nothing changes; v17 took 128 and 256, v18 the narrow blocks at every Dqk, v19 where 64 does not
    divide Dqk. Over such Dqk the dV kernel takes 128-wide blocks wherever v20 took a masked 256-wide one
    (at 144/288, 176/200 and 144/192, not at 144/512 nor at 128/288)."""
    for dim in (144, 160, 176):
        tiling = Tiling.default(64, dim, dim)
        blocks = (tiling.state_block_v, tiling.dv_block_v, tiling.block_v, tiling.block_qk)
        assert blocks == (64, 128, 128, 128)
        former = Tiling.default(64, dim, dim, former_state_blocks="v17")
        assert (former.state_block_v, former.dv_block_v) == (128, 256)
    unchanged = ((64, 192), (192, 192), (96, 96), (128, 256), (128, 176), (128, 288), (192, 160), (80, 160))
    for dqk, dv in unchanged:
        assert Tiling.default(64, dqk, dv) == Tiling.default(64, dqk, dv, former_state_blocks="v17")
    assert (Tiling.default(64, 144, 288).state_block_v, Tiling.default(64, 144, 288).dv_block_v) == (64, 128)
    assert Tiling.default(64, 144, 288, former_state_blocks="v20").dv_block_v == 256
    assert Tiling.default(64, 176, 200).dv_block_v == Tiling.default(64, 144, 192).dv_block_v == 128
    assert Tiling.default(64, 176, 200, former_state_blocks="v20").dv_block_v == 256
    assert Tiling.default(64, 144, 512).dv_block_v == Tiling.default(64, 128, 288).dv_block_v == 256
    v18 = Tiling.default(64, 128, 176, former_state_blocks="v18")
    v19 = Tiling.default(64, 80, 160, former_state_blocks="v19")
    assert (v18.state_block_v, v18.dv_block_v) == (v19.state_block_v, v19.dv_block_v) == (64, 128)
    assert Tiling.default(64, 128, 176, former_state_blocks="v19").state_block_v == 128
    assert Tiling.default(64, 160, 160, exact_head_blocks=True).state_block_v == 32


@pytest.mark.parametrize("dim, block", [(160, 64), (144, 64), (176, 64), (288, 64), (96, 128), (80, 128),
                                        (192, 64), (208, 128), (256, 128), (48, 64)])
def test_least_padded_blocks_mask_64_where_that_covers_fewer_columns(dim, block):
    """Masked 64-wide blocks where they cover fewer columns than `head_dim_block`'s (three of 64 over 160
    against two of 128); on a tie the wider block."""
    assert least_padded_block(dim, 128) == block


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_least_padded_state_blocks_match_the_reference(variant, normalize):
    """The v18 tiling at 160/160, scaled to 40/40: the state recurrences and state gradients in three masked
    16-wide value blocks (the last 8 columns masked), the other kernels in masked 32-wide blocks and dV in
    two; every output, gradient and state against the float64 reference."""
    shape = replace(SMALL, head_dim_qk=40, head_dim_v=40)
    tiling = replace(Tiling.default(32, 40, 40, variant=variant), block_qk=32, block_v=32, out_block_v=32,
                     state_block_qk=16, state_block_v=16, dv_block_v=32, fused_dkdv=False, fused_dq=False)
    problem = make_problem(seed=23, shape=shape, initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=32, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_masked_value_blocks_over_dividing_gradient_blocks_match_the_reference(variant, normalize):
    """The v17 tiling at Dv 192, scaled to Dv 48: dQ and dK in 16-wide value blocks through tensor
    descriptors, the output in two 32-wide blocks (the second half masked) and dV in one masked 64-wide
    block, both through pointer tiles; every output, gradient and state against the float64 reference."""
    shape = replace(SMALL, head_dim_qk=16, head_dim_v=48)
    tiling = replace(Tiling.default(32, 16, 48, variant=variant), block_qk=16, block_v=16, out_block_v=32,
                     dv_block_v=64, out_tma=False, bwd_tma=True, fused_dkdv=False, fused_dq=False)
    problem = make_problem(seed=19, shape=shape, initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=32, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("kernels", ["out_tma", "bwd_tma"])
def test_kernels_through_tensor_descriptors_match_the_reference(variant, normalize, kernels):
    """The output kernel's tiles (`out_tma`) and the dQ, dK and dV kernels' (`bwd_tma`) through tensor
    descriptors over the [B*T, H*D] matrices: two batches and heads (a tile's row and column offsets), two
    Dqk blocks, two value blocks (one dV block of two), two query tiles per chunk (one and two key/value
    tiles); every output, gradient and state against the float64 reference."""
    shape = replace(SMALL, batch=2, head_dim_qk=32)
    tiling = replace(Tiling.default(32, 32, 32, variant=variant), block_q=16, block_kv=16, out_block_kv=16,
                     block_qk=16, block_v=16, out_block_v=16, dv_block_v=32, out_q_tiles=1,
                     fused_dkdv=False, fused_dq=False, **{"out_tma": False, kernels: True})
    problem = make_problem(seed=17, shape=shape, initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=32, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_dq_from_the_diagonal_matches_the_reference(variant, normalize):
    """`Tiling.dq_from_diagonal`: the dQ kernel's key/value tiles from each query tile's diagonal down (four
    query tiles of 16 in a chunk of 64: one to four key/value tiles each); every output, gradient and state
    against the float64 reference."""
    tiling = replace(Tiling.default(64, 32, 32, variant=variant), block_q=16, block_kv=16, block_qk=16,
                     block_v=16, fused_dkdv=False, fused_dq=False, dq_from_diagonal=True)
    problem = make_problem(seed=23, shape=replace(SMALL, head_dim_qk=32, head_dim_v=32), initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=64, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


def test_tensor_descriptors_only_where_blocks_divide_the_head_dims():
    """The kernels fall back to pointer tiles where a head-dim block is masked (a descriptor over the
    [B*T, H*D] matrix would read the next head's columns) or a tensor is not contiguous."""
    q = torch.zeros(1, 32, 2, 48)
    v = torch.zeros(1, 32, 2, 64)
    assert not xl_chunk._tma_ready((q, q, v, v), (48, 64), (64, 64))
    assert xl_chunk._tma_ready((q, q, v, v), (48, 64), (16, 64))
    assert not xl_chunk._tma_ready((q, q, v.transpose(1, 2), v), (48, 64), (16, 64))


@pytest.mark.parametrize("dim, cap, block", [(96, 64, 64), (96, 128, 128), (48, 128, 64), (80, 64, 64),
                                             (192, 128, 64), (32, 64, 32), (16, 128, 16), (256, 128, 128)])
def test_head_dim_blocks_divide_or_are_masked_64_wide_at_least(dim, cap, block):
    """The largest dividing block where it is 64 wide or covers the head dim; else a masked one."""
    assert head_dim_block(dim, cap) == block


@pytest.mark.parametrize("variant, normalize", [("exp", None), ("sig", True)], ids=["exp", "sig-normalized"])
def test_matches_reference_with_a_large_eps(variant, normalize):
    """eps = 0.5 makes the placement of eps (after the max) visible in h; at 1e-6 it is not."""
    problem = make_problem(seed=5)
    cell = dict(variant=variant, normalize=normalize, eps=0.5)
    kernel = run_kernel(problem, **cell, algorithm="xl_chunk", chunk_size=16)
    assert_close(kernel, run_reference(problem, **cell))


@pytest.mark.parametrize("variant, normalize", [("exp", None), ("sig", True)], ids=["exp", "sig-normalized"])
def test_matches_the_parallel_form_from_its_initial_state(variant, normalize):
    """A second oracle, `mlstm_parallel`, which equals the chunkwise form from C_0 = n_0 = 0, m_0 = -inf
    (an edge case for the kernels' max-state arithmetic). dC0 is not compared: the parallel form has none."""
    problem = make_problem(seed=13)
    batch, _, heads, head_dim_qk = problem.inputs["q"].shape
    initial = parallel_form_initial_state(batch, heads, head_dim_qk, problem.inputs["v"].shape[-1], dtype=F32)
    problem = replace(problem, initial_state=initial)
    cell = dict(variant=variant, normalize=normalize)
    kernel = run_kernel(problem, **cell, loss_on=("h",), algorithm="xl_chunk", chunk_size=16)

    def parallel_form(q, k, v, i, f, *, initial_state, return_final_state):
        return mlstm_parallel(q, k, v, i, f, **cell, eps=EPS, detach_normalizer=True)

    reference = run(parallel_form, problem, F64, loss_on=("h",))
    reference = replace(reference, grads={name: g for name, g in reference.grads.items() if name != "dC0"})
    assert_close(kernel, reference)


# --- kernel options: tilings, recomputed states ------------------------------------------------------------

TILINGS = [
    pytest.param(
        Tiling(
            32,
            block_state=16,
            state_block_qk=16,
            state_block_v=32,
            block_q=32,
            block_kv=16,
            block_qk=16,
            block_v=32,
            out_block_kv=16,
            out_block_v=32,
            dv_block_v=64,
            fused_dkdv=False,
        ),
        id="L32-q32-kv16-out16-v32-dv64-split-dkdv",
    ),
    pytest.param(
        Tiling(
            64,
            block_state=32,
            state_block_qk=16,
            state_block_v=32,
            block_q=32,
            block_kv=16,
            block_qk=16,
            block_v=32,
            out_block_kv=32,
            out_block_v=64,
            out_q_tiles=2,
            fused_dkdv=True,
            dkdv_block_kv=32,
        ),
        id="L64-q32-kv16-out32-v64-2qtiles-fused-dkdv",
    ),
]


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("tiling", TILINGS)
def test_matches_reference_with_a_non_default_tiling(variant, normalize, tiling):
    """block_q != block_kv (and the forward's out_block_kv), the blocks smaller than the chunk or head dim
    they tile (Dqk 32, Dv 64), the forward's value block split (v32) or the whole value head dim (v64), both
    query tiles of a chunk in one output program (2qtiles), and the dV kernel's value block over the whole
    value head dim (dv64) next to split dQ / dK blocks."""
    problem = make_problem(seed=6, shape=replace(SMALL, head_dim_qk=32, head_dim_v=64), initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=tiling.chunk, tiling=tiling), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


def _differs_from_the_default_at_64(name: str) -> bool:
    options = tilings.launch_options("xl_chunk", name, chunk=64, head_dim_qk=64, head_dim_v=64, variant="sig")
    return options["tiling"] != Tiling.default(64, 64, 64, variant="sig")


#: the backward tilings for Dqk = Dv = 64 other than the default there (which is "bwd-small-dkdv")
SMALL_HEAD_BACKWARD_TILINGS = [name for name in tilings.NAMED
                               if name.startswith("bwd-") and _differs_from_the_default_at_64(name)]


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("name", SMALL_HEAD_BACKWARD_TILINGS)
def test_named_small_head_dim_backward_tilings_match_the_reference(variant, normalize, name):
    """The backward tilings for Dqk = Dv = 64 (`tilings.NAMED` "bwd-*": the split dK / dV kernels, one stage,
    smaller state tiles), at those head dims and L = 64 over two chunks: every gradient and the final
    state against the float64 reference."""
    assert SMALL_HEAD_BACKWARD_TILINGS
    shape = replace(SMALL, seq_len=128, heads=1, head_dim_qk=64, head_dim_v=64)
    problem = make_problem(seed=11, shape=shape, initial_state=True)
    options = tilings.launch_options("xl_chunk", name, chunk=64, head_dim_qk=64, head_dim_v=64,
                                     variant=variant)
    assert options["tiling"] != Tiling.default(64, 64, 64, variant=variant)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(mlstm_xl_chunk, **cell, chunk_size=64, **options), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))


class CountedLaunches:
    """A Triton kernel whose launches (``kernel[grid](...)``) are counted."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        self.launches += 1
        return self.kernel[grid]


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("algorithm", ["xl_chunk", "fused_chunk"])
@pytest.mark.parametrize("fused_dq", [True, False])
def test_dq_from_the_recurrence_and_the_dkdv_kernel_or_from_its_own_kernel(variant, normalize, algorithm,
                                                                          fused_dq, monkeypatch):
    """Where a chunk is one tile (L = 64 at Dqk = Dv = 64), the backward takes dQ's inter-chunk part from
    the recomputed state recurrence and the rest from the dK/dV kernel (fused_dq, the default: no dQ kernel
    and no stored states), or runs the dQ kernel (fused_dq false): each launches what it says, and both
    match the float64 reference over two chunks from an initial state."""
    from tflabench.kernels.mlstm import triton_bwd

    counted = {name: CountedLaunches(getattr(triton_bwd, name))
               for name in ("chunk_dq_kernel", "chunk_states_dq_kernel", "chunk_dkdv_kernel")}
    for name, kernel in counted.items():
        monkeypatch.setattr(triton_bwd, name, kernel)
    shape = replace(SMALL, seq_len=128, heads=1, head_dim_qk=64, head_dim_v=64)
    problem = make_problem(seed=12, shape=shape, initial_state=True)
    options = tilings.launch_options(algorithm, f"fused_dq={str(fused_dq).lower()}", chunk=64,
                                     head_dim_qk=64, head_dim_v=64, variant=variant)
    launcher = mlstm_xl_chunk if algorithm == "xl_chunk" else mlstm_fused_chunk
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    kernel = run(partial(launcher, **cell, chunk_size=64, **options), problem, F32)
    assert_close(kernel, run_reference(problem, **cell))
    launches = {name: counter.launches for name, counter in counted.items()}
    assert launches == {"chunk_dq_kernel": 0 if fused_dq else 1, "chunk_states_dq_kernel": int(fused_dq),
                        "chunk_dkdv_kernel": 1}


@pytest.mark.parametrize(
    "batch, seq_len, heads, q_blocks, k_blocks, sig, with_final",
    [
        pytest.param(2, 2 * xl_chunk.GATE_GRADS_BLOCK + 16, 3, 2, 1, True, True, id="three-steps-sig-final"),
        pytest.param(1, 64, 2, 1, 3, False, False, id="one-step-exp"),
        pytest.param(1, 3000, 1, 1, 1, True, False, id="partial-first-step"),
        pytest.param(2, 2 * xl_chunk.GATE_GRADS_SEGMENT + 1040, 1, 2, 2, False, True,
                     id="three-segments-the-last-partial"),
    ],
)
def test_the_gate_gradient_kernel_equals_the_pytorch_ops(batch, seq_len, heads, q_blocks, k_blocks, sig,
                                                         with_final):
    """`xl_chunk._gate_grads` (one program per segment of GATE_GRADS_SEGMENT tokens of a row, summing the
    tokens after it and walking it from its end in steps of GATE_GRADS_BLOCK tokens, the last step partial
    where the segment is no multiple of it) against `launch.gate_grads`, from row sums split over Dqk blocks
    as the dQ and dK kernels write them."""
    gen = torch.Generator().manual_seed(seq_len)
    rows = batch * heads
    q_dq = torch.randn(q_blocks, rows, seq_len, generator=gen)
    k_dk = torch.randn(k_blocks, rows, seq_len, generator=gen)
    i, f = (torch.randn(batch, seq_len, heads, generator=gen) for _ in range(2))
    c_last = torch.randn(rows, 16, 32, generator=gen)
    dc_last = torch.randn(rows, 16, 32, generator=gen) if with_final else None
    expected = gate_grads(q_dq.sum(0), k_dk.sum(0), i, f, c_last, dc_last, sig)
    actual = xl_chunk._gate_grads(q_dq, k_dk, i, f, c_last, dc_last, sig)
    for name, got, want in zip(("di", "df"), actual, expected, strict=True):
        assert relative_error(got, want) <= 1e-6, name


@pytest.mark.parametrize("gates", ["moderate", "forget-gate-near-1"])
@pytest.mark.parametrize("variant, normalize", CELLS)
def test_the_gate_gradient_kernel_in_the_backward_matches_the_reference(variant, normalize, gates):
    """`Tiling.fused_gate_grads`: every output and gradient against float64, from an initial state, with the
    states recomputed (dQ's row sums from the dK/dV kernel at these head dims) and kept (the dQ kernel's).
    Forget gates near 0 are left to the test against the PyTorch ops above: there df is a reverse sum of
    nearly cancelling terms whose float32 error (about 1e-4 relative at some seeds, either way) depends on the
    order of the sum, which the kernel's block scan and the PyTorch cumsum take differently."""
    problem = make_problem(seed=11, gates=gates, initial_state=True)
    tiling = replace(Tiling.default(16, SMALL.head_dim_qk, SMALL.head_dim_v, variant=variant),
                     fused_gate_grads=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    expected = run_reference(problem, **cell)
    for recompute in (True, False):
        launcher = partial(mlstm_xl_chunk, **cell, chunk_size=16, tiling=tiling,
                           recompute_states_in_bw=recompute)
        assert_close(run(launcher, problem, F32), expected)


@pytest.mark.parametrize("variant, normalize", CELLS)
def test_recomputing_the_states_in_the_backward_gives_identical_gradients(variant, normalize):
    """With the dQ kernel in both (fused_dq needs recomputed states, so the stored ones take the dQ kernel
    whatever the tiling says)."""
    problem = make_problem(seed=7, initial_state=True)
    tiling = replace(Tiling.default(16, SMALL.head_dim_qk, SMALL.head_dim_v, variant=variant), fused_dq=False)
    options = dict(variant=variant, normalize=normalize, eps=EPS, chunk_size=16, tiling=tiling)
    stored, recomputed = (
        run(partial(mlstm_xl_chunk, **options, recompute_states_in_bw=recompute), problem, F32)
        for recompute in (False, True)
    )
    assert torch.equal(stored.h, recomputed.h)
    for name, grad in stored.grads.items():
        assert torch.equal(grad, recomputed.grads[name]), name
    assert_close(recomputed, run_reference(problem, variant=variant, normalize=normalize))


# --- state passing and memory layouts ----------------------------------------------------------------------


def in_two_halves(mlstm_function):
    """``mlstm_function`` run on the two halves of the sequence, the second from the first's final state."""

    def run_in_two_halves(q, k, v, i, f, *, initial_state, return_final_state):
        half = q.shape[1] // 2
        inputs = dict(q=q, k=k, v=v, i=i, f=f)
        first, second = (
            {name: x[:, part] for name, x in inputs.items()}
            for part in (slice(None, half), slice(half, None))
        )
        h_first, state = mlstm_function(**first, initial_state=initial_state, return_final_state=True)
        h_second, final_state = mlstm_function(**second, initial_state=state, return_final_state=True)
        h = torch.cat([h_first, h_second], dim=1)
        return (h, final_state) if return_final_state else h

    return run_in_two_halves


@pytest.mark.parametrize("variant, normalize", CELLS)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_two_halves_with_the_carried_state_equal_one_full_run(variant, normalize, algorithm):
    """T = 128 as 2 x 64 with L = 32; the gradient reaches the first half through the carried C."""
    problem = make_problem(seed=8, shape=replace(SMALL, seq_len=128), initial_state=True)
    cell = dict(variant=variant, normalize=normalize, eps=EPS)
    halves = in_two_halves(partial(mlstm, **cell, algorithm=algorithm, chunk_size=32))
    assert_close(run(halves, problem, F32), run_reference(problem, **cell))


def heads_first(x: Tensor) -> Tensor:
    """The values of x [B, T, H, ...] stored as [B, H, T, ...]: dense, but not contiguous."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def strided_last_dim(x: Tensor) -> Tensor:
    """The values of x with stride 2 in the last dim."""
    return x.repeat_interleave(2, dim=-1)[..., ::2]


def slice_of_wider_last_dim(x: Tensor) -> Tensor:
    """x as the first half of the last dim of a twice as wide tensor (q of a fused qk projection);
    gates [B, T, H] as a slice of [B, T, 2H]."""
    return torch.cat([x, -x], dim=-1)[..., : x.shape[-1]]


def slice_of_longer_sequence(x: Tensor) -> Tensor:
    """x [B, T, ...] as the first T steps of a tensor with 2T steps (B = 2: not dense)."""
    return torch.cat([x, -x], dim=1)[:, : x.shape[1]]


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param(heads_first, id="heads-first"),
        pytest.param(strided_last_dim, id="strided-last-dim"),
        pytest.param(slice_of_wider_last_dim, id="slice-of-wider-last-dim"),
        pytest.param(slice_of_longer_sequence, id="slice-of-longer-sequence"),
    ],
)
def test_non_contiguous_inputs(layout):
    problem = make_problem(seed=9, shape=replace(SMALL, batch=2))
    assert not layout(problem.inputs["q"]).is_contiguous()
    cell = dict(variant="exp", normalize=None)
    kernel = run_kernel(problem, **cell, algorithm="xl_chunk", chunk_size=32, layout=layout)
    assert_close(kernel, run_reference(problem, **cell))


# --- the comparison can fail -------------------------------------------------------------------------------


def drop_gate(problem: Problem, options: dict, *, gate: str, token: int):
    """The gate of one token dropped: its pre-activation set to 50, so that sigmoid(50) = 1."""
    gates = problem.inputs[gate].clone()
    gates[:, token] = 50.0
    return replace(problem, inputs={**problem.inputs, gate: gates}), options


def eps_inside_the_max(problem: Problem, options: dict):
    """sig-normalized with max(|n^T q|, 1 + eps) instead of max(|n^T q|, 1) + eps: h is linear in q, so
    this is the reference with q / (1 + eps) and eps = 0."""
    q = problem.inputs["q"] / (1 + options["eps"])
    return replace(problem, inputs={**problem.inputs, "q": q}), {**options, "eps": 0.0}


def gradient_through_the_normalizer(problem: Problem, options: dict):
    return problem, {**options, "detach_normalizer": False}


@pytest.mark.parametrize(
    "variant, normalize, eps, perturb",
    [
        pytest.param("exp", None, EPS, partial(drop_gate, gate="f", token=32), id="forget-gate-of-token-32"),
        pytest.param("sig", False, EPS, partial(drop_gate, gate="i", token=31), id="input-gate-of-token-31"),
        pytest.param("sig", True, 0.5, eps_inside_the_max, id="eps-inside-the-max"),
        pytest.param("exp", None, EPS, gradient_through_the_normalizer, id="gradient-through-normalizer"),
    ],
)
def test_a_perturbed_reference_is_detected(variant, normalize, eps, perturb):
    """The kernel matches the reference but not a reference with one plausible bug (at a chunk border)."""
    problem = make_problem(seed=10)
    options = dict(variant=variant, normalize=normalize, eps=eps)
    kernel = run_kernel(problem, **options, algorithm="xl_chunk", chunk_size=32)
    assert_close(kernel, run_reference(problem, **options))
    perturbed_problem, perturbed_options = perturb(problem, options)
    errors = relative_errors(kernel, run_reference(perturbed_problem, **perturbed_options))
    assert max(errors.values()) > 10 * TOLERANCE, errors


def test_limit_chunk_at_128_loops_over_64_wide_head_dim_blocks():
    """limit_chunk at L = 128 takes head-dim blocks of 64 (shared memory); Dqk 128 / Dv 192 need 2 / 3."""
    tiling = Tiling.default(128, 128, 192, limit=True)
    assert (tiling.block_q, tiling.block_qk, tiling.block_v) == (128, 64, 64)
    shape = Shape(batch=1, seq_len=256, heads=1, head_dim_qk=128, head_dim_v=192)
    problem = make_problem(seed=41, shape=shape)
    cell = dict(variant="exp", normalize=None)
    kernel = run_kernel(problem, **cell, algorithm="limit_chunk", chunk_size=128)
    assert_close(kernel, run_reference(problem, **cell))


@triton.jit
def _program_coordinates_kernel(out_ptr, NC, H, tiles_0, tiles_1):
    """Row pid of out [programs, 6]: what `chunk_program` decodes for program pid."""
    coordinates = chunk_program(NC, H, tiles_0, tiles_1)
    row = out_ptr + tl.program_id(0).to(tl.int64) * 6
    for column in tl.static_range(6):
        tl.store(row + column, coordinates[column])


def test_chunk_programs_cover_every_tile_once_in_the_order_of_a_3d_grid():
    """The 1-D grid (no 65,535 limit) visits (tile block 0, tile block 1, chunk, batch * head) in the order
    of the 3-D grid (N0, N1, NC * B * H) it replaced: the first fastest, the chunks of one head together."""
    N0, N1, NC, B, H = 3, 2, 5, 2, 3
    programs, tiles = _chunk_launch(N0, N1, NC * B * H)
    out = torch.full((*programs, 6), -1, dtype=torch.int64)
    _program_coordinates_kernel[programs](out, NC, H, **tiles)
    expected = [(pid0, pid1, bh, chunk, bh // H, bh % H)
                for bh in range(B * H) for chunk in range(NC) for pid1 in range(N1) for pid0 in range(N0)]
    assert [tuple(row) for row in out.tolist()] == expected


# --- input validation --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "algorithm, seq_len, chunk_size, message",
    [
        ("xl_chunk", 96, 64, "T=96 is not divisible by chunk_size=64"),
        ("limit_chunk", 96, 64, "T=96 is not divisible by chunk_size=64"),
        ("xl_chunk", 96, 48, "chunk_size must be a power of two"),
        ("xl_chunk", 64, 8, "chunk_size must be a power of two >= 16"),
        ("limit_chunk", 256, 256, "limit_chunk supports chunk_size <= 128"),
        ("fused_chunk", 256, 256, "fused_chunk supports chunk_size <= 128"),
        ("auto", 96, 64, "T=96 is not divisible by chunk_size=64"),
    ],
)
def test_rejects_chunk_sizes_the_kernels_cannot_run(algorithm, seq_len, chunk_size, message):
    inputs = make_problem(seed=11, shape=replace(SMALL, seq_len=seq_len)).inputs
    with pytest.raises(ValueError, match=message):
        mlstm(**inputs, variant="sig", algorithm=algorithm, chunk_size=chunk_size)


VALID_TILING = Tiling.default(32, head_dim_qk=16, head_dim_v=32)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(block_v=24), "block_v=24 must be a power of two"),
        (dict(block_q=16, block_kv=32), "block_kv"),
        (dict(block_q=64), "must divide the chunk"),
        (dict(out_q_tiles=2), r"out_q_tiles \(2\) query tiles of 32 must divide the chunk \(32\)"),
        (dict(out_q_tiles=0), r"out_q_tiles \(0\)"),
    ],
)
def test_rejects_invalid_tilings(change, message):
    inputs = make_problem(seed=12).inputs  # L 32, Dqk 16, Dv 32
    tiling = replace(VALID_TILING, **change)
    with pytest.raises(ValueError, match=message):
        mlstm_xl_chunk(**inputs, variant="sig", chunk_size=32, normalize=False, eps=EPS, tiling=tiling)
