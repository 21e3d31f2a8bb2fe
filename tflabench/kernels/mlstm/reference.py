"""Plain-PyTorch mLSTM references: the test oracles of the TFLA Triton kernels
(docs/reference/mlstm-math.md#interface).

Three formulations of the same cell output h-tilde (before output gate and NORM), for mLSTMexp and mLSTMsig:

* `mlstm_recurrent`: the step loop, Eqs. 1-4 (exp) and 22-23 (sig), with stabilized states.
* `mlstm_parallel`: the quadratic form of App. B.1, Eqs. 27-35 (short sequences only, O(T^2) memory).
* `mlstm_chunkwise`: the chunkwise-parallel form of §4 (inter-chunk states, intra-chunk gate matrix, outputs
  combined under the stabilizer m^(comb)).

All three are differentiable with plain autograd; run them in float64 to get the gradient oracle.

Layout (the public API's): q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H] gate pre-activations.
The query scale 1/sqrt(Dqk) is applied inside. Returns h [B, T, H, Dv] in the dtype of q.

Compute dtype: float64 for float64 q, float32 otherwise (bf16/fp16 inputs are upcast, so the references
stay meaningful for low-precision inputs). All inputs and initial states are cast to it.

Conventions
-----------
* Denominator (exp, and sig with ``normalize=True``): ``max(|n^T q|, exp(-m)) + eps``, eps added after the
  max (§2.1). For sig ``m`` is identically 0, so the lower bound is 1 (App. D.2).
* Gates in log space: ``log sigmoid(x) = -softplus(-x)``; the log input gate is ``i`` for exp and
  ``log sigmoid(i)`` for sig.
* States are stored stabilized: the true exp state is ``C * exp(m)``. sig states are never rescaled.
* ``initial_state`` is a tuple ``(C [B, H, Dqk, Dv], n [B, H, Dqk] or None, m [B, H] or None)``; a missing
  entry (None, or no tuple at all) means zeros, so by default m_0 = 0 (the kernels' convention, §2.1).
  For sig, ``m`` is ignored (sig states are unscaled) and so is ``n`` unless ``normalize=True``; both are
  accepted so that a returned final state can be passed back unchanged.
* Final state (``return_final_state=True``): ``(C, n, m)`` in the compute dtype. For sig, ``n`` is the
  normalizer state when ``normalize=True`` and zeros otherwise, and ``m`` is zeros.

The m_0 convention, parallel versus recurrent
---------------------------------------------
The parallel form has no m_0 term, i.e. it is the recurrent form with m_0 = -inf. With C_0 = n_0 = 0 the
stabilized states and the lower bound ``exp(-m_t)`` both scale with ``exp(-m_t)``, so the output equals
``C_t^T q / (max(|n_t^T q|, 1) + eps * exp(m_t))`` in unstabilized terms: the two conventions differ only
through ``eps * exp(m_t)``: with eps = 0 they agree exactly, otherwise typically by a relative difference
of order eps (not only where |n^T q| is below the bound). To compare the parallel form with the
recurrent or chunkwise form exactly, pass ``initial_state=parallel_form_initial_state(...)`` (C_0 = n_0 = 0,
m_0 = -inf) to the latter; -inf is a valid m_0 for both and gives finite values and gradients.

Gradient conventions (``detach_normalizer``)
--------------------------------------------
* ``False`` (default): the exact autograd gradient of the function computed.
* ``True``: the kernels' convention (§5.1, §5.6): all max states m (m_t, m^(inter), m^(comb), m_0) are
  stop-gradient and the whole denominator ``max(|n^T q|, exp(-m)) + eps`` is a constant, so no gradient
  flows through the normalizer n and dH-tilde = dH / denominator. For sig without normalizer there is no
  denominator and no m, and the two conventions coincide. The forward values are the same in both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

State = tuple[Tensor, Tensor, Tensor]
InitialState = tuple[Tensor | None, Tensor | None, Tensor | None]

VARIANTS = ("exp", "sig")


def resolve_normalize(variant: str, normalize: bool | None) -> bool:
    """Whether the cell divides by a normalizer: always for exp, ``normalize`` (default False) for sig."""
    if variant == "exp":
        if normalize is False:
            raise ValueError("variant 'exp' always normalizes: normalize must be None or True, got False")
        return True
    if variant == "sig":
        return bool(normalize)
    raise ValueError(f"unknown variant {variant!r}: expected one of {VARIANTS}")


def parallel_form_initial_state(
    batch: int, heads: int, head_dim_qk: int, head_dim_v: int, *, dtype: torch.dtype, device=None
) -> State:
    """The initial state (C_0 = 0 [B, H, Dqk, Dv], n_0 = 0 [B, H, Dqk], m_0 = -inf [B, H]) under which
    `mlstm_recurrent` and `mlstm_chunkwise` compute exactly what `mlstm_parallel` computes."""
    return (
        torch.zeros(batch, heads, head_dim_qk, head_dim_v, dtype=dtype, device=device),
        torch.zeros(batch, heads, head_dim_qk, dtype=dtype, device=device),
        torch.full((batch, heads), -math.inf, dtype=dtype, device=device),
    )


def mlstm_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    i: Tensor,
    f: Tensor,
    *,
    variant: str,
    normalize: bool | None = None,
    eps: float = 1e-6,
    initial_state: InitialState | None = None,
    return_final_state: bool = False,
    detach_normalizer: bool = False,
) -> Tensor | tuple[Tensor, State]:
    """Step-by-step recurrence (Eqs. 1-4 for exp, 22-23 for sig), one time step per loop iteration.

    q, k: [B, T, H, Dqk]; v: [B, T, H, Dv]; i, f: [B, T, H]. Returns h [B, T, H, Dv] (dtype of q), and the
    final state (C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H]) when ``return_final_state``.
    """
    cell = _Cell.of(variant, normalize, eps, detach_normalizer)
    q_dtype = q.dtype
    q, k, v, log_i, log_f = _heads_first_inputs(q, k, v, i, f, variant)
    C, n, m = _initial_state(initial_state, q, v, cell)
    outputs = []
    for t in range(q.shape[2]):
        m_next = _next_max_state(m, log_f[..., t], log_i[..., t], cell)
        decay = torch.exp(log_f[..., t] + m - m_next)
        weight = torch.exp(log_i[..., t] - m_next)
        C = decay[..., None, None] * C + weight[..., None, None] * k[:, :, t, :, None] * v[:, :, t, None, :]
        h_t = torch.einsum("bhkv,bhk->bhv", C, q[:, :, t])
        if cell.normalized:
            n = decay[..., None] * n + weight[..., None] * k[:, :, t]
            h_t = h_t / _denominator(torch.einsum("bhk,bhk->bh", n, q[:, :, t]), m_next, cell)[..., None]
        outputs.append(h_t)
        m = m_next
    return _finish(torch.stack(outputs, dim=2), (C, n, m), q_dtype, return_final_state)


def mlstm_parallel(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    i: Tensor,
    f: Tensor,
    *,
    variant: str,
    normalize: bool | None = None,
    eps: float = 1e-6,
    detach_normalizer: bool = False,
) -> Tensor:
    """Quadratic parallel form (App. B.1, Eqs. 27-35). No initial state; corresponds to m_0 = -inf.

    q, k: [B, T, H, Dqk]; v: [B, T, H, Dv]; i, f: [B, T, H]. Returns h [B, T, H, Dv] (dtype of q).
    log F is built by cumulative sums down the columns (stable for long sequences, §3).
    """
    cell = _Cell.of(variant, normalize, eps, detach_normalizer)
    q_dtype = q.dtype
    q, k, v, log_i, log_f = _heads_first_inputs(q, k, v, i, f, variant)
    log_D = log_decay_matrix(log_f) + log_i[..., None, :]
    if variant == "exp":
        m = _maybe_detach(log_D.amax(dim=-1), cell.detach)
    else:
        m = torch.zeros_like(log_f)
    S_bar = (q @ k.transpose(-1, -2)) * torch.exp(log_D - m[..., None])
    h = S_bar @ v
    if cell.normalized:
        h = h / _denominator(S_bar.sum(dim=-1), m, cell)[..., None]
    return _finish(h, None, q_dtype, return_final_state=False)


def mlstm_chunkwise(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    i: Tensor,
    f: Tensor,
    *,
    variant: str,
    chunk_size: int,
    normalize: bool | None = None,
    eps: float = 1e-6,
    initial_state: InitialState | None = None,
    return_final_state: bool = False,
    detach_normalizer: bool = False,
) -> Tensor | tuple[Tensor, State]:
    """Chunkwise-parallel form (§4): inter-chunk recurrence over the states C_k, n_k, m^(inter)_k
    (Eqs. 39-43), intra-chunk gate matrix (Eqs. 44-48), outputs combined under m^(comb) (Eqs. 49-56).

    q, k: [B, T, H, Dqk]; v: [B, T, H, Dv]; i, f: [B, T, H]; T must be divisible by ``chunk_size`` (any
    positive divisor, 1 and T included). Returns as `mlstm_recurrent`.
    """
    cell = _Cell.of(variant, normalize, eps, detach_normalizer)
    seq_len = q.shape[1]
    if not isinstance(chunk_size, int) or chunk_size < 1 or seq_len % chunk_size:
        raise ValueError(
            f"chunk_size must be a positive divisor of the sequence length {seq_len}, got {chunk_size!r}"
        )
    q_dtype = q.dtype
    chunks = (seq_len // chunk_size, chunk_size)
    q, k, v, log_i, log_f = (x.unflatten(2, chunks) for x in _heads_first_inputs(q, k, v, i, f, variant))
    state = _initial_state(initial_state, q, v, cell)
    states_before, final_state = _chunk_states(k, v, log_i, log_f, state, cell)
    h = _chunk_outputs(q, k, v, log_i, log_f, states_before, cell)
    return _finish(h.flatten(2, 3), final_state, q_dtype, return_final_state)


def log_decay_matrix(log_f: Tensor) -> Tensor:
    """log F of Eq. 34 for the last axis: [..., T] -> [..., T, T] with entry (i, j) the sum of log_f[l] for
    j < l <= i, 0 on the diagonal and -inf above it, built by cumulative sums down the columns."""
    seq_len = log_f.shape[-1]
    ones = torch.ones(seq_len, seq_len, dtype=torch.bool, device=log_f.device)
    rows = log_f[..., :, None].expand(*log_f.shape, seq_len)
    log_F = rows.masked_fill(~ones.tril(-1), 0.0).cumsum(dim=-2)
    return log_F.masked_fill(~ones.tril(), -math.inf)


def exclusive_reverse_cumsum(x: Tensor) -> Tensor:
    """out[..., j] = sum of x[..., l] for l > j (Eq. 11's a_k without the input gate), no subtraction."""
    inclusive = x.flip(-1).cumsum(-1).flip(-1)
    return torch.cat([inclusive[..., 1:], torch.zeros_like(x[..., :1])], dim=-1)


def compute_dtype(input_dtype: torch.dtype) -> torch.dtype:
    """float64 for float64 inputs, float32 for everything else."""
    return torch.float64 if input_dtype == torch.float64 else torch.float32


@dataclass(frozen=True)
class _Cell:
    """What distinguishes the cells: variant ("exp" | "sig"), whether it normalizes, eps, and whether the
    max states and the denominator are detached (kernel gradient convention)."""

    variant: str
    normalized: bool
    eps: float
    detach: bool

    @classmethod
    def of(cls, variant: str, normalize: bool | None, eps: float, detach: bool) -> _Cell:
        return cls(variant, resolve_normalize(variant, normalize), eps, detach)


def _chunk_states(
    k: Tensor, v: Tensor, log_i: Tensor, log_f: Tensor, state: State, cell: _Cell
) -> tuple[State, State]:
    """Inter-chunk recurrence (Eqs. 39-43). k: [B, H, NC, L, Dqk]; v: [B, H, NC, L, Dv]; gates [B, H, NC, L].

    Returns the states before every chunk, (C [B, H, NC, Dqk, Dv], n [B, H, NC, Dqk], m^(inter) [B, H, NC]),
    and the final state (C, n, m) after the last chunk.
    """
    g = log_f.sum(dim=-1)
    a = exclusive_reverse_cumsum(log_f) + log_i
    C, n, m = state
    before = []
    for chunk in range(k.shape[2]):
        before.append((C, n, m))
        m_next = _next_max_state(m, g[..., chunk], a[..., chunk, :].amax(dim=-1), cell)
        g_bar = torch.exp(g[..., chunk] + m - m_next)
        k_bar = torch.exp(a[..., chunk, :] - m_next[..., None])[..., None] * k[:, :, chunk]
        C = g_bar[..., None, None] * C + k_bar.transpose(-1, -2) @ v[:, :, chunk]
        if cell.normalized:
            n = g_bar[..., None] * n + k_bar.sum(dim=-2)
        m = m_next
    C_before, n_before, m_before = (torch.stack(parts, dim=2) for parts in zip(*before, strict=True))
    return (C_before, n_before, m_before), (C, n, m)


def _chunk_outputs(
    q: Tensor, k: Tensor, v: Tensor, log_i: Tensor, log_f: Tensor, states_before: State, cell: _Cell
) -> Tensor:
    """Outputs of all chunks (Eqs. 44-56), the intra-chunk matrix stabilized directly with m^(comb).

    q (scaled), k: [B, H, NC, L, Dqk]; v: [B, H, NC, L, Dv]; gates [B, H, NC, L]; states_before as returned
    by `_chunk_states`. Returns h [B, H, NC, L, Dv].
    """
    C_before, n_before, m_before = states_before
    b = log_f.cumsum(dim=-1)
    log_D = log_decay_matrix(log_f) + log_i[..., None, :]
    if cell.variant == "exp":
        m_comb = _maybe_detach(torch.maximum(b + m_before[..., None], log_D.amax(dim=-1)), cell.detach)
    else:
        m_comb = torch.zeros_like(b)
    q_bar = torch.exp(b + m_before[..., None] - m_comb)[..., None] * q
    S_bar = (q @ k.transpose(-1, -2)) * torch.exp(log_D - m_comb[..., None])
    h = q_bar @ C_before + S_bar @ v
    if cell.normalized:
        dot = (q_bar @ n_before[..., None]).squeeze(-1) + S_bar.sum(dim=-1)
        h = h / _denominator(dot, m_comb, cell)[..., None]
    return h


def _heads_first_inputs(
    q: Tensor, k: Tensor, v: Tensor, i: Tensor, f: Tensor, variant: str
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Cast to the compute dtype and move heads before time: q (scaled by 1/sqrt(Dqk)), k [B, H, T, Dqk];
    v [B, H, T, Dv]; log input gate and log forget gate [B, H, T]."""
    dtype = compute_dtype(q.dtype)
    q, k, v, i, f = (x.to(dtype).transpose(1, 2) for x in (q, k, v, i, f))
    log_f = -F.softplus(-f)
    log_i = i if variant == "exp" else -F.softplus(-i)
    return q * q.shape[-1] ** -0.5, k, v, log_i, log_f


def _initial_state(initial_state: InitialState | None, q: Tensor, v: Tensor, cell: _Cell) -> State:
    """(C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H]) in the compute dtype; missing or unused parts are zeros.

    q: [B, H, ..., Dqk] and v: [B, H, ..., Dv] in the compute dtype give the shapes, dtype and device.
    """
    batch, heads, head_dim_qk, head_dim_v = q.shape[0], q.shape[1], q.shape[-1], v.shape[-1]
    C, n, m = initial_state if initial_state is not None else (None, None, None)
    like = dict(dtype=q.dtype, device=q.device)
    C = torch.zeros(batch, heads, head_dim_qk, head_dim_v, **like) if C is None else C.to(q.dtype)
    use_n = n is not None and cell.normalized
    n = n.to(q.dtype) if use_n else torch.zeros(batch, heads, head_dim_qk, **like)
    use_m = m is not None and cell.variant == "exp"
    m = m.to(q.dtype) if use_m else torch.zeros(batch, heads, **like)
    return C, n, _maybe_detach(m, cell.detach)


def _next_max_state(m: Tensor, log_decay: Tensor, max_log_weight: Tensor, cell: _Cell) -> Tensor:
    """Eqs. 1 / 39: max(log decay + m, max log input weight). sig states are not stabilized: m stays 0."""
    if cell.variant == "sig":
        return m
    return _maybe_detach(torch.maximum(log_decay + m, max_log_weight), cell.detach)


def _denominator(dot: Tensor, m: Tensor, cell: _Cell) -> Tensor:
    """max(|n^T q|, exp(-m)) + eps; a constant for autograd in the kernel convention (§5.1)."""
    return _maybe_detach(torch.maximum(dot.abs(), torch.exp(-m)) + cell.eps, cell.detach)


def _maybe_detach(x: Tensor, detach: bool) -> Tensor:
    return x.detach() if detach else x


def _finish(
    h: Tensor, state: State | None, q_dtype: torch.dtype, return_final_state: bool
) -> Tensor | tuple[Tensor, State]:
    """h [B, H, T, Dv] -> [B, T, H, Dv] in the dtype of q, with the final state when asked."""
    h = h.transpose(1, 2).to(q_dtype)
    return (h, state) if return_final_state else h
