"""TFLA backward kernels for the mLSTM (mLSTMexp and mLSTMsig), in Triton.

The max states m and the denominator are constants of the backward pass
(docs/reference/mlstm-math.md#gradient-convention): the forward pass stores the per-token denominator
and m_comb, so no online rescaling happens here. With
dHt = dH / denom (row-wise) and, for chunk c (0-based) with states[c] the state before it:

* `chunk_state_grads_kernel`: dC_{c-1} = gbar_c dC_c + Qbar_c^T dHt_c (Eqs. 63-64), a reverse recurrence
  over chunks starting from the gradient of the returned final state. It stores dstates[c], the gradient
  of the state *after* chunk c (which chunk c's keys and values enter), and dc0, the gradient of the
  initial state. Grid (Dqk/BK, Dv/BV, B*H).
* `chunk_dq_kernel`: dQ = scale (dHt V^T * D) K + scale qgate * dHt states[c]^T. Grid (Dqk/BK, L/BLQ) per
  chunk.
* `chunk_dk_kernel`: dK = scale (V dHt^T * D^T) Q + kgate * V dstates[c+1]^T. Grid (Dqk/BK, L/BLKV) per
  chunk.
* `chunk_dv_kernel`: dV = (scale K Q^T * D^T) dHt + (kgate * K) dstates[c+1]. Grid (Dv/BV, L/BLKV) per chunk.
* `chunk_dkdv_kernel`: dK and dV in one program per key/value tile over whole head dims; where a chunk is
  one tile, also dQ (WITH_DQ), after `chunk_states_dq_kernel` recomputed the states and wrote dQ's
  inter-chunk part, so that q, k, v and dh are read once for all three and no state tensor is stored.

"Per chunk" grids are 1-D, decoded by `triton_fwd.chunk_program` (the tile blocks fastest, then the NC * B * H
chunks).

Table 1 of the TFLA paper (grid column corrected): dQ is parallel over (L_hq, Dqk), dK over (L_kv, Dqk),
dV over (L_kv, Dv). Gate matrix D_ij = exp(b_i - b_j + ig_j - m_comb_i) for i >= j (m_comb = 0 for
mLSTMsig); qgate_i = exp(b_i + m_c - m_comb_i); kgate_j = exp(g_c - b_j + ig_j - m_{c+1}).

The dQ and dK kernels also write the row sums of q*dq and k*dk over their Dqk block; the gate gradients
follow from them (§5.6, the reference's shortcut): dlogf_t = sum_{s>=t} (q.dq - k.dk)_s + <C_T, dC_T>,
dig_t = (k.dk)_t; `gate_grads_kernel` computes them in one launch (`launch.gate_grads` with PyTorch ops).
"""

import triton
import triton.language as tl

from tflabench.kernels.mlstm.triton_fwd import (
    add_chunk_to_state,
    chunk_decay,
    chunk_kernel,
    chunk_program,
    load_cols,
    load_state,
    load_state_tile,
    load_token_tile,
    state_source,
    store_state,
    store_token_tile,
    token_source,
)


@triton.jit
def _row_gates(b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t_rows,
               STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, BLOCK: tl.constexpr):
    """Per query row: b, the query gate exp(b + m_c - m_comb) and m_comb, and 1/denom."""
    b_rows = tl.load(b_ptr + bh * T + t_rows)
    if STABILIZE:
        m_comb = tl.load(m_comb_ptr + bh * T + t_rows)
        m_prev = tl.load(m_ptr + bh * (NC + 1) + chunk)
        q_gate = tl.exp(b_rows + m_prev - m_comb)
    else:
        m_comb = tl.zeros([BLOCK], dtype=tl.float32)
        q_gate = tl.exp(b_rows)
    if NORMALIZE:
        inv_denom = 1.0 / tl.load(denom_ptr + bh * T + t_rows)
    else:
        inv_denom = tl.full([BLOCK], 1.0, dtype=tl.float32)
    return b_rows, q_gate, m_comb, inv_denom


