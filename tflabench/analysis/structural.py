"""Structural performance model of the mLSTM kernels: per kernel launch, the work of one program (tl.dot
FLOPs per tile shape, exp and multiply-add elements, loads and stores) and the number of programs, from the
shape, the chunk size and the tiling the kernels really use (`xl_chunk.Tiling.default`,
`fused_chunk.FusedTiling.default`), timed with the building-block rates of a calibration
(`analysis.calibrate_blocks`). No parameter is fitted to kernel timings (docs/performance-model.md).

Time of one launch with P programs on S SMs, r of them resident per SM (occupancy, `resident_programs`):

    n = ceil(P / S) programs on the busiest SM, c = min(r, n) of them at once
    compute = n * (sum over dots of FLOPs / dot_rate(shape, c, operands loaded, stages) + exp / exp_rate
                   + fma / fma_rate
                   [+ reductions / row_reduce_rate + row_sums / row_sum_rate, mLSTMexp, with a
                    calibration that has them]
                   + spills)
    spills  = spilled bytes x (L2 share / local_rate (l2_rate without it) + HBM share / hbm_rate)
              / max(1, c x warps / 4)   (the warps each of the SM's four schedulers switches between);
              8-warp programs, with a calibration that has spill loops: spilled bytes / spill_rate(c x
              warps, the SM's stack bytes)
    memory  = max(n * HBM bytes / P / latency_rate, HBM bytes / full-grid rate, n * L2 bytes / l2_rate)
              + stored bytes / full-grid store rate, for a pipelined launch (two or more stages);
              n * (max(HBM bytes / P / hbm_rate, L2 bytes / l2_rate) + stored bytes / P / store_rate) for
              a one-stage launch (`memory_seconds`); the L2 bytes those loaded outside tile products (the
              products' operand loads are in dot_rate), at the masked-token rates for a call whose
              head-dim blocks do not divide its head dims (`Launch.masked`)
    busy    = max(compute, memory) + min(compute, memory) / c
              (a pipelined launch, two or more stages: sqrt(compute^2 + memory^2))
    time    = launch + max(busy, dispatch) + min(busy, dispatch) / c, dispatch = P * per_program (the
              programs handed out one after another overlap the work of those already resident)

latency_rate = one-program-per-SM rate / S x c x stage bytes / READ_IN_FLIGHT_BYTES per SM (Little's law: the
loads one step of the c programs issues against those of the calibration's one program): the SMs share the
bandwidth by what they have in flight, so the busiest SM's bytes take its latency-bound rate while the whole
launch's bytes take the full-grid rate (160 programs on 132 SMs: the SMs of one program are done half-way);
hbm_rate (one-stage launches, spills) = min(full-grid rate / A, latency_rate), A = min(P, S) the SMs that
have programs, and store_rate the full-grid store rate / A: a one-stage loop has no loads in flight while it
computes, so its SMs do not take over the bandwidth of those that are done;

and, for a launch whose programs walk the chunks in order (the state recurrences, the fused forward), with
a calibration that times such walks, compute at least ceil(n / c) * (trips * step + spills): each of the
rounds of c programs on an SM takes the latency of one program's walk (its steps wait for each other, and for
its spills), the calibrated seconds per step of the nearest walk (`calibrate_blocks.measure_walks`), with c
programs walking side by side where the calibration times that (`walk_sharing`); for the fused forwards such
a walk, their whole step code, stands in for the issue floor below (`Rates.walk_times_issue`).

and, with a calibration that times the issue of instructions and compiled instruction counts, the busy
time at least ceil(n / c) * instructions of one warp / chains * t(c * warps / 4 * chains): the rounds of
programs issue their warps' instructions (the compiled kernel's, its loop body once more per further trip,
its head-dim block loops' bodies once per trip, `block_loop_instructions`) at the calibrated seconds
per instruction t of a walk's warp with as many warps per scheduler (`issue_seconds`; the masked kernels
are latency-bound, results/h100/profile-masked-chunk-sizes), the chains one where the tile loop waits
for all its products twice or more per trip, or a block loop sits inside it (`issue_chains`).

and, for the output kernel of one pipeline stage with its compiled waits for all of its products, the busy
time at least ceil(n / c) * (Qbar C's Dqk blocks + trips * waits per trip) * step: in a
one-stage loop each of those waits also waits for the load issued just before it (the next Dqk block's),
so each exposes one load step, the calibrated latency of a load step (`Rates.load_step_seconds`,
`exposed_load_seconds`).

with every other rate the per-SM share (whole-GPU figure / S); dot_rate the calibrated product with both
operands loaded for each product, or with the left one loaded once where it stays on chip (`Launch.dot`),
timed in a loop of two pipeline stages, or of one for a launch of one stage (calibrations with those figures),
a product of fewer than 64 rows priced at its own rows and the nearest calibrated product of fewer than 64
rows (mma.sync tiles; calibrations without them: as 64 rows, one warpgroup MMA), and it (and the pointwise
rates, where the calibration has their one-program-per-SM figures) interpolated in c between the
calibration's one-program-per-SM and full-grid figures; r and the spills from the compiled kernels
(compiled_resources.json.gz, `scripts/kernel_resources.py --table`) where it has the tiling, else a rule. A
pass is the sum of its launches.

Algorithms: ``xl_chunk`` (TFLA, two levels), ``limit_chunk`` (TFLA with one tile per chunk), ``fused_chunk``
(the fused forward; TFLA's backward), ``reference`` (mlstm_kernels' xl_chunk as its launchers launch it:
its own tiles and backward order, fp32 states, one pipeline stage, its recurrences at their padded state
tiles, its compiled registers from the same table, `--reference-table`). Equations, occupancy rule and
limits: docs/performance-model.md.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from tflabench.errors import InputError

ALGORITHMS = ("xl_chunk", "limit_chunk", "fused_chunk", "reference")
VARIANTS = ("sig", "exp")
MODES = ("fwd", "fwdbw")
#: registers and threads of a Hopper SM, the most programs per SM; shared memory is the calibration's
MAX_THREADS_PER_SM, MAX_PROGRAMS_PER_SM = 2048, 32
#: rows of one Hopper warpgroup MMA: Triton compiles a tile product of fewer rows to mma.sync tiles, which
#: calibrations since `Rates.times_short_products` time; before them such a product costs as many rows
MMA_ROWS = 64
#: 32-bit registers per thread besides the fp32 accumulators (addresses, gates, loop state): a rule
REGISTER_OVERHEAD = 40
#: warp schedulers of a Hopper SM (its four sub-partitions), each issuing for the warps it holds
SCHEDULERS_PER_SM = 4
#: registers per thread are allocated in multiples of 8 (256 per warp); the CUDA runtime reserves 1 KB of
#: shared memory per resident program (Hopper tuning guide)
REGISTER_UNIT, SHARED_RESERVED_BYTES = 8, 1024
#: the table of compiled kernel resources shipped beside this module (`compiled_kernels`)
COMPILED_RESOURCES = "compiled_resources.json.gz"
COMPILED_RESOURCES_PATH = Path(__file__).with_name(COMPILED_RESOURCES)
#: elementwise PyTorch launches of the backward's gate gradients (`launch.gate_grads`) and their passes
#: over a [B*H, T] fp32 row
GATE_GRAD_LAUNCHES, GATE_GRAD_ROW_PASSES = 12, 16
#: operand bytes per load step of the calibration's one-program-per-SM token read: one [64, 128] bf16 tile
#: (`calibrate_blocks._tile_stream_kernel` at the default `BlockSizes`)
READ_IN_FLIGHT_BYTES = 64 * 128 * 2
#: programs of at least this many warps take the calibrated spill-loop rate (`program_spill_seconds`)
SPILL_LOOP_WARPS = 8


@dataclass(frozen=True)
class Problem:
    """One call: q, k [B, T, H, Dqk], v [B, T, H, Dv], element_bytes of the inputs (2: bf16). The shape
    fields are those of `kernels.mlstm.choice.Shape`, repeated rather than inherited: importing the kernels
    package imports Triton, which this module leaves to the functions that need the kernels' tilings."""

    batch: int
    seq_len: int
    heads: int
    head_dim_qk: int
    head_dim_v: int
    variant: str = "sig"
    mode: str = "fwd"
    element_bytes: int = 2

    def __post_init__(self):
        for name in ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v", "element_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InputError(f"{name} must be a positive integer, got {value!r}")
        if self.variant not in VARIANTS:
            raise InputError(f"variant must be one of {VARIANTS}, got {self.variant!r}")
        if self.mode not in MODES:
            raise InputError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.head_dim_qk % 16 or self.head_dim_v % 16:
            raise InputError(f"head dims must be multiples of 16, got {self.head_dim_qk}/{self.head_dim_v}")

    @property
    def rows(self) -> int:
        """B * H."""
        return self.batch * self.heads


@dataclass
class Launch:
    """One kernel launch: `programs` programs, each doing `dots` ({(M, N, K, streamed): count}, `dot`), `exp`
    and `fma` fp32 elements, `reductions` fp32 score elements under a row max and row sum (mLSTMexp's
    online max), `row_sums` under a row sum alone (mLSTMexp's normalizer where the max is the gates'
    prefix max), `l2_bytes` of loads outside its tile products (a product's operands are loaded for it in
    the calibration that times it, so its rate includes their loads); the launch as a whole reads
    `hbm_bytes` (unique bytes) and stores `store_bytes` (``store_pattern`` "token" or "state"). warps,
    stages, accumulator_elements and stage_bytes (shared memory of one pipeline stage) give its occupancy
    by the rule; `kernel` (the Triton function) finds its compiled registers, shared memory and loop
    spills (`compiled`, from compiled_resources.json.gz) when the table has them, and `loop_trips` is the
    trips of its outermost loop per program (what the spills of one trip and the instructions of its body
    are multiplied by), over `loop_copies` copies of that loop in the compiled code (the output kernel's
    query tiles, unrolled, each with its own key/value loop); `inner_trips` the trips of a loop inside the
    outermost one per trip of it, where `loop_trips` counts those inner trips in all (the recurrences'
    sub-chunks within their loop over the chunks); `block_trips` the trips of its head-dim block loops (the
    output kernel's Dqk blocks after the first, the gradient kernels' blocks of the other head dim), which the
    compiled code keeps as loops inside its tile loops and beside them where they make several trips
    (`sass.top_loops`). `walk`: (kind, L, Dqk, Dv) of the step of a
    launch whose programs walk the chunks in order, one step per loop trip (`Rates.walk_step`). `chains`:
    the independent accumulator chains of tile products a program interleaves; the calibration times one
    chain per program, and c programs of n chains each get the product rate of c x n programs
    (results/h100/dot-chains/: two chains 1.17-1.37x one). `trip_chains`: the trips of its outermost loop
    that issue as independent chains (`issue_seconds`), 1 where each trip waits on the one before it.
    `masked`: a launch that moves head-dim tiles in a call whose blocks do not divide its head dims; its
    token loads and stores take the calibration's masked-token rates (`Rates.token_pattern`)."""

    name: str
    programs: int
    warps: int
    stages: int
    accumulator_elements: int
    stage_bytes: int
    dots: dict[tuple[int, int, int, int], float] = field(default_factory=dict)
    exp: float = 0.0
    fma: float = 0.0
    reductions: float = 0.0
    row_sums: float = 0.0
    l2_bytes: float = 0.0
    hbm_bytes: float = 0.0
    store_bytes: float = 0.0
    store_pattern: str = "token"
    kernel: str = ""
    loop_trips: float = 1.0
    loop_copies: int = 1
    inner_trips: int = 1
    block_trips: int = 1
    compiled: dict | None = None
    walk: tuple[str, int, int, int] | None = None
    chains: int = 1
    trip_chains: int = 1
    masked: bool = False

    def dot(self, m: int, n: int, k: int, count: float, streamed: int = 2) -> None:
        """``count`` products [M, K] x [K, N] per program, ``streamed`` of their two operands loaded from
        memory for each (1: the left operand stays on chip, a query block or a score tile)."""
        key = (m, n, k, streamed)
        self.dots[key] = self.dots.get(key, 0.0) + count

    @property
    def flops(self) -> float:
        """tl.dot FLOPs of the whole launch."""
        return self.programs * sum(2 * m * n * k * count for (m, n, k, _), count in self.dots.items())


