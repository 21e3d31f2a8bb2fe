"""The chained TFLA forward: chunk states passed from program to program instead of through HBM.

`triton_fwd`'s two launches move the chunk states through HBM: the state recurrence reads k and v and
writes every state, the output kernel reads q, k, v and every state again. `chunk_chained_kernel` does both
in one launch, one program per (chunk, batch x head, value block). A program computes its chunk's outputs
from the state before the chunk, C_{k-1}, then C_k = decay C_{k-1} + sum_t w_t k_t v_t^T from the k and v
tiles it has just read (L2 hits), and hands C_k to the program of the next chunk through a two-slot fp32
ring in global memory (L2-resident) and a per-chain counter: q, k and v are read from HBM once, and the
states do not go to HBM unless the backward keeps them.

Order and progress: each program takes a ticket (an atomic counter) and works on the ticket's
(chunk, batch x head, value block), chunk-major, so the program it waits for holds a smaller ticket: it has
started, and nothing it waits on waits on a later program. A program waits until its chain's counter
reaches its chunk (acquire), reads C_{k-1} past L1 (``.cg``: an earlier program on the same SM may have
cached the slot), and after writing C_k into the other slot publishes it (a CTA barrier, then a release).
Two slots suffice: C_{k+1} overwrites C_{k-1}, which the only program that reads it (chunk k) finished
reading before it published C_k. The programs of a chunk cover all its query tiles (one reader per state).
"""

import triton
import triton.language as tl

from tflabench.kernels.mlstm.triton_fwd import (
    _chunk_output_tile,
    add_chunk_to_state,
    chunk_decay,
    load_state,
    load_state_tile,
    load_vector,
    state_source,
    store_state,
    store_vector,
    token_source,
)


@triton.jit
def _wait_for_state(published_ptr, chunk):
    """Spin until the chain's counter (states published) reaches ``chunk``: C_{chunk-1} is in its slot."""
    published = tl.atomic_add(published_ptr, 0, sem="acquire")
    while published < chunk:
        published = tl.atomic_add(published_ptr, 0, sem="acquire")


