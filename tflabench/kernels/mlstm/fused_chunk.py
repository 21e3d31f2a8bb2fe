"""Fused-chunk mLSTM (`fused_chunk`): launchers and autograd for the kernels of `triton_fused`.

One program per (head-dim block, batch, head) walks the chunks in order with the state on chip: no chunk
state goes to HBM, forward or backward. It needs B * H * (head-dim blocks) programs to fill the GPU, where
TFLA (`xl_chunk`) also parallelizes over chunks; `choice.choose` picks between them.

Tensors: q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H] (pre-activations); h [B, T, H, Dv].
Final state: C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H] in fp32 (stabilized: true C = C * exp(m)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tflabench.errors import InputError
from tflabench.kernels.mlstm import triton_fused, xl_chunk
from tflabench.kernels.mlstm.launch import (
    FUSED_CHUNK_MAX,
    block_count,
    contiguous_last,
    empty_with_strides_of,
    exp_forward_four_warps,
    fused_state_blocks,
    gate_grads,
    next_pow2,
    token_strides,
)

#: the backward passes a fused-chunk forward can be followed by (`FusedTiling.backward`)
BACKWARDS = ("tfla", "fused")
#: warps of mLSTMexp's fused forward beyond a query/key head dim and chunk of 64 (`FusedTiling.default`)
EXP_FORWARD_WARPS = 8


@dataclass(frozen=True)
class FusedTiling:
    """Launch parameters of the fused-chunk kernels (block sizes are powers of two >= 16).

    chunk: L, one tile (<= 128). Forward: block_v (BV, the value columns of one program; its state tile is
    [Dqk, BV]; where it does not divide Dv, the columns past Dv are masked), num_warps, num_stages.
    Backward: dq_block_qk and dk_block_qk (BK: the dQ and dK programs keep a [BK, Dv] state tile),
    dv_block_v (BV of the dV program, a [Dqk, BV] tile), bwd_num_warps, bwd_num_stages. backward: "tfla"
    (TFLA's backward kernels, `xl_chunk.tfla_backward`, fed with this forward's row statistics) or "fused"
    (the kernels of `triton_fused`, state gradients on chip).
    lean_gate: the forward's intra-chunk gates without a live [L, L] log-gate (`triton_fused._lean_gates`),
    the mLSTMexp default (see `default`); mLSTMsig keeps the masked log-gate (`_masked_gates`) until the
    lean one is timed there. fused_dq: TFLA's backward takes its default tiling, with `xl_chunk.Tiling`'s
    fused_dq set to False when this is False (the dQ kernel of v10 and before).
    `FusedTiling.default` is the measured choice: the TFLA backward, 1.3-7x faster than the fused one on
    every shape measured (results/perf-log.md, v6).
    """

    chunk: int
    block_v: int = 64
    num_warps: int = 4
    num_stages: int = 2
    dq_block_qk: int = 32
    dk_block_qk: int = 32
    dv_block_v: int = 64
    bwd_num_warps: int = 8
    bwd_num_stages: int = 2
    backward: str = "tfla"
    lean_gate: bool = False
    fused_dq: bool = True

    @classmethod
    def default(cls, chunk: int, head_dim_qk: int, head_dim_v: int, variant: str = "sig",
                exact_head_blocks: bool = False) -> FusedTiling:
        """State tiles of at most `launch.STATE_TILE_ELEMENTS` fp32 values (`launch.fused_state_blocks`): the
        forward's value blocks masked where none of 64 or more divides Dv (exact_head_blocks: the dividing
        ones, the forward of the kernels before v14), the backward's dividing the head dims.

        The mLSTMexp forward keeps the running max and the normalizer on chip besides the state. It runs 8
        warps (`EXP_FORWARD_WARPS`): at 4 warps it spills 520-1752 bytes per thread at L = 64 and head
        dims >= 128 (`scripts/kernel_resources.py --algorithm fused_chunk`), 200-776 at 8 warps;
        results/perf-log.md (v6) has the timings. At head dims <= 64 and L <= 64 it runs 4 warps: 252-255
        registers and no spill traffic in the loop either way, but two programs fit an SM instead of one,
        and the forward takes 0.68-0.70 ms instead of 1.39-1.42 ms at 32 x 64/64, L = 64 (H100,
        results/h100/ab-exp-fused-warps; at L = 128, 4 warps take 3.2 ms against 1.1). Where only Dqk is
        <= 64 (state tiles of 64 x 128) it runs 4 warps as well: 264 bytes of stack per thread against 176,
        but two programs per SM, 0.947 -> 0.551 ms forward at 16 x 64/128, T = 4096, and 1.82 -> 1.73 ms at
        T = 16384 (H100, results/h100/ab-exp-fused-wide-values). Its gates are the
        lean ones: 26-28 % faster at 32 x 64/64 and 44-46 % at 16 x 128/256 (L = 64, T = 2k and 8k,
        forward, H100: results/h100/ab-exp-fused-lean-gate).
        """
        value_block, _ = fused_state_blocks(head_dim_qk, head_dim_v, masked_values=not exact_head_blocks)
        dividing_value_block, qk_block = fused_state_blocks(head_dim_qk, head_dim_v, masked_values=False)
        exp = variant == "exp"
        warps = EXP_FORWARD_WARPS if exp and not exp_forward_four_warps(chunk, head_dim_qk) else 4
        return cls(chunk=chunk, block_v=value_block, num_warps=warps, dq_block_qk=qk_block,
                   dk_block_qk=qk_block, dv_block_v=dividing_value_block, lean_gate=exp)

    def check(self, head_dim_qk: int, head_dim_v: int) -> None:
        if self.chunk > FUSED_CHUNK_MAX:
            raise InputError(f"fused_chunk supports chunk_size <= {FUSED_CHUNK_MAX} (a chunk is one SRAM "
                             f"tile), got {self.chunk}")
        if self.block_v < 16 or self.block_v & (self.block_v - 1):
            raise InputError(f"fused tiling block_v={self.block_v} must be a power of two >= 16")
        for name, dim in (("dv_block_v", head_dim_v), ("dq_block_qk", head_dim_qk),
                          ("dk_block_qk", head_dim_qk)):
            block = getattr(self, name)
            if block < 16 or block & (block - 1) or dim % block:
                raise InputError(f"fused tiling {name}={block} must be a power of two >= 16 dividing {dim}")
        if self.backward not in BACKWARDS:
            raise InputError(f"fused tiling backward must be one of {BACKWARDS}, got {self.backward!r}")


@dataclass(frozen=True)
class _Config:
    tiling: FusedTiling
    sig: bool
    normalize: bool
    eps: float
    return_final_state: bool


def _common_args(i: torch.Tensor, config: _Config):
    """(strides of the gates i and f, which are contiguous [B, T, H]; the flags every fused kernel takes)."""
    return i.stride(), dict(STABILIZE=not config.sig, NORMALIZE=config.normalize, SIG_INPUT_GATE=config.sig)


def _forward(q, k, v, i, f, initial, config: _Config):
    """Returns h, denom and m_comb ([B*H, T] fp32), maxes [B*H, NC+1], c_last [B*H, Dqk, Dv] and
    n_last [B*H, Dqk]."""
    B, T, H, DQK = q.shape
    DV = v.shape[-1]
    tiling = config.tiling
    NC = T // tiling.chunk
    device = q.device
    h = torch.empty(B, T, H, DV, device=device, dtype=q.dtype)
    row_stats = torch.empty(2, B * H, T, device=device, dtype=torch.float32)
    maxes = torch.zeros(B * H, NC + 1, device=device, dtype=torch.float32)
    c_last = torch.empty(B * H, DQK, DV, device=device, dtype=torch.float32)
    n_last = torch.zeros(B * H, DQK, device=device, dtype=torch.float32)
    c0, n0, m0 = initial if initial is not None else (c_last, n_last, maxes)
    gate_strides, flags = _common_args(i, config)
    blocks = block_count(DV, tiling.block_v)
    triton_fused.fused_forward_kernel[(blocks * B * H,)](
        q, k, v, i, f, c0, n0, m0, h, row_stats[0], row_stats[1], maxes, c_last, n_last,
        *token_strides(q), *token_strides(k), *token_strides(v), *token_strides(h), *gate_strides,
        T, H, NC, 1.0 / math.sqrt(DQK), config.eps, blocks,
        DQK=DQK, DV=DV, DQK_P=next_pow2(DQK), L=tiling.chunk, BV=tiling.block_v,
        HAS_INITIAL=initial is not None, LEAN_GATE=tiling.lean_gate, **flags,
        num_warps=tiling.num_warps, num_stages=tiling.num_stages,
    )
    return h, row_stats[0], row_stats[1], maxes, c_last, n_last


def _backward(q, k, v, i, f, dh, dc_last, initial, saved, config: _Config):
    """Returns dq, dk, dv, di, df and dc0 [B, H, Dqk, Dv] (the gradient of the initial C)."""
    denom, m_comb, maxes, c_last = saved
    B, T, H, DQK = q.shape
    DV = v.shape[-1]
    tiling = config.tiling
    NC = T // tiling.chunk
    device = q.device
    qk_scale = 1.0 / math.sqrt(DQK)
    gate_strides, flags = _common_args(i, config)
    launch = dict(num_warps=tiling.bwd_num_warps, num_stages=tiling.bwd_num_stages)
    has_dc_last = dc_last is not None
    stats = (maxes, m_comb, denom)

    dq = empty_with_strides_of(q)
    blocks = DQK // tiling.dq_block_qk
    q_dq = torch.empty(blocks, B * H, T, device=device, dtype=torch.float32)
    triton_fused.fused_dq_kernel[(blocks * B * H,)](
        q, k, v, dh, i, f, *stats, initial[0] if initial is not None else c_last, dq, q_dq,
        *token_strides(q), *token_strides(k), *token_strides(v), *token_strides(dh), *gate_strides,
        T, H, NC, qk_scale, blocks,
        DQK=DQK, DV=DV, DV_P=next_pow2(DV), L=tiling.chunk, BK=tiling.dq_block_qk,
        HAS_INITIAL=initial is not None, **flags, **launch,
    )
    dk = empty_with_strides_of(k)
    dc0 = torch.empty(B * H, DQK, DV, device=device, dtype=torch.float32)
    blocks = DQK // tiling.dk_block_qk
    k_dk = torch.empty(blocks, B * H, T, device=device, dtype=torch.float32)
    triton_fused.fused_dk_kernel[(blocks * B * H,)](
        q, k, v, dh, i, f, *stats, dc_last if has_dc_last else dc0, dk, k_dk, dc0,
        *token_strides(q), *token_strides(k), *token_strides(v), *token_strides(dh), *gate_strides,
        T, H, NC, qk_scale, blocks,
        DQK=DQK, DV=DV, DV_P=next_pow2(DV), L=tiling.chunk, BK=tiling.dk_block_qk,
        HAS_DC_LAST=has_dc_last, **flags, **launch,
    )
    dv = empty_with_strides_of(v)
    blocks = DV // tiling.dv_block_v
    triton_fused.fused_dv_kernel[(blocks * B * H,)](
        q, k, dh, i, f, *stats, dc_last if has_dc_last else dc0, dv,
        *token_strides(q), *token_strides(k), *token_strides(dh), *token_strides(dv), *gate_strides,
        T, H, NC, qk_scale, blocks,
        DQK=DQK, DV=DV, DQK_P=next_pow2(DQK), L=tiling.chunk, BV=tiling.dv_block_v,
        HAS_DC_LAST=has_dc_last, **flags, **launch,
    )
    di, df = gate_grads(q_dq.sum(0), k_dk.sum(0), i, f, c_last, dc_last, config.sig)
    return dq, dk, dv, di, df, dc0.view(B, H, DQK, DV)


class _MLSTMFusedChunk(torch.autograd.Function):
    """Outputs h, and with config.return_final_state also (C_T, n_T, m_T); C_0 gets a gradient."""

    @staticmethod
    def forward(ctx, config: _Config, q, k, v, i, f, c0, n0, m0):
        ctx.set_materialize_grads(False)
        initial = None if c0 is None else tuple(x.float().contiguous() for x in (c0, n0, m0))
        h, denom, m_comb, maxes, c_last, n_last = _forward(q, k, v, i, f, initial, config)
        ctx.config, ctx.has_initial = config, initial is not None
        ctx.save_for_backward(q, k, v, i, f, denom, m_comb, maxes, c_last, *(initial or ()))
        if not config.return_final_state:
            return h
        B, _, H, DQK = q.shape
        n_out, m_out = n_last.view(B, H, DQK), maxes[:, -1].reshape(B, H)
        ctx.mark_non_differentiable(n_out, m_out)
        return h, c_last.view(B, H, DQK, -1), n_out, m_out

    @staticmethod
    def backward(ctx, dh, dc_last=None, _dn_last=None, _dm_last=None):
        q, k, v, i, f, denom, m_comb, maxes, c_last, *initial = ctx.saved_tensors
        initial = tuple(initial) if ctx.has_initial else None
        if dh is None:
            dh = torch.zeros(*q.shape[:3], v.shape[-1], device=q.device, dtype=q.dtype)
        dc_last = dc_last.float().contiguous() if dc_last is not None else None
        config, row_stats = ctx.config, (denom, m_comb, maxes, c_last)
        if config.tiling.backward == "tfla":
            dq, dk, dv, di, df, dc0 = xl_chunk.tfla_backward(
                q, k, v, i, f, contiguous_last(dh), dc_last, initial, row_stats,
                chunk_size=config.tiling.chunk, variant="sig" if config.sig else "exp",
                normalize=config.normalize, fused_dq=config.tiling.fused_dq)
        else:
            dq, dk, dv, di, df, dc0 = _backward(q, k, v, i, f, contiguous_last(dh), dc_last, initial,
                                                row_stats, config)
        return None, dq, dk, dv, di, df, dc0 if ctx.has_initial else None, None, None


def mlstm_fused_chunk(q, k, v, i, f, *, variant: str, chunk_size: int, normalize: bool | None, eps: float,
                      initial_state=None, return_final_state: bool = False,
                      tiling: FusedTiling | None = None):
    """Fused-chunk mLSTM (inputs already validated by `tflabench.kernels.mlstm`); chunk_size <= 128.

    Returns h [B, T, H, Dv] (dtype of q), and (h, (C, n, m)) with return_final_state.
    """
    B, T, H, DQK = q.shape
    DV = v.shape[-1]
    tiling = tiling or FusedTiling.default(chunk_size, DQK, DV, variant=variant)
    if tiling.chunk != chunk_size:
        raise InputError(f"fused tiling chunk {tiling.chunk} differs from chunk_size {chunk_size}")
    tiling.check(DQK, DV)
    config = _Config(tiling=tiling, sig=variant == "sig", normalize=variant == "exp" or bool(normalize),
                     eps=eps, return_final_state=return_final_state)
    q, k, v = (contiguous_last(x) for x in (q, k, v))
    i, f = i.contiguous(), f.contiguous()
    c0 = n0 = m0 = None
    if initial_state is not None:
        c0, n0, m0 = initial_state
        n0 = n0 if n0 is not None else torch.zeros(B, H, DQK, device=q.device)
        m0 = m0 if m0 is not None else torch.zeros(B, H, device=q.device)
    outputs = _MLSTMFusedChunk.apply(config, q, k, v, i, f, c0, n0, m0)
    if return_final_state:
        h, c_last, n_last, m_last = outputs
        return h, (c_last, n_last, m_last)
    return outputs