# ---------------------------------------------------------------------------------------------- rates
def _interpolate_log2(x: float, points: list[tuple[float, float]]) -> float:
    """y at x, linear in log2 x between the (x, y) points (y averaged at equal x), the end points' y outside
    them."""
    merged: dict[float, list[float]] = {}
    for px, py in points:
        merged.setdefault(px, []).append(py)
    xs = sorted(merged)
    ys = [sum(merged[px]) / len(merged[px]) for px in xs]
    if x <= xs[0]:
        return ys[0]
    for index in range(1, len(xs)):
        if x <= xs[index]:
            x0, x1, y0, y1 = xs[index - 1], xs[index], ys[index - 1], ys[index]
            return y0 + (y1 - y0) * math.log2(x / x0) / math.log2(x1 / x0)
    return ys[-1]


def _interpolate_linear(x: float, points: list[tuple[float, float]]) -> float:
    """y at x on the broken line through sorted (x, y) ``points``, the end values outside them."""
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in itertools.pairwise(points):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def _log2_gap(measured: dict, keys, shape) -> float:
    """Sum over the keys of |log2(measured size / wanted size)|: how far a calibrated tile shape is from
    the one asked for."""
    return sum(abs(math.log2(measured[key] / size)) for key, size in zip(keys, shape, strict=True))


@dataclass(frozen=True)
class Rates:
    """The calibration's building-block figures (whole GPU) and device limits."""

    blocks: dict
    source: str = "calibration"

    @property
    def sm_count(self) -> int:
        return int(self.blocks["device"]["sm_count"])

    def per_sm(self, full: float, one_per_sm: float, concurrency: float) -> float:
        """Per-SM share of a rate, interpolated in the programs running at once on an SM between the
        one-program-per-SM figure (1) and the full-grid one (`programs_per_sm` of the calibration)."""
        full_at = float(self.blocks.get("programs_per_sm", 4))
        weight = min(1.0, max(0.0, (concurrency - 1) / max(full_at - 1, 1e-9)))
        return (one_per_sm + weight * (full - one_per_sm)) / self.sm_count

    def dot_rate(self, shape: tuple[int, int, int], warps: int, concurrency: float,
                 streamed: int = 2, stages: int = 2) -> float:
        """Per-SM FLOP/s of a [M, K] x [K, N] tile product: the calibrated shape nearest in log2 (M, N, K)
        (the same warp count preferred; of equally near ones the first in the calibration), its rate with
        both operands loaded every time, or with ``streamed`` 1 its rate with the left operand on chip;
        in a loop of one pipeline stage (``stages`` 1), its rate with one stage, each product waiting for
        its own operand loads (calibrations without those figures: the pipelined rate)."""

        def distance(dot: dict) -> tuple[float, int]:
            return _log2_gap(dot, "mnk", shape), dot["num_warps"] != warps

        nearest = min(self._dot_shapes_for(shape[0]), key=distance)
        prefix = "one_stage_" if stages == 1 and "one_stage_flops_per_s" in nearest else ""
        if streamed == 1 and f"{prefix}a_resident_flops_per_s" in nearest:
            prefix += "a_resident_"
        return self.per_sm(nearest[f"{prefix}flops_per_s"], nearest[f"{prefix}one_per_sm_flops_per_s"],
                           concurrency)

    @property
    def times_short_products(self) -> bool:
        """Whether the calibration times products of fewer than `MMA_ROWS` rows (the mma.sync tiles Triton
        compiles them to on Hopper; calibrations before them price such a product as `MMA_ROWS` rows)."""
        return any(dot["m"] < MMA_ROWS for dot in self.blocks["dot"])

    def priced_rows(self, rows: int) -> int:
        """Rows a tile product of ``rows`` rows is priced at: its own where the calibration times products
        of fewer than `MMA_ROWS` rows (`times_short_products`), else at least `MMA_ROWS`."""
        return rows if self.times_short_products else max(rows, MMA_ROWS)

    def _dot_shapes_for(self, rows: int) -> list[dict]:
        """The calibrated products of the same kind as one of ``rows`` rows: fewer than `MMA_ROWS` rows
        (mma.sync tiles) or at least as many (warpgroup MMAs)."""
        short = rows < MMA_ROWS
        same = [dot for dot in self.blocks["dot"] if (dot["m"] < MMA_ROWS) == short]
        return same or self.blocks["dot"]

    def pointwise(self, name: str, concurrency: float) -> float:
        """Per-SM fp32 elements per second of the pointwise block ``name`` (exp, fma, row_reduce),
        interpolated in the programs running at once like `per_sm` where the calibration has its
        one-program-per-SM figure, else the full-grid figure."""
        figures = self.blocks["pointwise"]
        full = figures[f"{name}_elements_per_s"]
        return self.per_sm(full, figures.get(f"{name}_one_per_sm_elements_per_s", full), concurrency)

    def memory(self, name: str) -> float:
        return float(self.blocks["memory"][f"{name}_bytes_per_s"])

    def token_pattern(self, masked: bool) -> str:
        """The calibrated token pattern a launch's loads and stores take: ``token_masked`` for masked tiles
        where the calibration times it (`calibrate_blocks.measure_memory`), else ``token``."""
        timed = "token_masked_read_bytes_per_s" in self.blocks["memory"]
        return "token_masked" if masked and timed else "token"

    def hbm_read(self, in_flight_bytes: float, active_sms: int | None = None,
                 pattern: str = "token") -> float:
        """Per-SM HBM read rate with ``in_flight_bytes`` of loads issued per step on the SM: the
        latency-bound rate (`hbm_latency_read`) up to the SM's share of the full-grid figure among the
        ``active_sms`` SMs that have programs (all by default)."""
        full = self.memory(f"{pattern}_read") / min(active_sms or self.sm_count, self.sm_count)
        return min(full, self.hbm_latency_read(in_flight_bytes, pattern))

    @property
    def load_step_seconds(self) -> float:
        """Seconds of one load step of a program that waits for its loads: the calibration's
        one-program-per-SM token read, `READ_IN_FLIGHT_BYTES` per step at its per-SM rate (0.95 us on the
        H200)."""
        return READ_IN_FLIGHT_BYTES / self.hbm_latency_read(READ_IN_FLIGHT_BYTES)

    def hbm_latency_read(self, in_flight_bytes: float, pattern: str = "token") -> float:
        """Per-SM HBM read rate with ``in_flight_bytes`` of loads issued per step on the SM where the
        bandwidth does not bind. Little's law: at a fixed latency the rate grows with the bytes in flight;
        the calibration's one-program-per-SM figure is the rate at its program's `READ_IN_FLIGHT_BYTES`."""
        one = self.memory(f"{pattern}_read_one_per_sm") / self.sm_count
        return one * in_flight_bytes / READ_IN_FLIGHT_BYTES

    def spill_rate(self, warps_per_sm: float, stack_bytes_per_sm: float, figure: str = "bytes_per_s_per_sm"
                   ) -> float:
        """Per-SM bytes per second of register-spill traffic (`calibrate_blocks.measure_spill_loops`'
        ``rates``, their ``figure``: ``load_bytes_per_s_per_sm`` for the spilled loads alone) with
        ``warps_per_sm`` warps resident on the SM and ``stack_bytes_per_sm`` of spill stacks: interpolated in
        log2 of the stack bytes within each calibrated warps-per-SM level, then in log2 of the warps between
        the two levels around it (the nearest level outside them); 0 when the calibration has no spill loops
        with that figure."""
        measured = [item for item in self.blocks.get("spill_loops", {}).get("rates", []) if figure in item]
        if not measured:
            return 0.0
        levels = sorted({item["warps_per_sm"] for item in measured})
        by_level = [(level, _interpolate_log2(stack_bytes_per_sm, [
            (item["stack_bytes_per_sm"], item[figure]) for item in measured
            if item["warps_per_sm"] == level])) for level in levels]
        return _interpolate_log2(warps_per_sm, by_level)

    def walk_step(self, walk: tuple[str, int, int, int], warps: int, stages: int, concurrency: int = 1
                  ) -> float:
        """Seconds per step of one program walking the chunks in order, ``concurrency`` programs walking side
        by side on each SM: the calibrated walk of the same kind nearest in log2 (L, Dqk, Dv), a warp count
        or stage count that differs counting as one doubling; 0 when the calibration times no walk of that
        kind. Walks whose own kernel spilled registers are left out: they time their own spills, which are
        not the launch's (its spills come from its compiled resources, `spilled_bytes`). Its one-program
        step times `walk_sharing` at ``concurrency``."""
        nearest = self._nearest_walk(walk, warps, stages)
        if nearest is None:
            return 0.0
        return float(nearest["step_s"]) * walk_sharing(nearest, concurrency)

    def walk_times_issue(self, walk: tuple[str, int, int, int], warps: int, stages: int) -> bool:
        """Whether the calibrated walk `walk_step` takes for ``walk`` times the launch's issue itself: a walk
        of `WHOLE_STEP_WALKS` timed at several programs per SM (its ``levels``), so its step at the launch's
        programs per SM is what their warps take to issue a step side by side."""
        nearest = self._nearest_walk(walk, warps, stages)
        return walk[0] in WHOLE_STEP_WALKS and nearest is not None and bool(nearest.get("levels"))

    def _nearest_walk(self, walk: tuple[str, int, int, int], warps: int, stages: int) -> dict | None:
        """The calibrated walk of ``walk``'s kind nearest to it (`walk_step`), None without one."""
        kind, *shape = walk
        measured = [item for item in self.blocks.get("walk", [])
                    if item["kind"] == kind and not item.get("spill_bytes_per_thread")]
        if not measured:
            return None

        def distance(item: dict) -> float:
            gap = _log2_gap(item, ("l", "dqk", "dv"), shape)
            return gap + (item["num_warps"] != warps) + (item["num_stages"] != stages)

        return min(measured, key=distance)

    def instruction_seconds(self, warps_per_scheduler: float) -> float:
        """Seconds one warp takes per instruction it issues in a loop that waits for its own loads and
        products (`calibrate_blocks.measure_issue`), with ``warps_per_scheduler`` warps on each scheduler:
        interpolated linearly between the calibrated levels (1, 2, 4 and 6 warps per scheduler), the end
        levels' figures outside them (a choice: the issue walk holds no more than six programs per SM);
        0 when the calibration has no such figure."""
        measured = sorted((item["warps_per_scheduler"], item["seconds_per_instruction"])
                          for item in self.blocks.get("issue", {}).get("levels", []))
        return _interpolate_linear(warps_per_scheduler, measured) if measured else 0.0


