"""The default of `tflabench.kernels.mlstm`: which algorithm and chunk size to run for a shape on a GPU.

`choose` answers from the table measured on H100 and H200 (`choices.json`, shipped with the package: the
fastest of our explicit rows of each (shape, mode) group of the `tfla-grid` sweep on that GPU) and, for a GPU
or a shape the table has not seen, from a rule: walking the chunks in order (`fused_chunk`) wins when its
programs alone fill the GPU, TFLA (`xl_chunk`) otherwise. The answer carries its reason; the harness
records it in each result row.

Tensors: q [B, T, H, Dqk], v [B, T, H, Dv].
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, astuple, dataclass
from functools import cache, lru_cache
from importlib import resources

import torch
from torch import Tensor

from tflabench.errors import InputError
from tflabench.kernels.mlstm.launch import (
    EXP_FOUR_WARPS_MAX,
    FUSED_CHUNK_MAX,
    ONE_TILE_CHUNK_MAX,
    block_count,
    fused_state_blocks,
    next_pow2,
)

#: chunk sizes of the rule (the measured optimum of most groups of the table)
XL_CHUNK_DEFAULT, FUSED_CHUNK_DEFAULT = 128, 64
#: fused_chunk's forward wins when it launches at least this many programs per SM: measured on an H100
#: (results/perf-log.md, v6) 1.6x faster than TFLA at 1.9 programs per SM, equal at 3.9, 1.9x slower at 0.5
FUSED_PROGRAMS_PER_SM = 1.5
#: the fused forward keeps a [Dqk, value block] state tile on chip: up to this padded Dqk (at Dqk 256 its
#: value blocks shrink to 32 columns and it ran 1.8x slower than TFLA with 7.8 programs per SM)
FUSED_MAX_HEAD_DIM_QK = 128
#: mLSTMexp's fused forward: only up to this query/key head dim, where it runs 4 warps and two programs per
#: SM (v10 at head dims <= 64, v12 at Dqk <= 64): at 32 x 64/64, L = 64 it beats its TFLA forward (0.68-0.70
#: vs 0.88 ms, results/perf-log.md v10), at 16 x 64/128, T = 4096 too (0.551 vs 0.648 ms, H100, v12);
#: above, at 8 warps, it lost every group of the tfla-grid runs (4-17x slower; it spills registers)
EXP_FUSED_MAX_HEAD_DIM = EXP_FOUR_WARPS_MAX
#: SMs assumed when the device is not a CUDA GPU (an H100 SXM)
DEFAULT_SM_COUNT = 132
TABLE = "choices.json"


@dataclass(frozen=True)
class Choice:
    """An algorithm and its chunk size (None for the plain-PyTorch references), and why."""

    algorithm: str
    chunk_size: int | None
    reason: str

    def as_params(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Shape:
    """q, k [batch, seq_len, heads, head_dim_qk]; v [batch, seq_len, heads, head_dim_v]."""

    batch: int
    seq_len: int
    heads: int
    head_dim_qk: int
    head_dim_v: int


def gpu_key(name: str | None) -> str | None:
    """The table's name of a GPU model ("h100", "h200") from a device name, or None if it has none."""
    lowered = (name or "").lower()
    for key in ("h200", "h100"):
        if key in lowered:
            return key
    return None


