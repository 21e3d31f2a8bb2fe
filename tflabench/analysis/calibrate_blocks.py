"""Triton microbenchmarks of the building blocks the mLSTM kernels are made of (`tflabench calibrate`).

What the structural performance model (`analysis.structural`) needs to know about a GPU, each measured with
the whole GPU busy (aggregate rates, all SMs):

* ``dot``: `tl.dot` FLOP/s at the tile shapes the kernels use, [M, K] x [K, N] with fp32 accumulation, the
  operands loaded from global memory (an L2-resident buffer) every iteration as in the kernels' loops,
  with two pipeline stages (the next operands' loads in flight during this product) and with one (the
  rate the model gives launches of one stage, such as the reference's);
* ``pointwise``: fp32 element rates of the gate arithmetic on a tile: ``exp`` (with two multiply-adds, the
  shape of the gate matrix exp(b_i - b_j + ig_j)), plain multiply-add (the rescaling of tiles),
  ``row_reduce`` (a row max and a row sum with the subtraction and multiply-add that use them, what the
  mLSTMexp kernels with an online max add per score) and ``row_sum`` (a row sum and its multiply-add: the
  normalizer's sum over the scores, where the max comes from the gates' prefix max);
* ``memory``: load and store bandwidth of the access patterns of the kernels: token tiles [rows, head dim]
  of a [B, T, H, D] tensor (row stride H * D, the q/k/v/h reads and writes), the same with a head dim that
  is not a power of two read in masked power-of-two tiles (``token_masked``: [rows, 128] tiles of a
  [B, T, H, 96] tensor, the columns past 96 masked, as the kernels' masked head-dim blocks load them; a
  diagnosis the model does not use, docs/performance-model.md) and the [Dqk, Dv] state tiles of a
  [B*H, NC, Dqk, Dv] tensor (the state kernel's stores, the output kernel's loads);
* ``spills``: the local-memory traffic of register spills (a tile too large for the registers, updated in
  a loop by 4-warp programs, a stack larger than L2: an HBM-bound rate);
* ``spill_loops``: the time register spills add to a kernel-shaped loop of one or two 8-warp programs per
  SM (products into an accumulator beside a carried fp32 tile too large for the registers), per byte the
  loop's local loads and stores move, at stacks from L1-sized to larger than L2;
* ``walk``: seconds per step of one program per SM walking a sequence of tiles in order with a state
  carried from step to step, as the chunk-recurrent kernels do (the TFLA state recurrence; the fused
  kernels' chunk walk), with the kernels' own step code (`triton_fwd`'s recurrence step, `triton_fused`'s
  gates, products and state update): with nothing else on its SM, each step waits for the one before, so
  its latency, not a throughput, is what such a launch takes when its programs do not fill the GPU;
* ``launch``: seconds per launch of a back-to-back burst of one-program launches, and seconds per program of
  an (almost) empty kernel with many programs;
* ``device``: SM count, shared memory and registers per SM, L2 size (what occupancy is computed from).

`measure_blocks` runs them with `BlockSizes` (the GPU defaults take about half a minute on an H100, most of
it compiling); `BlockSizes.tiny` runs the same code paths under the Triton interpreter on CPU tensors, for
tests (its timings mean nothing and are never stored as a calibration).
"""

from __future__ import annotations

import functools
import itertools
import math
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from tflabench.analysis import sass, structural
from tflabench.kernels.mlstm import triton_fused, triton_fwd

#: (M, N, K, num_warps) of the timed `tl.dot` tiles: the state update K^T V ([BK, BL] x [BL, BV]), the
#: inter-chunk term Q C and the scores Q K^T ([BLQ, BK] x [BK, BV|BLKV]), the fused kernels' whole chunks;
#: N or K of 32 where a tiling's head-dim blocks are 32 wide (96 = 3 x 32): such products run at 0.47-0.70x
#: the FLOP rate of 64 x 64 x 64 on an H100 (results/perf-log.md), not at the nearest 64-wide figure; M of 16
#: and 32 for the chunks of 16 and 32 rows (Triton compiles them to mma.sync tiles, not warpgroup MMAs). The
#: model takes the shape nearest in log2 and, among equally near ones, the first listed: the order matters
DOT_SHAPES = (
    (64, 64, 64, 4), (64, 128, 64, 4), (64, 256, 64, 4),
    (64, 64, 128, 4), (64, 128, 128, 4), (64, 256, 128, 4),
    (64, 32, 32, 4), (64, 32, 64, 4), (64, 64, 32, 4), (64, 32, 128, 4), (64, 128, 32, 4),
    (128, 64, 64, 4), (128, 128, 64, 4), (128, 128, 128, 4),
    (128, 64, 64, 8), (128, 128, 64, 8), (128, 128, 128, 8), (128, 256, 64, 8),
    (16, 32, 256, 4), (16, 64, 128, 4), (16, 16, 128, 4), (16, 64, 16, 4), (16, 64, 128, 8),
    (32, 32, 256, 4), (32, 64, 128, 4), (32, 32, 128, 4), (32, 64, 32, 4), (32, 64, 128, 8),
    (16, 128, 32, 4), (16, 128, 16, 4), (32, 128, 16, 4),
)

#: walks of the state recurrence's whole chunk step (`_walk_kernel` with STORE_STATES: the state stored each
#: step, every k / v tile read once from HBM): mLSTMsig's and mLSTMexp's (its max state and normalizer), for
#: `scripts/walk_concurrency.py` (results/h200/recurrence-walks)
RECURRENCE_WALKS = ("recurrence", "recurrence_exp")
#: walks of the state recurrence's step: the sub-chunk step alone (``state``) and the whole chunk step
STATE_WALKS = ("state", *RECURRENCE_WALKS)
#: (L, Dqk, Dv, num_warps, num_stages) of our recurrences' steps the calibration times (``state`` walks):
#: 64- and 128-row sub-chunks on [64, 64], [64, 128] and [32, 32] state tiles
RECURRENCE_STEPS = ((64, 64, 64, 4, 2), (128, 64, 64, 4, 2), (64, 64, 128, 4, 2), (128, 64, 128, 4, 2),
                    (64, 32, 32, 4, 2), (128, 32, 32, 4, 2))

#: (kind, L, Dqk, Dv, num_warps, num_stages) of the timed walks: ``state``, the state recurrence's sub-chunk
#: step on a [Dqk, Dv] state tile ([BL, BK] and [BL, BV] operand tiles; one stage as the reference runs it,
#: two as ours); ``fused`` and ``fused_exp``, mLSTMsig's and mLSTMexp's fused forward chunk step on a
#: [Dqk, BV] state (mLSTMsig runs 4 warps, mLSTMexp 4 at head dims and chunks <= 64, else 8). Not the
#: `RECURRENCE_WALKS`: as the state recurrences' walk floor they raised the run medians (results/perf-log.md,
#: "the recurrence's whole step as a walk")
WALK_SHAPES = (
    ("state", 64, 64, 64, 4, 1), ("state", 128, 64, 64, 4, 1),
    *(("state", *step) for step in RECURRENCE_STEPS),
    ("fused", 64, 64, 64, 4, 2), ("fused", 128, 64, 64, 4, 2),
    ("fused", 64, 128, 64, 4, 2), ("fused", 128, 128, 64, 4, 2),
    ("fused", 64, 64, 64, 8, 2), ("fused", 128, 64, 64, 8, 2),
    ("fused_exp", 64, 64, 64, 4, 2), ("fused_exp", 64, 64, 64, 8, 2), ("fused_exp", 128, 64, 64, 8, 2),
    ("fused_exp", 64, 128, 64, 8, 2), ("fused_exp", 128, 128, 64, 8, 2),
    ("fused", 16, 128, 64, 4, 2), ("fused", 32, 128, 64, 4, 2),
    ("fused", 16, 256, 32, 4, 2), ("fused", 32, 256, 32, 4, 2),
    ("fused_exp", 16, 128, 64, 8, 2), ("fused_exp", 32, 128, 64, 8, 2),
    ("fused_exp", 16, 256, 32, 8, 2), ("fused_exp", 32, 256, 32, 8, 2),
    ("fused", 16, 64, 64, 4, 2), ("fused", 32, 64, 64, 4, 2),
    ("fused", 16, 64, 128, 4, 2), ("fused", 32, 64, 128, 4, 2),
    ("fused_exp", 16, 64, 64, 4, 2), ("fused_exp", 32, 64, 64, 4, 2),
    ("fused", 16, 32, 32, 4, 2), ("fused", 32, 32, 32, 4, 2), ("fused", 64, 32, 32, 4, 2),
    ("fused_exp", 16, 32, 32, 4, 2), ("fused_exp", 32, 32, 32, 4, 2), ("fused_exp", 64, 32, 32, 4, 2),
)