#: walks that run a kernel's whole step (`calibrate_blocks._walk_kernel`): the fused forwards' (their gates, h
#: and its store, the state update). The state walk leaves out the recurrence's state store, gates and decay,
#: which take it to 2.0-2.4x the walk floor (results/perf-log.md, "the walks side by side")
WHOLE_STEP_WALKS = ("fused", "fused_exp")


def walk_sharing(walk: dict, concurrency: int) -> float:
    """How much longer a calibrated walk's step takes with ``concurrency`` programs per SM than with one:
    its ``levels`` (`calibrate_blocks.walk_levels`), those whose programs were all resident at once,
    interpolated linearly in the programs per SM (the last such level beyond them), each over the level of
    one program per SM timed with them (else the walk's ``step_s``); 1 for a walk without levels."""
    levels = [level for level in walk.get("levels", []) if level["resident"] == level["programs_per_sm"]]
    if concurrency <= 1 or not levels:
        return 1.0
    one = next((level["step_s"] for level in levels if level["programs_per_sm"] == 1), walk["step_s"])
    points = sorted({1: one, **{level["programs_per_sm"]: level["step_s"] for level in levels}}.items())
    return _interpolate_linear(concurrency, points) / one


# ---------------------------------------------------------------------------------------------- occupancy
def resident_programs(launch: Launch, rates: Rates) -> int:
    """Programs of a launch resident on one SM at once, limited by threads, 32-bit registers and shared
    memory. With the launch's compiled resources (`launch.compiled`): the compiler's registers per thread
    (allocated in units of `REGISTER_UNIT`) and shared bytes per program (plus the
    `SHARED_RESERVED_BYTES` the runtime reserves per program). Without them, a rule: the fp32 accumulators
    spread over the threads plus `REGISTER_OVERHEAD` each, and one operand tile set per pipeline stage."""
    threads = 32 * launch.warps
    if launch.compiled is not None:
        registers = launch.compiled["registers"]
        shared = launch.compiled["shared_bytes"] + SHARED_RESERVED_BYTES
    else:
        registers = launch.accumulator_elements / threads + REGISTER_OVERHEAD
        shared = max(1, launch.stage_bytes * max(1, launch.stages))
    return programs_per_sm(registers, shared, launch.warps, rates.blocks["device"])