@lru_cache(maxsize=4096)
def choose(shape: Shape, *, variant: str = "sig", training: bool = True, gpu: str | None = None,
           sm_count: int = DEFAULT_SM_COUNT, algorithm: str = "auto", chunk_size: int | None = None,
           triton_runs: bool = True) -> Choice:
    """The algorithm and chunk size for `shape` (algorithm "auto"), or the chunk size for a given algorithm.

    training: a backward pass follows (the fwdbw measurements decide, else the forward ones); gpu: the
    device name (`torch.cuda.get_device_name`); triton_runs: whether the Triton kernels can run on the
    device (a CUDA GPU, or the CPU under TRITON_INTERPRET=1). Answers are cached: a call of `mlstm` with
    algorithm "auto" costs a dictionary lookup, not a scan of the table (the scan took 0.23 ms, a third
    of a 0.6 ms kernel's time when timed call by call).
    """
    chunk_sizes = _chunk_sizes(shape.seq_len)
    if algorithm == "auto" and (not triton_runs or not chunk_sizes):
        why = ("the Triton kernels cannot run here (no CUDA device and TRITON_INTERPRET is not 1)"
               if not triton_runs else f"T={shape.seq_len} has no power-of-two divisor >= 16")
        return Choice("recurrent", None, f"{why}: the plain-PyTorch recurrent form")
    measured = _measured_choice(shape, variant, training, gpu_key(gpu), algorithm, chunk_size)
    if measured is not None:
        return measured
    modelled = _modelled_choice(shape, variant, training, gpu_key(gpu), algorithm, chunk_size)
    if modelled is not None:
        return modelled
    return _rule(shape, variant, sm_count, algorithm, chunk_size, chunk_sizes)


def choose_for_call(q: Tensor, v: Tensor, *, variant: str, algorithm: str, chunk_size: int | None,
                    training: bool) -> Choice:
    """`choose` for the inputs of one `mlstm` call (validated)."""
    B, T, H, DQK = q.shape
    return choose_on_device(Shape(B, T, H, DQK, v.shape[-1]), q.device, variant=variant, training=training,
                            algorithm=algorithm, chunk_size=chunk_size)


def choose_on_device(shape: Shape, device: torch.device, *, variant: str, training: bool,
                     algorithm: str = "auto", chunk_size: int | None = None) -> Choice:
    """`choose` for a shape on a device (its GPU model and SM count; a CPU runs the Triton kernels only
    under TRITON_INTERPRET=1)."""
    on_gpu = device.type == "cuda"
    gpu, sm_count = _cuda_facts(device.index) if on_gpu else (None, DEFAULT_SM_COUNT)
    return choose(
        shape, variant=variant, training=training, gpu=gpu, sm_count=sm_count,
        algorithm=algorithm, chunk_size=chunk_size,
        triton_runs=on_gpu or os.environ.get("TRITON_INTERPRET") == "1",
    )


@cache
def _cuda_facts(index: int | None) -> tuple[str, int]:
    """(device name, SM count) of a CUDA device (None: the current one)."""
    device = torch.device("cuda", index) if index is not None else torch.device("cuda")
    return torch.cuda.get_device_name(device), torch.cuda.get_device_properties(device).multi_processor_count


def fused_programs(shape: Shape) -> int:
    """Programs of the fused forward launch: B * H * (value blocks of its default tiling)."""
    value_block, _ = fused_state_blocks(shape.head_dim_qk, shape.head_dim_v)
    return shape.batch * shape.heads * block_count(shape.head_dim_v, value_block)


def _chunk_sizes(seq_len: int) -> list[int]:
    """Powers of two >= 16 dividing T, ascending."""
    return [1 << e for e in range(4, seq_len.bit_length()) if seq_len % (1 << e) == 0]


def _rule(shape: Shape, variant: str, sm_count: int, algorithm: str, chunk_size: int | None,
          chunk_sizes: list[int]) -> Choice:
    """The choice for a shape or GPU the table has not measured."""
    large_exp = variant == "exp" and shape.head_dim_qk > EXP_FUSED_MAX_HEAD_DIM
    if algorithm == "auto" and large_exp:
        algorithm = "xl_chunk"
        reason = (f"rule: above Dqk {EXP_FUSED_MAX_HEAD_DIM} the mLSTMexp fused forward lost to TFLA in "
                  "every group of the tfla-grid runs (4-17x slower on H100 and H200)")
    elif algorithm == "auto":
        programs = fused_programs(shape)
        fits = next_pow2(shape.head_dim_qk) <= FUSED_MAX_HEAD_DIM_QK and (chunk_size or 0) <= FUSED_CHUNK_MAX
        if fits and programs >= FUSED_PROGRAMS_PER_SM * sm_count:
            algorithm = "fused_chunk"
            reason = (f"rule: the fused forward's {programs} programs fill the {sm_count} SMs "
                      f"(>= {FUSED_PROGRAMS_PER_SM} per SM)")
        else:
            algorithm = "xl_chunk"
            reason = (f"rule: {programs} fused programs would leave the {sm_count} SMs under-filled"
                      if fits else f"rule: Dqk above {FUSED_MAX_HEAD_DIM_QK} or chunks above "
                      f"{FUSED_CHUNK_MAX} run faster with TFLA")
    else:
        reason = f"{algorithm} as asked"
    if chunk_size is None:
        if not chunk_sizes:
            raise InputError(f"T={shape.seq_len} has no power-of-two chunk size >= 16 dividing it: "
                             f"{algorithm} cannot run it (algorithm 'recurrent' or 'parallel' can)")
        preferred = XL_CHUNK_DEFAULT if algorithm == "xl_chunk" else FUSED_CHUNK_DEFAULT
        limit = ONE_TILE_CHUNK_MAX.get(algorithm, preferred)
        chunk_size = max((c for c in chunk_sizes if c <= min(preferred, limit)), default=chunk_sizes[0])
        reason += f", chunk size {chunk_size} (the default of {algorithm})"
    return Choice(algorithm, chunk_size, reason)