#: programs per SM, besides one, at which `measure_walks` also times each walk: the fused forwards run two to
#: four programs per SM at L <= 64, and the committed rows of their 4-warp launches at two per SM imply steps
#: 1.4-2.0x the one-program step (results/perf-log.md, "the walks side by side")
WALK_PROGRAMS_PER_SM = (2, 3, 4)

#: (kind, L, Dqk, Dv, num_warps, num_stages) of the walk whose instruction stream `measure_issue` times, and
#: the programs per SM it is timed at (one, two, four and six warps per scheduler; six is as many of the
#: walk's programs as an SM holds, 78 registers per thread)
ISSUE_WALK = ("state", 64, 64, 64, 4, 2)
ISSUE_PROGRAMS_PER_SM = (1, 2, 4, 6)

#: (num_warps, programs per SM) of the timed spill loops: 8 and 16 warps per SM of 8-warp programs
SPILL_LOOP_LAUNCHES = ((8, 1), (8, 2))
#: fp32 columns of the spill loop's carried tile: 64, 128 and 256 fit the registers (the loop without
#: spills), 512 / 1024 / 2048 spill about 0.4 / 2 / 4.6 KB per thread (a stack of 100 KB to 2.4 MB per SM)
SPILL_LOOP_WIDTHS = (64, 128, 256, 512, 1024, 2048)
#: the compiled figures (per thread) of each timed spill loop (`sass.cubin_resources`): its spill stack, the
#: local bytes its loop moves per trip, and the part of them its loads move (what its warps wait for)
SPILL_LOOP_FIGURES = ("stack_bytes", "loop_local_bytes", "loop_load_bytes")
#: A tiles of the spill loop's L2-resident buffer (`_spill_loop_kernel`'s SLOTS)
SPILL_LOOP_SLOTS = 64


@dataclass(frozen=True)
class BlockSizes:
    """How big each microbenchmark is. dot_iters / pointwise_iters / walk_steps: loop trips per program;
    walk_slots: the distinct tiles the walks cycle through (64: L2-resident; 0: programs x steps, each tile
    read once from HBM, which moved the fused steps by <= 3 % at L = 64 and the state steps by +40 % on an
    H100, results/h100/walk-slots/: the kernels' programs share tiles through L2);
    programs_per_sm:
    programs launched per SM (the grid); stream_bytes: bytes read or written per memory pattern;
    launch_programs: programs of the per-program-overhead launch; burst: launches per launch-overhead
    sample; repeats: timed samples (median kept)."""

    dtype: torch.dtype = torch.bfloat16
    dot_shapes: tuple[tuple[int, int, int, int], ...] = DOT_SHAPES
    dot_iters: int = 1024
    dot_stages: int = 2
    walk_shapes: tuple[tuple[str, int, int, int, int, int], ...] = WALK_SHAPES
    walk_steps: int = 256
    walk_slots: int = 64
    walk_side_rounds: int = 0  # `_walk_kernel`'s SIDE for state walks (0 in the calibration)
    walk_programs_per_sm: tuple[int, ...] = WALK_PROGRAMS_PER_SM
    pointwise_tile: tuple[int, int] = (64, 64)
    pointwise_iters: int = 1024
    spill_tile: tuple[int, int] = (256, 256)  # fp32, 4 warps: 512 elements per thread, about half spilled
    spill_iters: int = 64
    spill_loop_launches: tuple[tuple[int, int], ...] = SPILL_LOOP_LAUNCHES
    spill_loop_tile: tuple[int, int] = (128, 64)  # (COLS, INNER) of its product; ROWS = 16 x warps
    spill_loop_widths: tuple[int, ...] = SPILL_LOOP_WIDTHS
    spill_loop_trips: int = 512
    issue_walk: tuple[str, int, int, int, int, int] = ISSUE_WALK
    issue_programs_per_sm: tuple[int, ...] = ISSUE_PROGRAMS_PER_SM
    programs_per_sm: int = 4
    stream_bytes: int = 2**30
    token_shape: tuple[int, int] = (16, 128)  # (heads, head dim) of the token-tile pattern
    token_tile_rows: int = 64
    masked_head_dim: int = 96  # head dim of the masked token pattern, read in tiles of its next power of two
    state_shape: tuple[int, int] = (128, 256)  # (Dqk, Dv) of the state-tile pattern
    state_tile: tuple[int, int] = (64, 128)
    launch_programs: int = 2**16
    burst: int = 100
    repeats: int = 10
    hide_launch: bool = False  # `Timer.hide_launch` (False in the committed calibrations)
    flush_bytes: int = 0  # `Timer.flush_bytes` (0 in the committed calibrations)
    device: str = "cuda"

    @classmethod
    def tiny(cls) -> BlockSizes:
        """Smallest sizes that run every code path (float32, CPU tensors, Triton interpreter)."""
        return cls(dtype=torch.float32, dot_shapes=((16, 16, 16, 4), (16, 32, 16, 4)), dot_iters=2,
                   dot_stages=1, walk_shapes=(("state", 16, 16, 32, 4, 1), ("fused", 16, 16, 32, 4, 1),
                                                ("fused_exp", 16, 16, 32, 4, 1),
                                                ("recurrence", 16, 16, 32, 4, 1),
                                                ("recurrence_exp", 16, 16, 32, 4, 1)),
                   walk_steps=2, pointwise_tile=(16, 16), pointwise_iters=2, spill_tile=(16, 16),
                   spill_iters=2, spill_loop_launches=((1, 1),), spill_loop_tile=(16, 16),
                   spill_loop_widths=(16, 32, 64), spill_loop_trips=2, issue_walk=("state", 16, 16, 32, 4, 1),
                   issue_programs_per_sm=(1, 2), walk_programs_per_sm=(2,), programs_per_sm=1,
                   stream_bytes=2**14, token_shape=(2, 16),
                   token_tile_rows=16, masked_head_dim=12, state_shape=(16, 32), state_tile=(16, 16),
                   launch_programs=4, burst=2, repeats=1, device="cpu")


@dataclass(frozen=True)
class DeviceLimits:
    """What occupancy is computed from: SMs, shared memory and 32-bit registers per SM, L2 bytes."""

    sm_count: int
    shared_memory_per_sm: int
    registers_per_sm: int
    l2_bytes: int

    @classmethod
    def of(cls, device: str) -> DeviceLimits:
        """Limits of CUDA device 0; for the CPU (interpreter) an H100 SXM's, so the code paths run."""
        if device != "cuda":
            return cls(sm_count=132, shared_memory_per_sm=233472, registers_per_sm=65536, l2_bytes=50 * 2**20)
        props = torch.cuda.get_device_properties(0)
        return cls(sm_count=props.multi_processor_count,
                   shared_memory_per_sm=props.shared_memory_per_multiprocessor,
                   registers_per_sm=props.regs_per_multiprocessor, l2_bytes=props.L2_cache_size)


#: GPU clock cycles of the sleep `Timer` queues before a sample's start event with ``hide_launch``: about
#: 1 ms at Hopper's clocks, longer than the CPU takes to issue any timed launch
HIDE_LAUNCH_SLEEP_CYCLES = 2_000_000


