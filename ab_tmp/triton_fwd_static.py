"""TFLA forward kernels for the mLSTM (mLSTMexp and mLSTMsig), in Triton.

Three launches per forward pass (docs/reference/mlstm-math.md#chunkwise-form, #tiling):

1. `gate_cumsum_kernel`: log gates. b[t] = inclusive cumsum of log sigmoid(f) from the start of t's chunk,
   ig[t] = log input gate (i for mLSTMexp, log sigmoid(i) for mLSTMsig). Both fp32, head-first [B*H, T].
   For mLSTMexp also each chunk's largest log weight a_k = max_t (b[L-1] - b[t] + ig[t]), so that the max
   state m_{k+1} = max(b[L-1] + m_k, a_k) costs the state recurrence a scalar max, not a row reduction.
2. `chunk_states_kernel` (level 1 of sequence parallelism): the recurrence over chunks that materializes
   the stabilized states C_k [B*H, NC, Dqk, Dv] (and n_k, m_k). Grid (Dqk/BK, Dv/BV, B*H); each program
   walks the sequence chunk by chunk, in sub-chunks of BL tokens, and stores one state per chunk.
3. `chunk_outputs_kernel` (level 2): every chunk in parallel, and inside a chunk every (query tile, value
   tile) pair in parallel. Grid (Dv/BV, L/(BLQ*Q_TILES)) per chunk (1-D, `chunk_program`); a program
   takes Q_TILES query tiles one after the other. Each starts from the inter-chunk part Qbar C_{k-1},
   then loops over the key/value tiles up to the diagonal (tiles of BLKV)
   and over Dqk (tiles of BK), with FlashAttention-style rescaling for mLSTMexp (Algorithm 1, corrected
   as in §6.6, with the two Dqk loops fused: see the kernel's docstring).

Token-major tensors (q, k, v, h, gates) keep the public layout [B, T, H, D] and are addressed through
strides, so no transpose is needed. Head-dim blocks need not divide the head dims: every head-dim load and
store goes through `load_cols` / `store_cols` / `load_state` / `store_state` / `load_vector` /
`store_vector`, which mask the columns past the head dim where a block does not divide it (grids by cdiv;
"Dqk/BK" below). Indices: c is the 0-based chunk, states[c] is the state *before*
chunk c (states[0] = initial state); the final state is written separately in fp32.
"""

import triton
import triton.language as tl


@triton.jit
def chunk_program(NC, H, tiles_0, tiles_1):
    """(pid0, pid1, bh, chunk, batch, head) of a program of the 1-D grid of tiles_0 * tiles_1 * NC * B * H
    programs over (tiles_0 tile blocks, tiles_1 tile blocks, chunks, B * H), the first fastest: the program
    order of a 3-D grid (tiles_0, tiles_1, NC * B * H), without the 65,535 limit of its last axis (reached at
    NC * B * H = 128 * 512).

    The tile counts are runtime arguments that the kernels exclude from specialization (`chunk_kernel`), so
    the tile indices stay runtime values, as the 3-D grid's program ids were: with the counts as constexprs,
    a count of 1 made them compile-time zeros, and Triton 3.6 compiled the output kernel at Dqk 64 / Dv 32,
    L 64 into one that reads shared memory out of bounds (compute-sanitizer memcheck on an H200,
    results/perf-log.md).
    The tile indices are int32; the chunk and B * H indices, which scale base pointers, int64."""
    pid = tl.program_id(0)
    pid_cbh = (pid // (tiles_0 * tiles_1)).to(tl.int64)
    bh = pid_cbh // NC
    return pid % tiles_0, (pid // tiles_0) % tiles_1, bh, pid_cbh % NC, bh // H, bh % H


#: decorator of the kernels whose grid `chunk_program` decodes
chunk_kernel = triton.jit(do_not_specialize=["tiles_0", "tiles_1"])


@triton.jit
def _log_sigmoid(x):
    """log(sigmoid(x)) = min(x, 0) - log(1 + exp(-|x|)), stable for both signs."""
    return tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))


@triton.jit
def _maximum(a, b):
    """Combine function of a running max (`tl.associative_scan`)."""
    return tl.maximum(a, b)