@triton.jit
def _key_gates(b_ptr, ig_ptr, m_ptr, bh, T, NC, chunk, t_keys, L: tl.constexpr, STABILIZE: tl.constexpr):
    """Per key row: b, ig and the state-entry gate exp(g_c - b_j + ig_j - m_{c+1})."""
    b_keys = tl.load(b_ptr + bh * T + t_keys)
    ig_keys = tl.load(ig_ptr + bh * T + t_keys)
    chunk_decay = tl.load(b_ptr + bh * T + chunk * L + L - 1)
    k_gate_log = chunk_decay - b_keys + ig_keys
    if STABILIZE:
        k_gate_log -= tl.load(m_ptr + bh * (NC + 1) + chunk + 1)
    return b_keys, ig_keys, tl.exp(k_gate_log)


@triton.jit
def _transposed_gate(b_q, m_comb, inv_denom, b_kv, ig_kv, q_rows, kv_rows, qk_scale):
    """[BLKV, BLQ] for key rows j (kv_rows) and query rows i (q_rows, chunk-local): the causal intra-chunk
    gate exp(b_i - m_comb_i - b_j + ig_j) (zero where j > i) times the query row's 1/denom and qk_scale."""
    gate_log_t = b_q[None, :] - m_comb[None, :] - b_kv[:, None] + ig_kv[:, None]
    causal_t = q_rows[None, :] >= kv_rows[:, None]
    return tl.exp(tl.where(causal_t, gate_log_t, float("-inf"))) * (inv_denom * qk_scale)[None, :]


@triton.jit
def chunk_state_grads_kernel(
    q_ptr, dh_ptr, b_ptr, m_ptr, m_comb_ptr, denom_ptr,
    dc_last_ptr, dc_ptr, dc0_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    T, H, NC, qk_scale,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, HAS_DC_LAST: tl.constexpr,
):
    """Grid (DQK/BK, DV/BV, B*H). Writes dc [B*H, NC, DQK, DV] (dtype of dc_ptr; the recurrence runs in
    fp32) and dc0 [B*H, DQK, DV] fp32."""
    pid_k = tl.program_id(0)
    pid_v = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    batch = bh // H
    head = bh % H
    offs_k = pid_k * BK + tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    offs_l = tl.arange(0, BL)
    state_offs = offs_k[:, None] * DV + offs_v[None, :]
    q_base = q_ptr + batch * stride_q_b + head * stride_q_h
    dh_base = dh_ptr + batch * stride_dh_b + head * stride_dh_h

    if HAS_DC_LAST:
        dstate = load_state(dc_last_ptr + bh * DQK * DV + state_offs, offs_k, offs_v, DQK, BK, DV, BV)
        dstate = dstate.to(tl.float32)
    else:
        dstate = tl.zeros([BK, BV], dtype=tl.float32)
    for step in range(0, NC):
        chunk = NC - 1 - step
        store_state(dc_ptr + (bh * NC + chunk) * DQK * DV + state_offs, dstate.to(dc_ptr.dtype.element_ty),
                    offs_k, offs_v, DQK, BK, DV, BV)
        chunk_decay = tl.load(b_ptr + bh * T + chunk * L + L - 1)
        if STABILIZE:
            m_prev = tl.load(m_ptr + bh * (NC + 1) + chunk)
            m_next = tl.load(m_ptr + bh * (NC + 1) + chunk + 1)
            dstate = dstate * tl.exp(chunk_decay + m_prev - m_next)
        else:
            dstate = dstate * tl.exp(chunk_decay)
        for start in range(0, L, BL):
            t = chunk * L + start + offs_l
            _, q_gate, _, inv_denom = _row_gates(
                b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t, STABILIZE, NORMALIZE, BL)
            q_tile = load_cols(q_base + t[:, None] * stride_q_t + offs_k[None, :], offs_k, DQK, BK)
            q_gated = q_tile.to(tl.float32) * (q_gate * qk_scale)[:, None]
            dh_tile = load_cols(dh_base + t[:, None] * stride_dh_t + offs_v[None, :], offs_v, DV, BV)
            dh_scaled = dh_tile.to(tl.float32) * inv_denom[:, None]
            dstate += tl.dot(tl.trans(q_gated.to(q_tile.dtype)), dh_scaled.to(q_tile.dtype))
    store_state(dc0_ptr + bh * DQK * DV + state_offs, dstate, offs_k, offs_v, DQK, BK, DV, BV)


