"""Fused-chunk mLSTM kernels (mLSTMexp and mLSTMsig), in Triton: one program walks the chunks of one
sequence in order and keeps the state on chip, so no chunk state is ever written to HBM.

TFLA (`triton_fwd` / `triton_bwd`) materializes the state before every chunk so that all chunks can run in
parallel; that pays when B * H programs alone cannot fill the GPU. When B * H * (head-dim blocks) already
fills it, walking the chunks in order removes the state traffic and two of the three forward launches.

Launches (1-D grids over (head-dim block, B*H), the block fastest, so the programs of one (batch, head)
run side by side and share q, k, v, dh through L2):

* `fused_forward_kernel` over (Dv/BV, B*H): state C [Dqk, BV] in fp32 registers; per chunk of L tokens the
  gates, h = (Qbar C + (Q K^T * D) V) / denom, then C <- gbar C + Kbar^T V. Writes h, the final state, and
  for the backward pass the per-token denom and m_comb and the per-chunk max states m.
* `fused_dq_kernel` over (Dqk/BK, B*H): recomputes C [BK, Dv] chunk by chunk (with the stored m) and
  writes dQ = scale (dHt V^T * D) K + scale qgate * dHt C^T.
* `fused_dk_kernel` over (Dqk/BK, B*H) and `fused_dv_kernel` over (Dv/BV, B*H): walk the chunks
  backwards with the state gradient dC on chip (dC <- gbar dC + Qbar^T dHt), writing dK and dV; the dK kernel
  also writes the gradient of the initial state.

Notation, gates and gradient convention as in `triton_bwd` (the max states and the denominator are constants
of the backward pass). Head dims that are not powers of two are padded to the next power of two (DQK_P,
DV_P) with masked loads and stores. Tensors: q, k [B, T, H, Dqk]; v, h, dh [B, T, H, Dv]; i, f [B, T, H].
"""

import triton
import triton.language as tl

from tflabench.kernels.mlstm.triton_fwd import (
    _last,
    _log_sigmoid,
    _maximum,
    load_cols,
    load_state,
    normalize_rows,
    store_cols,
    store_state,
)