@triton.jit
def _last(x, N: tl.constexpr):
    """The last element of a [N] vector, as a scalar (exactly: a sum of it and zeros)."""
    return tl.sum(tl.where(tl.arange(0, N) == N - 1, x, 0.0), 0)


@triton.jit
def normalize_rows(h_acc, n_acc, m_comb, eps, STABILIZE: tl.constexpr):
    """(h_acc / denom, denom) with each row's denominator max(|n|, exp(-m_comb)) + eps (mLSTMexp;
    mLSTMsig: max(|n|, 1) + eps, m_comb unused): the output kernel's and the fused forward's.
    h_acc [R, BV], n_acc and m_comb [R] fp32."""
    if STABILIZE:
        denom = tl.maximum(tl.abs(n_acc), tl.exp(-m_comb)) + eps
    else:
        denom = tl.maximum(tl.abs(n_acc), 1.0) + eps
    return h_acc / denom[:, None], denom


@triton.jit
def load_cols(ptrs, cols, D: tl.constexpr, BD: tl.constexpr):
    """tl.load of a [rows, BD] tile whose columns ``cols`` [BD] are a block of a head dim of D. Where BD
    does not divide D (the masked blocks of `xl_chunk.head_dim_block`), the columns past D read as zeros;
    the mask is compiled only then."""
    if D % BD == 0:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=(cols < D)[None, :], other=0.0)
    return tile


@triton.jit
def store_cols(ptrs, value, cols, D: tl.constexpr, BD: tl.constexpr):
    """tl.store of a [rows, BD] tile, its columns ``cols`` past the head dim D left out (`load_cols`)."""
    if D % BD == 0:
        tl.store(ptrs, value)
    else:
        tl.store(ptrs, value, mask=(cols < D)[None, :])


@triton.jit
def load_state(ptrs, rows, cols, DQK: tl.constexpr, BK: tl.constexpr, DV: tl.constexpr, BV: tl.constexpr):
    """tl.load of a [BK, BV] state tile, rows ``rows`` of the Dqk head dim and columns ``cols`` of the Dv
    one; as `load_cols` on both axes."""
    if DQK % BK == 0 and DV % BV == 0:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=(rows < DQK)[:, None] & (cols < DV)[None, :], other=0.0)
    return tile


@triton.jit
def store_state(ptrs, value, rows, cols, DQK: tl.constexpr, BK: tl.constexpr, DV: tl.constexpr,
                BV: tl.constexpr):
    """tl.store of a [BK, BV] state tile (`load_state`)."""
    if DQK % BK == 0 and DV % BV == 0:
        tl.store(ptrs, value)
    else:
        tl.store(ptrs, value, mask=(rows < DQK)[:, None] & (cols < DV)[None, :])


@triton.jit
def token_source(x, stride_b, stride_h, batch, head, T, D: tl.constexpr, TMA: tl.constexpr):
    """(source, row0, col0) of one (batch, head) of a token-major tensor x [B, T, H, D] for `load_token_tile`
    / `store_token_tile`: with TMA, x is a tensor descriptor of its [B*T, H*D] matrix (Hopper's bulk copies,
    `xl_chunk._token_descriptor`) and the (batch, head) block starts at row batch*T, column head*D; else the
    (batch, head) base pointer, at (0, 0)."""
    if TMA:
        source = x
        row0 = (batch * T).to(tl.int32)
        col0 = (head * D).to(tl.int32)
    else:
        source = x + batch * stride_b + head * stride_h
        row0 = 0
        col0 = 0
    return source, row0, col0


@triton.jit
def load_token_tile(src, stride_t, t0, col, D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
                    TMA: tl.constexpr):
    """The [BT, BD] tile at tokens t0.. and columns col.. of a (batch, head) (src: its `token_source`)."""
    source, row0, col0 = src
    if TMA:
        tile = source.load([row0 + t0.to(tl.int32), col0 + col])
    else:
        rows = t0 + tl.arange(0, BT)
        cols = col + tl.arange(0, BD)
        tile = load_cols(source + rows[:, None] * stride_t + cols[None, :], cols, D, BD)
    return tile