@triton.jit
def chunk_states_dq_kernel(
    k_ptr, v_ptr, dh_ptr, b_ptr, ig_ptr, a_ptr, m_ptr, m_comb_ptr, denom_ptr, c0_ptr, m0_ptr,
    dq_ptr,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    stride_dq_b, stride_dq_t, stride_dq_h,
    T, H, NC, qk_scale,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BL: tl.constexpr, BK: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, HAS_INITIAL: tl.constexpr,
):
    """Grid (DQK/BK, B*H). The state recurrence of `chunk_states_kernel` again, each program over the whole
    value head dim (BV = DV), with every state applied to its chunk's output gradients instead of stored:
    dq[t] = scale * qgate_t * dHt_t states[c]^T for the tokens t of chunk c, the inter-chunk part of dQ,
    written into dq [B, T, H, DQK] (its dtype; `chunk_dkdv_kernel` with WITH_DQ adds the intra-chunk
    part). The states are cast to dh's dtype first, as `chunk_dq_kernel` reads them, so no [B*H, NC, DQK,
    DV] tensor is written or read. a: mLSTMexp's chunk maxes (`gate_cumsum_kernel`); m: the max states
    that the forward pass wrote (for the query gates)."""
    pid_k = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    batch = bh // H
    head = bh % H
    offs_k = pid_k * BK + tl.arange(0, BK)
    offs_v = tl.arange(0, DV)
    offs_l = tl.arange(0, BL)
    if HAS_INITIAL:
        state = tl.load(c0_ptr + bh * DQK * DV + offs_k[:, None] * DV + offs_v[None, :]).to(tl.float32)
        m_state = tl.load(m0_ptr + bh).to(tl.float32)
    else:
        state = tl.zeros([BK, DV], dtype=tl.float32)
        m_state = 0.0
    unused_norm = tl.zeros([BK, 16], dtype=tl.float32)
    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    v_base = v_ptr + batch * stride_v_b + head * stride_v_h
    dh_base = dh_ptr + batch * stride_dh_b + head * stride_dh_h
    dq_base = dq_ptr + batch * stride_dq_b + head * stride_dq_h
    for chunk in range(0, NC):
        state_operand = state.to(dh_ptr.dtype.element_ty)
        for start in range(0, L, BL):
            t = chunk * L + start + offs_l
            _, q_gate, _, inv_denom = _row_gates(
                b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t, STABILIZE, NORMALIZE, BL)
            dh_tile = tl.load(dh_base + t[:, None] * stride_dh_t + offs_v[None, :])
            dq_inter = tl.dot(dh_tile, tl.trans(state_operand)) * (q_gate * inv_denom * qk_scale)[:, None]
            dq_ptrs = dq_base + t[:, None] * stride_dq_t + offs_k[None, :]
            tl.store(dq_ptrs, dq_inter.to(dq_ptr.dtype.element_ty))
        decay, state_scale, m_state = chunk_decay(b_ptr, a_ptr, bh, T, NC, chunk, m_state, L, STABILIZE)
        state, unused_norm = add_chunk_to_state(
            state * state_scale, unused_norm, k_base, v_base, b_ptr, ig_ptr, bh, T, chunk, decay, m_state,
            offs_k, offs_v, stride_k_t, stride_v_t, DQK, DV, BK, DV, L, BL, STABILIZE, False)


