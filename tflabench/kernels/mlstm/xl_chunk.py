"""TFLA (`xl_chunk`) and single-level (`limit_chunk`) chunkwise mLSTM: launchers and autograd.

`mlstm_xl_chunk` runs the two-level TFLA kernels of `triton_fwd` / `triton_bwd` for any chunk size
L >= 16 that is a power of two dividing T. `limit_chunk` is the same computation with the whole chunk as
one SRAM tile (B_Lhq = B_Lkv = L), i.e. the single level of sequence parallelism of FLA-style kernels;
it is limited to L <= 128.

Tensors: q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H] (pre-activations); h [B, T, H, Dv].
States: C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H] in fp32 (stabilized: true C = C * exp(m)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from tflabench.errors import InputError
from tflabench.kernels.mlstm import triton_bwd, triton_fwd
from tflabench.kernels.mlstm.launch import (
    LIMIT_CHUNK_MAX,
    block_count,
    contiguous_last,
    empty_with_strides_of,
    final_state_term,
    gate_grads,
    head_dim_block,
    largest_pow2_block,
    least_padded_block,
    next_pow2,
    token_strides,
)


@dataclass(frozen=True)
class Tiling:
    """Block sizes and launch parameters of the TFLA kernels (block sizes are powers of two >= 16).

    chunk: L. Recurrent (state) kernels: block_state (BL, the sub-chunk of the recurrence), state_block_qk
    and state_block_v (the state tile of one program), state_num_warps, state_num_stages. Parallel (output
    and gradient) kernels: block_q / block_kv (B_Lhq / B_Lkv, block_q >= block_kv, both divide L),
    block_qk / block_v (B_dqk / B_dhv), num_warps, num_stages; the forward output kernel has its own
    out_block_kv, out_block_v, out_num_warps and out_num_stages (its best tiles differ from the backward
    kernels'; each of its programs recomputes the scores Q K^T for its out_block_v columns of h, so a
    wider value block computes them fewer times, for a larger accumulator) and out_q_tiles, the query
    tiles one output program computes one after the other (its state tile's first Dqk block loaded once
    for all of them). out_prefix_max: mLSTMexp's output kernel takes its stabilizer m_comb from a prefix max
    of the log gates that the gate kernel writes (one exp per score, no rescaling) instead of an online max
    over its key/value tiles. dv_block_v: the same choice for the backward's dV kernel (each program
    recomputes K Q^T for its dv_block_v columns of dV), and dv_num_stages its pipeline stages (0: those of
    the other gradient kernels, num_stages; one stage was up to 3.6 % faster fwd+bwd where two leave one
    program per SM and 1-6 % slower elsewhere, results/{h100,h200}/ab-dv-one-stage). out_tma: the output
    kernel moves q, k, v, h and the state tiles through tensor descriptors (Hopper's bulk copies,
    `triton_fwd.token_source`) instead of pointer tiles, where the tensors and blocks allow it
    (`_tma_ready`); bwd_tma: the dQ, dK and dV kernels theirs.
    fused_dkdv: compute dK and dV in one kernel over whole head dims (used when both head dims are powers
    of two with Dqk * Dv <= 128 * 256), with its own dkdv_block_kv, dkdv_num_warps, dkdv_num_stages;
    the default at head dims <= 64 only (see `default`).
    fused_dq: where dK and dV are fused, a chunk is one tile (block_q = dkdv_block_kv = L) and a state tile
    spans the value head dim (state_block_v = Dv), and the backward recomputes the states: the recurrence
    applies each state to dH (the inter-chunk part of dQ) instead of storing it, and the dK/dV kernel also
    computes dQ (`triton_bwd.chunk_states_dq_kernel`, `chunk_dkdv_kernel` WITH_DQ).
    fused_gate_grads: the gate gradients in one kernel (`triton_bwd.gate_grads_kernel`) instead of
    `launch.gate_grads`' PyTorch ops (a dozen launches over [B*H, T] rows).
    dq_from_diagonal: the dQ kernel walks each query tile's key/value tiles from the diagonal down instead
    of from the chunk's first, so that the chunk's programs, which run at once, read different tiles at a
    time (as the dK kernel's do); a candidate (results/h100/profile-dq-dk-wide-heads: dQ 1.17x dK's time at
    9 x 160/160, L = 512, with 30 % more stall on its global loads).
    Dataclass defaults are generic; `Tiling.default` is the measured choice.
    """

    chunk: int
    block_state: int = 64
    state_block_qk: int = 64
    state_block_v: int = 64
    block_q: int = 64
    block_kv: int = 64
    block_qk: int = 64
    block_v: int = 64
    num_warps: int = 4
    num_stages: int = 1
    out_block_kv: int = 64
    out_block_v: int = 64
    out_num_warps: int = 4
    out_num_stages: int = 1
    out_q_tiles: int = 1
    out_prefix_max: bool = True
    out_tma: bool = False
    bwd_tma: bool = False
    dv_block_v: int = 64
    dv_num_stages: int = 0
    state_num_warps: int = 4
    state_num_stages: int = 1
    fused_dkdv: bool = False
    dkdv_block_kv: int = 64
    dkdv_num_warps: int = 8
    dkdv_num_stages: int = 1
    fused_dq: bool = False
    fused_gate_grads: bool = False
    dq_from_diagonal: bool = False

    @property
    def dv_stages(self) -> int:
        """Pipeline stages of the dV kernel."""
        return self.dv_num_stages or self.num_stages

    def uses_fused_dkdv(self, head_dim_qk: int, head_dim_v: int) -> bool:
        powers_of_two = not (head_dim_qk & (head_dim_qk - 1) or head_dim_v & (head_dim_v - 1))
        return self.fused_dkdv and powers_of_two and head_dim_qk * head_dim_v <= 128 * 256

    def uses_fused_dq(self, head_dim_qk: int, head_dim_v: int) -> bool:
        one_tile = self.block_q == self.chunk and self.dkdv_block_kv == self.chunk
        whole_values = self.state_block_v == head_dim_v
        return self.fused_dq and one_tile and whole_values and self.uses_fused_dkdv(head_dim_qk, head_dim_v)

    @classmethod
    def default(cls, chunk: int, head_dim_qk: int, head_dim_v: int, *, variant: str = "sig",
                limit: bool = False, exact_head_blocks: bool = False,
                former_output_tiles: bool = False, former_value_blocks: bool = False,
                former_state_blocks: str | None = None) -> Tiling:
        """The fastest tiling measured on an H200 for Dqk 128 / Dv 256 (results/perf-log.md), generalized
        to other head dims by taking the largest power-of-two blocks that divide them, or masked wider ones
        where those are narrower than 64 (`launch.head_dim_block`; exact_head_blocks: the dividing ones
        always, the blocks of the kernels before v13). mLSTMexp's output
        kernel takes key/value tiles of 32 at Dv <= 64 (at 32 x 64/64, T = 8k, forward 3-11 % faster than
        64) and mLSTMsig's 64 above (16 x 128/256: 1-5 % faster than 32; H200,
        results/h200/ab-exp-prefix-max).
        limit_chunk at L = 128 (128-row tiles) takes head-dim blocks of at most 64: with 128 it needed
        291 KB of shared memory at Dqk 256 / Dv 512 on an H200 (227 KB available); not yet timed.
        xl_chunk's dV kernel takes value blocks of up to 256 (K Q^T computed once per key tile at Dv 256
        instead of twice: forward + backward 2.6-3.0 % faster at 128/256, L 128, in three runs; 112 KB of
        shared memory at 128/256 and 152 KB at 256/512 and above, scripts/kernel_resources.py). Its output
        programs take two query tiles each where the chunk has two or more (the state tile read once for
        both: Nsight Compute showed the output kernel bound by L2 throughput, results/perf-log.md v5). At
        Dqk > 128 its output kernel takes one query tile and one pipeline stage: with two of either it needed
        136-192 KB of shared memory there, one program per SM (one stage, one tile: 64 KB; forward 10-27 %
        faster at Dqk = Dv = 256 and 512, results/perf-log.md v5). At head dims <= 64 dK and dV come from one
        kernel of 4 warps and 2 stages (q, k, v, dh and the state gradient read once for both: forward +
        backward 9-17 % faster at 32 x 64/64, T = 2k ... 64k, L 64 and 128, on an H100,
        results/h100/ab-small-head-backward); at Dqk 128 / Dv 256 the split kernels were faster (H200).
        Where a chunk is one tile there, that kernel also computes dQ (`fused_dq`: fwd+bwd 3-8 % faster at
        32 x 64/64, L 64, T = 2k ... 32k, H100, results/h100/ab-fused-dq) and runs one stage, its loop
        making one trip (3 % faster than two, which spill 192 bytes, results/h100/ab-fused-dq-dkdv).
        The state and state-gradient recurrences run two pipeline stages (their next sub-chunk's loads in
        flight during the current one's update; sm_90: equal occupancy, fewer registers, no stack): mLSTMsig
        forward 4-6 % faster at 16 x 128/256, T = 8192, and 12-24 % at T = 65,536 (B x H = 16), L 128 and
        256, on an H100 (results/h100/ab-state-tiles-v7).
        Where a head dim exceeds 64 and the blocks divide the head dims, the output kernel (at Dqk <= 128)
        and the dQ, dK and dV kernels move their tiles through tensor descriptors (`out_tma`, `bwd_tma`),
        mLSTMexp's output kernel with one query tile per program (two programs per SM): forward 3-9 %,
        fwd+bwd 0-11 % faster on an H100 and an H200 at 16 x 128/256, 32 x 128/128 and (the gradient
        kernels) 8 x 256/512; at 32 x 64/64 0-14 % slower on the H200, so pointer tiles there
        (results/perf-log.md, v15), with one query tile per output program (128 registers, two programs per
        SM: the best forward there 4-11 % faster on both GPUs, results/h100/ab-small-head-query-tiles).
        The backward's gate gradients come from one kernel (`fused_gate_grads`) instead of a dozen PyTorch
        ops: fwd+bwd 0.3-3.8 % faster at tfla-grid's head dims, T = 8192 and 65,536, states recomputed or
        kept, on an H100 and an H200 (results/h100/ab-gate-grads-segments, v16).
        Value head dims between 128 and 256 take masked value blocks of 128 in the output kernel and of 256
        in the dV kernel (pointer tiles there), at 192 too, where 64 divides: each of those programs
        recomputes the scores Q K^T for its block, three times per chunk at 64. Forward 11-13 % and
        fwd+bwd 7-10 % faster (best chunk size against best) for mLSTMsig at 16 x 64/192, mLSTMexp's
        forward 19-20 % at 16 x 192/192, on an H100 and an H200 (results/{h100,h200}/ab-value-blocks-192;
        the output kernel at 64/192, L = 128, had been issue-bound: 2.9x the instructions of 64/128 for 1.3x
        its DRAM bytes, results/h100/profile-output-value-blocks). mLSTMsig keeps 64-wide output blocks
        where Dqk > 128 (its forward at 192/192 was 5-7 % slower with 128).
        Where Dqk exceeds 128 and 64 does not divide it (two or more masked query/key blocks), the state
        recurrences and state gradients take the value block that pads the fewest columns
        (`launch.least_padded_block`: masked 64 at Dv 144-176 and 272-304, where two 128-wide blocks would
        cover 1.45-1.78x the head dim), and at Dv 144-176 the dV kernel two 128-wide blocks (its masked
        256-wide one spilled 104-208 bytes of stack and ran one program per SM): fwd+bwd 7-12 % faster at
        12 x 160/160, 6-9 % at 12 x 144/144 and 4-9 % at 12 x 144/176, forward 0-6 %, on an H100 and an
        H200 (results/{h100,h200}/ab-state-blocks-160, holdout-v18-state-blocks, holdout-v19-masked-qk),
        and 8 x 176/176 (results/{h100,h200}/holdout-v20-state-blocks). There the dV kernel takes 128-wide
        blocks wherever its 256-wide ones would be masked, above Dv 256 too (three covering 384 of 288
        columns instead of two covering 512, and no stack where the 256-wide block spilled 104-208 bytes):
        fwd+bwd 5.5-11.5 % faster at 8 x 144/288 on both GPUs (the same run); held out at 12 x 144/192
        and 8 x 208/288, v20's masked 256-wide block 2.4-12.1 % slower
        (results/{h100,h200}/holdout-v21-dv-blocks).
        At other query/key head dims they were not faster: fwd+bwd 0-5 % slower at 16 x 128/176,
        12 x 192/160 and (mLSTMsig) 16 x 80/160, even at 8 x 128/288 (the same runs, and
        results/h100/ab-blocks-176); 128-wide dV blocks 2-5 % slower at 16 x 64/192 and 16 x 192/192
        (results/h100/ab-dv-block-192). 64-wide output, dQ and dK blocks were 8-15 % slower at 160/160 (each
        program recomputes the scores for its block, results/{h100,h200}/ab-masked-blocks-160).
        former_output_tiles: the pointer tiles and query tiles per output program of the kernels before
        v15; former_value_blocks: the value blocks of those before v17 (64 at Dv 192); former_state_blocks
        "v17": the state value blocks and dV blocks of those before v18 (128 and 256 at Dv 144-176), "v18":
        v18's (least-padded state blocks and 128-wide dV blocks at every Dqk), "v19": v19's (where 64 does
        not divide Dqk), "v20": v20's (the dV kernel's masked 256-wide blocks over such Dqk outside Dv
        144-176)."""
        tile = chunk if limit else min(64, chunk)
        small_heads = head_dim_qk <= 64 and head_dim_v <= 64
        out_tile = tile if limit or variant == "sig" or head_dim_v > 64 else min(32, chunk)
        head_block = 64 if tile >= 128 else 128
        wide_qk = head_dim_qk > 128 and not limit
        block_of = largest_pow2_block if exact_head_blocks else head_dim_block
        value_block = block_of(head_dim_v, head_block)
        qk_block = block_of(head_dim_qk, head_block)
        blocks_divide = head_dim_qk % qk_block == 0 and head_dim_v % value_block == 0
        masked_values = not (limit or former_value_blocks) and 128 < head_dim_v < 256
        out_value_block = 128 if masked_values and not (variant == "sig" and wide_qk) else value_block
        masked_qk = head_dim_qk % qk_block != 0
        least_padded_states = {"v17": False, "v18": True, "v19": masked_qk}.get(
            former_state_blocks, masked_qk and head_dim_qk > 128)
        wide_state_block = block_of(head_dim_v, 128)
        state_value_block = least_padded_block(head_dim_v, 128) if least_padded_states else wide_state_block
        wide_dv_block = 256 if masked_values else block_of(head_dim_v, 256)
        if former_state_blocks is None:
            narrow_dv = least_padded_states and wide_dv_block == 256 and head_dim_v % 256 != 0
        else:
            narrow_dv = masked_values and state_value_block < wide_state_block
        dv_block = value_block if limit else 128 if narrow_dv else wide_dv_block
        descriptors = not (former_output_tiles or limit or small_heads)
        descriptor_tiles = descriptors and blocks_divide and not wide_qk
        out_tma = descriptor_tiles and head_dim_v % out_value_block == 0
        exp_one_tile = descriptor_tiles and variant == "exp"
        one_tile_per_program = not former_output_tiles and (small_heads or exp_one_tile)
        q_tiles = 1 if limit or wide_qk or chunk < 2 * tile or one_tile_per_program else 2
        return cls(
            chunk=chunk,
            block_state=min(128, chunk),
            state_block_qk=block_of(head_dim_qk, 64),
            state_block_v=state_value_block,
            block_q=tile,
            block_kv=tile,
            block_qk=qk_block,
            block_v=value_block,
            num_stages=2,
            out_num_stages=1 if wide_qk else 2,
            out_block_kv=out_tile,
            out_block_v=out_value_block,
            out_q_tiles=q_tiles,
            out_tma=out_tma,
            dv_block_v=dv_block,
            bwd_tma=descriptors and blocks_divide,
            fused_dkdv=small_heads,
            fused_dq=small_heads,
            dkdv_block_kv=tile,
            dkdv_num_warps=4 if small_heads else 8,
            dkdv_num_stages=2 if small_heads and chunk > tile else 1,
            state_num_stages=2,
            fused_gate_grads=True,
        )

    def for_chunk(self, chunk: int) -> Tiling:
        """This tiling at chunk size ``chunk``, its dK/dV key tile and output key tile clamped to the chunk
        and the query tile."""
        clamp = self.dkdv_block_kv > chunk or self.out_block_kv > self.block_q
        if self.chunk == chunk and not clamp:
            return self
        return replace(self, chunk=chunk, dkdv_block_kv=min(self.dkdv_block_kv, chunk),
                       out_block_kv=min(self.out_block_kv, self.block_q))

    def head_dim_blocks(self, head_dim_qk: int, head_dim_v: int,
                        backward: bool = True) -> list[tuple[int, int]]:
        """(head dim, block) of every head-dim block the kernels of a forward (and ``backward``) pass run:
        the query/key blocks over Dqk, the value blocks over Dv (the dV kernel's in the backward only)."""
        value_blocks = [self.block_v, self.out_block_v, self.state_block_v]
        if backward:
            value_blocks.append(self.dv_block_v)
        return ([(head_dim_qk, block) for block in (self.block_qk, self.state_block_qk)]
                + [(head_dim_v, block) for block in value_blocks])

    def check(self, head_dim_qk: int, head_dim_v: int) -> None:
        blocks = ("chunk", "block_state", "state_block_qk", "state_block_v", "block_q", "block_kv",
                  "block_qk", "block_v", "dkdv_block_kv", "out_block_kv", "out_block_v", "dv_block_v")
        for name in blocks:
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise InputError(f"tiling {name}={value} must be a power of two >= 16")
        if self.chunk % self.block_q or self.chunk % self.block_state or self.block_q % self.block_kv:
            raise InputError(f"tiling: block_q ({self.block_q}) and block_state ({self.block_state}) must "
                             f"divide the chunk ({self.chunk}), block_kv ({self.block_kv}) block_q")
        if self.chunk % self.dkdv_block_kv or self.block_q % self.out_block_kv:
            raise InputError(f"tiling: dkdv_block_kv ({self.dkdv_block_kv}) must divide the chunk "
                             f"({self.chunk}), out_block_kv ({self.out_block_kv}) must divide block_q")
        if self.dv_num_stages < 0:
            raise InputError(f"tiling: dv_num_stages must be >= 0 (0: num_stages), got {self.dv_num_stages}")
        if self.out_q_tiles < 1 or self.chunk % (self.block_q * self.out_q_tiles):
            raise InputError(f"tiling: out_q_tiles ({self.out_q_tiles}) query tiles of {self.block_q} must "
                             f"divide the chunk ({self.chunk})")


#: bytes to which TMA's base addresses and strides must be aligned
TMA_ALIGNMENT = 16


def _tma_ready(tensors, head_dims: tuple[int, int], blocks: tuple[int, int]) -> bool:
    """Whether a kernel may move these contiguous [B, T, H, D] tensors and the chunk states through tensor
    descriptors of their [B*T, H*D] matrices (`_token_descriptor`): aligned bases and rows, head-dim blocks
    (BK, BV) that divide the head dims (Dqk, Dv) (a block past a head's columns would read the next head's),
    and on a GPU 16-bit inputs (the GPU suites check bf16 and fp16 there; the interpreter any dtype)."""
    def ready(x):
        row_bytes = x.shape[2] * x.shape[3] * x.element_size()
        aligned = x.data_ptr() % TMA_ALIGNMENT == 0 and row_bytes % TMA_ALIGNMENT == 0
        return x.is_contiguous() and aligned and (x.element_size() == 2 or x.device.type == "cpu")

    return all(ready(x) for x in tensors) and head_dims[0] % blocks[0] == 0 and head_dims[1] % blocks[1] == 0


def _matrix_descriptor(x: torch.Tensor, cols: int, block_rows: int, block_cols: int):
    """Tensor descriptor of contiguous x as a [numel / cols, cols] matrix, in [block_rows, block_cols]
    tiles."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(x, [x.numel() // cols, cols], [cols, 1], [block_rows, block_cols])


def _token_descriptor(x: torch.Tensor, block_rows: int, block_cols: int):
    """A [B, T, H, D] tensor as its [B*T, H*D] matrix (`triton_fwd.token_source`)."""
    return _matrix_descriptor(x, x.shape[2] * x.shape[3], block_rows, block_cols)


def _state_descriptor(states: torch.Tensor, block_rows: int, block_cols: int):
    """Chunk states [B*H, NC, Dqk, Dv] as their [B*H*NC*Dqk, Dv] matrix (`triton_fwd.state_source`)."""
    return _matrix_descriptor(states, states.shape[-1], block_rows, block_cols)


def _gradient_sources(q, k, v, dh, states, grad, grad_of: str, tiling: Tiling, block_v: int):
    """(TMA, (q, k, v, dh, states, grad)) of a gradient kernel (dQ, dK or dV: grad_of "q", "k" or "v", grad
    laid out as that input): with `Tiling.bwd_tma` where `_tma_ready`, tensor descriptors in the kernel's
    tiles (query rows block_q, key rows block_kv, Dqk columns block_qk, Dv columns block_v), else the
    tensors."""
    DQK, DV = q.shape[-1], v.shape[-1]
    tensors = (q, k, v, dh, states, grad)
    if not (tiling.bwd_tma and _tma_ready((q, k, v, dh, grad), (DQK, DV), (tiling.block_qk, block_v))):
        return False, tensors
    BLQ, BLKV, BK = tiling.block_q, tiling.block_kv, tiling.block_qk
    grad_block = {"q": (BLQ, BK), "k": (BLKV, BK), "v": (BLKV, block_v)}[grad_of]
    return True, (_token_descriptor(q, BLQ, BK), _token_descriptor(k, BLKV, BK),
                  _token_descriptor(v, BLKV, block_v), _token_descriptor(dh, BLQ, block_v),
                  _state_descriptor(states, BK, block_v), _token_descriptor(grad, *grad_block))


def _chunk_launch(tile_blocks_0: int, tile_blocks_1: int, chunk_programs: int) -> tuple[tuple[int], dict]:
    """(grid, tile-count arguments) of a kernel whose 1-D grid `triton_fwd.chunk_program` decodes:
    tile_blocks_0 * tile_blocks_1 programs for each of the chunk_programs = NC * B * H chunks."""
    grid = (tile_blocks_0 * tile_blocks_1 * chunk_programs,)
    return grid, {"tiles_0": tile_blocks_0, "tiles_1": tile_blocks_1}


@dataclass
class _Forward:
    """What the forward pass computes; all but h are kept for the backward pass."""

    h: torch.Tensor | None
    states: torch.Tensor | None  # [B*H, NC, Dqk, Dv], states before each chunk (matmul operand dtype)
    norms: torch.Tensor | None  # [B*H, NC, Dqk] fp32 (the output kernel's; the backward pass needs none)
    maxes: torch.Tensor  # [B*H, NC+1] fp32
    c_last: torch.Tensor  # [B*H, Dqk, Dv] fp32
    n_last: torch.Tensor | None  # [B*H, Dqk] fp32 (returned, not needed backward)
    denom: torch.Tensor  # [B*H, T]
    m_comb: torch.Tensor  # [B*H, T]
    log_f_cumsum: torch.Tensor  # [B*H, T]
    log_i: torch.Tensor  # [B*H, T]
    chunk_max: torch.Tensor | None  # [B*H, NC] fp32, mLSTMexp only (see `_gate_cumsums`)
    state_dtype: torch.dtype


def _gate_cumsums(i, f, tiling: Tiling, sig: bool, prefix_max: bool = False):
    """log_f_cumsum, log_i [B*H, T] fp32; when prefix_max, their prefix max [B*H, T] (else None); for
    mLSTMexp each chunk's largest log weight [B*H, NC] (else None). See `gate_cumsum_kernel`."""
    B, T, H = f.shape
    log_f_cumsum = torch.empty(B * H, T, device=f.device, dtype=torch.float32)
    log_i = torch.empty_like(log_f_cumsum)
    gate_max = torch.empty_like(log_f_cumsum) if prefix_max else None
    chunk_max = None if sig else torch.empty(B * H, T // tiling.chunk, device=f.device, dtype=torch.float32)
    grid = (T // tiling.chunk, B * H)
    triton_fwd.gate_cumsum_kernel[grid](
        i, f, log_f_cumsum, log_i, log_i if gate_max is None else gate_max,
        log_i if chunk_max is None else chunk_max, *f.stride(), T, H,
        L=tiling.chunk, BL=tiling.block_state, SIG_INPUT_GATE=sig, PREFIX_MAX=prefix_max, CHUNK_MAX=not sig,
    )
    return log_f_cumsum, log_i, gate_max, chunk_max


def _initial_or_placeholder(initial, placeholder: torch.Tensor) -> tuple:
    """(C_0, n_0, m_0), or ``placeholder`` in their place when there is no initial state (the kernels, run
    with HAS_INITIAL false, never read it)."""
    return initial if initial is not None else (placeholder,) * 3


def _chunk_states(k, v, log_f_cumsum, log_i, chunk_max, initial, tiling: Tiling, track_n: bool,
                  state_dtype: torch.dtype):
    """Launch the state recurrence (stabilized, mLSTMexp, when chunk_max is given). Returns states, norms,
    maxes, c_last, n_last (see `_Forward`)."""
    B, T, H, DQK = k.shape
    DV = v.shape[-1]
    NC = T // tiling.chunk
    device = k.device
    states = torch.empty(B * H, NC, DQK, DV, device=device, dtype=state_dtype)
    c_last = torch.empty(B * H, DQK, DV, device=device, dtype=torch.float32)
    n_last = torch.zeros(B * H, DQK, device=device, dtype=torch.float32)
    norms = torch.empty(B * H, NC, DQK, device=device, dtype=torch.float32) if track_n else c_last
    maxes = torch.zeros(B * H, NC + 1, device=device, dtype=torch.float32)
    c0, n0, m0 = _initial_or_placeholder(initial, c_last)
    grid = (block_count(DQK, tiling.state_block_qk), block_count(DV, tiling.state_block_v), B * H)
    triton_fwd.chunk_states_kernel[grid](
        k, v, log_f_cumsum, log_i, log_i if chunk_max is None else chunk_max, c0, n0, m0,
        states, norms, maxes, c_last, n_last,
        *token_strides(k), *token_strides(v), T, H, NC,
        DQK=DQK, DV=DV, L=tiling.chunk, BL=tiling.block_state, BK=tiling.state_block_qk,
        BV=tiling.state_block_v, STABILIZE=chunk_max is not None, TRACK_N=track_n,
        HAS_INITIAL=initial is not None,
        num_warps=tiling.state_num_warps, num_stages=tiling.state_num_stages,
    )
    return states, norms, maxes, c_last, n_last


def _forward(q, k, v, i, f, initial, tiling: Tiling, sig: bool, normalize: bool, eps: float,
             state_dtype: torch.dtype) -> _Forward:
    B, T, H, DQK = q.shape
    DV = v.shape[-1]
    NC = T // tiling.chunk
    stabilize = not sig
    prefix_max = stabilize and tiling.out_prefix_max
    log_f_cumsum, log_i, gate_max, chunk_max = _gate_cumsums(i, f, tiling, sig, prefix_max)
    states, norms, maxes, c_last, n_last = _chunk_states(
        k, v, log_f_cumsum, log_i, chunk_max, initial, tiling, normalize, state_dtype)
    h = torch.empty(B, T, H, DV, device=q.device, dtype=q.dtype)
    denom = torch.empty(B * H, T, device=q.device, dtype=torch.float32) if normalize else log_i
    m_comb = torch.empty(B * H, T, device=q.device, dtype=torch.float32) if stabilize else log_i
    query_tile_groups = tiling.chunk // (tiling.block_q * tiling.out_q_tiles)
    grid, tiles = _chunk_launch(block_count(DV, tiling.out_block_v), query_tile_groups, NC * B * H)
    tma = tiling.out_tma and _tma_ready((q, k, v, h), (DQK, DV), (tiling.block_qk, tiling.out_block_v))
    q_src, k_src, v_src, h_dst, c_src = q, k, v, h, states
    if tma:
        BLQ, BLKV, BK, BV = tiling.block_q, tiling.out_block_kv, tiling.block_qk, tiling.out_block_v
        q_src, k_src = _token_descriptor(q, BLQ, BK), _token_descriptor(k, BLKV, BK)
        v_src, h_dst = _token_descriptor(v, BLKV, BV), _token_descriptor(h, BLQ, BV)
        c_src = _state_descriptor(states, BK, BV)
    triton_fwd.chunk_outputs_kernel[grid](
        q_src, k_src, v_src, log_f_cumsum, log_i, log_i if gate_max is None else gate_max, c_src, norms,
        maxes, h_dst, denom, m_comb,
        *token_strides(q), *token_strides(k), *token_strides(v), *token_strides(h),
        T, H, NC, 1.0 / math.sqrt(DQK), eps, **tiles,
        DQK=DQK, DV=DV, L=tiling.chunk, BLQ=tiling.block_q, BLKV=tiling.out_block_kv,
        BK=tiling.block_qk, BV=tiling.out_block_v, Q_TILES=tiling.out_q_tiles, STABILIZE=stabilize,
        NORMALIZE=normalize, PREFIX_MAX=prefix_max, TMA=tma, num_warps=tiling.out_num_warps,
        num_stages=tiling.out_num_stages,
    )
    return _Forward(h, states, norms, maxes, c_last, n_last, denom, m_comb, log_f_cumsum, log_i, chunk_max,
                    state_dtype)


def _backward(q, k, v, i, f, dh, dc_last, fwd: _Forward, initial, tiling: Tiling, sig: bool, normalize: bool):
    """Returns dq, dk, dv, di, df, dc0 (dc0 is the gradient of the initial state C_0).

    initial: fp32 (C_0, n_0, m_0) or None, for the states that the backward recomputes where the forward
    pass did not keep them. The order (dQ with the states, then the state gradients, then dK/dV) keeps at
    most one of states and state gradients alive; with `Tiling.uses_fused_dq` the recomputed states are
    never stored (dQ's inter-chunk part comes from the recurrence, the rest from the dK/dV kernel).
    """
    B, T, H, DQK = q.shape
    DV = v.shape[-1]
    NC = T // tiling.chunk
    stabilize = not sig
    qk_scale = 1.0 / math.sqrt(DQK)
    flags = dict(STABILIZE=stabilize, NORMALIZE=normalize)
    launch = dict(num_warps=tiling.num_warps, num_stages=tiling.num_stages)
    dims = dict(DQK=DQK, DV=DV, L=tiling.chunk)
    blocks = dict(BK=tiling.block_qk, BV=tiling.block_v, BLQ=tiling.block_q, BLKV=tiling.block_kv)
    gates = (fwd.log_f_cumsum, fwd.log_i, fwd.maxes, fwd.m_comb, fwd.denom)
    strides_qkvh = (*token_strides(q), *token_strides(k), *token_strides(v), *token_strides(dh))
    bh_shape = (B * H, T)
    num_qk_blocks = block_count(DQK, tiling.block_qk)

    dq = empty_with_strides_of(q)
    fused_dq = fwd.states is None and tiling.uses_fused_dq(DQK, DV)
    if fused_dq:
        q_dq = torch.empty(1, *bh_shape, device=q.device, dtype=torch.float32)
        _states_dq(k, v, dh, fwd, initial, dq, tiling, qk_scale, normalize)
    else:
        states = fwd.states if fwd.states is not None else _recompute_states(k, v, fwd, initial, tiling)
        q_dq = torch.empty(num_qk_blocks, *bh_shape, device=q.device, dtype=torch.float32)
        grid, tiles = _chunk_launch(num_qk_blocks, tiling.chunk // tiling.block_q, NC * B * H)
        tma, (q_src, k_src, v_src, dh_src, c_src, dq_dst) = _gradient_sources(
            q, k, v, dh, states, dq, "q", tiling, tiling.block_v)
        triton_bwd.chunk_dq_kernel[grid](
            q_src, k_src, v_src, dh_src, *gates, c_src, dq_dst, q_dq, *strides_qkvh, T, H, NC, qk_scale,
            **tiles, **dims, **blocks, **flags, **launch, TMA=tma, FROM_DIAGONAL=tiling.dq_from_diagonal,
        )
        del states

    dstates = torch.empty(B * H, NC, DQK, DV, device=q.device, dtype=fwd.state_dtype)
    dc0 = torch.empty(B * H, DQK, DV, device=q.device, dtype=torch.float32)
    has_dc_last = dc_last is not None
    state_grid = (block_count(DQK, tiling.state_block_qk), block_count(DV, tiling.state_block_v), B * H)
    triton_bwd.chunk_state_grads_kernel[state_grid](
        q, dh, fwd.log_f_cumsum, fwd.maxes, fwd.m_comb, fwd.denom,
        dc_last if has_dc_last else dc0, dstates, dc0,
        *token_strides(q), *token_strides(dh), T, H, NC, qk_scale,
        BL=tiling.block_state, BK=tiling.state_block_qk, BV=tiling.state_block_v, HAS_DC_LAST=has_dc_last,
        **dims, **flags, num_warps=tiling.state_num_warps, num_stages=tiling.state_num_stages,
    )
    dk = empty_with_strides_of(k)
    dv = empty_with_strides_of(v)
    if tiling.uses_fused_dkdv(DQK, DV):
        k_dk = torch.empty(1, *bh_shape, device=q.device, dtype=torch.float32)
        grid, tiles = _chunk_launch(tiling.chunk // tiling.dkdv_block_kv, 1, NC * B * H)
        triton_bwd.chunk_dkdv_kernel[grid](
            q, k, v, dh, *gates, dstates, dk, dv, k_dk, dq, q_dq, *strides_qkvh, T, H, NC, qk_scale, **tiles,
            BLQ=tiling.block_q, BLKV=tiling.dkdv_block_kv, **dims, **flags, WITH_DQ=fused_dq,
            num_warps=tiling.dkdv_num_warps, num_stages=tiling.dkdv_num_stages,
        )
    else:
        k_dk = torch.empty(num_qk_blocks, *bh_shape, device=q.device, dtype=torch.float32)
        grid, tiles = _chunk_launch(num_qk_blocks, tiling.chunk // tiling.block_kv, NC * B * H)
        tma, (q_src, k_src, v_src, dh_src, dc_src, dk_dst) = _gradient_sources(
            q, k, v, dh, dstates, dk, "k", tiling, tiling.block_v)
        triton_bwd.chunk_dk_kernel[grid](
            q_src, k_src, v_src, dh_src, *gates, dc_src, dk_dst, k_dk, *strides_qkvh, T, H, NC, qk_scale,
            **tiles, **dims, **blocks, **flags, **launch, TMA=tma,
        )
        grid, tiles = _chunk_launch(block_count(DV, tiling.dv_block_v), tiling.chunk // tiling.block_kv,
                                    NC * B * H)
        tma, (q_src, k_src, _, dh_src, dc_src, dv_dst) = _gradient_sources(
            q, k, v, dh, dstates, dv, "v", tiling, tiling.dv_block_v)
        triton_bwd.chunk_dv_kernel[grid](
            q_src, k_src, dh_src, *gates, dc_src, dv_dst,
            *token_strides(q), *token_strides(k), *token_strides(dh), *token_strides(dv),
            T, H, NC, qk_scale, **tiles, **dims, **(blocks | {"BV": tiling.dv_block_v}), **flags,
            **(launch | {"num_stages": tiling.dv_stages}), TMA=tma,
        )
    if tiling.fused_gate_grads:
        di, df = _gate_grads(q_dq, k_dk, i, f, fwd.c_last, dc_last, sig)
    else:
        di, df = gate_grads(q_dq.sum(0), k_dk.sum(0), i, f, fwd.c_last, dc_last, sig)
    return dq, dk, dv, di, df, dc0.view(B, H, DQK, DV)


#: the most tokens per step of `triton_bwd.gate_grads_kernel`'s walk
GATE_GRADS_BLOCK = 1024
#: tokens per program of `triton_bwd.gate_grads_kernel` (a multiple of every walk step, powers of two to
#: GATE_GRADS_BLOCK)
GATE_GRADS_SEGMENT = 8192
#: tokens per load of the sum over the tokens after a program's segment
GATE_GRADS_SUM_BLOCK = 4096


@dataclass(frozen=True)
class GateGradsGrid:
    """How `triton_bwd.gate_grads_kernel` splits a row of T tokens: segments of `segment` tokens (one program
    each), walked in steps of `block` tokens after summing the later tokens in loads of `sum_block`."""

    block: int
    segment: int
    sum_block: int

    @classmethod
    def for_seq_len(cls, seq_len: int) -> GateGradsGrid:
        return cls(min(GATE_GRADS_BLOCK, next_pow2(seq_len)), GATE_GRADS_SEGMENT, GATE_GRADS_SUM_BLOCK)

    def segments(self, seq_len: int) -> int:
        return math.ceil(seq_len / self.segment)

    def later_tokens(self, seq_len: int, segment: int) -> int:
        """Tokens after segment ``segment``: what its program sums before walking."""
        return max(0, seq_len - (segment + 1) * self.segment)

    def longest_program_steps(self, seq_len: int) -> int:
        """Loop trips of the first segment's program (the most): its loads of the later tokens, its walk."""
        return (math.ceil(self.later_tokens(seq_len, 0) / self.sum_block)
                + math.ceil(min(seq_len, self.segment) / self.block))


def _gate_grads(q_dq, k_dk, i, f, c_last, dc_last, sig: bool):
    """`launch.gate_grads` in one launch (`triton_bwd.gate_grads_kernel`), from the row sums per Dqk block
    q_dq [blocks, B*H, T] and k_dk [blocks, B*H, T]. Returns di, df [B, T, H] in the dtypes of i, f."""
    B, T, H = f.shape
    i, f = i.contiguous(), f.contiguous()
    final = None if dc_last is None else final_state_term(c_last, dc_last)
    di, df = torch.empty_like(i), torch.empty_like(f)
    grid = GateGradsGrid.for_seq_len(T)
    triton_bwd.gate_grads_kernel[(B * H, grid.segments(T))](
        q_dq, k_dk, i, f, q_dq if final is None else final, di, df, *i.stride(), B * H, T, H,
        Q_BLOCKS=q_dq.shape[0], K_BLOCKS=k_dk.shape[0], BT=grid.block, SEGMENT=grid.segment,
        SUM_BT=grid.sum_block, SIG=sig, HAS_FINAL=final is not None,
    )
    return di, df


def _states_dq(k, v, dh, fwd: _Forward, initial, dq, tiling: Tiling, qk_scale: float,
               normalize: bool) -> None:
    """The state recurrence again, each state applied to its chunk's output gradients: writes the
    inter-chunk part of dQ into dq (`triton_bwd.chunk_states_dq_kernel`)."""
    B, T, H, DQK = k.shape
    DV = v.shape[-1]
    stabilize = fwd.chunk_max is not None
    c0, _, m0 = _initial_or_placeholder(initial, dq)
    triton_bwd.chunk_states_dq_kernel[(block_count(DQK, tiling.state_block_qk), B * H)](
        k, v, dh, fwd.log_f_cumsum, fwd.log_i, fwd.chunk_max if stabilize else fwd.log_i, fwd.maxes,
        fwd.m_comb, fwd.denom, c0, m0, dq,
        *token_strides(k), *token_strides(v), *token_strides(dh), *token_strides(dq),
        T, H, T // tiling.chunk, qk_scale,
        DQK=DQK, DV=DV, L=tiling.chunk, BL=tiling.block_state, BK=tiling.state_block_qk,
        STABILIZE=stabilize, NORMALIZE=normalize, HAS_INITIAL=initial is not None,
        num_warps=tiling.state_num_warps, num_stages=tiling.state_num_stages,
    )


def _recompute_states(k, v, fwd: _Forward, initial, tiling: Tiling) -> torch.Tensor:
    """The chunk states [B*H, NC, Dqk, Dv] again, for a backward pass whose forward did not keep them."""
    states, *_ = _chunk_states(k, v, fwd.log_f_cumsum, fwd.log_i, fwd.chunk_max, initial, tiling, False,
                               fwd.state_dtype)
    return states


def tfla_backward(q, k, v, i, f, dh, dc_last, initial, row_stats, *, chunk_size: int, variant: str,
                  normalize: bool, fused_dq: bool = True):
    """The TFLA backward pass after a forward pass computed by another algorithm (`fused_chunk`).

    row_stats: (denom, m_comb [B*H, T], maxes [B*H, NC+1], c_last [B*H, Dqk, Dv]) as the TFLA forward writes
    them (one max update per chunk, m_{k+1} = max(b[L-1] + m_k, a_k)). initial: fp32 (C_0, n_0, m_0) or
    None. The tiling is `Tiling.default`, its fused_dq off unless ``fused_dq``. Returns dq, dk, dv, di,
    df, dc0 as `_backward`.
    """
    B, T, H, DQK = q.shape
    tiling = Tiling.default(chunk_size, DQK, v.shape[-1], variant=variant)
    tiling = tiling if fused_dq else replace(tiling, fused_dq=False)
    sig = variant == "sig"
    denom, m_comb, maxes, c_last = row_stats
    log_f_cumsum, log_i, _, chunk_max = _gate_cumsums(i, f, tiling, sig)
    fwd = _Forward(None, None, None, maxes, c_last, None, denom, m_comb, log_f_cumsum, log_i, chunk_max,
                   q.dtype)
    return _backward(q, k, v, i, f, dh, dc_last, fwd, initial, tiling, sig, normalize)


@dataclass(frozen=True)
class _Config:
    tiling: Tiling
    sig: bool
    normalize: bool
    eps: float
    recompute_states: bool
    return_final_state: bool
    state_dtype: torch.dtype


class _MLSTMChunkwise(torch.autograd.Function):
    """Outputs h, and with config.return_final_state also (C_T, n_T, m_T); C_0 gets a gradient."""

    @staticmethod
    def forward(ctx, config: _Config, q, k, v, i, f, c0, n0, m0):
        ctx.set_materialize_grads(False)
        initial = None if c0 is None else tuple(x.float().contiguous() for x in (c0, n0, m0))
        fwd = _forward(q, k, v, i, f, initial, config.tiling, config.sig, config.normalize, config.eps,
                       config.state_dtype)
        h, fwd.h = fwd.h, None  # h is not needed backward; keeping it in ctx would form a reference cycle
        if config.recompute_states:
            fwd.states = None
        ctx.config, ctx.fwd, ctx.has_initial = config, fwd, initial is not None
        ctx.save_for_backward(q, k, v, i, f, *(initial or ()))
        if not config.return_final_state:
            return h
        B, _, H, DQK = q.shape
        c_last = fwd.c_last.view(B, H, DQK, -1)
        n_last = fwd.n_last.view(B, H, DQK)
        m_last = fwd.maxes[:, -1].reshape(B, H)
        ctx.mark_non_differentiable(n_last, m_last)
        return h, c_last, n_last, m_last

    @staticmethod
    def backward(ctx, dh, dc_last=None, _dn_last=None, _dm_last=None):
        config, fwd = ctx.config, ctx.fwd
        q, k, v, i, f, *initial = ctx.saved_tensors
        initial = tuple(initial) if ctx.has_initial else None
        if dh is None:
            dh = torch.zeros(*q.shape[:3], v.shape[-1], device=q.device, dtype=q.dtype)
        dc_last = dc_last.float().contiguous() if dc_last is not None else None
        dq, dk, dv, di, df, dc0 = _backward(q, k, v, i, f, contiguous_last(dh), dc_last, fwd, initial,
                                            config.tiling, config.sig, config.normalize)
        return None, dq, dk, dv, di, df, dc0 if ctx.has_initial else None, None, None


def mlstm_chunkwise_triton(q, k, v, i, f, *, variant: str, chunk_size: int, normalize: bool | None,
                           eps: float, initial_state=None, return_final_state: bool = False,
                           recompute_states_in_bw: bool = True, tiling: Tiling | None = None,
                           limit: bool = False, state_dtype: torch.dtype | None = None):
    """Chunkwise mLSTM with the TFLA Triton kernels (inputs already validated by `tflabench.kernels.mlstm`).

    state_dtype: dtype of the materialized inter-chunk states in HBM (default: the dtype of q, which is the
    dtype they are cast to as matmul operands anyway; the recurrence and the returned final state are fp32).
    Returns h [B, T, H, Dv] (dtype of q), and (h, (C, n, m)) with return_final_state.
    """
    B, T, H, DQK = q.shape
    DV = v.shape[-1]
    tiling = tiling or Tiling.default(chunk_size, DQK, DV, variant=variant, limit=limit)
    tiling = tiling.for_chunk(chunk_size)
    tiling.check(DQK, DV)
    config = _Config(
        tiling=tiling, sig=variant == "sig", normalize=variant == "exp" or bool(normalize), eps=eps,
        recompute_states=recompute_states_in_bw, return_final_state=return_final_state,
        state_dtype=state_dtype or q.dtype,
    )
    q, k, v = (contiguous_last(x) for x in (q, k, v))
    i, f = i.contiguous(), f.contiguous()
    c0 = n0 = m0 = None
    if initial_state is not None:
        c0, n0, m0 = initial_state
        n0 = n0 if n0 is not None else torch.zeros(B, H, DQK, device=q.device)
        m0 = m0 if m0 is not None else torch.zeros(B, H, device=q.device)
    outputs = _MLSTMChunkwise.apply(config, q, k, v, i, f, c0, n0, m0)
    if return_final_state:
        h, c_last, n_last, m_last = outputs
        return h, (c_last, n_last, m_last)
    return outputs


def mlstm_xl_chunk(q, k, v, i, f, *, variant, chunk_size, normalize, eps, initial_state=None,
                   return_final_state=False, recompute_states_in_bw=True, tiling=None, state_dtype=None):
    """TFLA: two levels of sequence parallelism, any chunk size (power of two >= 16 dividing T)."""
    return mlstm_chunkwise_triton(
        q, k, v, i, f, variant=variant, chunk_size=chunk_size, normalize=normalize, eps=eps,
        initial_state=initial_state, return_final_state=return_final_state,
        recompute_states_in_bw=recompute_states_in_bw, tiling=tiling, state_dtype=state_dtype,
    )


def mlstm_limit_chunk(q, k, v, i, f, *, variant, chunk_size, normalize, eps, initial_state=None,
                      return_final_state=False, recompute_states_in_bw=True):
    """Single-level chunkwise kernel: one chunk is one SRAM tile, so chunk_size <= 128."""
    if chunk_size > LIMIT_CHUNK_MAX:
        raise InputError(f"limit_chunk supports chunk_size <= {LIMIT_CHUNK_MAX}, got {chunk_size}")
    return mlstm_chunkwise_triton(
        q, k, v, i, f, variant=variant, chunk_size=chunk_size, normalize=normalize, eps=eps,
        initial_state=initial_state, return_final_state=return_final_state,
        recompute_states_in_bw=recompute_states_in_bw, limit=True,
    )