@triton.jit
def store_token_tile(src, value, stride_t, t0, col, D: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
                     TMA: tl.constexpr):
    """Store a [BT, BD] tile, cast to the tensor's dtype, at tokens t0.. and columns col.. of a (batch,
    head) (src: its `token_source`)."""
    source, row0, col0 = src
    if TMA:
        source.store([row0 + t0.to(tl.int32), col0 + col], value.to(source.dtype))
    else:
        rows = t0 + tl.arange(0, BT)
        cols = col + tl.arange(0, BD)
        store_cols(source + rows[:, None] * stride_t + cols[None, :], value.to(source.dtype.element_ty), cols,
                   D, BD)


@triton.jit
def state_source(c_ptr, state, DQK: tl.constexpr, DV: tl.constexpr, TMA: tl.constexpr):
    """(source, row0) of state ``state`` of chunk states [B*H*NC, DQK, DV] for `load_state_tile`: with TMA,
    c_ptr is a tensor descriptor of their [B*H*NC*DQK, DV] matrix and the state starts at row state*DQK;
    else the state's base pointer, at row 0."""
    if TMA:
        source = c_ptr
        row0 = (state * DQK).to(tl.int32)
    else:
        source = c_ptr + state * DQK * DV
        row0 = 0
    return source, row0


@triton.jit
def load_state_tile(src, row, col, DQK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                    TMA: tl.constexpr):
    """The [BK, BV] tile at rows row.. and columns col.. of a chunk's state [DQK, DV] (src: its
    `state_source`)."""
    source, row0 = src
    if TMA:
        tile = source.load([row0 + row, col])
    else:
        rows = row + tl.arange(0, BK)
        cols = col + tl.arange(0, BV)
        tile = load_state(source + rows[:, None] * DV + cols[None, :], rows, cols, DQK, BK, DV, BV)
    return tile


@triton.jit
def load_vector(ptrs, offs, D: tl.constexpr, BD: tl.constexpr):
    """tl.load of a [BD] block of a vector over a head dim of D (`load_cols`)."""
    if D % BD == 0:
        vector = tl.load(ptrs)
    else:
        vector = tl.load(ptrs, mask=offs < D, other=0.0)
    return vector


@triton.jit
def store_vector(ptrs, value, offs, D: tl.constexpr, BD: tl.constexpr):
    """tl.store of a [BD] block of a vector over a head dim of D (`load_cols`)."""
    if D % BD == 0:
        tl.store(ptrs, value)
    else:
        tl.store(ptrs, value, mask=offs < D)