@chunk_kernel
def chunk_dq_kernel(
    q_ptr, k_ptr, v_ptr, dh_ptr, b_ptr, ig_ptr, m_ptr, m_comb_ptr, denom_ptr, c_ptr,
    dq_ptr, qdq_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    T, H, NC, qk_scale, tiles_0, tiles_1,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, TMA: tl.constexpr, FROM_DIAGONAL: tl.constexpr,
):
    """Grid `chunk_program` over (DQK/BK, L/BLQ). Writes dq [B, T, H, DQK] (layout of q) and
    qdq [DQK/BK, B*H, T]. TMA: q, k, v, dh, the states and dq are tensor descriptors
    (`triton_fwd.token_source`, `state_source`). FROM_DIAGONAL: the key/value tiles from the query tile's
    diagonal down to the chunk's first (`Tiling.dq_from_diagonal`), else from the first."""
    pid_k, pid_q, bh, chunk, batch, head = chunk_program(NC, H, tiles_0, tiles_1)
    offs_q = pid_q * BLQ + tl.arange(0, BLQ)
    offs_kv = tl.arange(0, BLKV)
    q_start = chunk * L + pid_q * BLQ
    t_q = q_start + tl.arange(0, BLQ)
    col_k = pid_k * BK
    k_src = token_source(k_ptr, stride_k_b, stride_k_h, batch, head, T, DQK, TMA)
    v_src = token_source(v_ptr, stride_v_b, stride_v_h, batch, head, T, DV, TMA)
    dh_src = token_source(dh_ptr, stride_dh_b, stride_dh_h, batch, head, T, DV, TMA)
    b_q, q_gate, m_comb, inv_denom = _row_gates(
        b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t_q, STABILIZE, NORMALIZE, BLQ)

    dq = tl.zeros([BLQ, BK], dtype=tl.float32)
    num_kv_tiles = (pid_q + 1) * BLQ // BLKV
    for step in range(0, num_kv_tiles):
        kv_tile = num_kv_tiles - 1 - step if FROM_DIAGONAL else step
        kv_start = chunk * L + kv_tile * BLKV
        t_kv = kv_start + offs_kv
        dscores = tl.zeros([BLQ, BLKV], dtype=tl.float32)
        for dv in range(0, DV, BV):
            dh_tile = load_token_tile(dh_src, stride_dh_t, q_start, dv, DV, BLQ, BV, TMA)
            v_tile = load_token_tile(v_src, stride_v_t, kv_start, dv, DV, BLKV, BV, TMA)
            dscores += tl.dot(dh_tile, tl.trans(v_tile))
        b_kv = tl.load(b_ptr + bh * T + t_kv)
        ig_kv = tl.load(ig_ptr + bh * T + t_kv)
        gate_log = b_q[:, None] - b_kv[None, :] + ig_kv[None, :] - m_comb[:, None]
        causal = offs_q[:, None] >= (kv_tile * BLKV + offs_kv)[None, :]
        gate = tl.exp(tl.where(causal, gate_log, float("-inf")))
        dscores = dscores * gate * (inv_denom * qk_scale)[:, None]
        k_tile = load_token_tile(k_src, stride_k_t, kv_start, col_k, DQK, BLKV, BK, TMA)
        dq += tl.dot(dscores.to(k_tile.dtype), k_tile)

    dq_inter = tl.zeros([BLQ, BK], dtype=tl.float32)
    c_src = state_source(c_ptr, bh * NC + chunk, DQK, DV, TMA)
    for dv in range(0, DV, BV):
        dh_tile = load_token_tile(dh_src, stride_dh_t, q_start, dv, DV, BLQ, BV, TMA)
        c_tile = load_state_tile(c_src, col_k, dv, DQK, DV, BK, BV, TMA)
        dq_inter += tl.dot(dh_tile, tl.trans(c_tile.to(dh_tile.dtype)))
    dq += dq_inter * (q_gate * inv_denom * qk_scale)[:, None]

    q_src = token_source(q_ptr, stride_q_b, stride_q_h, batch, head, T, DQK, TMA)
    q_tile = load_token_tile(q_src, stride_q_t, q_start, col_k, DQK, BLQ, BK, TMA)
    num_bh = tl.num_programs(0) // (tiles_0 * tiles_1 * NC)
    tl.store(qdq_ptr + (pid_k * num_bh + bh) * T + t_q, tl.sum(q_tile.to(tl.float32) * dq, 1))
    dq_dst = token_source(dq_ptr, stride_q_b, stride_q_h, batch, head, T, DQK, TMA)
    store_token_tile(dq_dst, dq, stride_q_t, q_start, col_k, DQK, BLQ, BK, TMA)