@dataclass
class Timer:
    """Median seconds of a callable: CUDA events on a GPU, wall clock on the CPU (interpreter). The
    microbenchmarks' clock, also for the probes under scripts/ that time building blocks (`of`).

    Each sample starts on an idle GPU, so it also times the CPU's issue of the callable's launches (20-95 us
    per launch, results/h200/fused-walk-gap). ``hide_launch``: a GPU sleep is queued before the start event,
    so the GPU reaches it after the CPU has issued the launches, as the harness hides them behind its L2
    flush. ``flush_bytes``: the samples are timed as the harness times a call (`bench.measure`'s
    ``time_calls_cuda``): a buffer of that many bytes zeroed before each start event, the samples queued back
    to back and read after one synchronize, so the CPU issues each launch while the flush runs, the timed
    work finds the L2 full of the flush's lines and the GPU is never idle between samples. The committed
    calibrations were timed with neither."""

    device: str
    repeats: int
    warmup: int = 2
    hide_launch: bool = False
    flush_bytes: int = 0

    @classmethod
    def of(cls, sizes: BlockSizes) -> Timer:
        """The timer `measure_blocks` uses for ``sizes``: its device, its timed samples and how it starts
        each sample (`hide_launch`, `flush_bytes`)."""
        return cls(sizes.device, sizes.repeats, hide_launch=sizes.hide_launch, flush_bytes=sizes.flush_bytes)

    def __call__(self, fn: Callable[[], object]) -> float:
        for _ in range(self.warmup):
            fn()
        self._sync()
        if self.flush_bytes and self.device == "cuda":
            return statistics.median(self._after_flushes(fn))
        times = [self._once(fn) for _ in range(self.repeats)]
        return statistics.median(times)

    def _after_flushes(self, fn: Callable[[], object]) -> list[float]:
        """Seconds of each sample queued behind its own flush, read after one synchronize."""
        flush = _flush_buffer(self.flush_bytes)
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(self.repeats)]
        for start, end in events:
            flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in events]

    def _once(self, fn: Callable[[], object]) -> float:
        if self.device != "cuda":
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if self.hide_launch:
            torch.cuda._sleep(HIDE_LAUNCH_SLEEP_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


@functools.cache
def _flush_buffer(size: int) -> torch.Tensor:
    """The bytes `Timer` zeroes before each sample with ``flush_bytes`` (allocated once per size)."""
    return torch.empty(size, dtype=torch.int8, device="cuda")


# ---------------------------------------------------------------------------------------------- kernels
@triton.jit
def _slot_tile(ptr, slot, ROWS: tl.constexpr, COLS: tl.constexpr):
    """Tile `slot` [ROWS, COLS] of a contiguous [SLOTS, ROWS, COLS] buffer."""
    offsets = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    return tl.load(ptr + slot * ROWS * COLS + offsets)


@triton.jit
def _dot_kernel(a_ptr, b_ptr, out_ptr, ITERS, SLOTS,
                M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, NUM_STAGES: tl.constexpr,
                A_RESIDENT: tl.constexpr, B_RESIDENT: tl.constexpr = False):
    """acc[M, N] += a[M, K] @ b[K, N] ITERS times, the operands loaded each iteration from one of SLOTS
    tile slots (a [SLOTS, M, K], b [SLOTS, K, N], L2-resident); an operand marked RESIDENT is loaded once
    before the loop instead (A_RESIDENT: a product whose left operand stays on chip, a query block or a
    score tile; B_RESIDENT, both with it: the tensor cores alone, `scripts/dot_operands.py`).
    Writes the sum of acc to out[pid]."""
    pid = tl.program_id(0)
    acc = tl.zeros([M, N], dtype=tl.float32)
    a_first = _slot_tile(a_ptr, pid % SLOTS, M, K)
    b_first = _slot_tile(b_ptr, pid % SLOTS, K, N)
    for it in tl.range(0, ITERS, num_stages=NUM_STAGES):
        slot = (pid + it) % SLOTS
        a = a_first if A_RESIDENT else _slot_tile(a_ptr, slot, M, K)
        b = b_first if B_RESIDENT else _slot_tile(b_ptr, slot, K, N)
        acc = tl.dot(a, b, acc)
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, 1), 0))


@triton.jit
def _walk_kernel(q_ptr, k_ptr, v_ptr, gate_ptr, h_ptr, states_ptr, norms_ptr, out_ptr, STEPS, SLOTS,
                 L: tl.constexpr, DQK: tl.constexpr, DV: tl.constexpr, FUSED: tl.constexpr,
                 STABILIZE: tl.constexpr, STORE_STATES: tl.constexpr, NUM_STAGES: tl.constexpr,
                 SIDE: tl.constexpr):
    """STEPS steps of one program in order, with the kernels' own step code, a [DQK, DV] fp32 state carried
    from each step to the next. Program p takes the tiles p * STEPS, p * STEPS + 1, ... (modulo SLOTS) of
    q, k [SLOTS, L, DQK], v [SLOTS, L, DV] and gate [2, SLOTS * L] fp32: L2-resident for a few slots, each
    tile read once from HBM with SLOTS >= programs * STEPS.

    Without FUSED, the state recurrence's sub-chunk step (`triton_fwd.chunk_decay` and
    `add_chunk_to_state`; mLSTMsig, with STABILIZE mLSTMexp's max state and normalizer): gate[0] holds b,
    gate[1] ig (and, with STABILIZE, stands in for the chunk maxima a). With STORE_STATES, the
    recurrence's whole chunk step (`triton_fwd.chunk_states_kernel`): the state before each step stored
    first, in the dtype of states [programs, STEPS, DQK, DV] (with STABILIZE the normalizer to norms
    [programs, STEPS, DQK] fp32). With FUSED, the fused forward's chunk step
    (`triton_fused._chunk_gates`, `chunk_output`, `chunk_state_update`): gate[0] and gate[1] hold the forget
    and input pre-activations; mLSTMsig's masked gates, or with STABILIZE mLSTMexp's lean gates, running max
    and normalizer, as each variant's default tiling runs them; h stored to h[pid], then the state update.
    Writes the state's sum to out[pid]. SIDE > 0 (state step only): per step, SIDE rounds of
    side <- 0.999 side + b[L-1] on an fp32 [L, DV] tile of distinct values, work that waits for the step's
    gate load but not for the state (instructions a step can issue in the shadow of its chain); their sum
    to h[pid, 0, 0]."""
    QK_SCALE: tl.constexpr = 0.125
    pid = tl.program_id(0)
    offs_l = tl.arange(0, L)
    offs_k = tl.arange(0, DQK)
    offs_v = tl.arange(0, DV)
    state = tl.zeros([DQK, DV], dtype=tl.float32)
    norm = tl.zeros([DQK], dtype=tl.float32)
    norm_cols = tl.zeros([DQK, 16], dtype=tl.float32)
    m_state = 0.0
    side = offs_l[:, None] * 1.0 + offs_v[None, :] * 0.001
    rows = SLOTS * L
    for step in tl.range(0, STEPS, num_stages=NUM_STAGES):
        slot = (pid * STEPS + step) % SLOTS
        if FUSED:
            t = slot * L + offs_l
            b, ig, decay = triton_fused._chunk_gates(gate_ptr + rows, gate_ptr, 0, 1, t, L, not STABILIZE)
            q = _slot_tile(q_ptr, slot, L, DQK)
            k = _slot_tile(k_ptr, slot, L, DQK)
            v = _slot_tile(v_ptr, slot, L, DV)
            h, _, _ = triton_fused.chunk_output(q, k, v, b, ig, state, norm, m_state, offs_l, QK_SCALE, 1e-6,
                                                L, STABILIZE, STABILIZE, STABILIZE)
            tl.store(h_ptr + pid * L * DV + offs_l[:, None] * DV + offs_v[None, :], h)
            state, norm, m_state = triton_fused.chunk_state_update(k, v, b, ig, decay, state, norm, m_state,
                                                                   STABILIZE, STABILIZE)
        else:
            if STORE_STATES:
                stored = pid * STEPS + step
                tl.store(states_ptr + stored * DQK * DV + offs_k[:, None] * DV + offs_v[None, :],
                         state.to(states_ptr.dtype.element_ty))
                if STABILIZE:
                    tl.store(norms_ptr + stored * DQK + offs_k, tl.max(norm_cols, 1))
            decay, state_scale, m_state = triton_fwd.chunk_decay(gate_ptr, gate_ptr + rows, 0, rows, SLOTS,
                                                                 slot, m_state, L, STABILIZE)
            for _ in tl.static_range(SIDE):
                side = side * 0.999 + decay
            if STABILIZE:
                norm_cols = norm_cols * state_scale
            state, norm_cols = triton_fwd.add_chunk_to_state(
                state * state_scale, norm_cols, k_ptr, v_ptr, gate_ptr, gate_ptr + rows, 0, rows, slot, decay,
                m_state, offs_k, offs_v, DQK, DV, DQK, DV, DQK, DV, L, L, STABILIZE, STABILIZE)
    tl.store(out_ptr + pid, tl.sum(tl.sum(state, 1), 0))
    if SIDE > 0:
        tl.store(h_ptr + pid * L * DV, tl.sum(tl.sum(side, 1), 0))