@triton.jit
def gate_cumsum_kernel(
    i_ptr, f_ptr, b_ptr, ig_ptr, g_ptr, a_ptr,
    stride_gate_b, stride_gate_t, stride_gate_h,
    T, H,
    L: tl.constexpr, BL: tl.constexpr, SIG_INPUT_GATE: tl.constexpr, PREFIX_MAX: tl.constexpr,
    CHUNK_MAX: tl.constexpr,
):
    """Grid (NC, B*H). i, f: [B, T, H] pre-activations. b, ig: [B*H, T] fp32 outputs. With PREFIX_MAX also
    g [B*H, T] fp32: g[t] = max of ig[s] - b[s] over the tokens s <= t of t's chunk, the intra-chunk part
    of mLSTMexp's stabilizer, m_comb[t] = b[t] + max(m_{k-1}, g[t]) (a running max over [BL] vectors, so
    the output kernel needs no row max of an [L, L] gate and no rescaling). With CHUNK_MAX also a [B*H, NC]
    fp32: a_k = max_t (b[L-1] - b[t] + ig[t]) over chunk k, the largest log weight of the chunk's update
    of the state; rounded as the fused forward rounds it where the chunk is one block (L == BL), else as
    b[L-1] + max_t (ig[t] - b[t])."""
    chunk = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    batch = bh // H
    head = bh % H
    gate_base = batch * stride_gate_b + head * stride_gate_h
    carry = 0.0
    prefix_max = float("-inf")
    largest = float("-inf")
    for start in range(0, L, BL):
        t = chunk * L + start + tl.arange(0, BL)
        f = tl.load(f_ptr + gate_base + t * stride_gate_t).to(tl.float32)
        log_f = _log_sigmoid(f)
        b = tl.cumsum(log_f, 0) + carry
        tl.store(b_ptr + bh * T + t, b)
        carry += tl.sum(log_f, 0)
        i = tl.load(i_ptr + gate_base + t * stride_gate_t).to(tl.float32)
        if SIG_INPUT_GATE:
            i = _log_sigmoid(i)
        tl.store(ig_ptr + bh * T + t, i)
        if PREFIX_MAX:
            g = tl.maximum(tl.associative_scan(i - b, 0, _maximum), prefix_max)
            tl.store(g_ptr + bh * T + t, g)
            prefix_max = tl.max(g, 0)
        elif CHUNK_MAX:
            prefix_max = tl.maximum(prefix_max, tl.max(i - b, 0))
        if CHUNK_MAX:
            b_end = _last(b, BL)
            if L == BL:
                largest = tl.max(b_end - b + i, 0)
            else:
                largest = b_end + prefix_max
    if CHUNK_MAX:
        tl.store(a_ptr + bh * (T // L) + chunk, largest)


@triton.jit
def chunk_decay(b_ptr, a_ptr, bh, T, NC, chunk, m_state, L: tl.constexpr, STABILIZE: tl.constexpr):
    """(decay, state_scale, m_next) of chunk ``chunk`` for a state with max m_state: its log decay b[L-1],
    the factor exp(b[L-1] + m_k - m_{k+1}) of the state before it and the max state after it,
    m_{k+1} = max(b[L-1] + m_k, a_k) (mLSTMexp; mLSTMsig: exp(b[L-1]) and m_state unchanged)."""
    decay = tl.load(b_ptr + bh * T + chunk * L + L - 1)
    if STABILIZE:
        m_next = tl.maximum(decay + m_state, tl.load(a_ptr + bh * NC + chunk))
        return decay, tl.exp(decay + m_state - m_next), m_next
    return decay, tl.exp(decay), m_state


@triton.jit
def add_chunk_to_state(state, norm_cols, k_base, v_base, b_ptr, ig_ptr, bh, T, chunk, decay, m_next,
                       offs_k, offs_v, stride_k_t, stride_v_t,
                       DQK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
                       L: tl.constexpr, BL: tl.constexpr, STABILIZE: tl.constexpr, TRACK_N: tl.constexpr):
    """(state, norm_cols) plus chunk ``chunk``'s update, in sub-chunks of BL tokens: sum_t w_t k_t v_t^T
    into the [BK, BV] state tile (keys offs_k, values offs_v), and with TRACK_N sum_t w_t k_t into every
    column of the [BK, 16] normalizer tile (a product with a tile of ones, on the tensor cores); weights
    w_t = exp(decay - b[t] + ig[t] - m_next) (m_next = 0 for mLSTMsig)."""
    offs_l = tl.arange(0, BL)
    for start in range(0, L, BL):
        t = chunk * L + start + offs_l
        weight_log = decay - tl.load(b_ptr + bh * T + t) + tl.load(ig_ptr + bh * T + t)
        if STABILIZE:
            weight_log -= m_next
        weight = tl.exp(weight_log)
        k_tile = load_cols(k_base + t[:, None] * stride_k_t + offs_k[None, :], offs_k, DQK, BK)
        v_tile = load_cols(v_base + t[:, None] * stride_v_t + offs_v[None, :], offs_v, DV, BV)
        k_weighted = tl.trans((k_tile.to(tl.float32) * weight[:, None]).to(v_tile.dtype))
        state += tl.dot(k_weighted, v_tile)
        if TRACK_N:
            norm_cols += tl.dot(k_weighted, tl.full([BL, 16], 1.0, dtype=v_tile.dtype))
    return state, norm_cols


@triton.jit
def chunk_states_kernel(
    k_ptr, v_ptr, b_ptr, ig_ptr, a_ptr,
    c0_ptr, n0_ptr, m0_ptr,
    c_ptr, n_ptr, m_ptr, c_last_ptr, n_last_ptr,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    T, H, NC,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BL: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, TRACK_N: tl.constexpr, HAS_INITIAL: tl.constexpr,
):
    """Grid (DQK/BK, DV/BV, B*H).

    Per chunk k of L tokens, C_{k+1} = exp(b[L-1] + m_k - m_{k+1}) C_k + sum_t w_t k_t v_t^T with weights
    w_t = exp(b[L-1] - b[t] + ig[t] - m_{k+1}) (m = 0 for mLSTMsig), the sum over sub-chunks of BL tokens.
    mLSTMexp's max state m_{k+1} = max(b[L-1] + m_k, a_k) takes the chunk's largest log weight a_k [B*H, NC]
    from `gate_cumsum_kernel`, so the walk carries a scalar max and no row reduction; the normalizer's
    update sum_t w_t k_t is a product with a [BL, 16] tile of ones, on the tensor cores beside the state's,
    instead of a column sum.

    Outputs (stabilized: the true state is the stored one times exp(m)): c [B*H, NC, DQK, DV] the states
    before each chunk, in the dtype of c_ptr (the kernels' matmul operand dtype; the recurrence itself runs
    in fp32); n [B*H, NC, DQK] fp32 when TRACK_N; m [B*H, NC+1] fp32 when STABILIZE (mLSTMexp);
    c_last [B*H, DQK, DV] and n_last [B*H, DQK] the final states in fp32.
    """
    pid_k = tl.program_id(0)
    pid_v = tl.program_id(1)
    bh = tl.program_id(2).to(tl.int64)
    batch = bh // H
    head = bh % H
    offs_k = pid_k * BK + tl.arange(0, BK)
    offs_v = pid_v * BV + tl.arange(0, BV)
    state_offs = offs_k[:, None] * DV + offs_v[None, :]
    writes_vectors = pid_v == 0

    if HAS_INITIAL:
        state = load_state(c0_ptr + bh * DQK * DV + state_offs, offs_k, offs_v, DQK, BK, DV, BV)
        state = state.to(tl.float32)
        norm = load_vector(n0_ptr + bh * DQK + offs_k, offs_k, DQK, BK).to(tl.float32)
        m_state = tl.load(m0_ptr + bh).to(tl.float32)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)
        norm = tl.zeros([BK], dtype=tl.float32)
        m_state = 0.0
    norm_cols = tl.broadcast_to(norm[:, None], (BK, 16))

    k_base = k_ptr + batch * stride_k_b + head * stride_k_h
    v_base = v_ptr + batch * stride_v_b + head * stride_v_h
    for chunk in range(0, NC):
        store_state(c_ptr + (bh * NC + chunk) * DQK * DV + state_offs, state.to(c_ptr.dtype.element_ty),
                    offs_k, offs_v, DQK, BK, DV, BV)
        if TRACK_N:
            if writes_vectors:
                store_vector(n_ptr + (bh * NC + chunk) * DQK + offs_k, tl.max(norm_cols, 1), offs_k, DQK, BK)
        if STABILIZE:
            if writes_vectors & (pid_k == 0):
                tl.store(m_ptr + bh * (NC + 1) + chunk, m_state)
        decay, state_scale, m_state = chunk_decay(b_ptr, a_ptr, bh, T, NC, chunk, m_state, L, STABILIZE)
        state = state * state_scale
        if TRACK_N:
            norm_cols = norm_cols * state_scale
        state, norm_cols = add_chunk_to_state(
            state, norm_cols, k_base, v_base, b_ptr, ig_ptr, bh, T, chunk, decay, m_state, offs_k, offs_v,
            stride_k_t, stride_v_t, DQK, DV, BK, BV, L, BL, STABILIZE, TRACK_N)

    store_state(c_last_ptr + bh * DQK * DV + state_offs, state, offs_k, offs_v, DQK, BK, DV, BV)
    if TRACK_N:
        if writes_vectors:
            store_vector(n_last_ptr + bh * DQK + offs_k, tl.max(norm_cols, 1), offs_k, DQK, BK)
    if STABILIZE:
        if writes_vectors & (pid_k == 0):
            tl.store(m_ptr + bh * (NC + 1) + NC, m_state)


@chunk_kernel
def chunk_outputs_kernel(
    q_ptr, k_ptr, v_ptr, b_ptr, ig_ptr, g_ptr,
    c_ptr, n_ptr, m_ptr,
    h_ptr, denom_ptr, m_comb_ptr,
    stride_q_b, stride_q_t, stride_q_h,
    stride_k_b, stride_k_t, stride_k_h,
    stride_v_b, stride_v_t, stride_v_h,
    stride_h_b, stride_h_t, stride_h_h,
    T, H, NC, qk_scale, eps, tiles_0, tiles_1,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    Q_TILES: tl.constexpr, STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, PREFIX_MAX: tl.constexpr,
    TMA: tl.constexpr,
):
    """Grid `chunk_program` over (DV/BV, L/(BLQ*Q_TILES)). Writes h [B, T, H, DV] and, when NORMALIZE, the
    per-token denominator and (when STABILIZE) m_comb, both [B*H, T] fp32, which the backward pass reuses.

    Each program computes Q_TILES query tiles of BLQ rows one after the other, for one value block; the
    first Dqk block of its state tile C_{k-1} is loaded once for all of them (at Q_TILES = 1 every query
    tile of a chunk reads the state tile again, through L2). For each query tile the inter-chunk part
    Qbar C_{k-1} seeds the accumulators, for mLSTMexp with the running max seeded by its stabilizer
    b + m_{k-1}; the key/value tiles then update them FlashAttention-style. The final running max is m_comb
    of Eq. 99, so no separate combination step (and no second pass over Q) is needed, for mLSTMexp as well
    as mLSTMsig. The first Dqk block of the query tile (all of it when Dqk == BK) is loaded once and reused
    for every key/value tile. TMA: q, k, v, h and the state tiles move through tensor descriptors
    (`token_source`) instead of pointer tiles.
    """
    pid_v, pid_q_group, bh, chunk, batch, head = chunk_program(NC, H, tiles_0, tiles_1)
    q_src = token_source(q_ptr, stride_q_b, stride_q_h, batch, head, T, DQK, TMA)
    k_src = token_source(k_ptr, stride_k_b, stride_k_h, batch, head, T, DQK, TMA)
    v_src = token_source(v_ptr, stride_v_b, stride_v_h, batch, head, T, DV, TMA)
    h_dst = token_source(h_ptr, stride_h_b, stride_h_h, batch, head, T, DV, TMA)
    c_src = state_source(c_ptr, bh * NC + chunk, DQK, DV, TMA)
    c_first = load_state_tile(c_src, 0, pid_v * BV, DQK, DV, BK, BV, TMA)
    for q_tile in tl.static_range(Q_TILES):
        _chunk_output_tile(
            q_src, k_src, v_src, h_dst, c_src, c_first, b_ptr, ig_ptr, g_ptr, n_ptr, m_ptr, denom_ptr,
            m_comb_ptr, stride_q_t, stride_k_t, stride_v_t, stride_h_t,
            T, NC, qk_scale, eps, pid_v, pid_q_group * Q_TILES + q_tile, bh, chunk,
            DQK, DV, L, BLQ, BLKV, BK, BV, STABILIZE, NORMALIZE, PREFIX_MAX, TMA,
        )


@triton.jit
def _chunk_output_tile(
    q_src, k_src, v_src, h_dst, c_src, c_first, b_ptr, ig_ptr, g_ptr, n_ptr, m_ptr, denom_ptr, m_comb_ptr,
    stride_q_t, stride_k_t, stride_v_t, stride_h_t,
    T, NC, qk_scale, eps, pid_v, pid_q, bh, chunk,
    DQK: tl.constexpr, DV: tl.constexpr,
    L: tl.constexpr, BLQ: tl.constexpr, BLKV: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    STABILIZE: tl.constexpr, NORMALIZE: tl.constexpr, PREFIX_MAX: tl.constexpr, TMA: tl.constexpr,
):
    """h (and denom, m_comb) of query tile pid_q of a chunk for value block pid_v; c_first: the state
    tile C_{k-1}[:BK, value block] [BK, BV]. mLSTMexp (STABILIZE) with PREFIX_MAX takes m_comb from the
    prefix max g of `gate_cumsum_kernel` before any key/value tile (no row max, no rescaling); without it,
    from an online max over the key/value tiles, FlashAttention-style."""
    offs_q = pid_q * BLQ + tl.arange(0, BLQ)
    offs_kv = tl.arange(0, BLKV)
    offs_dk = tl.arange(0, BK)
    q_start = chunk * L + pid_q * BLQ
    t_q = q_start + tl.arange(0, BLQ)
    n_base = n_ptr + (bh * NC + chunk) * DQK
    b_q = tl.load(b_ptr + bh * T + t_q)

    if STABILIZE:
        m_inter = b_q + tl.load(m_ptr + bh * (NC + 1) + chunk)
        if PREFIX_MAX:
            m_run = tl.maximum(m_inter, b_q + tl.load(g_ptr + bh * T + t_q))
            q_gate = tl.exp(m_inter - m_run) * qk_scale
            row_log = b_q - m_run
        else:
            m_run = m_inter
            q_gate = tl.full([BLQ], qk_scale, dtype=tl.float32)
    else:
        m_run = tl.zeros([BLQ], dtype=tl.float32)
        q_gate = tl.exp(b_q) * qk_scale
    q_first = load_token_tile(q_src, stride_q_t, q_start, 0, DQK, BLQ, BK, TMA)
    q_gated = (q_first.to(tl.float32) * q_gate[:, None]).to(q_first.dtype)
    h_acc = tl.dot(q_gated, c_first.to(q_first.dtype))
    n_acc = tl.zeros([BLQ], dtype=tl.float32)
    if NORMALIZE:
        n_acc += tl.sum(q_gated.to(tl.float32) * load_vector(n_base + offs_dk, offs_dk, DQK, BK)[None, :], 1)
    for dk in range(BK, DQK, BK):
        dk_offs = dk + offs_dk
        q_tile = load_token_tile(q_src, stride_q_t, q_start, dk, DQK, BLQ, BK, TMA)
        q_gated = (q_tile.to(tl.float32) * q_gate[:, None]).to(q_tile.dtype)
        c_tile = load_state_tile(c_src, dk, pid_v * BV, DQK, DV, BK, BV, TMA)
        h_acc += tl.dot(q_gated, c_tile.to(q_tile.dtype))
        if NORMALIZE:
            n_tile = load_vector(n_base + dk_offs, dk_offs, DQK, BK)
            n_acc += tl.sum(q_gated.to(tl.float32) * n_tile[None, :], 1)

    num_kv_tiles = (pid_q + 1) * BLQ // BLKV
    for kv_tile in range(0, num_kv_tiles):
        kv_start = chunk * L + kv_tile * BLKV
        t_kv = kv_start + offs_kv
        k_tile = load_token_tile(k_src, stride_k_t, kv_start, 0, DQK, BLKV, BK, TMA)
        scores = tl.dot(q_first, tl.trans(k_tile))
        for dk in tl.static_range(BK, DQK, BK):
            q_tile = load_token_tile(q_src, stride_q_t, q_start, dk, DQK, BLQ, BK, TMA)
            k_tile = load_token_tile(k_src, stride_k_t, kv_start, dk, DQK, BLKV, BK, TMA)
            scores += tl.dot(q_tile, tl.trans(k_tile))
        b_kv = tl.load(b_ptr + bh * T + t_kv)
        ig_kv = tl.load(ig_ptr + bh * T + t_kv)
        causal = offs_q[:, None] >= (kv_tile * BLKV + offs_kv)[None, :]
        v_tile = load_token_tile(v_src, stride_v_t, kv_start, pid_v * BV, DV, BLKV, BV, TMA)
        if STABILIZE and PREFIX_MAX:
            gate_log = tl.where(causal, row_log[:, None] + (ig_kv - b_kv)[None, :], float("-inf"))
        else:
            gate_log = tl.where(causal, b_q[:, None] - b_kv[None, :] + ig_kv[None, :], float("-inf"))
        if STABILIZE and not PREFIX_MAX:
            m_new = tl.maximum(m_run, tl.max(gate_log, 1))
            rescale = tl.exp(m_run - m_new)
            scores_gated = scores * qk_scale * tl.exp(gate_log - m_new[:, None])
            h_acc = h_acc * rescale[:, None] + tl.dot(scores_gated.to(v_tile.dtype), v_tile)
            n_acc = n_acc * rescale + tl.sum(scores_gated, 1)
            m_run = m_new
        else:
            scores_gated = scores * qk_scale * tl.exp(gate_log)
            h_acc += tl.dot(scores_gated.to(v_tile.dtype), v_tile)
            if NORMALIZE:
                n_acc += tl.sum(scores_gated, 1)

    if NORMALIZE:
        h_acc, denom = normalize_rows(h_acc, n_acc, m_run, eps, STABILIZE)
        if pid_v == 0:
            tl.store(denom_ptr + bh * T + t_q, denom)
            if STABILIZE:
                tl.store(m_comb_ptr + bh * T + t_q, m_run)
    store_token_tile(h_dst, h_acc, stride_h_t, q_start, pid_v * BV, DV, BLQ, BV, TMA)