#: algorithms the structural model predicts (`analysis.structural`)
MODELLED_ALGORITHMS = ("xl_chunk", "fused_chunk")


def _modelled_choice(shape: Shape, variant: str, training: bool, gpu: str | None, algorithm: str,
                     chunk_size: int | None) -> Choice | None:
    """For a shape the table has not measured: the structural model's fastest (algorithm, chunk size) that
    satisfies the given algorithm / chunk size, on the GPU's calibration (results/calibration/), or None
    without one (a GPU not calibrated, or a package installed without the calibrations). On the shapes of
    results/h100/model-holdout and results/h200/model-holdout (no table rows) its pick was the fastest row,
    or within 5 % of it, in 31 of 32 groups (the miss: mLSTMexp's fused forward as v11 ran it, 8 warps),
    the rule's in 18."""
    if gpu is None or algorithm not in ("auto", *MODELLED_ALGORITHMS):
        return None
    from tflabench.analysis import structural

    try:
        rates = structural.load_rates(gpu)
        problem = structural.Problem(*astuple(shape), variant=variant, mode="fwdbw" if training else "fwd")
        algorithms = MODELLED_ALGORITHMS if algorithm == "auto" else (algorithm,)
        predictions = [prediction for prediction in structural.predict_all(problem, rates, algorithms)
                       if chunk_size in (None, prediction.chunk)]
    except InputError:
        return None
    if not predictions:
        return None
    best = predictions[0]
    return Choice(best.algorithm, best.chunk,
                  f"model: predicted fastest of {len(predictions)} (algorithm, chunk size) on the "
                  f"{gpu.upper()} calibration ({best.ms:.3f} ms; the table has not measured this shape)")


def _measured_choice(shape: Shape, variant: str, training: bool, gpu: str | None, algorithm: str,
                     chunk_size: int | None) -> Choice | None:
    """The fastest measured row of the table for exactly this GPU model, shape, variant and mode that
    satisfies the given algorithm / chunk size, or None."""
    if gpu is None:
        return None
    mode = "fwdbw" if training else "fwd"
    rows = [row for row in _table()["rows"]
            if row["gpu"] == gpu and row["variant"] == variant and row["mode"] == mode
            and Shape(**row["shape"]) == shape
            and algorithm in ("auto", row["algorithm"]) and chunk_size in (None, row["chunk_size"])]
    if not rows:
        return None
    best = min(rows, key=lambda row: row["median_ms"])
    return Choice(best["algorithm"], best["chunk_size"],
                  f"measured: fastest of {len(rows)} rows on the {gpu.upper()} for this shape and mode "
                  f"({best['median_ms']:.3f} ms, {_table()['source']})")


@cache
def _table() -> dict:
    """{"source": str, "rows": [{"gpu", "variant", "mode", "shape", "algorithm", "chunk_size",
    "median_ms"}]}"""
    return json.loads(resources.files("tflabench.kernels.mlstm").joinpath(TABLE).read_text())