@triton.jit
def _head_program(H, blocks):
    """(head-dim block, bh, batch, head) of a program of the 1-D grid of blocks * B * H programs, the head-dim
    block fastest. `blocks` is a runtime argument excluded from specialization (`head_kernel`), so the block
    index stays a runtime value even when there is one block (see `triton_fwd.chunk_program`)."""
    pid = tl.program_id(0)
    bh = (pid // blocks).to(tl.int64)
    return pid % blocks, bh, bh // H, bh % H


#: decorator of the kernels whose grid `_head_program` decodes
head_kernel = triton.jit(do_not_specialize=["blocks"])


@triton.jit
def _chunk_gates(i_ptr, f_ptr, gate_base, stride_gate_t, t, L: tl.constexpr, SIG_INPUT_GATE: tl.constexpr):
    """Gates of the L tokens t of one chunk: b (inclusive cumsum of log sigmoid(f) within the chunk), ig (the
    log input gate) [L] fp32, and the chunk's total log decay b[L-1].

    The decay is b's last element, as TFLA's kernels take it: a separate sum of log sigmoid(f) rounds
    differently (by an ulp of |b[L-1]|), which moves the max states m and the final state that TFLA's
    backward reads away from its own gates, and the reverse cumsum of the gate gradients amplifies that in
    df (at forget gates near 0, 1e-3 relative)."""
    log_f = _log_sigmoid(tl.load(f_ptr + gate_base + t * stride_gate_t).to(tl.float32))
    i = tl.load(i_ptr + gate_base + t * stride_gate_t).to(tl.float32)
    if SIG_INPUT_GATE:
        i = _log_sigmoid(i)
    b = tl.cumsum(log_f, 0)
    return b, i, _last(b, L)


@triton.jit
def _state_step(decay, b, ig, m_prev, m_next, STABILIZE: tl.constexpr):
    """(scale of the old state, weight of each key row [L]) of the state update C <- scale C + (w K)^T V."""
    weight_log = decay - b + ig
    if STABILIZE:
        return tl.exp(decay + m_prev - m_next), tl.exp(weight_log - m_next)
    return tl.exp(decay), tl.exp(weight_log)


@triton.jit
def _intra_gate(b_rows, m_comb, b_cols, ig_cols, rows, cols):
    """[len(rows), len(cols)] causal gate exp(b_i - m_comb_i - b_j + ig_j) (zero where j > i)."""
    gate_log = b_rows[:, None] - m_comb[:, None] - b_cols[None, :] + ig_cols[None, :]
    return tl.exp(tl.where(rows[:, None] >= cols[None, :], gate_log, float("-inf")))


@triton.jit
def _masked_gates(q, k, b, ig, m_state, offs_l, qk_scale, STABILIZE: tl.constexpr):
    """(m_comb [L], query gate [L], gated scores [L, L] fp32) of one chunk from the masked [L, L] log-gate
    b_i - b_j + ig_j, which stays live across the Q K^T product (the measured default).

    mLSTMexp rounds it as b_i + (ig_j - b_j): its row max is then TFLA's m_comb, b_i + the prefix max of
    ig - b (`triton_fwd.gate_cumsum_kernel`), to the bit, as TFLA's backward expects (the row max of
    (b_i - b_j) + ig_j is an ulp of |b| away and gave 2-4x its df error at forget gates near 0). mLSTMsig
    keeps (b_i - b_j) + ig_j: unstabilized, the other rounding would cancel two large terms in the exp."""
    if STABILIZE:
        gate_log = b[:, None] + (ig - b)[None, :]
    else:
        gate_log = b[:, None] - b[None, :] + ig[None, :]
    gate_log = tl.where(offs_l[:, None] >= offs_l[None, :], gate_log, float("-inf"))
    if STABILIZE:
        m_inter = b + m_state
        m_comb = tl.maximum(m_inter, tl.max(gate_log, 1))
        q_gate = tl.exp(m_inter - m_comb) * qk_scale
    else:
        m_comb = tl.zeros_like(b)
        q_gate = tl.exp(b) * qk_scale
    scores = tl.dot(q, tl.trans(k)) * qk_scale * tl.exp(gate_log - m_comb[:, None])
    return m_comb, q_gate, scores


@triton.jit
def _lean_gates(q, k, b, ig, m_state, offs_l, qk_scale, STABILIZE: tl.constexpr):
    """`_masked_gates` without a live [L, L] log-gate: the row max is b_i + the running max of ig_j - b_j
    (a scan over [L]), and the gate is formed only where it multiplies the scores."""
    if STABILIZE:
        m_inter = b + m_state
        m_comb = tl.maximum(m_inter, b + tl.associative_scan(ig - b, 0, _maximum))
        q_gate = tl.exp(m_inter - m_comb) * qk_scale
    else:
        m_comb = tl.zeros_like(b)
        q_gate = tl.exp(b) * qk_scale
    scores = tl.dot(q, tl.trans(k)) * qk_scale * _intra_gate(b, m_comb, b, ig, offs_l, offs_l)
    return m_comb, q_gate, scores


@triton.jit
def chunk_output(q, k, v, b, ig, state, norm, m_state, offs_l, qk_scale, eps, L: tl.constexpr,
                 STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, LEAN_GATE: tl.constexpr):
    """(h [L, BV] fp32, denom [L], m_comb [L]) of one chunk of the fused forward: Qbar C + S V from the state
    before it, divided by the denominator when NORMALIZE (denom 1 without). The intra-chunk gates by
    `_lean_gates` with LEAN_GATE, else `_masked_gates`. q, k [L, Dqk_p], v [L, BV]; state [Dqk_p, BV] and
    norm [Dqk_p] fp32; b, ig [L] from `_chunk_gates`."""
    if LEAN_GATE:
        m_comb, q_gate, scores = _lean_gates(q, k, b, ig, m_state, offs_l, qk_scale, STABILIZE)
    else:
        m_comb, q_gate, scores = _masked_gates(q, k, b, ig, m_state, offs_l, qk_scale, STABILIZE)
    q_gated = (q.to(tl.float32) * q_gate[:, None]).to(q.dtype)
    h_acc = tl.dot(q_gated, state.to(q.dtype)) + tl.dot(scores.to(v.dtype), v)
    denom = tl.full([L], 1.0, dtype=tl.float32)
    if NORMALIZE:
        if LEAN_GATE:
            n_acc = q_gate * tl.sum(q.to(tl.float32) * norm[None, :], 1) + tl.sum(scores, 1)
        else:
            n_acc = tl.sum(q_gated.to(tl.float32) * norm[None, :], 1) + tl.sum(scores, 1)
        h_acc, denom = normalize_rows(h_acc, n_acc, m_comb, eps, STABILIZE)
    return h_acc, denom, m_comb


@triton.jit
def chunk_state_update(k, v, b, ig, decay, state, norm, m_state, STABILIZE: tl.constexpr,
                       NORMALIZE: tl.constexpr):
    """(state, norm, max state) after one chunk of the fused forward: C <- gbar C + Kbar^T V (and the
    normalizer's n <- gbar n + Kbar^T 1 when NORMALIZE), mLSTMexp's max state
    m_{k+1} = max(b[L-1] + m_k, max_t (b[L-1] - b[t] + ig[t]))."""
    if STABILIZE:
        m_next = tl.maximum(decay + m_state, tl.max(decay - b + ig, 0))
    else:
        m_next = 0.0
    state_scale, weight = _state_step(decay, b, ig, m_state, m_next, STABILIZE)
    k_weighted = k.to(tl.float32) * weight[:, None]
    state = state * state_scale + tl.dot(tl.trans(k_weighted.to(v.dtype)), v)
    if NORMALIZE:
        norm = norm * state_scale + tl.sum(k_weighted, 0)
    return state, norm, m_next


@triton.jit
def _row_stats(m_comb_ptr, denom_ptr, bh, T, t, L: tl.constexpr, STABILIZE: tl.constexpr,
               NORMALIZE: tl.constexpr):
    """m_comb (0 for mLSTMsig) and 1/denom (1 without normalization) [L] of the tokens t."""
    if STABILIZE:
        m_comb = tl.load(m_comb_ptr + bh * T + t)
    else:
        m_comb = tl.zeros([L], dtype=tl.float32)
    if NORMALIZE:
        inv_denom = 1.0 / tl.load(denom_ptr + bh * T + t)
    else:
        inv_denom = tl.full([L], 1.0, dtype=tl.float32)
    return m_comb, inv_denom


@triton.jit
def _chunk_max(m_ptr, bh, NC, chunk, STABILIZE: tl.constexpr):
    """The max state m before chunk `chunk` (0 for mLSTMsig)."""
    if STABILIZE:
        return tl.load(m_ptr + bh * (NC + 1) + chunk)
    return 0.0


@head_kernel
def fused_forward_kernel(
    q_ptr, k_ptr, v_ptr, i_ptr, f_ptr,
    c0_ptr, n0_ptr, m0_ptr,
    h_ptr, denom_ptr, m_comb_ptr, m_ptr, c_last_ptr, n_last_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_h_b, stride_h_t, stride_h_h,
    stride_gate_b, stride_gate_t, stride_gate_h,
    T, H, NC, qk_scale, eps, blocks,
    DQK: tl.constexpr, DV: tl.constexpr, DQK_P: tl.constexpr, L: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, SIG_INPUT_GATE: tl.constexpr,
    HAS_INITIAL: tl.constexpr, LEAN_GATE: tl.constexpr,
):
    """Grid (DV/BV * B*H,). Writes h [B, T, H, DV]; when NORMALIZE denom [B*H, T] fp32; when STABILIZE m_comb
    [B*H, T] and m [B*H, NC+1] fp32 (the max state before each chunk and the final one); c_last
    [B*H, DQK, DV] and, when NORMALIZE, n_last [B*H, DQK], the final states in fp32 (stabilized).
    LEAN_GATE: the intra-chunk gates by `_lean_gates`, else by `_masked_gates`."""
    pid_v, bh, batch, head = _head_program(H, blocks)
    offs_l = tl.arange(0, L)
    offs_k = tl.arange(0, DQK_P)
    offs_v = pid_v * BV + tl.arange(0, BV)
    k_mask = offs_k < DQK
    state_offs = offs_k[:, None] * DV + offs_v[None, :]
    writes_rows = pid_v == 0

    if HAS_INITIAL:
        state = load_state(c0_ptr + bh * DQK * DV + state_offs, offs_k, offs_v, DQK, DQK_P, DV, BV)
        norm = tl.load(n0_ptr + bh * DQK + offs_k, mask=k_mask, other=0.0)
        m_state = tl.load(m0_ptr + bh)
    else:
        state = tl.zeros([DQK_P, BV], dtype=tl.float32)
        norm = tl.zeros([DQK_P], dtype=tl.float32)
        m_state = 0.0

    q_base = q_ptr + batch * stride_q_b + head * stride_q_h
    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    v_base = v_ptr + batch * stride_v_b + head * stride_v_h
    h_base = h_ptr + batch * stride_h_b + head * stride_h_h
    gate_base = batch * stride_gate_b + head * stride_gate_h
    for chunk in range(0, NC):
        t = chunk * L + offs_l
        b, ig, decay = _chunk_gates(i_ptr, f_ptr, gate_base, stride_gate_t, t, L, SIG_INPUT_GATE)
        q = tl.load(q_base + t[:, None] * stride_q_t + offs_k[None, :], mask=k_mask[None, :], other=0.0)
        k = tl.load(k_base + t[:, None] * stride_k_t + offs_k[None, :], mask=k_mask[None, :], other=0.0)
        v = load_cols(v_base + t[:, None] * stride_v_t + offs_v[None, :], offs_v, DV, BV)

        if STABILIZE and writes_rows:
            tl.store(m_ptr + bh * (NC + 1) + chunk, m_state)
        h_acc, denom, m_comb = chunk_output(q, k, v, b, ig, state, norm, m_state, offs_l, qk_scale, eps, L,
                                            STABILIZE, NORMALIZE, LEAN_GATE)
        if NORMALIZE and writes_rows:
            tl.store(denom_ptr + bh * T + t, denom)
            if STABILIZE:
                tl.store(m_comb_ptr + bh * T + t, m_comb)
        h_tile = h_acc.to(h_ptr.dtype.element_ty)
        store_cols(h_base + t[:, None] * stride_h_t + offs_v[None, :], h_tile, offs_v, DV, BV)
        state, norm, m_state = chunk_state_update(k, v, b, ig, decay, state, norm, m_state, STABILIZE,
                                                  NORMALIZE)

    store_state(c_last_ptr + bh * DQK * DV + state_offs, state, offs_k, offs_v, DQK, DQK_P, DV, BV)
    if writes_rows:
        if NORMALIZE:
            tl.store(n_last_ptr + bh * DQK + offs_k, norm, mask=k_mask)
        if STABILIZE:
            tl.store(m_ptr + bh * (NC + 1) + NC, m_state)


@head_kernel
def fused_dq_kernel(
    q_ptr, k_ptr, v_ptr, dh_ptr, i_ptr, f_ptr, m_ptr, m_comb_ptr, denom_ptr, c0_ptr,
    dq_ptr, qdq_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    stride_gate_b, stride_gate_t, stride_gate_h,
    T, H, NC, qk_scale, blocks,
    DQK: tl.constexpr, DV: tl.constexpr, DV_P: tl.constexpr, L: tl.constexpr, BK: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, SIG_INPUT_GATE: tl.constexpr,
    HAS_INITIAL: tl.constexpr,
):
    """Grid (DQK/BK * B*H,). Writes dq [B, T, H, DQK] (layout of q) and qdq [DQK/BK, B*H, T], the row sums of
    q * dq over the program's Dqk block."""
    pid_k, bh, batch, head = _head_program(H, blocks)
    offs_l = tl.arange(0, L)
    offs_k = pid_k * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, DV_P)
    v_mask = offs_v < DV

    if HAS_INITIAL:
        state = tl.load(c0_ptr + bh * DQK * DV + offs_k[:, None] * DV + offs_v[None, :],
                        mask=v_mask[None, :], other=0.0)
    else:
        state = tl.zeros([BK, DV_P], dtype=tl.float32)
    q_base = q_ptr + batch * stride_q_b + head * stride_q_h
    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    v_base = v_ptr + batch * stride_v_b + head * stride_v_h
    dh_base = dh_ptr + batch * stride_dh_b + head * stride_dh_h
    dq_base = dq_ptr + batch * stride_q_b + head * stride_q_h
    gate_base = batch * stride_gate_b + head * stride_gate_h
    num_bh = tl.num_programs(0) // blocks
    for chunk in range(0, NC):
        t = chunk * L + offs_l
        b, ig, decay = _chunk_gates(i_ptr, f_ptr, gate_base, stride_gate_t, t, L, SIG_INPUT_GATE)
        m_comb, inv_denom = _row_stats(m_comb_ptr, denom_ptr, bh, T, t, L, STABILIZE, NORMALIZE)
        m_prev = _chunk_max(m_ptr, bh, NC, chunk, STABILIZE)
        k = tl.load(k_base + t[:, None] * stride_k_t + offs_k[None, :])
        v = tl.load(v_base + t[:, None] * stride_v_t + offs_v[None, :], mask=v_mask[None, :], other=0.0)
        dh = tl.load(dh_base + t[:, None] * stride_dh_t + offs_v[None, :], mask=v_mask[None, :], other=0.0)

        row_scale = inv_denom * qk_scale
        dscores = tl.dot(dh, tl.trans(v)) * _intra_gate(b, m_comb, b, ig, offs_l, offs_l) * row_scale[:, None]
        q_gate = tl.exp(b + m_prev - m_comb) * row_scale
        dq = tl.dot(dscores.to(k.dtype), k) + tl.dot(dh, tl.trans(state.to(dh.dtype))) * q_gate[:, None]
        q = tl.load(q_base + t[:, None] * stride_q_t + offs_k[None, :])
        tl.store(qdq_ptr + (pid_k * num_bh + bh) * T + t, tl.sum(q.to(tl.float32) * dq, 1))
        tl.store(dq_base + t[:, None] * stride_q_t + offs_k[None, :], dq.to(dq_ptr.dtype.element_ty))

        state_scale, weight = _state_step(
            decay, b, ig, m_prev, _chunk_max(m_ptr, bh, NC, chunk + 1, STABILIZE), STABILIZE)
        k_weighted = (k.to(tl.float32) * weight[:, None]).to(v.dtype)
        state = state * state_scale + tl.dot(tl.trans(k_weighted), v)


