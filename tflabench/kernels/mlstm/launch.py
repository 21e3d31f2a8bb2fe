"""What the launchers of the Triton algorithms (`xl_chunk`, `fused_chunk`) share: their chunk-size limits,
tensor layout helpers and the gate gradients. Plain PyTorch: importing it does not import Triton, so the
public entry point `api` can read the limits.

Tensors: q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H]; head-first row sums [B*H, T].
"""

from __future__ import annotations

import torch

#: limit_chunk and fused_chunk hold one chunk in one SRAM tile
LIMIT_CHUNK_MAX = 128
FUSED_CHUNK_MAX = 128
ONE_TILE_CHUNK_MAX = {"limit_chunk": LIMIT_CHUNK_MAX, "fused_chunk": FUSED_CHUNK_MAX}
#: the most fp32 elements of the state tile a fused-chunk program keeps in registers by default
#: (Dqk x BV or BK x Dv: 64 registers per thread at 4 warps)
STATE_TILE_ELEMENTS = 8192
#: the largest chunk and query/key head dim at which mLSTMexp's fused forward runs 4 warps
#: (`exp_forward_four_warps`)
EXP_FOUR_WARPS_MAX = 64


def exp_forward_four_warps(chunk: int, head_dim_qk: int) -> bool:
    """Whether mLSTMexp's fused forward runs 4 warps instead of `fused_chunk.EXP_FORWARD_WARPS`
    (`FusedTiling.default`; the `auto` rule and the former versions' defaults follow it): at chunks and
    query/key head dims of at most `EXP_FOUR_WARPS_MAX`."""
    return chunk <= EXP_FOUR_WARPS_MAX and head_dim_qk <= EXP_FOUR_WARPS_MAX


def largest_pow2_block(dim: int, cap: int) -> int:
    """Largest power of two <= cap dividing dim (dim is a multiple of 16)."""
    block = cap
    while dim % block:
        block //= 2
    return block


#: the narrowest block `head_dim_block` takes from the divisors of a head dim before it masks a wider one
NARROWEST_EXACT_BLOCK = 64


def head_dim_block(dim: int, cap: int) -> int:
    """The TFLA kernels' block of a head dim, and the fused forward's value block (dim a multiple of 16): the
    largest power of two <= cap
    dividing it, unless that is narrower than both `NARROWEST_EXACT_BLOCK` and the dim; then the masked
    block min(cap, next_pow2(dim)), whose columns past the head dim the kernels read as zeros (`triton_fwd.
    load_cols`): 64 or 128 at 96 instead of 32, 64 at 48 and 80 instead of 16. The reference kernels mask
    64- and 128-wide blocks there; with 32-wide ones our fwd+bwd at 24 x 96/96 took 1.11-1.18x theirs
    (results/perf-log.md, v13)."""
    exact = largest_pow2_block(dim, cap)
    padded = min(cap, next_pow2(dim))
    return exact if exact >= min(NARROWEST_EXACT_BLOCK, padded) else padded


def least_padded_block(dim: int, cap: int) -> int:
    """`head_dim_block(dim, cap)`, or the masked `NARROWEST_EXACT_BLOCK`-wide block where its blocks cover
    fewer padded columns: 64 at 144-176 (three cover 192 where two of 128 cover 256) and at 272-304. For
    tiles whose programs share no work (the state recurrences' and state gradients' [BK, BV] tiles), so that
    a narrower block costs nothing twice (where `xl_chunk.Tiling.default` takes it, and what it measured)."""
    block = head_dim_block(dim, cap)
    narrow = NARROWEST_EXACT_BLOCK
    pads_less = block_count(dim, narrow) * narrow < block_count(dim, block) * block
    return narrow if block > narrow and pads_less else block


def block_count(dim: int, block: int) -> int:
    """Blocks of ``block`` covering ``dim``: a launcher's programs (or a kernel's loop trips) over a head dim,
    the last block masked where ``block`` does not divide it."""
    return -(-dim // block)


def next_pow2(dim: int) -> int:
    """The smallest power of two >= dim (the padded width of a head dim held whole in one tile)."""
    return 1 << (dim - 1).bit_length()


def fused_state_blocks(head_dim_qk: int, head_dim_v: int, masked_values: bool = True) -> tuple[int, int]:
    """(value block BV of the [Dqk, BV] state tiles, Dqk block BK of the [BK, Dv] ones) of the fused-chunk
    kernels: tiles of at most STATE_TILE_ELEMENTS, blocks from 16 to 128 (BK: 64) dividing the head dims,
    except BV with masked_values, the forward's (`head_dim_block`: 64 at 96 instead of 32; mLSTMsig's fused
    forward at 24 x 96/96 1.67 -> 1.21 ms, results/perf-log.md, v14)."""
    value_cap = max(16, min(128, STATE_TILE_ELEMENTS // next_pow2(head_dim_qk)))
    qk_cap = max(16, min(64, STATE_TILE_ELEMENTS // next_pow2(head_dim_v)))
    value_block = (head_dim_block if masked_values else largest_pow2_block)(head_dim_v, value_cap)
    return value_block, largest_pow2_block(head_dim_qk, qk_cap)


def token_strides(x: torch.Tensor) -> tuple[int, int, int]:
    """(batch, time, head) strides of a [B, T, H, ...] tensor; the last dim must be contiguous."""
    return x.stride(0), x.stride(1), x.stride(2)


def empty_with_strides_of(x: torch.Tensor) -> torch.Tensor:
    """Uninitialized tensor with x's shape and strides (the gradient kernels store with x's strides)."""
    return torch.empty_strided(x.shape, x.stride(), device=x.device, dtype=x.dtype)


def contiguous_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def final_state_term(c_last: torch.Tensor, dc_last: torch.Tensor) -> torch.Tensor:
    """<C_T, dC_T> [B*H] of the final state c_last [B*H, Dqk, Dv] and its gradient: the part of every log
    forget gate's gradient that comes through the returned final state."""
    rows = c_last.shape[0]
    return (c_last.reshape(rows, -1) * dc_last.reshape(rows, -1)).sum(-1)


def gate_grads(q_dq: torch.Tensor, k_dk: torch.Tensor, i: torch.Tensor, f: torch.Tensor,
               c_last: torch.Tensor, dc_last: torch.Tensor | None, sig: bool):
    """Gate gradients from the row sums q.dq and k.dk ([B*H, T]): dlogf_t = sum_{s>=t} (q.dq - k.dk)_s
    + <C_T, dC_T>, dig_t = (k.dk)_t (c_last [B*H, Dqk, Dv] the stabilized final state, dc_last its gradient
    or None). Returns di, df [B, T, H] in the dtypes of i, f."""
    B, T, H = f.shape
    d_log_f = (q_dq - k_dk).flip(-1).cumsum(-1).flip(-1)
    if dc_last is not None:
        d_log_f = d_log_f + final_state_term(c_last, dc_last)[:, None]

    def to_token_major(x):
        return x.view(B, H, T).transpose(1, 2)

    df = to_token_major(d_log_f) * torch.sigmoid(-f.float())
    di = to_token_major(k_dk)
    if sig:
        di = di * torch.sigmoid(-i.float())
    return di.to(i.dtype), df.to(f.dtype)