@triton.jit
def _pointwise_kernel(x_ptr, out_ptr, ITERS, ROWS: tl.constexpr, COLS: tl.constexpr, EXP: tl.constexpr):
    """ITERS rounds of x <- exp(x * a + b) * c + d (EXP) or x <- x * a + b on an fp32 [ROWS, COLS] tile."""
    pid = tl.program_id(0)
    offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    x = tl.load(x_ptr + offs)
    for _ in range(ITERS):
        if EXP:
            x = tl.exp(x * 0.5 - 0.25) * 0.5 - 0.5
        else:
            x = x * 0.999 + 0.001
    tl.store(out_ptr + pid * ROWS * COLS + offs, x)


@triton.jit
def _row_reduce_kernel(x_ptr, out_ptr, ITERS, ROWS: tl.constexpr, COLS: tl.constexpr, MAX: tl.constexpr):
    """ITERS rounds of x <- (x - rowmax(x)) * 0.5 + rowsum(x) * 2^-10 (MAX) or x <- x * 0.5 + rowsum(x) *
    2^-10 on an fp32 [ROWS, COLS] tile."""
    pid = tl.program_id(0)
    offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    x = tl.load(x_ptr + offs)
    for _ in range(ITERS):
        if MAX:
            x = (x - tl.max(x, 1)[:, None]) * 0.5 + tl.sum(x, 1)[:, None] * 0.0009765625
        else:
            x = x * 0.5 + tl.sum(x, 1)[:, None] * 0.0009765625
    tl.store(out_ptr + pid * ROWS * COLS + offs, x)


@triton.jit
def _spill_kernel(x_ptr, out_ptr, ITERS, ROWS: tl.constexpr, COLS: tl.constexpr):
    """ITERS rounds of x <- x * a + b on an fp32 [ROWS, COLS] tile larger than the registers of the
    program's threads: the compiler keeps the rest in local memory and moves it every round."""
    pid = tl.program_id(0)
    offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
    x = tl.load(x_ptr + offs)
    for it in range(ITERS):
        x = x * 0.999 + tl.sum(x, 1)[:, None] * 1e-6 + it
    tl.store(out_ptr + pid * ROWS * COLS + offs, x)


@triton.jit
def _spill_loop_kernel(a_ptr, b_ptr, out_ptr, TRIPS, SLOTS, ROWS: tl.constexpr, COLS: tl.constexpr,
                       INNER: tl.constexpr, WIDTH: tl.constexpr):
    """TRIPS trips of a kernel-shaped loop: an A tile [ROWS, INNER] from an L2-resident buffer of SLOTS
    tiles into `tl.dot` with a fixed B [INNER, COLS], accumulated in fp32, and an fp32 tile [ROWS, WIDTH]
    carried from trip to trip: updated with the accumulator's row sums, and its row sums added to the
    accumulator before the next product (which waits for it, as the fused forwards' next products wait for
    their spilled tiles). Above about 256 registers per thread (WIDTH / 2 of them for the carried tile at
    ROWS = 16 x warps) the compiler spills part of it and moves it every trip."""
    pid = tl.program_id(0)
    rows = tl.arange(0, ROWS)
    a_offs = rows[:, None] * INNER + tl.arange(0, INNER)[None, :]
    b = tl.load(b_ptr + tl.arange(0, INNER)[:, None] * COLS + tl.arange(0, COLS)[None, :])
    acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
    carried = tl.zeros([ROWS, WIDTH], dtype=tl.float32) + pid
    for trip in range(TRIPS):
        a = tl.load(a_ptr + (trip % SLOTS) * ROWS * INNER + a_offs)
        acc = tl.dot(a, b, acc)
        carried = carried * 0.999 + tl.sum(acc, 1)[:, None]
        acc = acc * 0.5 + tl.sum(carried, 1)[:, None] * 1e-6
    tl.store(out_ptr + pid * ROWS + rows, tl.sum(acc, 1) + tl.sum(carried, 1))