def programs_per_sm(registers: float, shared_bytes: int, warps: int, device: dict) -> int:
    """Programs of ``warps`` warps resident on one SM of ``device`` (`DeviceLimits` fields) with
    ``registers`` per thread (allocated in units of `REGISTER_UNIT`, at most 255) and ``shared_bytes`` per
    program, at most `MAX_THREADS_PER_SM` threads and `MAX_PROGRAMS_PER_SM` programs, at least 1."""
    threads = 32 * warps
    registers = min(REGISTER_UNIT * math.ceil(registers / REGISTER_UNIT), 255)
    by_registers = device["registers_per_sm"] // (registers * threads)
    by_shared = device["shared_memory_per_sm"] // shared_bytes
    return max(1, min(MAX_THREADS_PER_SM // threads, by_registers, by_shared, MAX_PROGRAMS_PER_SM))


def spilled_bytes(launch: Launch, figure: str = "loop_local_bytes") -> float:
    """Local-memory bytes one program moves for its register spills: the compiled loads and stores of one
    trip of its outermost loop (per thread; ``figure`` ``loop_load_bytes``: its loads alone) times its
    threads and trips; 0 without compiled resources."""
    if launch.compiled is None:
        return 0.0
    return launch.compiled[figure] * 32 * launch.warps * launch.loop_trips


def issued_instructions(counts: dict, trips: float, copies: int = 1, inner_trips: int = 1,
                        block_trips: int = 1) -> float:
    """Instructions one warp issues in a kernel of compiled ``counts`` (`sass.cubin_resources`:
    ``instructions``, ``loop_instructions``, ``inner_loop_instructions``, ``top_loops``) whose outermost
    loop makes ``trips`` trips over ``copies`` compiled copies of it: all of them, and the loop's body once
    more for each further trip. Where that loop holds an inner one of ``inner_trips`` trips per outer trip
    (``trips`` then counting the inner trips in all), the outer body's own instructions once more per further
    outer trip and the inner body's per further inner trip (counts without the inner loop's figure: the outer
    body per trip). Head-dim block loops of ``block_trips`` trips (`block_loop_instructions`) issue their
    bodies that many times, not once."""
    inner = counts.get("inner_loop_instructions") if inner_trips > 1 else None
    blocks = block_loop_instructions(counts, trips, copies, block_trips)
    if inner is None:
        return counts["instructions"] + max(0.0, trips - copies) * counts["loop_instructions"] + blocks
    outer_trips = trips / inner_trips
    return (counts["instructions"] + max(0.0, outer_trips - copies) * (counts["loop_instructions"] - inner)
            + max(0.0, trips - copies) * inner + blocks)


def block_loop_instructions(counts: dict, trips: float, copies: int, block_trips: int) -> float:
    """The instructions a warp issues in the further trips of a kernel's head-dim block loops of
    ``block_trips`` trips each: what counting each loop's body once leaves out (`block_loop_bodies`: the
    loops beside the tile loops once per program, those inside them once per tile trip). 0 for block loops
    of one trip, and for counts without ``top_loops``."""
    beside, inside = block_loop_bodies(counts, copies)
    return max(0, block_trips - 1) * (beside + trips * inside)


def block_loop_bodies(counts: dict, copies: int) -> tuple[float, float]:
    """(instructions of the loops beside the kernel's ``copies`` tile loops, of those inside one trip of a
    tile loop, averaged over its copies), from the compiled ``top_loops`` (`sass.top_loops`, widest first:
    the tile loops); (0, 0) without them."""
    loops = counts.get("top_loops")
    if not loops:
        return 0.0, 0.0
    tile_loops = loops[:copies]
    return (float(sum(body for body, _ in loops[copies:])),
            sum(nested for _, nested in tile_loops) / len(tile_loops))


def program_instructions(launch: Launch) -> float:
    """Instructions each warp of one program issues (`issued_instructions` of its compiled kernel over
    `Launch.loop_trips`, `Launch.loop_copies` and its block loops' `Launch.block_trips`); 0 without compiled
    instruction counts."""
    if launch.compiled is None or "instructions" not in launch.compiled:
        return 0.0
    return issued_instructions(launch.compiled, launch.loop_trips, launch.loop_copies, launch.inner_trips,
                               launch.block_trips)


def further_trip_instructions(launch: Launch) -> float:
    """The part of `program_instructions` that the outermost loop's trips beyond its compiled copies issue
    (their block loops' trips included); 0 without compiled instruction counts."""
    if launch.compiled is None or "instructions" not in launch.compiled:
        return 0.0
    further = max(0.0, launch.loop_trips - launch.loop_copies)
    _, inside = block_loop_bodies(launch.compiled, launch.loop_copies)
    return further * (launch.compiled["loop_instructions"] + max(0, launch.block_trips - 1) * inside)


def warps_per_scheduler(launch: Launch, concurrency: int) -> float:
    """Warps each of an SM's `SCHEDULERS_PER_SM` warp schedulers holds with ``concurrency`` programs of the
    launch resident, at least 1: while one warp waits for its spilled registers, its scheduler issues
    another's instructions, so a program's spill waits are hidden by this factor."""
    return max(1.0, concurrency * launch.warps / SCHEDULERS_PER_SM)


def _spill_seconds_per_byte(launch: Launch, rates: Rates, concurrency: int, hbm_rate: float,
                            l2_rate: float) -> float:
    """Per-SM seconds per spilled byte: the spill stacks of the programs running at once on all SMs
    (stack bytes x threads x programs) hit the cache for the share of them that fits in L2, at the
    calibration's local-memory rate (``spills.local_bytes_per_s``; the L2 load rate in calibrations without
    it), the rest goes to HBM."""
    if launch.compiled is None or not launch.compiled["stack_bytes"]:
        return 0.0
    running = min(launch.programs, concurrency * rates.sm_count)
    footprint = launch.compiled["stack_bytes"] * 32 * launch.warps * running
    hit = min(1.0, rates.blocks["device"]["l2_bytes"] / footprint)
    local_rate = rates.blocks.get("spills", {}).get("local_bytes_per_s", 0.0)
    cached_rate = local_rate / rates.sm_count if local_rate > 0 else l2_rate
    return hit / cached_rate + (1 - hit) / hbm_rate


def program_spill_seconds(launch: Launch, rates: Rates, concurrency: int, hbm_rate: float,
                          l2_rate: float) -> float:
    """SM seconds of one program's register spills (`spilled_bytes`). A launch of `SPILL_LOOP_WARPS` or
    more warps per program, with a calibration that has spill loops: its spilled loads (the compiled
    ``loop_load_bytes``) at the calibrated per-SM rate of the spill loops' loads for its warps and stack
    bytes per SM (`Rates.spill_rate` of ``load_bytes_per_s_per_sm``: 8-warp programs load their spills at
    10-40 GB/s per SM, slower the larger the SM's stack); a warp waits for its spilled loads, while its
    stores go on without it. Priced by all of their local bytes (loads and stores, where the compiled
    entry or the calibration lacks the loads), the fused forwards at 384/384 and 512/512, L = 16 and 32,
    which store 0.9-0.96x the bytes they load, needed 1.3-1.6x the rate the calibration gave, and the others,
    which store 0.5-0.7x of them, 0.9-1.25x (results/perf-log.md, "Model: the spills' loads"). Otherwise at
    `_spill_seconds_per_byte`, divided by the warps each scheduler switches between
    (`warps_per_scheduler`): a lone 4-warp program waits for all of its spills, at the HBM-bound rate of
    `calibrate_blocks.measure_spills`, which is what the profiled 4-warp fused forwards move
    (results/{h100,h200}/profile-spills)."""
    if launch.compiled is None or not launch.compiled["stack_bytes"]:
        return 0.0
    if launch.warps >= SPILL_LOOP_WARPS:
        stack = launch.compiled["stack_bytes"] * 32 * launch.warps * concurrency
        if "loop_load_bytes" in launch.compiled:
            rate = rates.spill_rate(concurrency * launch.warps, stack, "load_bytes_per_s_per_sm")
            if rate > 0:
                return spilled_bytes(launch, "loop_load_bytes") / rate
        rate = rates.spill_rate(concurrency * launch.warps, stack)
        if rate > 0:
            return spilled_bytes(launch) / rate
    per_byte = _spill_seconds_per_byte(launch, rates, concurrency, hbm_rate, l2_rate)
    return spilled_bytes(launch) * per_byte / warps_per_scheduler(launch, concurrency)


# ---------------------------------------------------------------------------------------------- time
@dataclass(frozen=True)
class LaunchTime:
    """Predicted seconds of one launch and what they are made of (``compute_s`` holds the walk floor
    ``walk_s`` where the launch walks the chunks in order and that is the larger)."""

    name: str
    programs: int
    resident: int
    concurrency: int
    waves: int
    compute_s: float
    memory_s: float
    overhead_s: float
    pipelined: bool = False
    issue_s: float = 0.0
    exposed_load_s: float = 0.0
    walk_s: float = 0.0
    dispatch_s: float = 0.0

    @property
    def seconds(self) -> float:
        """The launch overhead (``overhead_s``) plus the busy time (`busy_s`) and the programs' dispatch
        (``dispatch_s``: the programs x the calibrated seconds per program of an empty kernel) overlapped as
        compute and memory are: the larger plus the smaller divided by the programs that run at once on an
        SM. While the GPU hands out one program to an SM, that SM's other resident programs run; a launch
        of many small programs (the gate cumsum's one per head and chunk, 16 per SM) is dispatch-bound."""
        return self.overhead_s + _overlapped(self.busy_s, self.dispatch_s, self.concurrency)

    @property
    def busy_s(self) -> float:
        """Unless the launch is pipelined, the larger of compute and memory and the smaller one divided by
        the programs that run at once on an SM (what one program waits for, the others hide). A pipelined
        launch (two or more stages: the next tiles' loads in flight during this tile's work) overlaps them
        within each program, but not fully (the loop's first loads, its last tile's work and the dependent
        products of one tile are not hidden): sqrt(compute^2 + memory^2), the larger term when one
        dominates, 1.41x it when they are equal (docs/performance-model.md). At least `issue_s`, the time
        the warps take to issue their instructions one after another, and `exposed_load_s`, the load steps
        its waits expose one after another."""
        return max(self._work_s, self.issue_s, self.exposed_load_s)

    @property
    def _work_s(self) -> float:
        """compute and memory combined (`seconds`)."""
        if self.pipelined:
            return math.hypot(self.compute_s, self.memory_s)
        return _overlapped(self.compute_s, self.memory_s, self.concurrency)

    @property
    def bound(self) -> str:
        """The term that sets the launch's time past its overheads: "dispatch" (the programs handed out
        take longer than their work), "issue" (the issue floor), "exposed loads" (`exposed_load_seconds`),
        else "compute" or "memory", the larger of the two, compute named "walk" where the walk floor
        (``walk_s``: the rounds of programs walking the chunks in order) set it."""
        if self.dispatch_s > self.busy_s:
            return "dispatch"
        floor = max(self.issue_s, self.exposed_load_s)
        if floor > self._work_s:
            return "issue" if self.issue_s >= self.exposed_load_s else "exposed loads"
        if self.compute_s < self.memory_s:
            return "memory"
        return "walk" if self.walk_s >= self.compute_s > 0 else "compute"


def _overlapped(first: float, second: float, concurrency: int) -> float:
    """Two times that the ``concurrency`` programs running at once on an SM overlap: the larger, plus the
    smaller divided by those programs (what one program waits for, the others hide)."""
    return max(first, second) + min(first, second) / concurrency


def active_sms(launch: Launch, rates: Rates) -> int:
    """SMs that have programs of the launch: a launch of fewer programs than SMs leaves the others idle,
    and the HBM bandwidth is shared among those that have programs."""
    return min(launch.programs, rates.sm_count)


def hbm_read_rate(launch: Launch, rates: Rates, concurrency: int) -> float:
    """Per-SM HBM read rate of a launch: by the operand bytes of one pipeline stage of each of the
    ``concurrency`` programs running at once on an SM, up to the SM's share of the bandwidth among the
    `active_sms` (`Rates.hbm_read`); for launches without tiles (elementwise ones), interpolated in the
    programs per SM (`Rates.per_sm`)."""
    pattern = rates.token_pattern(launch.masked)
    if launch.stage_bytes:
        return rates.hbm_read(concurrency * launch.stage_bytes, active_sms(launch, rates), pattern)
    return rates.per_sm(rates.memory(f"{pattern}_read"), rates.memory(f"{pattern}_read_one_per_sm"),
                        concurrency)


def memory_seconds(launch: Launch, rates: Rates, per_sm: int, concurrency: int) -> float:
    """Seconds of the launch's loads and stores on the busiest SM, whose ``per_sm`` programs run
    ``concurrency`` at a time. A pipelined launch (two or more stages) shares the bandwidth by what the SMs
    have in flight: its loads take the longest of the busiest SM's HBM bytes at the rate its bytes in
    flight allow (`Rates.hbm_latency_read`; elementwise launches: `hbm_read_rate`), the whole launch's HBM
    bytes at the full-grid rate, and the busiest SM's loads outside tile products (`Launch.l2_bytes`) at
    its share of the L2 rate; its stores the whole launch's bytes at the full-grid store rate. So where
    its programs do not divide evenly among the SMs (160 on 132), those with more programs take more of
    the bandwidth once the others are done (results/perf-log.md, "uneven grids"). A one-stage launch has
    no loads in flight while it computes (Little's law needs them all the time): its SMs each take their
    share of the bandwidth (`hbm_read_rate`) and the busiest one's programs set the time."""
    pattern = rates.token_pattern(launch.masked)
    store_pattern = pattern if launch.store_pattern == "token" else launch.store_pattern
    l2_rate = rates.memory("l2_read") / rates.sm_count
    if launch.stages < 2:
        loads = max(launch.hbm_bytes / launch.programs / hbm_read_rate(launch, rates, concurrency),
                    launch.l2_bytes / l2_rate)
        stores = (launch.store_bytes / launch.programs * active_sms(launch, rates)
                  / rates.memory(f"{store_pattern}_write"))
        return per_sm * (loads + stores)
    if launch.stage_bytes:
        latency_rate = rates.hbm_latency_read(concurrency * launch.stage_bytes, pattern)
    else:
        latency_rate = hbm_read_rate(launch, rates, concurrency)
    loads = max(per_sm * launch.hbm_bytes / launch.programs / latency_rate,
                launch.hbm_bytes / rates.memory(f"{pattern}_read"),
                per_sm * launch.l2_bytes / l2_rate)
    return loads + launch.store_bytes / rates.memory(f"{store_pattern}_write")


def issue_seconds(launch: Launch, rates: Rates, rounds: int, concurrency: int) -> float:
    """Seconds the busiest SM's warps take to issue the launch's instructions one after another: its
    ``rounds`` of ``concurrency`` programs x the instructions of one warp (`program_instructions`) x the
    calibrated seconds per instruction (`Rates.instruction_seconds`). A program of n independent chains of
    products (`issue_chains`) counts as n warps each issuing 1/n of them, as the chains count as programs
    for the product rate. The further trips of a loop whose trips do not wait on each other
    (`Launch.trip_chains` = k > 1) count the same way once more: as k chains, each issuing 1/k of them
    (the calibrated price is a recurrence's, whose steps wait on each other)."""
    chains = issue_chains(launch)
    warps = warps_per_scheduler(launch, concurrency) * chains
    instructions, k = program_instructions(launch), launch.trip_chains
    further = further_trip_instructions(launch) if k > 1 else 0.0
    return rounds * ((instructions - further) / chains * rates.instruction_seconds(warps)
                     + further / (chains * k) * rates.instruction_seconds(warps * k))


#: waits for all of a program's outstanding products per trip of its tile loop (`sass.product_waits`) from
#: which its chains of products issue as one (`issue_chains`)
SERIAL_PRODUCT_WAITS = 2


def issue_chains(launch: Launch) -> int:
    """The independent chains of products a program's warps issue side by side (`Launch.chains`), one
    where its compiled tile loop waits for all of its outstanding products `SERIAL_PRODUCT_WAITS` or more
    times per trip (``tile_loop_waits`` of the output kernel: its key/value loop waits once at
    64/128-128/128, 3-7 times at Dqk 144-512 and in 32-wide Dqk blocks) or, in entries without that count,
    where a head-dim block loop of several trips sits inside the tile loop (`block_loop_bodies`): the score
    chain of a key tile then cannot run beside H += S V. The dK/dV kernel's two chains (dK's and dV's
    products) keep their count: its loop waits 2-5 times per trip wherever it is compiled, and counted as one
    chain it raised the run medians of 27 committed runs (results/perf-log.md)."""
    compiled = launch.compiled
    if not compiled:
        return launch.chains
    if launch.kernel == "chunk_outputs_kernel" and "tile_loop_waits" in compiled:
        serial = compiled["tile_loop_waits"] >= SERIAL_PRODUCT_WAITS
    else:
        serial = launch.block_trips > 1 and block_loop_bodies(compiled, launch.loop_copies)[1] > 0
    return 1 if serial else launch.chains


#: kernels whose waits for all of their products each expose one load step in a loop of one pipeline stage
#: (`exposed_load_seconds`): the output kernel. Not the dK/dV kernel, whose one-stage loop waits 2-5 times per
#: trip too: with the floor 7 committed runs' medians rose, so its waits do not each expose a load
#: (results/perf-log.md)
EXPOSED_LOAD_KERNELS = ("chunk_outputs_kernel",)


def exposed_load_seconds(launch: Launch, rates: Rates, rounds: int) -> float:
    """Seconds of the load steps a one-stage output kernel's waits expose one after another: its ``rounds``
    of programs x (Qbar C's Dqk blocks, one wait each, + its key/value loop's trips x the compiled waits for
    all of its products per trip, ``tile_loop_waits``) x `Rates.load_step_seconds`. In a one-stage loop the
    next Dqk block's load is issued one block ahead, beside the few products of one block (two 64 x 64 x 16 in
    32-wide blocks, four in the defaults' 64- and 128-wide ones), too few to hide it, so each wait also waits
    for that load. It binds in 32-wide blocks at Dqk >= 160 and, of today's default tilings, at Dqk 192 and
    L >= 256; held out at both (results/perf-log.md, "Model: a one-stage output kernel's waits expose its
    loads"). 0 for other kernels, launches of two or more stages and compiled entries without the count."""
    compiled = launch.compiled
    if (launch.kernel not in EXPOSED_LOAD_KERNELS or launch.stages >= 2 or not compiled
            or "tile_loop_waits" not in compiled):
        return 0.0
    qk_blocks = launch.block_trips + 1
    waits = qk_blocks + launch.loop_trips * compiled["tile_loop_waits"]
    return rounds * waits * rates.load_step_seconds


def launch_time(launch: Launch, rates: Rates) -> LaunchTime:
    """The launch's time on the calibrated GPU (module docstring)."""
    sms = rates.sm_count
    resident = resident_programs(launch, rates)
    per_sm = math.ceil(launch.programs / sms)
    concurrency = min(resident, per_sm)
    rounds = math.ceil(per_sm / concurrency)
    products = concurrency * launch.chains
    dot_s = 0.0
    for (m, n, k, streamed), count in launch.dots.items():
        rows = rates.priced_rows(m)
        dot_s += 2 * rows * n * k * count / rates.dot_rate((rows, n, k), launch.warps, products, streamed,
                                                           launch.stages)
    compute = per_sm * (dot_s + launch.exp / rates.pointwise("exp", concurrency)
                        + launch.fma / rates.pointwise("fma", concurrency))
    for name, elements in (("row_reduce", launch.reductions), ("row_sum", launch.row_sums)):
        if f"{name}_elements_per_s" in rates.blocks["pointwise"]:  # calibrations before it: untimed
            compute += per_sm * elements / rates.pointwise(name, concurrency)
    hbm_rate = hbm_read_rate(launch, rates, concurrency)
    l2_rate = rates.memory("l2_read") / sms
    program_spills = program_spill_seconds(launch, rates, concurrency, hbm_rate, l2_rate)
    compute += per_sm * program_spills
    memory = memory_seconds(launch, rates, per_sm, concurrency)
    walk = 0.0
    if launch.walk is not None:
        step = rates.walk_step(launch.walk, launch.warps, launch.stages, concurrency)
        walk = rounds * (launch.loop_trips * step + program_spills)
        compute = max(compute, walk)
    overhead = rates.blocks["launch"]["launch_s"]
    dispatch = launch.programs * rates.blocks["launch"]["program_s"]
    waves = math.ceil(launch.programs / (sms * resident))
    if launch.walk is not None and rates.walk_times_issue(launch.walk, launch.warps, launch.stages):
        issue = 0.0  # the walk floor at the launch's programs per SM times the warps' issue
    else:
        issue = issue_seconds(launch, rates, rounds, concurrency)
    return LaunchTime(launch.name, launch.programs, resident, concurrency, waves, compute, memory, overhead,
                      pipelined=launch.stages >= 2, issue_s=issue,
                      exposed_load_s=exposed_load_seconds(launch, rates, rounds), walk_s=walk,
                      dispatch_s=dispatch)


# ---------------------------------------------------------------------------------------------- launches
def _tfla_tiling(problem: Problem, chunk: int, algorithm: str, tiling: str | dict | None = None):
    """The tiling the kernels run: `Tiling.default` (limit=True for limit_chunk; the head-dim blocks of the
    kernels before v13 and the output and gradient kernels' tiles of those before v15 where ``tiling`` sets
    them, `_former_default_options`) with the overrides of ``tiling`` (`tiling_fields`; its fused_chunk
    fields and state_dtype left out), or the reference's."""
    from tflabench.kernels.mlstm.xl_chunk import Tiling

    if algorithm == "reference":
        return reference_tiling(problem, chunk)
    default = Tiling.default(chunk, problem.head_dim_qk, problem.head_dim_v, variant=problem.variant,
                             limit=algorithm == "limit_chunk",
                             **_former_default_options(tiling, "xl_chunk"))
    return dataclasses.replace(default, **_tiling_overrides(tiling, Tiling, "xl_chunk")).for_chunk(chunk)


def _fused_tiling(problem: Problem, chunk: int, tiling: str | dict | None = None):
    """fused_chunk's forward tiling: `FusedTiling.default` (the value blocks of the kernels before v14 where
    ``tiling`` sets them, `_former_default_options`) with the FusedTiling overrides of ``tiling``
    (`tiling_fields`); InputError for its own backward (``backward = "fused"``), which the model does not
    cover."""
    from tflabench.kernels.mlstm.fused_chunk import FusedTiling

    default = FusedTiling.default(chunk, problem.head_dim_qk, problem.head_dim_v, variant=problem.variant,
                                  **_former_default_options(tiling, "fused_chunk"))
    fused = dataclasses.replace(default, **_tiling_overrides(tiling, FusedTiling, "fused_chunk"))
    if fused.backward != "tfla":
        raise InputError(f"fused_chunk with backward {fused.backward!r} is not modelled (TFLA's backward is)")
    return fused


def modelled_tiling(problem: Problem, algorithm: str, chunk: int, tiling: str | dict | None = None):
    """The tiling of our algorithm's first launch with ``tiling`` applied: fused_chunk's `FusedTiling` (its
    forward), else xl_chunk's / limit_chunk's `Tiling`; what compiled_resources.json.gz entries are keyed by
    (`scripts/kernel_resources.py --table`)."""
    if algorithm == "fused_chunk":
        return _fused_tiling(problem, chunk, tiling)
    return _tfla_tiling(problem, chunk, algorithm, tiling)


def tiling_fields(tiling: str | dict | None) -> dict:
    """The field overrides of a tiling: a tiling text (`kernels.mlstm.tilings.overrides`; None and
    "default" set none) or a dict of them."""
    from tflabench.kernels.mlstm import tilings

    if isinstance(tiling, dict):
        return tiling
    return {} if tiling in (None, "default") else tilings.overrides(tiling)


def _former_default_options(tiling: str | dict | None, algorithm: str) -> dict:
    """The keyword arguments of the algorithm's ``default`` tiling that a tiling (a former version's
    defaults, `kernels.mlstm.tilings.FORMER_DEFAULTS`) sets: ``exact_head_blocks`` (the head-dim blocks that
    divide the head dims) where ``head_dim_blocks`` or ``ALGORITHM.head_dim_blocks`` is "exact", and for
    xl_chunk ``former_output_tiles`` (the output and gradient kernels' tiles before v15) where
    ``output_tiles`` is "v14", ``former_value_blocks`` (the value blocks at Dv 192 before v17) where
    ``value_blocks`` is "v16" and ``former_state_blocks`` (the state value and dV blocks of v17-v20)
    from ``state_blocks``."""
    fields = tiling_fields(tiling)
    exact = "exact" in (fields.get("head_dim_blocks"), fields.get(f"{algorithm}.head_dim_blocks"))
    if algorithm == "fused_chunk":
        return {"exact_head_blocks": exact}
    return {"exact_head_blocks": exact, "former_output_tiles": fields.get("output_tiles") == "v14",
            "former_value_blocks": fields.get("value_blocks") == "v16",
            "former_state_blocks": fields.get("state_blocks")}


def _tiling_overrides(tiling: str | dict | None, tiling_class, algorithm: str) -> dict:
    """The fields of ``tiling_class``, the tiling of ``algorithm``, that a tiling sets (`tiling_fields`):
    plain field names, and ``ALGORITHM.FIELD`` ones of that algorithm
    (`kernels.mlstm.tilings.FORMER_DEFAULTS`), which take precedence."""
    names = {item.name for item in dataclasses.fields(tiling_class)}
    scope = f"{algorithm}."
    fields = tiling_fields(tiling)
    plain = {name: value for name, value in fields.items() if name in names}
    scoped = {name.removeprefix(scope): value for name, value in fields.items()
              if name.startswith(scope) and name.removeprefix(scope) in names}
    return plain | scoped


def _tiling_state_bytes(problem: Problem, algorithm: str, tiling: str | dict | None) -> int:
    """Bytes per materialized state element, with a tiling's ``state_dtype`` where it sets one."""
    dtype = tiling_fields(tiling).get("state_dtype")
    return {"float32": 4, "bfloat16": 2, "float16": 2}[dtype] if dtype else _state_bytes(problem, algorithm)


def reference_tiling(problem: Problem, chunk: int):
    """mlstm_kernels' xl_chunk tiles as a `Tiling` (docs/performance-model.md#the-reference-kernel), from
    its launchers: sub-chunks of min(128, L) in its recurrent kernels, 64-token tiles, head-dim blocks of
    min(64, next_pow2(d)), value blocks of min(128, next_pow2(Dv)) in the forward output and dV kernels,
    one pipeline stage, 4 warps, an online max in its mLSTMexp output kernel. Its dQ and dK blocks
    (min(128, next_pow2(Dqk))) are `reference_gradient_block`."""
    from tflabench.kernels.mlstm.launch import next_pow2
    from tflabench.kernels.mlstm.xl_chunk import Tiling

    tile = min(64, chunk)
    qk_block = min(64, next_pow2(problem.head_dim_qk))
    v_block = min(64, next_pow2(problem.head_dim_v))
    wide_v_block = min(128, next_pow2(problem.head_dim_v))
    return Tiling(chunk=chunk, block_state=min(128, chunk), state_block_qk=qk_block, state_block_v=v_block,
                  block_q=tile, block_kv=tile, block_qk=qk_block, block_v=v_block, num_stages=1,
                  out_block_kv=tile, out_block_v=wide_v_block, out_num_stages=1,
                  dv_block_v=wide_v_block, dkdv_block_kv=tile, out_prefix_max=False)


def reference_gradient_block(problem: Problem) -> int:
    """Head-dim block of the reference's dQ and dK outputs: min(128, next_pow2(Dqk))."""
    from tflabench.kernels.mlstm.launch import next_pow2

    return min(128, next_pow2(problem.head_dim_qk))


def _state_bytes(problem: Problem, algorithm: str) -> int:
    """Bytes per materialized state element: fp32 in the reference, the input dtype in ours."""
    return 4 if algorithm == "reference" else problem.element_bytes


def _gate_launch(problem: Problem, chunk: int, block: int) -> Launch:
    """`gate_cumsum_kernel`: log gates and their cumsum per chunk, [B*H, T] fp32 twice."""
    chunks = problem.seq_len // chunk
    launch = Launch("gate cumsum", chunks * problem.rows, 4, 1, block, 0, kernel="gate_cumsum_kernel")
    launch.exp = 2 * chunk
    launch.l2_bytes = 2 * chunk * problem.element_bytes
    launch.hbm_bytes = 2 * problem.rows * problem.seq_len * problem.element_bytes
    launch.store_bytes = 2 * problem.rows * problem.seq_len * 4
    return launch


#: the Triton kernels of the state recurrence (k, v in; states out) and of the state-gradient one (q, dh in)
STATES_KERNEL, STATE_GRADS_KERNEL = "chunk_states_kernel", "chunk_state_grads_kernel"


def _recurrence_launch(name: str, problem: Problem, tiling, state_bytes: int,
                       kernel: str = STATES_KERNEL) -> Launch:
    """`kernel`, a state recurrence (`STATES_KERNEL` or `STATE_GRADS_KERNEL`; the same loads and products):
    grid (Dqk/BK, Dv/BV, B*H), each program walking T in sub-chunks of BL with a [BK, BV] fp32 state tile
    and storing one state per chunk (state_bytes per element)."""
    p, e = problem, problem.element_bytes
    bk, bv, bl = tiling.state_block_qk, tiling.state_block_v, tiling.block_state
    steps = p.seq_len // bl
    programs = _blocks(p.head_dim_qk, bk) * _blocks(p.head_dim_v, bv) * p.rows
    launch = Launch(name, programs, tiling.state_num_warps, tiling.state_num_stages, bk * bv,
                    (bl * bk + bl * bv) * e, kernel=kernel, loop_trips=steps,
                    inner_trips=max(1, tiling.chunk // bl), walk=("state", bl, bk, bv))
    launch.dot(bk, bv, bl, steps)
    launch.exp = steps * bl
    launch.fma = steps * (bk * bv + bl * bk)
    launch.hbm_bytes = p.rows * p.seq_len * (p.head_dim_qk + p.head_dim_v) * e
    chunks = p.seq_len // tiling.chunk
    launch.store_bytes = p.rows * chunks * p.head_dim_qk * p.head_dim_v * state_bytes
    launch.store_pattern = "state"
    return launch


def _states_dq_launch(problem: Problem, tiling) -> Launch:
    """`chunk_states_dq_kernel`: the state recurrence (k, v in) over whole value rows (BV = Dv), each
    state applied to its chunk's dh [BL, Dv] sub-chunks instead of stored: dQ's inter-chunk part out, in
    the layout of q."""
    p, e = problem, problem.element_bytes
    launch = _recurrence_launch("states + dQ (inter)", problem, tiling, 0, kernel="chunk_states_dq_kernel")
    bk, bv, bl = tiling.state_block_qk, tiling.state_block_v, tiling.block_state
    steps = p.seq_len // bl
    launch.stage_bytes += bl * bv * e
    launch.dot(bl, bk, bv, steps, streamed=1)
    launch.fma += steps * bl * bk
    launch.hbm_bytes += p.rows * p.seq_len * p.head_dim_v * e
    launch.store_bytes = p.rows * p.seq_len * p.head_dim_qk * e
    launch.store_pattern = "token"
    return launch


def _blocks(dim: int, block: int) -> int:
    """Programs (or loop trips) over a head dim in blocks: the launchers' `launch.block_count` (a block that
    does not divide the head dim, ours since v13 or the reference's, covers the rest with masked tiles)."""
    from tflabench.kernels.mlstm.launch import block_count

    return block_count(dim, block)


def _mean_causal_tiles(chunk: int, outer_block: int, inner_block: int) -> float:
    """Mean number of inner tiles up to (or from) the diagonal over the outer tiles of a chunk."""
    outer_tiles = chunk // outer_block
    return (outer_tiles + 1) / 2 * outer_block / inner_block


def _output_launch(problem: Problem, tiling, state_bytes: int, reload_query: bool = False,
                   chains: int = 2) -> Launch:
    """`chunk_outputs_kernel`: per chunk (Dv/BV) x (L/(BLQ Q_TILES)) programs, each Q_TILES query tiles:
    Qbar C over Dqk/BK blocks, then the key/value tiles up to the diagonal. reload_query: the query
    tile's Dqk blocks are loaded again for every key/value tile (the reference's output kernel); ours keeps
    the last block loaded, so with one Dqk block the scores' left operand stays on chip, as the score
    tile does in H += S V. chains: the scores of each key tile, a product independent of the tile before,
    form a second chain beside H += S V in ours (held out: results/{h100,h200}/holdout-output-chains); the
    reference's output kernel is modelled with one (with two its best chunk sizes matched on 21 instead of
    32 of 35 runs)."""
    p, e, t = problem, problem.element_bytes, tiling
    chunks = p.seq_len // t.chunk
    qk_blocks = _blocks(p.head_dim_qk, t.block_qk)
    query_groups = t.chunk // (t.block_q * t.out_q_tiles)
    programs = _blocks(p.head_dim_v, t.out_block_v) * query_groups * chunks * p.rows
    kv_tiles = _mean_causal_tiles(t.chunk, t.block_q, t.out_block_kv) * t.out_q_tiles
    launch = Launch("output", programs, t.out_num_warps, t.out_num_stages, t.block_q * t.out_block_v,
                    (t.block_q * t.block_qk + t.out_block_kv * (t.block_qk + t.out_block_v)) * e,
                    kernel="chunk_outputs_kernel", chains=chains, loop_trips=kv_tiles,
                    loop_copies=t.out_q_tiles, block_trips=qk_blocks - 1)
    launch.dot(t.block_q, t.out_block_v, t.block_qk, qk_blocks * t.out_q_tiles)
    launch.dot(t.block_q, t.out_block_kv, t.block_qk, qk_blocks * kv_tiles,
               streamed=2 if reload_query or qk_blocks > 1 else 1)
    launch.dot(t.block_q, t.out_block_v, t.out_block_kv, kv_tiles, streamed=1)
    online_max = p.variant == "exp" and not t.out_prefix_max
    launch.exp = kv_tiles * t.block_q * t.out_block_kv * (2 if online_max else 1)
    launch.reductions = kv_tiles * t.block_q * t.out_block_kv if online_max else 0.0
    launch.row_sums = kv_tiles * t.block_q * t.out_block_kv if p.variant == "exp" and not online_max else 0.0
    launch.fma = kv_tiles * t.block_q * (3 * t.out_block_kv + t.out_block_v)
    launch.hbm_bytes = (p.rows * p.seq_len * (2 * p.head_dim_qk + p.head_dim_v) * e
                        + p.rows * chunks * p.head_dim_qk * p.head_dim_v * state_bytes)
    launch.store_bytes = p.rows * p.seq_len * p.head_dim_v * e
    return launch


#: the token tensors each gradient kernel reads (besides its chunk's state or state gradient): ours read q in
#: dQ and k in dK for the row sums q.dq and k.dk of the gate gradients, which they store; the reference's dQ
#: and dK do neither (its gate gradients read q, k, dQ, dK again, `_reference_gate_gradient_launch`); no dV
#: kernel reads v
GRADIENT_READS = {
    "ours": {"dQ": ("q", "k", "v", "dh"), "dK": ("q", "k", "v", "dh"), "dV": ("q", "k", "dh")},
    "reference": {"dQ": ("k", "v", "dh"), "dK": ("q", "v", "dh"), "dV": ("q", "k", "dh")},
}


def _gradient_launch(name: str, problem: Problem, tiling, state_bytes: int, kernels: str = "ours") -> Launch:
    """`chunk_dq_kernel`, `chunk_dk_kernel` or `chunk_dv_kernel` (``kernels`` "ours"; "reference": the
    reference's of the same name): per chunk (head-dim blocks of the gradient) x (L / row tile) programs;
    the intra-chunk part over the tiles on one side of the diagonal (where the other head dim is one block
    the row tile is loaded again for every partner tile from the same address, an L2 hit, and the product is
    priced at the rate with the left operand loaded once, as the one with the score tile on chip is; the
    held-out run `holdout-operands` decided both; with the L2 term left to loads outside products, the rate
    with both operands loaded there met fewer targets, results/perf-log.md), the inter-chunk part over the
    other head dim in blocks; HBM reads of the tensors of `GRADIENT_READS`. The partner loop's trips add
    into the program's one gradient tile but none waits on another's result: the issue floor counts the
    trips its pipeline holds in flight (its stages) as chains (`Launch.trip_chains`)."""
    p, e, t = problem, problem.element_bytes, tiling
    chunks = p.seq_len // t.chunk
    if name == "dQ":
        rows, out_block, out_dim = t.block_q, t.block_qk, p.head_dim_qk
        loop_block, loop_dim = t.block_v, p.head_dim_v
        partner_tiles = _mean_causal_tiles(t.chunk, t.block_q, t.block_kv)
        partner = t.block_kv
    else:
        rows, partner = t.block_kv, t.block_q
        partner_tiles = _mean_causal_tiles(t.chunk, t.block_kv, t.block_q) * t.block_kv / t.block_q
        if name == "dK":
            out_block, out_dim, loop_block, loop_dim = t.block_qk, p.head_dim_qk, t.block_v, p.head_dim_v
        else:
            out_block, out_dim, loop_block, loop_dim = t.dv_block_v, p.head_dim_v, t.block_qk, p.head_dim_qk
    loop_blocks = _blocks(loop_dim, loop_block)
    programs = _blocks(out_dim, out_block) * (t.chunk // rows) * chunks * p.rows
    stages = t.dv_stages if name == "dV" else t.num_stages
    launch = Launch(name, programs, t.num_warps, stages, rows * (out_block + partner),
                    (rows * loop_block + partner * loop_block + partner * out_block) * e,
                    kernel=f"chunk_{name.lower()}_kernel", loop_trips=partner_tiles, trip_chains=stages,
                    block_trips=loop_blocks)
    launch.dot(rows, partner, loop_block, partner_tiles * loop_blocks, streamed=2 if loop_blocks > 1 else 1)
    launch.dot(rows, out_block, partner, partner_tiles, streamed=1)
    launch.dot(rows, out_block, loop_block, loop_blocks)
    launch.exp = partner_tiles * rows * partner
    launch.fma = partner_tiles * rows * partner * 3 + rows * out_block * 2
    widths = {"q": p.head_dim_qk, "k": p.head_dim_qk, "v": p.head_dim_v, "dh": p.head_dim_v}
    token_width = sum(widths[tensor] for tensor in GRADIENT_READS[kernels][name])
    launch.hbm_bytes = (p.rows * p.seq_len * token_width * e
                        + p.rows * chunks * p.head_dim_qk * p.head_dim_v * state_bytes)
    summed = kernels == "ours" and name != "dV"  # the fp32 row sums q.dq / k.dk per head-dim block
    partial_sums = p.rows * p.seq_len * 4 * _blocks(out_dim, out_block) if summed else 0
    launch.store_bytes = p.rows * p.seq_len * out_dim * e + partial_sums
    return launch


def _dkdv_launch(problem: Problem, tiling, state_bytes: int, with_dq: bool = False) -> Launch:
    """`chunk_dkdv_kernel`: dK and dV in one program per key/value tile of dkdv_block_kv rows over whole
    head dims, walking the query tiles at and after the diagonal (K Q^T and V dH^T computed once for
    both); q, k, v, dh and the state gradient read once. Two chains of products: the scores and the score
    gradients, then dV and dK from them, do not wait for each other. with_dq (a chunk of one tile): also
    dQ, its inter-chunk part read and the sum written back."""
    p, e, t = problem, problem.element_bytes, tiling
    chunks, rows = p.seq_len // t.chunk, t.dkdv_block_kv
    dqk, dv = p.head_dim_qk, p.head_dim_v
    programs = (t.chunk // rows) * chunks * p.rows
    query_tiles = _mean_causal_tiles(t.chunk, rows, t.block_q) * rows / t.block_q
    launch = Launch("dK+dV", programs, t.dkdv_num_warps, t.dkdv_num_stages, rows * (dqk + dv),
                    t.block_q * (dqk + dv) * e, kernel="chunk_dkdv_kernel", chains=2,
                    loop_trips=query_tiles, trip_chains=t.dkdv_num_stages)
    launch.dot(rows, dqk, dv, 1)
    launch.dot(rows, dv, dqk, 1)
    launch.dot(rows, t.block_q, dqk, query_tiles, streamed=1)
    launch.dot(rows, dv, t.block_q, query_tiles, streamed=1)
    launch.dot(rows, t.block_q, dv, query_tiles, streamed=1)
    launch.dot(rows, dqk, t.block_q, query_tiles, streamed=1)
    launch.exp = query_tiles * rows * t.block_q
    launch.fma = query_tiles * rows * t.block_q * 3 + rows * (dqk + dv) * 2
    launch.hbm_bytes = (p.rows * p.seq_len * (2 * dqk + 2 * dv) * e
                        + p.rows * chunks * dqk * dv * state_bytes)
    launch.store_bytes = p.rows * p.seq_len * ((dqk + dv) * e + 4)
    if with_dq:
        launch.name, launch.accumulator_elements = "dQ+dK+dV", launch.accumulator_elements + rows * dqk
        launch.dot(rows, dqk, t.block_q, query_tiles, streamed=1)
        launch.fma += rows * dqk * 2
        launch.hbm_bytes += p.rows * p.seq_len * dqk * e
        launch.store_bytes += p.rows * p.seq_len * (dqk * e + 4)
    return launch


def _gate_gradient_launches(problem: Problem) -> list[Launch]:
    """The PyTorch elementwise ops of `launch.gate_grads` (reverse cumsum, sigmoids, casts) as launches
    that each stream [B*H, T] fp32 rows."""
    row = problem.rows * problem.seq_len * 4
    launches = []
    for index in range(GATE_GRAD_LAUNCHES):
        launch = Launch(f"gate grads {index}", max(1, row // 2**16), 4, 1, 1024, 0)
        launch.hbm_bytes = launch.store_bytes = row * GATE_GRAD_ROW_PASSES / GATE_GRAD_LAUNCHES / 2
        launch.l2_bytes = launch.hbm_bytes / launch.programs
        launches.append(launch)
    return launches


def _gate_gradient_kernel_launch(problem: Problem, q_blocks: int, k_blocks: int) -> Launch:
    """`gate_grads_kernel` (`Tiling.fused_gate_grads`): one program per segment of a (batch, head) row
    (`xl_chunk.GateGradsGrid`) sums the fp32 row sums (q_blocks of q.dq, k_blocks of k.dk) of the tokens after
    its segment, then walks the segment reading those row sums and the gates i, f, writing di and df."""
    from tflabench.kernels.mlstm.xl_chunk import GateGradsGrid

    T, grid = problem.seq_len, GateGradsGrid.for_seq_len(problem.seq_len)
    segments = grid.segments(T)
    gate_bytes = 2 * problem.element_bytes
    sum_bytes = 4 * (q_blocks + k_blocks)
    later_tokens = sum(grid.later_tokens(T, segment) for segment in range(segments)) / segments
    launch = Launch("gate grads", problem.rows * segments, 4, 1, grid.block,
                    grid.block * (sum_bytes + gate_bytes), kernel="gate_grads_kernel",
                    loop_trips=grid.longest_program_steps(T))
    walked = T / segments
    launch.fma = walked * (q_blocks + k_blocks + 4) + later_tokens * (q_blocks + k_blocks)
    launch.exp = walked * 2
    launch.l2_bytes = later_tokens * sum_bytes
    launch.hbm_bytes = problem.rows * T * (sum_bytes + gate_bytes)
    launch.store_bytes = problem.rows * T * gate_bytes
    return launch


def _fused_forward_launch(problem: Problem, chunk: int, tiling) -> Launch:
    """`fused_forward_kernel` with a `FusedTiling`: (Dv/BV) x B*H programs walking the NC chunks with a
    [Dqk_p, BV] state."""
    from tflabench.kernels.mlstm.launch import next_pow2

    p, e = problem, problem.element_bytes
    dqk, bv, chunks = next_pow2(p.head_dim_qk), tiling.block_v, p.seq_len // chunk
    programs = _blocks(p.head_dim_v, bv) * p.rows
    launch = Launch("fused forward", programs, tiling.num_warps, tiling.num_stages,
                    dqk * bv + chunk * (chunk + bv), (2 * chunk * dqk + chunk * bv) * e,
                    kernel="fused_forward_kernel", loop_trips=chunks,
                    walk=("fused_exp" if p.variant == "exp" else "fused", chunk, dqk, bv))
    launch.dot(chunk, chunk, dqk, chunks)
    launch.dot(chunk, bv, dqk, chunks)
    launch.dot(chunk, bv, chunk, chunks)
    launch.dot(dqk, bv, chunk, chunks)
    launch.exp = chunks * chunk * chunk * (2 if p.variant == "exp" else 1)
    launch.reductions = chunks * chunk * chunk if p.variant == "exp" else 0.0
    launch.fma = chunks * (chunk * chunk * 3 + dqk * bv + chunk * dqk)
    launch.hbm_bytes = p.rows * p.seq_len * (2 * p.head_dim_qk + p.head_dim_v + 2) * e
    launch.store_bytes = p.rows * p.seq_len * (p.head_dim_v * e + 8)
    return launch


def _tfla_backward(problem: Problem, tiling, state_bytes: int, recompute_states: bool = True,
                   recompute_gates: bool = False) -> list[Launch]:
    """TFLA's backward (`xl_chunk._backward`): the gate cumsums where the forward did not leave TFLA's
    (recompute_gates: after fused_chunk's forward, `xl_chunk.tfla_backward`), the state recurrence again
    (unless the forward's states were kept, recompute_states False), dQ, state gradients, dK and dV (one
    kernel where the tiling fuses them) and the gate gradients (PyTorch ops, or one kernel with
    `Tiling.fused_gate_grads`); with `Tiling.uses_fused_dq` and recomputed states, the recurrence gives dQ's
    inter-chunk part and the dK/dV kernel the rest."""
    dims = problem.head_dim_qk, problem.head_dim_v
    gate = [_gate_launch(problem, tiling.chunk, tiling.block_state)] if recompute_gates else []
    state_gradients = _recurrence_launch("state gradients", problem, tiling, state_bytes, STATE_GRADS_KERNEL)
    fused_dq = recompute_states and tiling.uses_fused_dq(*dims)
    qk_blocks = _blocks(problem.head_dim_qk, tiling.block_qk)
    k_blocks = 1 if tiling.uses_fused_dkdv(*dims) else qk_blocks
    gate_gradients = ([_gate_gradient_kernel_launch(problem, 1 if fused_dq else qk_blocks, k_blocks)]
                      if tiling.fused_gate_grads else _gate_gradient_launches(problem))
    if fused_dq:
        return [*gate, _states_dq_launch(problem, tiling), state_gradients,
                _dkdv_launch(problem, tiling, state_bytes, with_dq=True), *gate_gradients]
    if tiling.uses_fused_dkdv(*dims):
        key_gradients = [_dkdv_launch(problem, tiling, state_bytes)]
    else:
        key_gradients = [_gradient_launch(name, problem, tiling, state_bytes) for name in ("dK", "dV")]
    recomputed = ([_recurrence_launch("states (recomputed)", problem, tiling, state_bytes)]
                  if recompute_states else [])
    return [
        *gate,
        *recomputed,
        _gradient_launch("dQ", problem, tiling, state_bytes),
        state_gradients,
        *key_gradients,
        *gate_gradients,
    ]


def check_chunk(problem: Problem, algorithm: str, chunk: int) -> None:
    """InputError unless the algorithm runs this chunk size at this shape."""
    from tflabench.kernels.mlstm.launch import ONE_TILE_CHUNK_MAX

    if algorithm not in ALGORITHMS:
        raise InputError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    if chunk < 16 or chunk & (chunk - 1) or problem.seq_len % chunk:
        raise InputError(f"chunk size must be a power of two >= 16 dividing seq_len={problem.seq_len}, "
                         f"got {chunk}")
    limit = ONE_TILE_CHUNK_MAX.get(algorithm)
    if limit is not None and chunk > limit:
        raise InputError(f"{algorithm} runs chunk sizes <= {limit}, got {chunk}")
    if algorithm == "reference" and problem.seq_len >= 128 and chunk % 64:
        raise InputError(f"the reference runs chunk sizes that are multiples of 64, got {chunk}")


def launches(problem: Problem, algorithm: str, chunk: int, tiling: str | dict | None = None) -> list[Launch]:
    """Every kernel launch of one call (forward, and with mode fwdbw the backward too), with the default
    tilings changed by ``tiling``: a tiling text (a named candidate or FIELD=VALUE overrides, as a sweep
    row records it) or a dict of field overrides (`tiling_fields`)."""
    check_chunk(problem, algorithm, chunk)
    if algorithm == "reference":
        return _reference_launches(problem, chunk)
    tiling = tiling_fields(tiling)
    state_bytes = _tiling_state_bytes(problem, algorithm, tiling)
    tfla_algorithm = "xl_chunk" if algorithm == "fused_chunk" else algorithm
    tfla_tiling = _tfla_tiling(problem, chunk, tfla_algorithm, tiling)
    if algorithm == "fused_chunk":
        forward = [_fused_forward_launch(problem, chunk, _fused_tiling(problem, chunk, tiling))]
    else:
        forward = [
            _gate_launch(problem, chunk, tfla_tiling.block_state),
            _recurrence_launch("states", problem, tfla_tiling, state_bytes),
            _output_launch(problem, tfla_tiling, state_bytes),
        ]
    recompute = algorithm == "fused_chunk" or tiling.get("recompute_states", True)
    backward = (_tfla_backward(problem, tfla_tiling, state_bytes, recompute, algorithm == "fused_chunk")
                if problem.mode == "fwdbw" else [])
    _attach_compiled(forward, compiled_kernels(problem, algorithm, chunk, tiling))
    _attach_compiled(backward, compiled_kernels(problem, "xl_chunk", chunk, tiling))
    masked = any(dim % block for dim, block in head_dim_blocks(problem, algorithm, chunk, tiling))
    for launch in forward + backward:
        launch.masked = masked and launch.kernel not in GATE_KERNELS and bool(launch.kernel)
    return forward + backward


#: our Triton kernels that move gates, not head-dim tiles
GATE_KERNELS = ("gate_cumsum_kernel", "gate_grads_kernel")


def head_dim_blocks(problem: Problem, algorithm: str, chunk: int, tiling: dict | None = None
                    ) -> list[tuple[int, int]]:
    """(head dim, block) of each head-dim block size our kernels run at this shape with ``tiling`` (the
    fields of `tiling_fields`); none for the reference, whose tiles the model prices as its launches run
    them."""
    if algorithm == "reference":
        return []
    dqk, dv = problem.head_dim_qk, problem.head_dim_v
    blocks = []
    if algorithm == "fused_chunk":
        from tflabench.kernels.mlstm.launch import next_pow2

        fused = modelled_tiling(problem, algorithm, chunk, tiling)
        blocks += [(dqk, next_pow2(dqk)), (dv, fused.block_v)]
        if problem.mode == "fwd":
            return blocks
    tfla_algorithm = "xl_chunk" if algorithm == "fused_chunk" else algorithm
    tfla = modelled_tiling(problem, tfla_algorithm, chunk, tiling)
    return blocks + tfla.head_dim_blocks(dqk, dv, backward=problem.mode == "fwdbw")


#: the reference's Triton kernels (mLSTMsig) per launch name of the model
REFERENCE_KERNELS = {
    "states": "mlstm_siging_chunkwise__recurrent_fw_C_kernel",
    "states (recomputed)": "mlstm_siging_chunkwise__recurrent_fw_C_kernel",
    "output": "mlstm_siging_chunkwise__parallel_fw_Hintra_kernel",
    "state gradients": "mlstm_siging_chunkwise__recurrent_bw_dC_kernel",
    "dV": "mlstm_siging_chunkwise__parallel_bw_dV_kernel",
    "dK": "mlstm_siging_chunkwise__parallel_bw_dK_kernel",
    "dQ": "mlstm_siging_chunkwise__parallel_bw_dQ_kernel",
}


def _reference_launches(problem: Problem, chunk: int) -> list[Launch]:
    """mlstm_kernels' xl_chunk as it launches (its fw.py and bw.py): gate cumsums, state recurrence, output;
    backward: gate cumsums, states recomputed, state gradients, dV, dK, dQ (dQ and dK with head-dim blocks
    of `reference_gradient_block`) and its compiled gate-gradient kernel, with the compiled resources of
    its kernels (mLSTMsig) where the table has them; its recurrences at their padded tiles
    (`_padded_problem`)."""
    tiling = reference_tiling(problem, chunk)
    gradient_tiling = dataclasses.replace(tiling, block_qk=reference_gradient_block(problem))
    padded = _padded_problem(problem, tiling.state_block_qk, tiling.state_block_v)
    launch_list = [
        _gate_launch(problem, chunk, tiling.block_state),
        _recurrence_launch("states", padded, tiling, 4),
        _output_launch(problem, tiling, 4, reload_query=True, chains=1),
    ]
    if problem.mode == "fwdbw":
        launch_list += [
            _gate_launch(problem, chunk, tiling.block_state),
            _recurrence_launch("states (recomputed)", padded, tiling, 4),
            _recurrence_launch("state gradients", padded, tiling, 4, STATE_GRADS_KERNEL),
            _gradient_launch("dV", problem, tiling, 4, "reference"),
            _gradient_launch("dK", problem, gradient_tiling, 4, "reference"),
            _gradient_launch("dQ", problem, gradient_tiling, 4, "reference"),
            _reference_gate_gradient_launch(problem),
        ]
    launch_list[2].loop_trips = _mean_causal_tiles(chunk, tiling.block_q, tiling.out_block_kv)  # its kv loop
    blocks = tiling.head_dim_blocks(problem.head_dim_qk, problem.head_dim_v, backward=problem.mode == "fwdbw")
    masked = any(dim % block for dim, block in blocks + [(problem.head_dim_qk, gradient_tiling.block_qk)])
    for launch in launch_list:
        launch.kernel = REFERENCE_KERNELS.get(launch.name, launch.kernel)
        launch.masked = masked and launch.name in ("output", "dV", "dK", "dQ")
    _attach_compiled(launch_list, compiled_kernels(problem, "reference", chunk))
    return launch_list


def _padded_problem(problem: Problem, block_qk: int, block_v: int) -> Problem:
    """``problem`` with its head dims rounded up to whole [block_qk, block_v] tiles: the reference's state
    recurrences (boundary-checked block pointers) take the time of their padded tiles, loads and state
    stores alike: its states launch at 80/80 in [64, 64] tiles takes 0.86-0.94x the time of 128/128, which
    has as many tiles (results/{h100,h200}/launch-times-reference-heads)."""
    return dataclasses.replace(problem, head_dim_qk=_blocks(problem.head_dim_qk, block_qk) * block_qk,
                               head_dim_v=_blocks(problem.head_dim_v, block_v) * block_v)


def _reference_gate_gradient_launch(problem: Problem) -> Launch:
    """The reference's gate gradients, one `torch.compile`d kernel: q, k, dQ, dK read once (their
    products summed over Dqk, then a reverse cumsum over [B*H, T])."""
    tokens = problem.rows * problem.seq_len
    launch = Launch("gate grads", max(1, tokens // 1024), 4, 1, 1024, 0)
    launch.hbm_bytes = 4 * tokens * problem.head_dim_qk * problem.element_bytes
    launch.l2_bytes = launch.hbm_bytes / launch.programs
    launch.store_bytes = 2 * tokens * 4
    return launch


def _attach_compiled(launch_list: list[Launch], kernels: dict | None) -> None:
    """Set each launch's compiled resources from a table entry's kernels, and its warps to those it was
    compiled with (the reference launches 2 warps per program at Dqk 32, where the model's tiling has 4);
    launches of kernels the entry lacks, such as the PyTorch gate-gradient ops, keep the rule."""
    for launch in launch_list:
        launch.compiled = (kernels or {}).get(launch.kernel)
        if launch.compiled is not None:
            launch.warps = launch.compiled.get("num_warps", launch.warps)


def read_compiled_resources(path: Path = COMPILED_RESOURCES_PATH) -> dict:
    """The compiled-resources table (gzipped JSON: target, triton, command, entries), as
    `scripts/kernel_resources.py` writes it."""
    return json.loads(gzip.decompress(Path(path).read_bytes()))


@functools.cache
def _compiled_table() -> dict[str, list[dict]]:
    """The entries of the compiled-resources table beside this module by configuration
    (``algorithm/variant/DqkxDv/Lchunk``, the first four parts of a key), in the table's order ({} when
    absent)."""
    entries = read_compiled_resources()["entries"] if COMPILED_RESOURCES_PATH.exists() else {}
    by_configuration: dict[str, list[dict]] = {}
    for key, entry in entries.items():
        by_configuration.setdefault("/".join(key.split("/")[:4]), []).append(entry)
    return by_configuration


def compiled_kernels(problem: Problem, algorithm: str, chunk: int,
                     tiling: str | dict | None = None) -> dict | None:
    """{Triton kernel name: registers, shared_bytes, stack_bytes, loop_local_bytes, ...} of the algorithm's
    tiling at this shape compiled for sm_90 (`scripts/kernel_resources.py --table`, `--reference-table`
    for the reference), or None when the table has no entry or its tiling is not the one the kernels (or
    the model, for the reference) would run with ``tiling`` (`tiling_fields`). The table holds today's
    default tilings and, under keys with a ``/version`` suffix, those of the former versions
    (`kernels.mlstm.tilings.FORMER_DEFAULTS`); a stale entry or another tiling falls back to the rule."""
    configuration = f"{algorithm}/{problem.variant}/{problem.head_dim_qk}x{problem.head_dim_v}/L{chunk}"
    entries = _compiled_table().get(configuration, [])
    if algorithm == "reference":
        modelled = reference_tiling(problem, chunk)
        matching = [entry for entry in entries if _reference_entry_matches(entry, modelled)]
    else:
        resolved = modelled_tiling(problem, algorithm, chunk, tiling)
        matching = [entry for entry in entries if _compiled_with(entry.get("tiling"), resolved)]
    return matching[0]["kernels"] if matching else None


def _compiled_with(recorded: dict | None, tiling) -> bool:
    """Whether a table entry's tiling (its fields as compiled) is ``tiling``: every field equal, and a field
    the entry does not record (added to the tiling class after the entry was compiled) at its default,
    the value that keeps the kernels as they were."""
    if recorded is None:
        return False
    fields = dataclasses.fields(tiling)
    if not set(recorded) <= {item.name for item in fields}:
        return False
    return all(recorded.get(item.name, item.default) == getattr(tiling, item.name) for item in fields)


def _reference_entry_matches(entry: dict, tiling) -> bool:
    """Whether the reference's compiled launches have the tiles `reference_tiling` models (its output
    kernel's query, key/value and value blocks, its recurrence's sub-chunk and state blocks)."""
    blocks = {name: kernel.get("blocks", {}) for name, kernel in entry["kernels"].items()}
    output = blocks.get(REFERENCE_KERNELS["output"], {})
    states = blocks.get(REFERENCE_KERNELS["states"], {})
    return (output.get("siz_b_LQ"), output.get("siz_b_LKV"), output.get("siz_b_DHHV"),
            states.get("L"), states.get("siz_b_DHQK"), states.get("siz_b_DHHV")) == (
        tiling.block_q, tiling.out_block_kv, tiling.out_block_v, tiling.block_state, tiling.state_block_qk,
        tiling.state_block_v)


@dataclass(frozen=True)
class Prediction:
    """Predicted seconds of one (algorithm, chunk size) call, with its launches."""

    algorithm: str
    chunk: int
    launches: tuple[LaunchTime, ...]

    @property
    def seconds(self) -> float:
        return sum(launch.seconds for launch in self.launches)

    @property
    def ms(self) -> float:
        return self.seconds * 1e3


def predict(problem: Problem, algorithm: str, chunk: int, rates: Rates, tiling: str | dict | None = None
            ) -> Prediction:
    """The structural model's time of one call (with ``tiling``, as in `launches`)."""
    return _prediction(algorithm, chunk, launches(problem, algorithm, chunk, tiling), rates)


def _prediction(algorithm: str, chunk: int, launch_list: list[Launch], rates: Rates) -> Prediction:
    """The `Prediction` of one call made of ``launch_list``."""
    return Prediction(algorithm, chunk, tuple(launch_time(launch, rates) for launch in launch_list))


def runnable_chunks(problem: Problem, algorithm: str, candidates=(16, 32, 64, 128, 256, 512, 1024, 2048,
                                                                   4096)) -> list[int]:
    """The candidate chunk sizes the algorithm runs at this shape."""
    runnable = []
    for chunk in candidates:
        try:
            check_chunk(problem, algorithm, chunk)
        except InputError:
            continue
        runnable.append(chunk)
    return runnable


def fits_shared_memory(launch_list: list[Launch], rates: Rates) -> bool:
    """Whether every launch's compiled program fits in the shared memory of one SM of the calibrated GPU
    (launches without compiled resources count as fitting): a program that needs more does not launch
    (Triton's OutOfResources), as mLSTMexp's fused forward at a 512-wide padded Dqk and L = 128 (288 KB)."""
    limit = rates.blocks["device"]["shared_memory_per_sm"]
    return all(launch.compiled is None or launch.compiled["shared_bytes"] <= limit for launch in launch_list)


def predict_all(problem: Problem, rates: Rates, algorithms=("xl_chunk", "fused_chunk"),
                tiling: str | dict | None = None) -> list[Prediction]:
    """Predictions of every runnable (algorithm, chunk size) whose programs fit the SM's shared memory
    (`fits_shared_memory`), with ``tiling`` as in `launches`, fastest first."""
    calls = [(algorithm, chunk, launches(problem, algorithm, chunk, tiling))
             for algorithm in algorithms for chunk in runnable_chunks(problem, algorithm)]
    predictions = [_prediction(algorithm, chunk, launch_list, rates)
                   for algorithm, chunk, launch_list in calls if fits_shared_memory(launch_list, rates)]
    if not predictions:
        raise InputError(f"no chunk size runs at seq_len={problem.seq_len} ({', '.join(algorithms)}, with "
                         "programs that fit an SM's shared memory)")
    return sorted(predictions, key=lambda prediction: prediction.seconds)


def load_rates(gpu_key: str) -> Rates:
    """The building-block rates of a GPU's stored calibration; InputError when it has none."""
    from tflabench.analysis import hardware

    gpu = hardware.get_gpu(gpu_key)
    blocks = hardware.load_calibration_blocks(gpu.key)
    if blocks is None:
        raise InputError(f"no building-block calibration for {gpu.key}: run `tflabench calibrate` on it "
                         f"(results/calibration/{gpu.key}.json)")
    return Rates(blocks, source=f"calibration {gpu.key}")