@triton.jit
def chunk_chained_kernel(
    q_ptr, k_ptr, v_ptr, b_ptr, ig_ptr, g_ptr, a_ptr,
    ring_c_ptr, ring_n_ptr, ring_m_ptr, counters_ptr,
    c_ptr, maxes_ptr, c_last_ptr, n_last_ptr,
    h_ptr, denom_ptr, m_comb_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_h_b, stride_h_t, stride_h_h,
    T, H, NC, BH, qk_scale, eps,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    BL: tl.constexpr, BKS: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, PREFIX_MAX: tl.constexpr, TMA: tl.constexpr,
    STORE_STATES: tl.constexpr,
):
    """Grid (NC * B*H * NV,), NV = Dv/BV value blocks; one chain per (batch x head, value block).

    ring_c [B*H, 2, DQK, DV], ring_n [B*H*NV, 2, DQK], ring_m [B*H*NV, 2] fp32: slot 0 holds the initial
    state (C_0, n_0, m_0) on entry. counters [1 + B*H*NV] int32, zeros on entry: the ticket counter, then
    per chain the number of states published. Writes h, denom and m_comb as `chunk_outputs_kernel`, maxes
    [B*H, NC+1] (m_k; mLSTMexp), c_last [B*H, DQK, DV] and n_last [B*H, DQK] fp32, and with STORE_STATES
    the states before each chunk into c [B*H, NC, DQK, DV] (in its dtype) for the backward. The state update
    runs in [BKS, BV] tiles over sub-chunks of BL tokens (`add_chunk_to_state`).
    """
    NV: tl.constexpr = (DV + BV - 1) // BV
    ticket = tl.atomic_add(counters_ptr, 1).to(tl.int64)
    chunk = ticket // (BH * NV)
    chain = ticket % (BH * NV)
    bh = chain // NV
    pid_v = chain % NV
    batch = bh // H
    head = bh % H
    slot = chunk % 2
    _wait_for_state(counters_ptr + 1 + chain, chunk)

    m_prev = 0.0
    if STABILIZE:
        m_prev = tl.load(ring_m_ptr + chain * 2 + slot, cache_modifier=".cg")
        if pid_v == 0:
            tl.store(maxes_ptr + bh * (NC + 1) + chunk, m_prev)
    q_src = token_source(q_ptr, stride_q_b, stride_q_h, batch, head, T, DQK, TMA)
    k_src = token_source(k_ptr, stride_k_b, stride_k_h, batch, head, T, DQK, TMA)
    v_src = token_source(v_ptr, stride_v_b, stride_v_h, batch, head, T, DV, TMA)
    h_dst = token_source(h_ptr, stride_h_b, stride_h_h, batch, head, T, DV, TMA)
    c_src = state_source(ring_c_ptr, bh * 2 + slot, DQK, DV, False)
    n_prev = ring_n_ptr + (chain * 2 + slot) * DQK
    c_first = load_state_tile(c_src, 0, pid_v * BV, DQK, DV, BK, BV, False, True)
    for q_tile in tl.static_range(L // BLQ):
        _chunk_output_tile(
            q_src, k_src, v_src, h_dst, c_src, c_first, b_ptr, ig_ptr, g_ptr, n_prev, m_prev, denom_ptr,
            m_comb_ptr, stride_q_t, stride_k_t, stride_v_t, stride_h_t,
            T, qk_scale, eps, pid_v, q_tile, bh, chunk,
            DQK, DV, L, BLQ, BLKV, BK, BV, STABILIZE, NORMALIZE, PREFIX_MAX, TMA, False, True,
        )

    decay, state_scale, m_next = chunk_decay(b_ptr, a_ptr, bh, T, NC, chunk, m_prev, L, STABILIZE)
    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    v_base = v_ptr + batch * stride_v_b + head * stride_v_h
    offs_v = pid_v * BV + tl.arange(0, BV)
    last = chunk == NC - 1
    for dk in range(0, DQK, BKS):
        offs_k = dk + tl.arange(0, BKS)
        tile_offs = offs_k[:, None] * DV + offs_v[None, :]
        state = load_state(ring_c_ptr + (bh * 2 + slot) * DQK * DV + tile_offs, offs_k, offs_v,
                           DQK, BKS, DV, BV, True)
        if STORE_STATES:
            store_state(c_ptr + (bh * NC + chunk) * DQK * DV + tile_offs, state.to(c_ptr.dtype.element_ty),
                        offs_k, offs_v, DQK, BKS, DV, BV)
        norm_cols = tl.zeros([BKS, 16], dtype=tl.float32)
        if NORMALIZE:
            norm = load_vector(n_prev + offs_k, offs_k, DQK, BKS, True)
            norm_cols = tl.broadcast_to(norm[:, None], (BKS, 16)) * state_scale
        state, norm_cols = add_chunk_to_state(
            state * state_scale, norm_cols, k_base, v_base, b_ptr, ig_ptr, bh, T, chunk, decay, m_next,
            offs_k, offs_v, stride_k_t, stride_v_t, DQK, DV, BKS, BV, L, BL, STABILIZE, NORMALIZE)
        store_state(ring_c_ptr + (bh * 2 + 1 - slot) * DQK * DV + tile_offs, state, offs_k, offs_v,
                    DQK, BKS, DV, BV)
        if NORMALIZE:
            store_vector(ring_n_ptr + (chain * 2 + 1 - slot) * DQK + offs_k, tl.max(norm_cols, 1), offs_k,
                         DQK, BKS)
        if last:
            store_state(c_last_ptr + bh * DQK * DV + tile_offs, state, offs_k, offs_v, DQK, BKS, DV, BV)
            if NORMALIZE and pid_v == 0:
                store_vector(n_last_ptr + bh * DQK + offs_k, tl.max(norm_cols, 1), offs_k, DQK, BKS)
    if STABILIZE:
        tl.store(ring_m_ptr + chain * 2 + 1 - slot, m_next)
        if last and pid_v == 0:
            tl.store(maxes_ptr + bh * (NC + 1) + NC, m_next)
    tl.debug_barrier()
    tl.atomic_xchg(counters_ptr + 1 + chain, chunk + 1, sem="release")