@chunk_kernel
def chunk_dk_kernel(
    q_ptr, k_ptr, v_ptr, dh_ptr, b_ptr, ig_ptr, m_ptr, m_comb_ptr, denom_ptr, dc_ptr,
    dk_ptr, kdk_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    T, H, NC, qk_scale, tiles_0, tiles_1,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, TMA: tl.constexpr,
):
    """Grid `chunk_program` over (DQK/BK, L/BLKV). Writes dk [B, T, H, DQK] (layout of k) and
    kdk [DQK/BK, B*H, T]. TMA: as `chunk_dq_kernel`'s (the state gradients for the states)."""
    pid_k, pid_kv, bh, chunk, batch, head = chunk_program(NC, H, tiles_0, tiles_1)
    offs_kv = pid_kv * BLKV + tl.arange(0, BLKV)
    offs_lq = tl.arange(0, BLQ)
    kv_start = chunk * L + pid_kv * BLKV
    t_kv = kv_start + tl.arange(0, BLKV)
    col_k = pid_k * BK
    q_src = token_source(q_ptr, stride_q_b, stride_q_h, batch, head, T, DQK, TMA)
    v_src = token_source(v_ptr, stride_v_b, stride_v_h, batch, head, T, DV, TMA)
    dh_src = token_source(dh_ptr, stride_dh_b, stride_dh_h, batch, head, T, DV, TMA)
    b_kv, ig_kv, k_gate = _key_gates(b_ptr, ig_ptr, m_ptr, bh, T, NC, chunk, t_kv, L, STABILIZE)

    dk = tl.zeros([BLKV, BK], dtype=tl.float32)
    first_q_tile = pid_kv * BLKV // BLQ
    for q_tile_idx in range(first_q_tile, L // BLQ):
        q_start = chunk * L + q_tile_idx * BLQ
        t_q = q_start + offs_lq
        b_q, _, m_comb, inv_denom = _row_gates(
            b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t_q, STABILIZE, NORMALIZE, BLQ)
        dscores_t = tl.zeros([BLKV, BLQ], dtype=tl.float32)
        for dv in range(0, DV, BV):
            v_tile = load_token_tile(v_src, stride_v_t, kv_start, dv, DV, BLKV, BV, TMA)
            dh_tile = load_token_tile(dh_src, stride_dh_t, q_start, dv, DV, BLQ, BV, TMA)
            dscores_t += tl.dot(v_tile, tl.trans(dh_tile))
        q_rows = q_tile_idx * BLQ + offs_lq
        dscores_t *= _transposed_gate(b_q, m_comb, inv_denom, b_kv, ig_kv, q_rows, offs_kv, qk_scale)
        q_tile = load_token_tile(q_src, stride_q_t, q_start, col_k, DQK, BLQ, BK, TMA)
        dk += tl.dot(dscores_t.to(q_tile.dtype), q_tile)

    dk_inter = tl.zeros([BLKV, BK], dtype=tl.float32)
    dc_src = state_source(dc_ptr, bh * NC + chunk, DQK, DV, TMA)
    for dv in range(0, DV, BV):
        v_tile = load_token_tile(v_src, stride_v_t, kv_start, dv, DV, BLKV, BV, TMA)
        dc_tile = load_state_tile(dc_src, col_k, dv, DQK, DV, BK, BV, TMA)
        dk_inter += tl.dot(v_tile, tl.trans(dc_tile.to(v_tile.dtype)))
    dk += dk_inter * k_gate[:, None]

    k_src = token_source(k_ptr, stride_k_b, stride_k_h, batch, head, T, DQK, TMA)
    k_tile = load_token_tile(k_src, stride_k_t, kv_start, col_k, DQK, BLKV, BK, TMA)
    num_bh = tl.num_programs(0) // (tiles_0 * tiles_1 * NC)
    tl.store(kdk_ptr + (pid_k * num_bh + bh) * T + t_kv, tl.sum(k_tile.to(tl.float32) * dk, 1))
    dk_dst = token_source(dk_ptr, stride_k_b, stride_k_h, batch, head, T, DQK, TMA)
    store_token_tile(dk_dst, dk, stride_k_t, kv_start, col_k, DQK, BLKV, BK, TMA)


@chunk_kernel
def chunk_dv_kernel(
    q_ptr, k_ptr, dh_ptr, b_ptr, ig_ptr, m_ptr, m_comb_ptr, denom_ptr, dc_ptr,
    dv_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    stride_dv_b, stride_dv_t, stride_dv_h,
    T, H, NC, qk_scale, tiles_0, tiles_1,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, TMA: tl.constexpr,
):
    """Grid `chunk_program` over (DV/BV, L/BLKV). Writes dv [B, T, H, DV] (layout of v). TMA: as
    `chunk_dk_kernel`'s."""
    pid_v, pid_kv, bh, chunk, batch, head = chunk_program(NC, H, tiles_0, tiles_1)
    offs_kv = pid_kv * BLKV + tl.arange(0, BLKV)
    offs_lq = tl.arange(0, BLQ)
    kv_start = chunk * L + pid_kv * BLKV
    t_kv = kv_start + tl.arange(0, BLKV)
    col_v = pid_v * BV
    q_src = token_source(q_ptr, stride_q_b, stride_q_h, batch, head, T, DQK, TMA)
    k_src = token_source(k_ptr, stride_k_b, stride_k_h, batch, head, T, DQK, TMA)
    dh_src = token_source(dh_ptr, stride_dh_b, stride_dh_h, batch, head, T, DV, TMA)
    b_kv, ig_kv, k_gate = _key_gates(b_ptr, ig_ptr, m_ptr, bh, T, NC, chunk, t_kv, L, STABILIZE)

    dv = tl.zeros([BLKV, BV], dtype=tl.float32)
    first_q_tile = pid_kv * BLKV // BLQ
    for q_tile_idx in range(first_q_tile, L // BLQ):
        q_start = chunk * L + q_tile_idx * BLQ
        t_q = q_start + offs_lq
        b_q, _, m_comb, inv_denom = _row_gates(
            b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t_q, STABILIZE, NORMALIZE, BLQ)
        scores_t = tl.zeros([BLKV, BLQ], dtype=tl.float32)
        for dk in range(0, DQK, BK):
            k_tile = load_token_tile(k_src, stride_k_t, kv_start, dk, DQK, BLKV, BK, TMA)
            q_tile = load_token_tile(q_src, stride_q_t, q_start, dk, DQK, BLQ, BK, TMA)
            scores_t += tl.dot(k_tile, tl.trans(q_tile))
        q_rows = q_tile_idx * BLQ + offs_lq
        scores_t *= _transposed_gate(b_q, m_comb, inv_denom, b_kv, ig_kv, q_rows, offs_kv, qk_scale)
        dh_tile = load_token_tile(dh_src, stride_dh_t, q_start, col_v, DV, BLQ, BV, TMA)
        dv += tl.dot(scores_t.to(dh_tile.dtype), dh_tile)

    dc_src = state_source(dc_ptr, bh * NC + chunk, DQK, DV, TMA)
    for dk in range(0, DQK, BK):
        k_tile = load_token_tile(k_src, stride_k_t, kv_start, dk, DQK, BLKV, BK, TMA)
        k_gated = k_tile.to(tl.float32) * k_gate[:, None]
        dc_tile = load_state_tile(dc_src, dk, col_v, DQK, DV, BK, BV, TMA)
        dv += tl.dot(k_gated.to(k_tile.dtype), dc_tile.to(k_tile.dtype))

    dv_dst = token_source(dv_ptr, stride_dv_b, stride_dv_h, batch, head, T, DV, TMA)
    store_token_tile(dv_dst, dv, stride_dv_t, kv_start, col_v, DV, BLKV, BV, TMA)


@chunk_kernel
def chunk_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, dh_ptr, b_ptr, ig_ptr, m_ptr, m_comb_ptr, denom_ptr, dc_ptr,
    dk_ptr, dv_ptr, kdk_ptr, dq_ptr, qdq_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_dh_b, stride_dh_t, stride_dh_h,
    T, H, NC, qk_scale, tiles_0, tiles_1,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, WITH_DQ: tl.constexpr,
):
    """dK and dV of one key/value tile in one program (whole head dims, both powers of two).

    Grid `chunk_program` over (L/BLKV, 1). The key tile, value tile and the state gradient stay on chip
    while the program walks the query tiles at and after the diagonal, so the scores K Q^T and V dHt^T are
    computed once for both gradients (the split kernels compute each twice). Writes dk, dv (layouts of k,
    v) and kdk [1, B*H, T].

    WITH_DQ (a chunk of one tile, L = BLQ = BLKV): also dQ, its intra-chunk part (V dHt^T * D^T)^T K from
    the same scores added to the inter-chunk part that `chunk_states_dq_kernel` wrote into dq (layout of
    q), and qdq [1, B*H, T]; q, k, v and dh are then read once for all three gradients.
    """
    pid_kv, _single_tile, bh, chunk, batch, head = chunk_program(NC, H, tiles_0, tiles_1)
    offs_kv = pid_kv * BLKV + tl.arange(0, BLKV)
    offs_lq = tl.arange(0, BLQ)
    offs_qk = tl.arange(0, DQK)
    offs_v = tl.arange(0, DV)
    t_kv = chunk * L + offs_kv
    q_base = q_ptr + batch * stride_q_b + head * stride_q_h
    dh_base = dh_ptr + batch * stride_dh_b + head * stride_dh_h
    k_tile = tl.load(k_ptr + batch * stride_k_b + head * stride_k_h
                     + t_kv[:, None] * stride_k_t + offs_qk[None, :])
    v_tile = tl.load(v_ptr + batch * stride_v_b + head * stride_v_h
                     + t_kv[:, None] * stride_v_t + offs_v[None, :])
    b_kv, ig_kv, k_gate = _key_gates(b_ptr, ig_ptr, m_ptr, bh, T, NC, chunk, t_kv, L, STABILIZE)

    dc_tile = tl.load(dc_ptr + (bh * NC + chunk) * DQK * DV + offs_qk[:, None] * DV + offs_v[None, :])
    dk = tl.dot(v_tile, tl.trans(dc_tile.to(v_tile.dtype))) * k_gate[:, None]
    k_gated = (k_tile.to(tl.float32) * k_gate[:, None]).to(k_tile.dtype)
    dv = tl.dot(k_gated, dc_tile.to(k_tile.dtype))

    first_q_tile = pid_kv * BLKV // BLQ
    for q_tile_idx in range(first_q_tile, L // BLQ):
        t_q = chunk * L + q_tile_idx * BLQ + offs_lq
        b_q, _, m_comb, inv_denom = _row_gates(
            b_ptr, m_comb_ptr, m_ptr, denom_ptr, bh, T, NC, chunk, t_q, STABILIZE, NORMALIZE, BLQ)
        q_tile = tl.load(q_base + t_q[:, None] * stride_q_t + offs_qk[None, :])
        dh_tile = tl.load(dh_base + t_q[:, None] * stride_dh_t + offs_v[None, :])
        q_rows = q_tile_idx * BLQ + offs_lq
        gate_t = _transposed_gate(b_q, m_comb, inv_denom, b_kv, ig_kv, q_rows, offs_kv, qk_scale)
        scores_t = tl.dot(k_tile, tl.trans(q_tile)) * gate_t
        dv += tl.dot(scores_t.to(dh_tile.dtype), dh_tile)
        dscores_t = tl.dot(v_tile, tl.trans(dh_tile)) * gate_t
        dk += tl.dot(dscores_t.to(q_tile.dtype), q_tile)
        if WITH_DQ:
            dq_ptrs = (dq_ptr + batch * stride_q_b + head * stride_q_h
                       + t_q[:, None] * stride_q_t + offs_qk[None, :])
            dq = tl.load(dq_ptrs).to(tl.float32) + tl.dot(tl.trans(dscores_t.to(k_tile.dtype)), k_tile)
            tl.store(qdq_ptr + bh * T + t_q, tl.sum(q_tile.to(tl.float32) * dq, 1))
            tl.store(dq_ptrs, dq.to(dq_ptr.dtype.element_ty))

    tl.store(kdk_ptr + bh * T + t_kv, tl.sum(k_tile.to(tl.float32) * dk, 1))
    tl.store(dk_ptr + batch * stride_k_b + head * stride_k_h + t_kv[:, None] * stride_k_t + offs_qk[None, :],
             dk.to(dk_ptr.dtype.element_ty))
    tl.store(dv_ptr + batch * stride_v_b + head * stride_v_h + t_kv[:, None] * stride_v_t + offs_v[None, :],
             dv.to(dv_ptr.dtype.element_ty))


@triton.jit
def _row_sum_of_blocks(ptr, blocks: tl.constexpr, BH, bh, T, t, mask):
    """sum over the Dqk blocks of a [blocks, B*H, T] fp32 row-sum tensor, at tokens t of row bh."""
    total = tl.load(ptr + bh * T + t, mask=mask, other=0.0)
    for block in tl.static_range(1, blocks):
        total += tl.load(ptr + (block * BH + bh) * T + t, mask=mask, other=0.0)
    return total


@triton.jit
def gate_grads_kernel(
    qdq_ptr, kdk_ptr, i_ptr, f_ptr, final_ptr, di_ptr, df_ptr,
    stride_g_b, stride_g_t, stride_g_h,
    BH, T, H,
    Q_BLOCKS: tl.constexpr, K_BLOCKS: tl.constexpr, BT: tl.constexpr, SEGMENT: tl.constexpr,
    SUM_BT: tl.constexpr, SIG: tl.constexpr, HAS_FINAL: tl.constexpr,
):
    """Grid (B*H, cdiv(T, SEGMENT)): the gate gradients of one segment of SEGMENT tokens of one (batch, head)
    row: df_t = (sum_{s>=t} (q.dq - k.dk)_s + <C_T, dC_T>) sigmoid(-f_t), di_t = (k.dk)_t (mLSTMsig: times
    sigmoid(-i_t)), `launch.gate_grads` in one launch. Each program sums the differences after its segment
    (independent loads of SUM_BT tokens), then walks its segment from the end in blocks of BT with the running
    suffix sum; segments keep a long row's walk from running on one SM while the others idle.

    qdq [Q_BLOCKS, B*H, T], kdk [K_BLOCKS, B*H, T] fp32 (the dQ and dK kernels' row sums per Dqk block);
    i, f, di, df [B, T, H] with the strides given (the same layout for all four); final [B*H] fp32,
    <C_T, dC_T> (read when HAS_FINAL)."""
    bh = tl.program_id(0).to(tl.int64)
    start = tl.program_id(1) * SEGMENT
    end = tl.minimum(start + SEGMENT, T)
    gate_base = (bh // H) * stride_g_b + (bh % H) * stride_g_h
    later = tl.zeros([SUM_BT], dtype=tl.float32)
    sum_offs = tl.arange(0, SUM_BT)
    for block_start in range(end, T, SUM_BT):
        t = block_start + sum_offs
        mask = t < T
        later += (_row_sum_of_blocks(qdq_ptr, Q_BLOCKS, BH, bh, T, t, mask)
                  - _row_sum_of_blocks(kdk_ptr, K_BLOCKS, BH, bh, T, t, mask))
    carry = tl.sum(later, 0)
    if HAS_FINAL:
        carry += tl.load(final_ptr + bh)
    offs = tl.arange(0, BT)
    for block in range(0, tl.cdiv(end - start, BT)):
        t = end - (block + 1) * BT + offs
        mask = t >= start
        k_dk = _row_sum_of_blocks(kdk_ptr, K_BLOCKS, BH, bh, T, t, mask)
        difference = _row_sum_of_blocks(qdq_ptr, Q_BLOCKS, BH, bh, T, t, mask) - k_dk
        suffix = tl.cumsum(difference, 0, reverse=True) + carry
        carry += tl.sum(difference, 0)
        gate_offs = gate_base + t * stride_g_t
        f = tl.load(f_ptr + gate_offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(df_ptr + gate_offs, (suffix * tl.sigmoid(-f)).to(df_ptr.dtype.element_ty), mask=mask)
        if SIG:
            i = tl.load(i_ptr + gate_offs, mask=mask, other=0.0).to(tl.float32)
            k_dk = k_dk * tl.sigmoid(-i)
        tl.store(di_ptr + gate_offs, k_dk.to(di_ptr.dtype.element_ty), mask=mask)