@triton.jit
def _tile_stream_kernel(src_ptr, dst_ptr, sums_ptr, TILES, INNER, OUTER_STRIDE, INNER_STRIDE, COL_BLOCKS,
                        ROW_STRIDE, TILE_STRIDE,
                        ROWS: tl.constexpr, COLS: tl.constexpr, DIM: tl.constexpr, WRITE: tl.constexpr):
    """One program per (stream, column block), the column block fastest; stream s starts at
    (s // INNER) * OUTER_STRIDE + (s % INNER) * INNER_STRIDE. Walks TILES tiles [ROWS, COLS] (rows ROW_STRIDE
    apart, tiles TILE_STRIDE apart) of rows of DIM columns, the columns past DIM masked as the kernels mask
    them (`triton_fwd.load_cols`, `store_cols`; no mask where COLS divides DIM): loads them (sum to
    sums[pid]) or, with WRITE, stores them to dst."""
    pid = tl.program_id(0)
    stream = (pid // COL_BLOCKS).to(tl.int64)
    cols = (pid % COL_BLOCKS) * COLS + tl.arange(0, COLS)
    base = (stream // INNER) * OUTER_STRIDE + (stream % INNER) * INNER_STRIDE
    offs = tl.arange(0, ROWS)[:, None] * ROW_STRIDE + cols[None, :]
    acc = tl.zeros([ROWS, COLS], dtype=tl.float32)
    for tile in range(0, TILES):
        ptrs = base + tile * TILE_STRIDE + offs
        if WRITE:
            triton_fwd.store_cols(dst_ptr + ptrs, acc.to(dst_ptr.dtype.element_ty), cols, DIM, COLS)
        else:
            acc += triton_fwd.load_cols(src_ptr + ptrs, cols, DIM, COLS).to(tl.float32)
    if not WRITE:
        tl.store(sums_ptr + pid, tl.sum(tl.sum(acc, 1), 0))


@triton.jit(do_not_specialize=["NEVER"])
def _empty_kernel(out_ptr, NEVER):
    """Does nothing (the store is never taken; NEVER is a runtime 0 so it is not compiled away)."""
    if tl.program_id(0) == NEVER - 1:
        tl.store(out_ptr, 0.0)


# ---------------------------------------------------------------------------------------------- measurements
def _grid_programs(sizes: BlockSizes, limits: DeviceLimits) -> tuple[int, int]:
    """(programs of a full grid, programs of a grid of one per SM); on the CPU both tiny."""
    if sizes.device != "cuda":
        return sizes.programs_per_sm, 1
    return sizes.programs_per_sm * limits.sm_count, limits.sm_count


def measure_dot(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> list[dict]:
    """FLOP/s (whole GPU) of `tl.dot` per (M, N, K, num_warps) of `sizes.dot_shapes`, both operands loaded
    every iteration: ``flops_per_s`` with `sizes.programs_per_sm` programs per SM, ``one_per_sm_flops_per_s``
    with one program per SM; the same with the left operand loaded once (``a_resident_flops_per_s``,
    ``a_resident_one_per_sm_flops_per_s``); all four with `sizes.dot_stages` pipeline stages, and again
    with one stage (``one_stage_`` prefixed: each product waits for its own operand loads, as in a kernel
    that runs one stage, such as the reference's)."""
    slots = 64 if sizes.device == "cuda" else 2
    results = []
    for m, n, k, warps in sizes.dot_shapes:
        a = torch.randn(slots, m, k, device=sizes.device).to(sizes.dtype)
        b = torch.randn(slots, k, n, device=sizes.device).to(sizes.dtype)
        out = torch.empty(_grid_programs(sizes, limits)[0], device=sizes.device)
        figures = {"m": m, "n": n, "k": k, "num_warps": warps}
        placements = itertools.product((("", sizes.dot_stages), ("one_stage_", 1)),
                                       (("", False), ("a_resident_", True)),
                                       zip(("", "one_per_sm_"), _grid_programs(sizes, limits), strict=True))
        for (stage_prefix, stages), (prefix, a_resident), (tag, programs) in placements:
            def launch(programs=programs, a=a, b=b, out=out, m=m, n=n, k=k, warps=warps,
                       a_resident=a_resident, stages=stages):
                _dot_kernel[(programs,)](a, b, out, sizes.dot_iters, slots, M=m, N=n, K=k,
                                         NUM_STAGES=stages, A_RESIDENT=a_resident, num_warps=warps)
            flops = 2 * m * n * k * sizes.dot_iters * programs
            figures[f"{stage_prefix}{prefix}{tag}flops_per_s"] = flops / timer(launch)
        results.append(figures)
    return results


@triton.jit
def _gradient_walk_kernel(q_ptr, k_ptr, v_ptr, dh_ptr, out_ptr, STEPS, SLOTS, L: tl.constexpr,
                          DQK: tl.constexpr, DV: tl.constexpr, NUM_STAGES: tl.constexpr):
    """STEPS trips of one program in the form of the intra-chunk gradient kernels' loop (the dK kernel's):
    its key and value tiles k [L, DQK] and v [L, DV] loaded once, then per trip a query tile q [L, DQK] and
    an output-gradient tile dh [L, DV] of one of SLOTS slots (L2-resident), the two products S^T = k q^T
    and dP^T = v dh^T that do not wait for each other, their combination with an exp, and dS^T q added to
    a carried [L, DQK] fp32 accumulator. Program p starts at slot p; writes the accumulator's sum to
    out[p]."""
    pid = tl.program_id(0)
    k = _slot_tile(k_ptr, pid % SLOTS, L, DQK)
    v = _slot_tile(v_ptr, pid % SLOTS, L, DV)
    acc = tl.zeros([L, DQK], dtype=tl.float32)
    for step in tl.range(0, STEPS, num_stages=NUM_STAGES):
        slot = (pid + step) % SLOTS
        q = _slot_tile(q_ptr, slot, L, DQK)
        dh = _slot_tile(dh_ptr, slot, L, DV)
        scores_t = tl.dot(k, tl.trans(q))
        dp_t = tl.dot(v, tl.trans(dh))
        ds_t = scores_t * dp_t * tl.exp(scores_t)
        acc = tl.dot(ds_t.to(q.dtype), q, acc)
    tl.store(out_ptr + pid, tl.sum(tl.sum(acc, 1), 0))


def measure_walks(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> list[dict]:
    """Seconds per step (``step_s``) of `_walk_kernel` per (kind, L, Dqk, Dv, num_warps, num_stages) of
    `sizes.walk_shapes`, one program per SM (the SMs' programs run side by side and do not meet), cycling
    through `sizes.walk_slots` tiles (on the CPU two), and the walk kernel's own register spills
    (``spill_bytes_per_thread``; a spilling walk times its spills, not the step's latency alone). Kinds:
    ``state`` (the state recurrence), ``fused`` (mLSTMsig's fused forward), ``fused_exp`` (mLSTMexp's).
    ``levels``: the same walk with each of `sizes.walk_programs_per_sm` programs per SM (`walk_levels`)."""
    programs = _grid_programs(sizes, limits)[1]
    results = []
    for walk in sizes.walk_shapes:
        kind, chunk, dqk, dv, warps, stages = walk
        launch = _walk_launch(walk, programs, sizes)
        spill_bytes = 4 * (getattr(launch(), "n_spills", 0) or 0)  # Triton reports 32-bit words
        results.append({"kind": kind, "l": chunk, "dqk": dqk, "dv": dv, "num_warps": warps,
                        "num_stages": stages, "step_s": timer(launch) / sizes.walk_steps,
                        "spill_bytes_per_thread": spill_bytes,
                        "levels": walk_levels(walk, sizes, limits, timer)})
    return results


def walk_levels(walk: tuple[str, int, int, int, int, int], sizes: BlockSizes, limits: DeviceLimits,
                timer: Timer) -> list[dict]:
    """Per programs per SM of `sizes.walk_programs_per_sm`: ``resident`` (of them at once, from the walk's
    compiled registers and shared memory) and ``step_s``, the seconds per step of each program (the
    launch's seconds / its rounds of resident programs / the walk's steps): how much the programs walking
    side by side on an SM slow each other. On the CPU (interpreter) the launches run and nothing is kept."""
    levels = []
    for per_sm in sizes.walk_programs_per_sm:
        timed = _time_walk_per_sm(walk, per_sm, sizes, limits, timer)
        if timed is None:
            continue
        _, seconds, resident = timed
        levels.append({"programs_per_sm": per_sm, "resident": resident,
                       "step_s": seconds / math.ceil(per_sm / resident) / sizes.walk_steps})
    return levels


def _time_walk_per_sm(walk: tuple[str, int, int, int, int, int], per_sm: int, sizes: BlockSizes,
                      limits: DeviceLimits, timer: Timer) -> tuple[object, float, int] | None:
    """(compiled kernel, seconds, programs resident at once per SM) of ``walk`` launched with ``per_sm``
    programs per SM, the residency from its compiled registers and shared memory; on the CPU (interpreter)
    one grid of ``per_sm`` programs runs and None is returned: nothing is compiled."""
    launch = _walk_launch(walk, per_sm * (limits.sm_count if sizes.device == "cuda" else 1), sizes)
    compiled = launch()
    seconds = timer(launch)
    if sizes.device != "cuda":
        return None
    resident = min(per_sm, structural.programs_per_sm(
        compiled.n_regs, compiled.metadata.shared + structural.SHARED_RESERVED_BYTES, walk[4],
        limits.__dict__))
    return compiled, seconds, resident


def _walk_launch(walk: tuple[str, int, int, int, int, int], programs: int,
                 sizes: BlockSizes) -> Callable[[], object]:
    """A callable that launches `_walk_kernel` for ``walk`` (kind, L, Dqk, Dv, warps, stages) with
    ``programs`` programs of `sizes.walk_steps` steps over `sizes.walk_slots` tiles (0: programs x steps,
    each tile read once; on the CPU two) of fresh random inputs, and returns the compiled kernel; kind
    ``gradient``: `_gradient_walk_kernel` (a loop of the intra-chunk gradient kernels' form, for
    `measure_issue`; `scripts/issue_walk_kinds.py`); state walks with `sizes.walk_side_rounds` rounds of
    side work per step (`scripts/issue_walk_side.py`); the kinds of `RECURRENCE_WALKS` read every tile once
    (from HBM, as the recurrence reads its chunks) and store a state per step."""
    kind, chunk, dqk, dv, warps, stages = walk
    recurrence = kind in RECURRENCE_WALKS
    slots = programs * sizes.walk_steps if recurrence else sizes.walk_slots or programs * sizes.walk_steps
    slots = slots if sizes.device == "cuda" else 2
    k = torch.randn(slots, chunk, dqk, device=sizes.device).div(8).to(sizes.dtype)
    q = k if recurrence else torch.randn_like(k).div(8)
    v = torch.randn(slots, chunk, dv, device=sizes.device).to(sizes.dtype)
    out = torch.empty(programs, device=sizes.device)
    if kind == "gradient":
        dh = torch.randn(slots, chunk, dv, device=sizes.device).div(8).to(sizes.dtype)
        return lambda: _gradient_walk_kernel[(programs,)](q, k, v, dh, out, sizes.walk_steps, slots, L=chunk,
                                                          DQK=dqk, DV=dv, NUM_STAGES=stages, num_warps=warps)
    gate = _walk_gates(kind, slots, chunk, sizes.device)
    h = torch.empty(programs, chunk, dv, device=sizes.device)
    stored = programs * sizes.walk_steps if recurrence else 1
    states = torch.empty(stored, dqk, dv, device=sizes.device, dtype=sizes.dtype)
    norms = torch.empty(stored, dqk, device=sizes.device)
    side = sizes.walk_side_rounds if kind == "state" else 0

    def launch():
        return _walk_kernel[(programs,)](q, k, v, gate, h, states, norms, out, sizes.walk_steps, slots,
                                         L=chunk, DQK=dqk, DV=dv, **walk_flags(kind), NUM_STAGES=stages,
                                         SIDE=side, num_warps=warps)
    return launch


def walk_flags(kind: str) -> dict[str, bool]:
    """`_walk_kernel`'s FUSED, STABILIZE and STORE_STATES for a walk of ``kind``."""
    return {"FUSED": kind not in STATE_WALKS, "STABILIZE": kind in ("fused_exp", "recurrence_exp"),
            "STORE_STATES": kind in RECURRENCE_WALKS}


def measure_issue(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> dict:
    """Seconds one warp takes per instruction it issues in a loop whose steps wait for their own loads and
    products: the walk `sizes.issue_walk` (`_walk_kernel`, its tiles L2-resident) with each of
    `sizes.issue_programs_per_sm` programs per SM, its compiled instructions counted
    (`sass.cubin_resources`: all of them, and its loop's body once more per further step). ``levels``: per
    programs per SM, ``warps_per_scheduler`` (of the programs resident at once), ``seconds`` and
    ``seconds_per_instruction`` (the launch's seconds / its rounds of resident programs / the instructions
    of one warp). On the CPU (interpreter) nothing is compiled and ``levels`` is empty."""
    warps = sizes.issue_walk[4]
    levels = []
    for per_sm in sizes.issue_programs_per_sm:
        timed = _time_walk_per_sm(sizes.issue_walk, per_sm, sizes, limits, timer)
        if timed is None:
            continue
        compiled, seconds, resident = timed
        counts = sass.cubin_resources(compiled.asm["cubin"])
        instructions = structural.issued_instructions(counts, sizes.walk_steps)
        levels.append({"programs_per_sm": per_sm, "resident": resident,
                       "warps_per_scheduler": resident * warps / structural.SCHEDULERS_PER_SM,
                       "seconds": seconds,
                       "instructions": counts["instructions"],
                       "loop_instructions": counts["loop_instructions"],
                       "seconds_per_instruction": seconds / math.ceil(per_sm / resident) / instructions})
    return {"walk": list(sizes.issue_walk), "steps": sizes.walk_steps, "levels": levels}


def _walk_gates(kind: str, slots: int, chunk: int, device: str) -> torch.Tensor:
    """The [2, slots * chunk] fp32 gates of a walk: for ``state``, b (the within-chunk cumsum of log
    forget gates) and ig (the recurrence kinds too); for the fused kinds, forget pre-activations near +3 and
    input pre-activations."""
    pre = torch.randn(2, slots, chunk, device=device)
    pre[0] += 3
    if kind in STATE_WALKS:
        pre[0] = torch.nn.functional.logsigmoid(pre[0]).cumsum(-1)
        pre[1] = torch.nn.functional.logsigmoid(pre[1])
    return pre.reshape(2, slots * chunk)


def measure_pointwise(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> dict:
    """fp32 elements per second (whole GPU) of an exp with two multiply-adds (``exp``), of one multiply-add
    (``fma``), of a row max and row sum with their subtraction and multiply-add (``row_reduce``) and of a row
    sum with its multiply-add (``row_sum``), each as ``<name>_elements_per_s`` with `sizes.programs_per_sm`
    programs per SM and as
    ``<name>_one_per_sm_elements_per_s`` with one program per SM (4 warps: one per scheduler, nothing to
    hide a dependent instruction's latency, as in a kernel whose programs do not fill the GPU)."""
    rows, cols = sizes.pointwise_tile
    x = torch.rand(rows * cols, device=sizes.device)
    out = torch.empty(_grid_programs(sizes, limits)[0] * rows * cols, device=sizes.device)
    kernels = {
        "exp": lambda grid: _pointwise_kernel[(grid,)](x, out, sizes.pointwise_iters, ROWS=rows, COLS=cols,
                                                       EXP=True),
        "fma": lambda grid: _pointwise_kernel[(grid,)](x, out, sizes.pointwise_iters, ROWS=rows, COLS=cols,
                                                       EXP=False),
        "row_reduce": lambda grid: _row_reduce_kernel[(grid,)](x, out, sizes.pointwise_iters, ROWS=rows,
                                                               COLS=cols, MAX=True),
        "row_sum": lambda grid: _row_reduce_kernel[(grid,)](x, out, sizes.pointwise_iters, ROWS=rows,
                                                            COLS=cols, MAX=False),
    }
    rates = {}
    for name, kernel in kernels.items():
        for suffix, programs in zip(("", "_one_per_sm"), _grid_programs(sizes, limits), strict=True):
            elements = programs * rows * cols * sizes.pointwise_iters
            rates[f"{name}{suffix}_elements_per_s"] = elements / timer(lambda kernel=kernel, grid=programs:
                                                                       kernel(grid))
    return rates


def measure_spills(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> dict:
    """``local_bytes_per_s``: bytes per second (whole GPU) of the local-memory loads and stores of register
    spills, with `sizes.programs_per_sm` programs of `_spill_kernel` per SM, 4 warps. Each round stores and
    loads the spilled part of the tile once: 2 x the compiled kernel's spill bytes per thread (its local
    memory size). The same arithmetic without spills, a quarter of the rows in four times the programs
    (a half tile still spills on sm_90), is timed and subtracted. On the CPU (interpreter) the kernel has
    no spills and the figure is 0."""
    programs = _grid_programs(sizes, limits)[0]
    rows, cols = sizes.spill_tile
    x = torch.rand(rows * cols, device=sizes.device)
    out = torch.empty(programs * rows * cols, device=sizes.device)

    def run(tile_rows: int, grid: int):
        return _spill_kernel[(grid,)](x, out, sizes.spill_iters, ROWS=tile_rows, COLS=cols, num_warps=4)

    spill_bytes = 4 * (getattr(run(rows, programs), "n_spills", 0) or 0)  # Triton reports 32-bit words
    seconds = timer(lambda: run(rows, programs)) - timer(lambda: run(rows // 4, 4 * programs))
    moved = 2 * spill_bytes * 32 * 4 * programs * sizes.spill_iters
    return {"local_bytes_per_s": moved / seconds if moved and seconds > 0 else 0.0,
            "spill_bytes_per_thread": spill_bytes, "spill_seconds": seconds}


def measure_spill_loops(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> dict:
    """The time register spills add to a kernel-shaped loop (`_spill_loop_kernel`), per (num_warps,
    programs per SM) of `sizes.spill_loop_launches` and carried width of `sizes.spill_loop_widths`.

    ``loops``: each timed loop's seconds with its compiled stack bytes, loop local bytes and loop load bytes
    per thread (`SPILL_LOOP_FIGURES`, what `scripts/kernel_resources.py` reports for our kernels). ``rates``:
    per launch and spilling width, the spilled bytes the SM moves per second of the time they add,
    ``bytes_per_s_per_sm`` = loop local bytes x threads x trips x programs per SM / (seconds - the seconds of
    the same loop without spills: the least-squares line in the width through the loops that do not spill),
    and ``load_bytes_per_s_per_sm`` the same of its loads alone (`spill_loop_rates`), with the launch's warps
    and stack bytes per SM (L1 holds a small stack, L2 or HBM a large one). On the CPU (interpreter) nothing
    is compiled and ``rates`` is empty."""
    most_warps = max(warps for warps, _ in sizes.spill_loop_launches)
    most_programs = max(per_sm for _, per_sm in sizes.spill_loop_launches) * limits.sm_count
    a, b, out = spill_loop_operands(sizes, most_warps, most_programs, torch.rand)
    loops, rates = [], []
    for warps, per_sm in sizes.spill_loop_launches:
        programs = per_sm * limits.sm_count if sizes.device == "cuda" else per_sm

        def run(width: int, warps=warps, programs=programs):
            return launch_spill_loop(sizes, a, b, out, programs, warps, width)

        timed = []
        for width in sizes.spill_loop_widths:
            compiled = run(width)
            resources = (sass.cubin_resources(compiled.asm["cubin"]) if sizes.device == "cuda"
                         else {"stack_bytes": 0, "loop_local_bytes": 0, "loop_load_bytes": 0})
            timed.append({"num_warps": warps, "programs_per_sm": per_sm, "width": width,
                          "seconds": timer(lambda width=width: run(width)),
                          **{name: resources[name] for name in SPILL_LOOP_FIGURES}})
        loops += timed
        rates += spill_loop_rates(timed, sizes.spill_loop_trips)
    return {"loops": loops, "rates": rates}


def spill_loop_operands(sizes: BlockSizes, warps: int, programs: int, fill=torch.rand
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The A buffer (`SPILL_LOOP_SLOTS` tiles of 16 x ``warps`` rows), the fixed B and the output of
    `launch_spill_loop` for up to ``warps`` warps and ``programs`` programs on ``sizes.device``, A and B made
    by ``fill`` (``torch.empty`` where the loop is only compiled)."""
    cols, inner = sizes.spill_loop_tile
    rows = 16 * warps
    a = fill(SPILL_LOOP_SLOTS * rows * inner, device=sizes.device).to(sizes.dtype)
    b = fill(inner * cols, device=sizes.device).to(sizes.dtype)
    return a, b, torch.empty(programs * rows, device=sizes.device)


def launch_spill_loop(sizes: BlockSizes, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, programs: int,
                      warps: int, width: int):
    """`_spill_loop_kernel` of ``warps`` warps carrying ``width`` columns, ``programs`` programs, as
    `measure_spill_loops` times it (``sizes.spill_loop_tile`` and ``spill_loop_trips``); the compiled
    kernel it returns."""
    cols, inner = sizes.spill_loop_tile
    return _spill_loop_kernel[(programs,)](a, b, out, sizes.spill_loop_trips, SPILL_LOOP_SLOTS,
                                           ROWS=16 * warps, COLS=cols, INNER=inner, WIDTH=width,
                                           num_warps=warps)


def spill_loop_rates(timed: list[dict], trips: int) -> list[dict]:
    """`measure_spill_loops`' ``rates`` of one launch's loops (all widths): each spilling loop's time above
    the least-squares line through the (width, seconds) of the loops that do not spill; the load rate where
    the loops record their ``loop_load_bytes`` (calibrations before it: `scripts/calibrate_more.py
    --spill-load-bytes` adds them from the same loops compiled without a GPU)."""
    free = [(loop["width"], loop["seconds"]) for loop in timed if not loop["loop_local_bytes"]]
    if len({width for width, _ in free}) < 2:
        return []
    slope, intercept = statistics.linear_regression(*zip(*free, strict=True))
    rates = []
    for loop in timed:
        added = loop["seconds"] - (intercept + slope * loop["width"])
        if not loop["loop_local_bytes"] or added <= 0:
            continue
        threads = 32 * loop["num_warps"] * loop["programs_per_sm"]
        rate = {"num_warps": loop["num_warps"], "programs_per_sm": loop["programs_per_sm"],
                "width": loop["width"], "warps_per_sm": loop["num_warps"] * loop["programs_per_sm"],
                "stack_bytes_per_sm": loop["stack_bytes"] * threads,
                "bytes_per_s_per_sm": loop["loop_local_bytes"] * threads * trips / added}
        if "loop_load_bytes" in loop:
            rate["load_bytes_per_s_per_sm"] = loop["loop_load_bytes"] * threads * trips / added
        rates.append(rate)
    return rates


@dataclass(frozen=True)
class _StreamPattern:
    """A tile walk of `_tile_stream_kernel`: streams = outer * inner, col_blocks, tiles per stream; rows of
    ``dim`` columns (0: col_blocks * cols, no mask), the columns past them masked."""

    outer: int
    inner: int
    outer_stride: int
    inner_stride: int
    col_blocks: int
    row_stride: int
    tile_stride: int
    rows: int
    cols: int
    tiles: int
    dim: int = 0

    @property
    def programs(self) -> int:
        return self.outer * self.inner * self.col_blocks

    @property
    def row_elements(self) -> int:
        """Columns of a row that exist (the masked ones are not moved)."""
        return self.dim or self.col_blocks * self.cols

    @property
    def elements(self) -> int:
        """Elements moved: every stream's tiles, the existing columns of their rows."""
        return self.outer * self.inner * self.tiles * self.rows * self.row_elements


def _token_pattern(sizes: BlockSizes, element_bytes: int, max_seq_len: int = 8192,
                   head_dim: int | None = None) -> _StreamPattern:
    """Token tiles [rows, next_pow2(D)] of a [B, T, H, D] tensor (D: ``head_dim``, by default the
    `BlockSizes.token_shape` one; the columns past D masked), one stream per (batch, head), T <=
    max_seq_len."""
    heads, dim = sizes.token_shape[0], head_dim or sizes.token_shape[1]
    seq_len = min(max_seq_len, sizes.stream_bytes // (element_bytes * heads * dim))
    batch = max(1, sizes.stream_bytes // (element_bytes * seq_len * heads * dim))
    rows = sizes.token_tile_rows
    return _StreamPattern(outer=batch, inner=heads, outer_stride=seq_len * heads * dim, inner_stride=dim,
                          col_blocks=1, row_stride=heads * dim, tile_stride=rows * heads * dim, rows=rows,
                          cols=triton.next_power_of_2(dim), tiles=seq_len // rows, dim=dim)


def _l2_pattern(sizes: BlockSizes, element_bytes: int, limits: DeviceLimits) -> _StreamPattern:
    """The token pattern with every batch reading the same [T, H, D] slab of a quarter of L2: L2 hits."""
    heads, dim = sizes.token_shape
    seq_len = max(sizes.token_tile_rows, limits.l2_bytes // 4 // (element_bytes * heads * dim))
    if sizes.device != "cuda":
        seq_len = 2 * sizes.token_tile_rows
    token = _token_pattern(sizes, element_bytes)
    return replace(token, outer_stride=0, tiles=seq_len // sizes.token_tile_rows,
                   outer=token.outer * token.tiles * sizes.token_tile_rows // seq_len)


def _state_pattern(sizes: BlockSizes, element_bytes: int) -> _StreamPattern:
    """State tiles [BK, BV] of a [B*H, NC, Dqk, Dv] tensor, one stream per (Dqk block, B*H), walking NC."""
    dqk, dv = sizes.state_shape
    block_qk, block_v = sizes.state_tile
    chunks = 64 if sizes.device == "cuda" else 2
    streams = max(1, sizes.stream_bytes // (element_bytes * chunks * dqk * dv))
    return _StreamPattern(outer=streams, inner=dqk // block_qk, outer_stride=chunks * dqk * dv,
                          inner_stride=block_qk * dv, col_blocks=dv // block_v, row_stride=dv,
                          tile_stride=dqk * dv, rows=block_qk, cols=block_v, tiles=chunks)


def _stream_seconds(pattern: _StreamPattern, programs: int, write: bool, buffer, timer: Timer) -> float:
    sums = torch.empty(pattern.programs, device=buffer.device)
    p = pattern
    return timer(lambda: _tile_stream_kernel[(programs,)](
        buffer, buffer, sums, p.tiles, p.inner, p.outer_stride, p.inner_stride, p.col_blocks, p.row_stride,
        p.tile_stride, ROWS=p.rows, COLS=p.cols, DIM=p.row_elements, WRITE=write))


def _pattern_buffer(pattern: _StreamPattern, sizes: BlockSizes) -> torch.Tensor:
    return torch.zeros(pattern.outer * pattern.outer_stride, device=sizes.device, dtype=sizes.dtype)


def _read_write_rates(name: str, pattern: _StreamPattern, buffer: torch.Tensor, timer: Timer) -> dict:
    """``{name}_read_bytes_per_s`` and ``{name}_write_bytes_per_s`` of a pattern over ``buffer``, every
    program launched."""
    rates = {}
    for direction, write in (("read", False), ("write", True)):
        seconds = _stream_seconds(pattern, pattern.programs, write, buffer, timer)
        rates[f"{name}_{direction}_bytes_per_s"] = pattern.elements * buffer.element_size() / seconds
    return rates


def _one_per_sm_read_rate(pattern: _StreamPattern, buffer: torch.Tensor, sizes: BlockSizes,
                          limits: DeviceLimits, timer: Timer) -> float:
    """Bytes per second of a pattern's loads over ``buffer`` with one program per SM (its first streams)."""
    one_per_sm = min(pattern.programs, _grid_programs(sizes, limits)[1])
    seconds = _stream_seconds(pattern, one_per_sm, False, buffer, timer)
    return pattern.elements // pattern.programs * one_per_sm * buffer.element_size() / seconds


def measure_memory(sizes: BlockSizes, limits: DeviceLimits, timer: Timer) -> dict:
    """Bandwidth in B/s (bytes moved / time, whole GPU) of the token-tile and state-tile patterns, loads and
    stores, every program of the pattern launched; ``token_read_one_per_sm``: token loads with one program
    per SM; ``l2_read``: token loads that hit L2; ``token_masked``: the token pattern at
    `BlockSizes.masked_head_dim` in masked tiles, loads and stores and loads with one program per SM (bytes
    of the existing columns). One buffer per pattern."""
    element_bytes = torch.empty(0, dtype=sizes.dtype).element_size()
    token, state = _token_pattern(sizes, element_bytes), _state_pattern(sizes, element_bytes)
    token_buffer = _pattern_buffer(token, sizes)
    rates = _read_write_rates("token", token, token_buffer, timer)
    rates |= _read_write_rates("state", state, _pattern_buffer(state, sizes), timer)
    rates["token_read_one_per_sm_bytes_per_s"] = _one_per_sm_read_rate(token, token_buffer, sizes, limits,
                                                                        timer)
    l2 = _l2_pattern(sizes, element_bytes, limits)
    seconds = _stream_seconds(l2, l2.programs, False, token_buffer, timer)
    rates["l2_read_bytes_per_s"] = l2.elements * element_bytes / seconds
    masked = _token_pattern(sizes, element_bytes, head_dim=sizes.masked_head_dim)
    masked_buffer = _pattern_buffer(masked, sizes)
    rates |= _read_write_rates("token_masked", masked, masked_buffer, timer)
    rates["token_masked_read_one_per_sm_bytes_per_s"] = _one_per_sm_read_rate(masked, masked_buffer, sizes,
                                                                              limits, timer)
    return rates


def memory_patterns(sizes: BlockSizes) -> dict:
    """What `measure_memory` timed, in words (stored beside its figures)."""
    heads, dim = sizes.token_shape
    masked, masked_cols = sizes.masked_head_dim, triton.next_power_of_2(sizes.masked_head_dim)
    return {
        "token": f"[{sizes.token_tile_rows}, {dim}] tiles of [B, T, {heads}, {dim}] {sizes.dtype}",
        "token_masked": f"[{sizes.token_tile_rows}, {masked_cols}] tiles of [B, T, {heads}, {masked}] "
                        f"{sizes.dtype}, the columns past {masked} masked",
        "state": "[{}, {}] tiles of [B*H, NC, {}, {}] {}".format(*sizes.state_tile, *sizes.state_shape,
                                                               sizes.dtype),
    }


def measure_launch(sizes: BlockSizes, timer: Timer) -> dict:
    """launch_s: seconds per launch in a burst of one-program launches; program_s: seconds per program
    (whole GPU) of an empty kernel with `sizes.launch_programs` programs, the launch subtracted."""
    out = torch.empty(1, device=sizes.device)

    def burst():
        for _ in range(sizes.burst):
            _empty_kernel[(1,)](out, 0)

    launch_s = timer(burst) / sizes.burst
    many_s = timer(lambda: _empty_kernel[(sizes.launch_programs,)](out, 0))
    return {"launch_s": launch_s, "program_s": max(0.0, many_s - launch_s) / sizes.launch_programs}


#: most processes that compile the microbenchmarks before they are timed (`precompile`)
PRECOMPILE_WORKERS = 8


def precompile(sizes: BlockSizes, workers: int) -> None:
    """Compile the tile products, spill loops and walks in ``workers`` processes first, each a share of
    their shapes run once, so that the timed pass finds every kernel in Triton's on-disk cache: compiling
    them one after another was most of the calibration's time. The timed figures are not affected (each is
    still measured after its warm-up calls in this process)."""
    shares = [replace(sizes, dot_shapes=sizes.dot_shapes[index::workers],
                      walk_shapes=sizes.walk_shapes[index::workers],
                      spill_loop_widths=sizes.spill_loop_widths[index::workers], repeats=1)
              for index in range(workers)]
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        pool.map(_compile_share, shares)


def _compile_share(sizes: BlockSizes) -> None:
    """`precompile`'s work in one process: its shapes' microbenchmarks run once, their figures dropped."""
    limits, timer = DeviceLimits.of(sizes.device), Timer(sizes.device, repeats=1, warmup=0)
    measure_dot(sizes, limits, timer)
    measure_walks(sizes, limits, timer)
    measure_spill_loops(sizes, limits, timer)


def measure_blocks(sizes: BlockSizes | None = None) -> dict:
    """Every building-block figure (the ``blocks`` entry of a calibration file) with the sizes used; on a
    GPU the kernels compiled in parallel first (`precompile`)."""
    sizes = sizes or BlockSizes()
    limits = DeviceLimits.of(sizes.device)
    timer = Timer.of(sizes)
    started = time.perf_counter()
    if sizes.device == "cuda":
        precompile(sizes, min(PRECOMPILE_WORKERS, os.cpu_count() or 1))
    blocks = {
        "dtype": str(sizes.dtype).removeprefix("torch."),
        "programs_per_sm": sizes.programs_per_sm,
        "device": limits.__dict__,
        "dot": measure_dot(sizes, limits, timer),
        "pointwise": measure_pointwise(sizes, limits, timer),
        "memory": measure_memory(sizes, limits, timer),
        "memory_patterns": memory_patterns(sizes),
        "spills": measure_spills(sizes, limits, timer),
        "spill_loops": measure_spill_loops(sizes, limits, timer),
        "walk": measure_walks(sizes, limits, timer),
        "issue": measure_issue(sizes, limits, timer),
        "launch": measure_launch(sizes, timer),
    }
    blocks["seconds"] = time.perf_counter() - started
    return blocks