@head_kernel
def fused_dk_kernel(
    q_ptr, k_ptr, v_ptr, dh_ptr, i_ptr, f_ptr, m_ptr, m_comb_ptr, denom_ptr, dc_last_ptr,
    dk_ptr, kdk_ptr, dc0_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    stride_gate_b, stride_gate_t, stride_gate_h,
    T, H, NC, qk_scale, blocks,
    DQK: tl.constexpr, DV: tl.constexpr, DV_P: tl.constexpr, L: tl.constexpr, BK: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, SIG_INPUT_GATE: tl.constexpr,
    HAS_DC_LAST: tl.constexpr,
):
    """Grid (DQK/BK * B*H,). Walks the chunks backwards with dC [BK, DV] on chip. Writes dk [B, T, H, DQK]
    (layout of k), kdk [DQK/BK, B*H, T] (row sums of k * dk over the Dqk block) and dc0 [B*H, DQK, DV] fp32,
    the gradient of the initial state."""
    pid_k, bh, batch, head = _head_program(H, blocks)
    offs_l = tl.arange(0, L)
    offs_k = pid_k * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, DV_P)
    v_mask = offs_v < DV
    state_offs = offs_k[:, None] * DV + offs_v[None, :]

    if HAS_DC_LAST:
        dstate = tl.load(dc_last_ptr + bh * DQK * DV + state_offs, mask=v_mask[None, :], other=0.0)
    else:
        dstate = tl.zeros([BK, DV_P], dtype=tl.float32)
    q_base = q_ptr + batch * stride_q_b + head * stride_q_h
    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    v_base = v_ptr + batch * stride_v_b + head * stride_v_h
    dh_base = dh_ptr + batch * stride_dh_b + head * stride_dh_h
    dk_base = dk_ptr + batch * stride_k_b + head * stride_k_h
    gate_base = batch * stride_gate_b + head * stride_gate_h
    num_bh = tl.num_programs(0) // blocks
    for step in range(0, NC):
        chunk = NC - 1 - step
        t = chunk * L + offs_l
        b, ig, decay = _chunk_gates(i_ptr, f_ptr, gate_base, stride_gate_t, t, L, SIG_INPUT_GATE)
        m_comb, inv_denom = _row_stats(m_comb_ptr, denom_ptr, bh, T, t, L, STABILIZE, NORMALIZE)
        m_prev = _chunk_max(m_ptr, bh, NC, chunk, STABILIZE)
        state_scale, k_gate = _state_step(
            decay, b, ig, m_prev, _chunk_max(m_ptr, bh, NC, chunk + 1, STABILIZE), STABILIZE)
        q = tl.load(q_base + t[:, None] * stride_q_t + offs_k[None, :])
        v = tl.load(v_base + t[:, None] * stride_v_t + offs_v[None, :], mask=v_mask[None, :], other=0.0)
        dh = tl.load(dh_base + t[:, None] * stride_dh_t + offs_v[None, :], mask=v_mask[None, :], other=0.0)

        row_scale = inv_denom * qk_scale
        gate_t = tl.trans(_intra_gate(b, m_comb, b, ig, offs_l, offs_l) * row_scale[:, None])
        dscores_t = tl.dot(v, tl.trans(dh)) * gate_t
        dk = tl.dot(dscores_t.to(q.dtype), q) + tl.dot(v, tl.trans(dstate.to(v.dtype))) * k_gate[:, None]
        k = tl.load(k_base + t[:, None] * stride_k_t + offs_k[None, :])
        tl.store(kdk_ptr + (pid_k * num_bh + bh) * T + t, tl.sum(k.to(tl.float32) * dk, 1))
        tl.store(dk_base + t[:, None] * stride_k_t + offs_k[None, :], dk.to(dk_ptr.dtype.element_ty))

        q_gated = (q.to(tl.float32) * (tl.exp(b + m_prev - m_comb) * qk_scale)[:, None]).to(q.dtype)
        dh_scaled = (dh.to(tl.float32) * inv_denom[:, None]).to(q.dtype)
        dstate = dstate * state_scale + tl.dot(tl.trans(q_gated), dh_scaled)
    tl.store(dc0_ptr + bh * DQK * DV + state_offs, dstate, mask=v_mask[None, :])


@head_kernel
def fused_dv_kernel(
    q_ptr, k_ptr, dh_ptr, i_ptr, f_ptr, m_ptr, m_comb_ptr, denom_ptr, dc_last_ptr,
    dv_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    stride_dv_b, stride_dv_t, stride_dv_h,
    stride_gate_b, stride_gate_t, stride_gate_h,
    T, H, NC, qk_scale, blocks,
    DQK: tl.constexpr, DV: tl.constexpr, DQK_P: tl.constexpr, L: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, SIG_INPUT_GATE: tl.constexpr,
    HAS_DC_LAST: tl.constexpr,
):
    """Grid (DV/BV * B*H,). Walks the chunks backwards with dC [DQK, BV] on chip. Writes dv [B, T, H, DV]
    (layout of dv_ptr)."""
    pid_v, bh, batch, head = _head_program(H, blocks)
    offs_l = tl.arange(0, L)
    offs_k = tl.arange(0, DQK_P)
    offs_v = pid_v * BV + tl.arange(0, BV)
    k_mask = offs_k < DQK

    if HAS_DC_LAST:
        dstate = tl.load(dc_last_ptr + bh * DQK * DV + offs_k[:, None] * DV + offs_v[None, :],
                         mask=k_mask[:, None], other=0.0)
    else:
        dstate = tl.zeros([DQK_P, BV], dtype=tl.float32)
    q_base = q_ptr + batch * stride_q_b + head * stride_q_h
    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    dh_base = dh_ptr + batch * stride_dh_b + head * stride_dh_h
    dv_base = dv_ptr + batch * stride_dv_b + head * stride_dv_h
    gate_base = batch * stride_gate_b + head * stride_gate_h
    for step in range(0, NC):
        chunk = NC - 1 - step
        t = chunk * L + offs_l
        b, ig, decay = _chunk_gates(i_ptr, f_ptr, gate_base, stride_gate_t, t, L, SIG_INPUT_GATE)
        m_comb, inv_denom = _row_stats(m_comb_ptr, denom_ptr, bh, T, t, L, STABILIZE, NORMALIZE)
        m_prev = _chunk_max(m_ptr, bh, NC, chunk, STABILIZE)
        state_scale, k_gate = _state_step(
            decay, b, ig, m_prev, _chunk_max(m_ptr, bh, NC, chunk + 1, STABILIZE), STABILIZE)
        q = tl.load(q_base + t[:, None] * stride_q_t + offs_k[None, :], mask=k_mask[None, :], other=0.0)
        k = tl.load(k_base + t[:, None] * stride_k_t + offs_k[None, :], mask=k_mask[None, :], other=0.0)
        dh = tl.load(dh_base + t[:, None] * stride_dh_t + offs_v[None, :])

        row_scale = inv_denom * qk_scale
        gate_t = tl.trans(_intra_gate(b, m_comb, b, ig, offs_l, offs_l) * row_scale[:, None])
        scores_t = tl.dot(k, tl.trans(q)) * gate_t
        k_gated = (k.to(tl.float32) * k_gate[:, None]).to(k.dtype)
        dv = tl.dot(scores_t.to(dh.dtype), dh) + tl.dot(k_gated, dstate.to(k.dtype))
        tl.store(dv_base + t[:, None] * stride_dv_t + offs_v[None, :], dv.to(dv_ptr.dtype.element_ty))

        q_gated = (q.to(tl.float32) * (tl.exp(b + m_prev - m_comb) * qk_scale)[:, None]).to(q.dtype)
        dh_scaled = (dh.to(tl.float32) * inv_denom[:, None]).to(q.dtype)
        dstate = dstate * state_scale + tl.dot(tl.trans(q_gated), dh_scaled)
