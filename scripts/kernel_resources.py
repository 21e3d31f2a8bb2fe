#!/usr/bin/env python
"""Shared memory, registers and spills of our TFLA kernels for a shape and tiling, compiled for Hopper
(sm_90) on a machine without a GPU.

The launchers of `tflabench.kernels.mlstm.xl_chunk` run on CPU tensors with every Triton launch captured
instead of executed; each captured launch is compiled ahead of time (`triton.compile` for target cuda:90,
specialized as the JIT would: 16-byte-aligned pointers, integers divisible by 16 except those the kernel
excludes) and its cubin read with the bundled cuobjdump. What a tiling costs on chip, before any device
time is spent (the device library's METHOD.md: read the resource report first):

    python scripts/kernel_resources.py --dqk 128 --dv 256 --chunk 128 --variant sig
    python scripts/kernel_resources.py --dqk 128 --dv 256 --chunk 128 --set dv_block_v=256
    python scripts/kernel_resources.py --dqk 128 --dv 256 --chunk 128 --reference

Shared memory per program must stay within the H100/H200's 227 KB; spills show as stack bytes, and the
local-memory loads and stores (LDL/STL) inside each kernel's outermost loop as `loop_local_bytes` (bytes
per thread per trip of that loop, read from the SASS). `instr` and `loop` are its SASS instructions and
those of that loop's body (`sass.instruction_counts`: what a warp issues, once and per further trip).

`--table` compiles the default tilings over the head dims and chunk sizes the structural performance model
is checked and plotted at, today's and those of the former kernels versions that committed runs measured
(`tilings.FORMER_DEFAULTS`, keys with a `/version` suffix), and the tilings that committed rows ran (A/B
runs; keys `/version/tiling`), and writes them to
`tflabench/analysis/compiled_resources.json.gz` (about an hour on two cores); the model reads registers,
shared memory and loop spills from it (docs/performance-model.md). A head-dim pair added to
`TABLE_HEAD_DIMS` can be compiled alone and merged into the table with `--table --head-dims 64x192`
(repeatable): the entries a full run writes for it, in a minute or two; `--table --chunks 32` the same for a
chunk size.
`--inner-loops` adds to the table's entries the instructions of the state recurrences' sub-chunk loops, where
a chunk holds several sub-chunks (their loop over the chunks then issues its own instructions once per chunk,
the sub-chunk loop's once per sub-chunk; `structural.issued_instructions`), compiling the recurrences alone
(about six minutes on two cores).
`--block-loops` adds the loop structure of the output and gradient kernels whose head-dim block loops make
several trips (`sass.top_loops`: 32-wide blocks at 96/96, two 128-wide value blocks at Dv 256), compiling
those kernels alone (the structural model counts those loops' trips; `structural.block_loop_instructions`).
`--product-waits` adds the waits for all outstanding warpgroup products in each output and dK/dV kernel's
outermost loop (`sass.product_waits`; the output kernel issues its chains as one from two such waits per
trip, `structural.issue_chains`) to the entries the model reads for committed rows and today's default
tilings, compiling those kernels alone (about 20 minutes on two cores).
`--sweep-config FILE` adds the entries of the tilings a sweep config runs, so that a held-out run's predictions
(`scripts/holdout_predictions.py`) have them before it runs.
`--reference-table` adds the launches of the reference kernel (mlstm_kernels' mLSTMsig xl_chunk, captured
from its launchers as ours are) at the same head dims and chunk sizes 64-512 (about four minutes):

    python scripts/kernel_resources.py --table
    python scripts/kernel_resources.py --reference-table
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gzip
import inspect
import itertools
import json
import math
import multiprocessing
import os
from pathlib import Path

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
from triton.tools.tensor_descriptor import TensorDescriptor

from tflabench.analysis import sass, structural
from tflabench.errors import InputError

HOPPER = GPUTarget("cuda", 90, 32)
SHARED_LIMIT_KB = 227
HOPPER_SMS = 132  # H100 SXM and H200: programs per SM of a grid
POINTER_TYPES = {torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.float32: "*fp32"}
LAUNCH_OPTIONS = ("num_warps", "num_stages")


@dataclasses.dataclass
class Launch:
    """One captured kernel launch: the kernel, its grid, bound arguments and launch options."""

    kernel: JITFunction
    grid: tuple
    arguments: dict
    options: dict


@contextlib.contextmanager
def captured_launches():
    """Within the block, `kernel[grid](...)` records a `Launch` instead of running the kernel."""
    launches: list[Launch] = []
    original = JITFunction.run

    def record(self, *args, grid, warmup, **kwargs):
        options = {name: kwargs.pop(name) for name in LAUNCH_OPTIONS if name in kwargs}
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        launches.append(Launch(self, grid, dict(bound.arguments), options))

    JITFunction.run = record
    try:
        yield launches
    finally:
        JITFunction.run = original


def _compile_arguments(launch: Launch) -> tuple[dict, dict, dict]:
    """(signature, constexprs, attributes) as the JIT would specialize the launch."""
    excluded = set(launch.kernel.do_not_specialize or ())
    signature, constexprs, attributes = {}, {}, {}
    for index, param in enumerate(launch.kernel.params):
        value = launch.arguments[param.name]
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = POINTER_TYPES[value.dtype]
            attributes[(index,)] = [["tt.divisibility", 16]]
        elif isinstance(value, TensorDescriptor):
            block = ",".join(str(size) for size in value.block_shape)
            signature[param.name] = f"tensordesc<{POINTER_TYPES[value.base.dtype][1:]}[{block}]>"
        elif isinstance(value, bool):
            signature[param.name] = "i1"
        elif isinstance(value, int):
            specialized = param.name not in excluded and index not in excluded
            if specialized and value == 1:
                signature[param.name] = "constexpr"  # the JIT compiles an integer 1 in as a constant
                constexprs[param.name] = 1
                continue
            signature[param.name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if specialized and value % 16 == 0:
                attributes[(index,)] = [["tt.divisibility", 16]]
        else:
            signature[param.name] = "fp32"
    return signature, constexprs, attributes


def resources(launch: Launch) -> dict:
    """Shared memory (KB), registers per thread and spill/local bytes of the launch compiled for sm_90."""
    signature, constexprs, attributes = _compile_arguments(launch)
    compiled = triton.compile(ASTSource(launch.kernel, signature, constexprs, attributes), target=HOPPER,
                              options=launch.options)
    return {"kernel": launch.kernel.fn.__name__, "grid": launch.grid, **launch.options,
            "shared_kb": compiled.metadata.shared / 1024, **sass.cubin_resources(compiled.asm["cubin"])}


def spill_loop_resources(num_warps: int, width: int) -> dict:
    """What `resources` reports for the calibration's spill loop (`calibrate_blocks._spill_loop_kernel`) of
    ``num_warps`` warps and a carried tile ``width`` columns wide, launched as `measure_spill_loops` launches
    it (its default `BlockSizes`, bf16 operands)."""
    from tflabench.analysis import calibrate_blocks

    sizes = dataclasses.replace(calibrate_blocks.BlockSizes(), device="cpu")
    a, b, out = calibrate_blocks.spill_loop_operands(sizes, num_warps, HOPPER_SMS, torch.empty)  # not run
    with captured_launches() as launches:
        calibrate_blocks.launch_spill_loop(sizes, a, b, out, HOPPER_SMS, num_warps, width)
    return resources(launches[0])


def _launches(args: argparse.Namespace, tiling=None) -> list[Launch]:
    """The launches of one forward and one backward pass at the requested shape, with ``tiling`` or else
    the default tiling changed by ``args.set``."""
    from tflabench.kernels.mlstm import fused_chunk, xl_chunk

    if tiling is None:
        if args.algorithm == "fused_chunk":
            tiling = fused_chunk.FusedTiling.default(args.chunk, args.dqk, args.dv, variant=args.variant)
        else:
            tiling = xl_chunk.Tiling.default(args.chunk, args.dqk, args.dv, variant=args.variant,
                                             limit=args.limit)
        changes = dict(change.split("=") for change in args.set)
        tiling = dataclasses.replace(tiling, **{name: _field_value(value) for name, value in changes.items()})
    tiling.check(args.dqk, args.dv)
    B, T, H = args.batch, args.seq or 2 * args.chunk, args.heads
    q, k = (torch.empty(B, T, H, args.dqk, dtype=torch.bfloat16) for _ in range(2))  # never read: not run
    v = torch.empty(B, T, H, args.dv, dtype=torch.bfloat16)
    i, f = torch.empty(B, T, H), torch.empty(B, T, H)
    sig, normalize = args.variant == "sig", args.variant == "exp"
    with captured_launches() as launches:
        if args.algorithm == "fused_chunk":
            _fused_launches(q, k, v, i, f, tiling, args.variant)
            return launches
        forward = xl_chunk._forward(q, k, v, i, f, None, tiling, sig, normalize, 1e-6, torch.bfloat16)
        forward.states = None  # recomputed in the backward, as `mlstm` runs it
        xl_chunk._backward(q, k, v, i, f, torch.empty_like(v), None, forward, None, tiling, sig, normalize)
    return launches


def _field_value(text: str) -> int | bool | str:
    """A `--set` value: an int, true / false, or a string (fused_chunk's ``backward``)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if text.lstrip("-").isdigit() else text


def _fused_launches(q, k, v, i, f, tiling, variant: str) -> None:
    """One forward and one backward pass of `fused_chunk` (the backward of `tiling.backward`)."""
    from tflabench.kernels.mlstm import fused_chunk

    config = fused_chunk._Config(tiling=tiling, sig=variant == "sig", normalize=variant == "exp", eps=1e-6,
                                 return_final_state=False)
    h, denom, m_comb, maxes, c_last, _ = fused_chunk._forward(q, k, v, i, f, None, config)
    if tiling.backward == "fused":
        fused_chunk._backward(q, k, v, i, f, torch.empty_like(v), None, None, (denom, m_comb, maxes, c_last),
                              config)


#: (Dqk, Dv) pairs and chunk sizes of the compiled-resources table: the tfla-grid and tfla-fig5 head dims,
#: 64/128 and 96/96 (results/h100/model-holdout; 96: blocks that do not divide the reference's),
#: square ones for the L* over head dim plot, the masked head dims of the held-out runs holdout-masked-loads
#: (112/112, 48/96, 96/192), holdout-masked-ours (80/160, 64/96, 160/160), holdout-spill-curve (192/384,
#: 384/384), holdout-new-heads (192/192, 128/512, 32/64), holdout-walkers (64/192, 64/256),
#: holdout-walkers-linear (64/32, 32/128, 32/32) and holdout-small-head-shapes (32/256), and the state and
#: dV block runs from holdout-v18-state-blocks to holdout-v21-dv-blocks (144/144 ... 208/288),
#: holdout-dispatch (32/48, 48/64, 64/80, 48/32), holdout-wide-keys (96/64, 128/96, 160/128, 256/128) and
#: holdout-spill-loads (320/320, 448/448, 384/512, 256/384, 288/288);
#: limit_chunk and larger chunks use the model's rule
TABLE_HEAD_DIMS = ((48, 48), (64, 64), (64, 128), (80, 80), (96, 96), (128, 128), (128, 256), (256, 256),
                   (256, 512), (512, 512), (112, 112), (48, 96), (96, 192), (80, 160), (64, 96), (160, 160),
                   (192, 384), (384, 384), (192, 192), (128, 512), (32, 64), (64, 32), (32, 128),
                   (32, 32), (64, 192), (64, 256), (32, 256), (144, 144), (128, 176), (128, 288),
                   (144, 176), (192, 160), (176, 176), (144, 288), (96, 160), (144, 192), (208, 288),
                   (112, 176), (48, 80), (208, 208), (192, 256), (256, 384), (160, 320), (128, 192),
                   (64, 160), (32, 48), (48, 64), (64, 80), (48, 32), (96, 64), (128, 96), (160, 128),
                   (256, 128), (320, 320), (448, 448), (384, 512), (256, 384), (288, 288))
TABLE_CHUNKS = {"fused_chunk": (16, 32, 64, 128), "xl_chunk": (64, 128, 256, 512, 1024)}
#: fused_chunk's chunk sizes below xl_chunk's smallest: its backward runs the xl_chunk kernels at them
#: (`structural.launches`), so the table holds those launches too, at today's default tiling and at the
#: kernels versions of committed fused_chunk fwd+bwd rows (`_committed_fused_backwards`)
FUSED_BACKWARD_CHUNKS = (16, 32)
TABLE_PATH = structural.COMPILED_RESOURCES_PATH
RESULTS = Path(__file__).resolve().parent.parent / "results"


def _table_tiling(algorithm: str, variant: str, dqk: int, dv: int, chunk: int, version: str | None,
                  tiling: str | None = None):
    """The tiling of one configuration in the kernels version ``version`` (None: today's;
    `tilings.former_default`) with a committed row's ``tiling`` text on top, as the structural model
    resolves it (`model_check.row_tiling`, `structural.modelled_tiling`)."""
    from tflabench.analysis import model_check, structural

    problem = structural.Problem(1, 2 * chunk, 1, dqk, dv, variant=variant)
    fields = model_check.row_tiling(version, variant, tiling, (dqk, dv))
    return structural.modelled_tiling(problem, algorithm, chunk, fields)


def _table_entry(algorithm: str, variant: str, dqk: int, dv: int, chunk: int, version: str | None = None,
                 tiling: str | None = None) -> dict:
    """The tiling of one configuration (in the kernels version ``version``, with ``tiling`` on top) and,
    per kernel it launches (forward and backward), what `resources` reports; the first launch of a kernel
    stands for its repeats."""
    resolved = _table_tiling(algorithm, variant, dqk, dv, chunk, version, tiling)
    kernels = {}
    for launch in _launches(_table_arguments(algorithm, variant, dqk, dv, chunk), resolved):
        row = resources(launch)
        kernels.setdefault(row["kernel"], {
            "num_warps": row.get("num_warps", 4), "num_stages": row.get("num_stages", 3),
            "shared_bytes": int(row["shared_kb"] * 1024), "registers": row["registers"],
            "stack_bytes": row["stack_bytes"], "loop_local_bytes": row["loop_local_bytes"],
            "loop_load_bytes": row["loop_load_bytes"], "instructions": row["instructions"],
            "loop_instructions": row["loop_instructions"],
            "inner_loop_instructions": row["inner_loop_instructions"], "top_loops": row["top_loops"],
            "tile_loop_waits": row["tile_loop_waits"]})
    return {"tiling": dataclasses.asdict(resolved), "kernels": kernels}


def _table_arguments(algorithm: str, variant: str, dqk: int, dv: int, chunk: int) -> argparse.Namespace:
    """The command-line arguments `_launches` takes for one table configuration (B = H = 2, two chunks)."""
    return argparse.Namespace(dqk=dqk, dv=dv, chunk=chunk, variant=variant, set=[], batch=2, heads=2,
                              seq=None, algorithm="fused_chunk" if algorithm == "fused_chunk" else "xl_chunk",
                              limit=algorithm == "limit_chunk")


#: the state recurrences: a loop over the chunks around a loop over their sub-chunks
RECURRENCE_KERNELS = ("chunk_states_kernel", "chunk_state_grads_kernel", "chunk_states_dq_kernel")


def _kernel_figures(config: tuple, kernels: set[str], figures: tuple[str, ...]) -> tuple[str, dict]:
    """(table key, {kernel: {figure: its `resources` figure}}) of one configuration, the first launch of
    each of ``kernels`` alone compiled."""
    found = {}
    for launch in _launches(_table_arguments(*config[:5]), _table_tiling(*config)):
        name = launch.kernel.fn.__name__
        if name in kernels and name not in found:
            row = resources(launch)
            found[name] = {figure: row[figure] for figure in figures}
    print(_table_key(*config), flush=True)
    return _table_key(*config), found


def _add_kernel_figures(path: Path, configs: list[tuple], kernels_of, figure: str,
                        same: tuple[str, ...] = ()) -> None:
    """Set ``figure`` in the table's entries of ``configs``, for the kernels ``kernels_of(config)`` names,
    compiling those kernels alone; the rest of each entry is what it was (the same compiler gives the same
    counts). With ``same``, only where the compiled figures of those names equal the entry's (an entry of a
    former version compiled from its own source, `scripts/former_source_resources.py`, that today's source
    no longer compiles to). Configurations without an entry, or without such kernels, are not compiled."""
    table = structural.read_compiled_resources(path)
    jobs = []
    for config in configs:
        kernels = set(kernels_of(config))
        if kernels and _table_key(*config) in table["entries"]:
            jobs.append((config, kernels, (figure, *same)))
    with multiprocessing.Pool(os.cpu_count()) as pool:
        found = pool.starmap(_kernel_figures, jobs)
    for key, figures in found:
        kernels = table["entries"][key]["kernels"]
        for name, values in figures.items():
            if name in kernels and all(kernels[name].get(other) == values[other] for other in same):
                kernels[name][figure] = values[figure]
    _write_table(path, table)


def _spilling_wide_kernels(table: dict, config: tuple) -> set[str]:
    """The kernels of the configuration's table entry that spill registers in programs of
    `structural.SPILL_LOOP_WARPS` or more warps (those whose spills the model prices by their loads)."""
    entry = table["entries"].get(_table_key(*config))
    if entry is None:
        return set()
    return {name for name, kernel in entry["kernels"].items()
            if kernel.get("stack_bytes") and kernel["num_warps"] >= structural.SPILL_LOOP_WARPS}


def add_load_bytes(path: Path = TABLE_PATH) -> None:
    """Add ``loop_load_bytes`` (the LDL part of ``loop_local_bytes``) to the kernels of the table's entries
    that spill in programs of 8 or more warps (`_spilling_wide_kernels`), compiling those kernels alone,
    where the compile gives the entry's stack and loop local bytes (`structural.program_spill_seconds`
    prices those kernels' spills by their loads; about 15 minutes on two cores)."""
    table = structural.read_compiled_resources(path)
    _add_kernel_figures(path, _table_configs(), lambda config: _spilling_wide_kernels(table, config),
                        "loop_load_bytes", same=("stack_bytes", "loop_local_bytes"))


def add_inner_loop_counts(path: Path = TABLE_PATH) -> None:
    """Add ``inner_loop_instructions`` to the recurrences of the table's entries whose chunks hold several
    sub-chunks (chunk > block_state), compiling those kernels alone (a few minutes)."""
    configs = [config for config in _table_configs()
               if config[0] != "fused_chunk" and config[4] > _table_tiling(*config).block_state]
    _add_kernel_figures(path, configs, lambda _config: RECURRENCE_KERNELS, "inner_loop_instructions")


#: the kernels with head-dim block loops, and the blocks of the tiling (head dim, block field) they walk
BLOCK_LOOP_KERNELS = {"chunk_outputs_kernel": ("head_dim_qk", "block_qk"),
                      "chunk_dq_kernel": ("head_dim_v", "block_v"), "chunk_dk_kernel": ("head_dim_v", "block_v"),
                      "chunk_dv_kernel": ("head_dim_qk", "block_qk")}


def _block_loop_kernels(config: tuple) -> set[str]:
    """The kernels of `BLOCK_LOOP_KERNELS` whose head-dim block loops make two or more trips in this
    configuration (the output kernel's Dqk blocks after the first: three or more blocks)."""
    if config[0] == "fused_chunk":
        return set()
    tiling = _table_tiling(*config)
    dims = {"head_dim_qk": config[2], "head_dim_v": config[3]}
    trips = {name: structural._blocks(dims[dim], getattr(tiling, block))
             - (name == "chunk_outputs_kernel") for name, (dim, block) in BLOCK_LOOP_KERNELS.items()}
    return {name for name, count in trips.items() if count >= 2}


def add_top_loops(path: Path = TABLE_PATH) -> None:
    """Add ``top_loops`` to the kernels of the table's entries whose head-dim block loops make several trips
    (`_block_loop_kernels`), compiling those kernels alone. A kernel without the figure counts its block
    loops once (`structural.block_loop_instructions`)."""
    _add_kernel_figures(path, _table_configs(), _block_loop_kernels, "top_loops")


#: the kernels whose products the model counts as two chains (`structural.issue_chains`)
TWO_CHAIN_KERNELS = ("chunk_outputs_kernel", "chunk_dkdv_kernel")


def _modelled_configs() -> list[tuple]:
    """The configurations of `_table_configs` that the model reads for a committed row of our TFLA kernels
    (the same configuration and tiling, `_table_tiling`) or at today's default tiling."""
    used = set()
    for version, (algorithm, variant, dqk, dv, chunk, tiling, _mode) in _committed_rows():
        if algorithm in TABLE_CHUNKS:
            try:
                used.add(((algorithm, variant, dqk, dv, chunk),
                          _table_tiling(algorithm, variant, dqk, dv, chunk, version, tiling)))
            except InputError:  # a committed tiling the kernels no longer have
                continue
    return [config for config in _table_configs()
            if config[5:] == (None, None) or (config[:5], _table_tiling(*config)) in used]


def add_product_waits(path: Path = TABLE_PATH) -> None:
    """Add ``tile_loop_waits`` (`sass.product_waits`) to the two-chain kernels (`TWO_CHAIN_KERNELS`) of the
    entries the model reads (`_modelled_configs`), compiling those kernels alone. A kernel without the
    figure keeps two chains unless a block loop sits inside its tile loop."""
    _add_kernel_figures(path, [config for config in _modelled_configs() if config[0] != "fused_chunk"],
                        lambda _config: TWO_CHAIN_KERNELS, "tile_loop_waits")


def _table_key(algorithm: str, variant: str, dqk: int, dv: int, chunk: int,
               version: str | None = None, tiling: str | None = None) -> str:
    """``algorithm/variant/DqkxDv/Lchunk`` (today's default tiling), ``.../version`` for a former one,
    ``.../version/tiling`` for a committed row's tiling."""
    return (f"{algorithm}/{variant}/{dqk}x{dv}/L{chunk}" + (f"/{version}" if version or tiling else "")
            + (f"/{tiling}" if tiling else ""))


def _table_entry_or_none(*config) -> dict | None:
    """`_table_entry`, or None (reported) for a tiling that does not compile."""
    try:
        entry = _table_entry(*config)
    except Exception as error:  # noqa: BLE001 - a tiling that does not compile is left out of the table
        print(_table_key(*config), f"not compiled ({type(error).__name__}: {error})", flush=True)
        return None
    print(_table_key(*config), flush=True)
    return entry


#: chunk sizes of the reference kernel's table entries (mlstm_kernels' mLSTMsig xl_chunk runs multiples of 64)
REFERENCE_CHUNKS = (64, 128, 256, 512)
#: constexpr arguments of the reference's kernels that fix its tiles and loops
REFERENCE_BLOCKS = ("L", "siz_b_LQ", "siz_b_LKV", "siz_b_DHQK", "siz_b_DHHV", "save_states_every_nth_chunk")


def _reference_launches(dqk: int, dv: int, chunk: int) -> list[Launch]:
    """The launches of one forward and one backward pass of mlstm_kernels' mLSTMsig xl_chunk as the bench
    calls it (normalize=False, bf16 outputs, states recomputed in the backward) at two chunks of 2 heads."""
    from mlstm_kernels.torch.chunkwise.triton_xl_chunk_siging.bw import mlstm_siging_chunkwise_bw
    from mlstm_kernels.torch.chunkwise.triton_xl_chunk_siging.fw import mlstm_siging_chunkwise_fw

    B, H, T = 1, 2, max(2 * chunk, 256)  # its heuristics need T >= 128 to keep the chunk size
    q, k = (torch.randn(B, H, T, dqk, dtype=torch.bfloat16) for _ in range(2))
    v = torch.randn(B, H, T, dv, dtype=torch.bfloat16)
    i, f = torch.randn(B, H, T), torch.randn(B, H, T)
    with captured_launches() as launches:
        mlstm_siging_chunkwise_fw(q, k, v, i, f, normalize=False, chunk_size=chunk,
                                  output_dtype=torch.bfloat16)
        mlstm_siging_chunkwise_bw(q, k, v, i, f, vecN_out=torch.zeros(B, H, T),
                                  matDeltaH_out=torch.randn_like(v), normalize=False, chunk_size=chunk)
    return launches


def _reference_entry(dqk: int, dv: int, chunk: int) -> dict:
    """Per kernel of the reference's launches: what `resources` reports and the tile constexprs it was
    launched with (`REFERENCE_BLOCKS`); the first launch of a kernel stands for its repeats."""
    from importlib.metadata import version

    kernels = {}
    for launch in _reference_launches(dqk, dv, chunk):
        row = resources(launch)
        kernels.setdefault(row["kernel"], {
            "num_warps": row.get("num_warps", 4), "num_stages": row.get("num_stages", 3),
            "shared_bytes": int(row["shared_kb"] * 1024), "registers": row["registers"],
            "stack_bytes": row["stack_bytes"], "loop_local_bytes": row["loop_local_bytes"],
            "blocks": {name: launch.arguments[name] for name in REFERENCE_BLOCKS
                       if name in launch.arguments}})
    return {"source": f"mlstm_kernels {version('mlstm_kernels')}", "kernels": kernels}


def write_reference_table(path: Path = TABLE_PATH, head_dims: set[tuple[int, int]] | None = None) -> None:
    """Compile the reference's launches at the table's head dims (or only ``head_dims``) and
    `REFERENCE_CHUNKS` and add them to the table as `reference/sig/<Dqk>x<Dv>/L<chunk>` (our entries are
    kept)."""
    configs = [(dqk, dv, chunk) for dqk, dv in _selected_head_dims(head_dims) for chunk in REFERENCE_CHUNKS]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        compiled = pool.starmap(_reference_entry, configs)
    table = structural.read_compiled_resources(path)
    table["entries"].update({"reference/sig/{}x{}/L{}".format(*config): entry
                             for config, entry in zip(configs, compiled, strict=True)})
    _write_table(path, table)


def _selected_head_dims(head_dims: set[tuple[int, int]] | None) -> tuple[tuple[int, int], ...]:
    """`TABLE_HEAD_DIMS`, or those of them in ``head_dims``; a pair the table does not list is an error
    (add it to `TABLE_HEAD_DIMS` first, so that a full `--table` run writes it too)."""
    if head_dims is None:
        return TABLE_HEAD_DIMS
    unknown = sorted(head_dims - set(TABLE_HEAD_DIMS))
    if unknown:
        raise InputError(f"head dims {', '.join(f'{dqk}x{dv}' for dqk, dv in unknown)} are not in "
                         "TABLE_HEAD_DIMS; add them there first")
    return tuple(pair for pair in TABLE_HEAD_DIMS if pair in head_dims)


@functools.cache
def _committed_rows() -> frozenset[tuple]:
    """(version, row) of every committed row of our kernels: ``row`` as `model_check.modelled_rows` gives it
    (algorithm, variant, Dqk, Dv, chunk, tiling, mode), the version today's where the run does not say.
    The committed runs are read once for `_committed_tilings` and `_committed_fused_backwards`."""
    from tflabench.analysis import model_check
    from tflabench.analysis.run_data import committed_run_dirs, load_run
    from tflabench.kernels.mlstm import tilings

    found = set()
    for run_dir in committed_run_dirs(RESULTS):
        run = load_run(run_dir)
        version = model_check.kernels_version(run) or tilings.KERNELS_VERSION
        found.update((version, row) for row in model_check.modelled_rows(run))
    return frozenset(found)


def _committed_tilings() -> list[tuple]:
    """(algorithm, variant, Dqk, Dv, chunk, version, tiling) of the committed rows of our kernels that ran
    a tiling other than their version's default (A/B runs)."""
    return sorted({(*row[:5], version, row[5]) for version, row in _committed_rows()
                   if row[5] is not None and row[0] in TABLE_CHUNKS})


def _committed_fused_backwards() -> list[tuple]:
    """(xl_chunk, variant, Dqk, Dv, chunk, version, None) of the committed fused_chunk fwd+bwd rows at
    `FUSED_BACKWARD_CHUNKS`: the backward they ran, at their version's default tiling."""
    return sorted({("xl_chunk", variant, dqk, dv, chunk, version, None)
                   for version, (algorithm, variant, dqk, dv, chunk, tiling, mode) in _committed_rows()
                   if algorithm == "fused_chunk" and mode == "fwdbw" and chunk in FUSED_BACKWARD_CHUNKS
                   and tiling is None})


def _sweep_tilings(config: Path) -> list[tuple]:
    """(algorithm, variant, Dqk, Dv, chunk, version, tiling) of the points of our TFLA kernels in a sweep
    config that run a tiling other than the default, today's kernels version: the entries a held-out run's
    predictions need before it runs (afterwards its committed rows name them, `_committed_tilings`)."""
    from tflabench.bench.registry import all_kernels
    from tflabench.bench.sweep import expand, load_sweep_file
    from tflabench.kernels.mlstm import tilings

    found = set()
    for job in expand(load_sweep_file(config), all_kernels()):
        params, point = job.kernel.params, job.point
        if (job.kernel.name.startswith("tflabench.mlstm_") and params.get("algorithm") in TABLE_CHUNKS
                and point.tiling not in (None, "default")):
            found.add((params["algorithm"], params["variant"], point.head_dim_qk, point.head_dim_v,
                       point.chunk_size, tilings.KERNELS_VERSION, point.tiling))
    return sorted(found)


def add_sweep_tilings(config: Path, path: Path = TABLE_PATH) -> None:
    """Compile the entries of a sweep config's tilings (`_sweep_tilings`) and merge them into the table."""
    write_table(path, configs=_sweep_tilings(config))


def _table_configs() -> list[tuple]:
    """(algorithm, variant, Dqk, Dv, chunk, version, tiling) of every table entry: today's default tiling of
    each configuration, each former version's (`tilings.FORMER_DEFAULTS`, the kernels of the committed
    runs), fused_chunk's backward below xl_chunk's chunk sizes (`FUSED_BACKWARD_CHUNKS`) and each tiling of
    a committed row (`_committed_tilings`) where it is another tiling."""
    from tflabench.kernels.mlstm import tilings

    defaults = [(algorithm, variant, dqk, dv, chunk, version, None)
                for algorithm, chunks in TABLE_CHUNKS.items()
                for variant, (dqk, dv), chunk in itertools.product(("sig", "exp"), TABLE_HEAD_DIMS, chunks)
                for version in (None, *tilings.FORMER_DEFAULTS)]
    fused_backwards = [("xl_chunk", variant, dqk, dv, chunk, None, None)
                       for variant, (dqk, dv), chunk in itertools.product(("sig", "exp"), TABLE_HEAD_DIMS,
                                                                          FUSED_BACKWARD_CHUNKS)]
    seen: dict[tuple, list] = {}
    configs = []
    for config in [*defaults, *fused_backwards, *_committed_fused_backwards(), *_committed_tilings()]:
        try:
            tiling = _table_tiling(*config)
        except InputError:  # a committed tiling the kernels no longer have
            continue
        same_configuration = seen.setdefault(config[:5], [])
        if tiling not in same_configuration:
            same_configuration.append(tiling)
            configs.append(config)
    return configs


def write_table(path: Path = TABLE_PATH, head_dims: set[tuple[int, int]] | None = None,
                chunks: set[int] | None = None, configs: list[tuple] | None = None) -> None:
    """Compile every configuration of `_table_configs` and write the table as gzipped JSON; with
    ``head_dims`` or ``chunks``, compile only the configurations at those (Dqk, Dv) pairs and chunk sizes,
    with ``configs`` only those, and replace their entries in the table, keeping the others (what a full
    run writes for them)."""
    partial = head_dims is not None or chunks is not None or configs is not None
    if configs is None:
        selected = _selected_head_dims(head_dims)
        configs = [config for config in _table_configs()
                   if config[2:4] in selected and (chunks is None or config[4] in chunks)]
    with multiprocessing.Pool(os.cpu_count()) as pool:
        compiled = pool.starmap(_table_entry_or_none, configs)
    entries = {_table_key(*config): entry for config, entry in zip(configs, compiled, strict=True)
               if entry is not None}
    if os.path.exists(path):  # the reference's entries (`--reference-table`), and the others of a partial run
        kept = structural.read_compiled_resources(path)["entries"]
        entries.update({key: entry for key, entry in kept.items()
                        if key.startswith("reference/") or (partial and key not in entries)})
    _write_table(path, {"target": f"sm_{HOPPER.arch}", "triton": triton.__version__,
                        "command": "python scripts/kernel_resources.py --table", "entries": entries})


def _write_table(path: Path, table: dict) -> None:
    """Write the table as gzipped JSON, keys sorted and no timestamp in the gzip header, so that the same
    table gives the same bytes."""
    text = json.dumps(table, indent=1, sort_keys=True) + "\n"
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as file:
        file.write(text.encode())


def _head_dims(text: str) -> tuple[int, int]:
    """``"64x192"`` -> (64, 192)."""
    dqk, _, dv = text.partition("x")
    try:
        return int(dqk), int(dv)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected DQKxDV such as 64x192, got {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dqk", type=int, default=128)
    parser.add_argument("--dv", type=int, default=256)
    parser.add_argument("--chunk", type=int, default=128)
    parser.add_argument("--variant", choices=("sig", "exp"), default="sig")
    parser.add_argument("--algorithm", choices=("xl_chunk", "fused_chunk"), default="xl_chunk")
    parser.add_argument("--limit", action="store_true", help="limit_chunk's tiling (one tile per chunk)")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seq", type=int, default=None,
                        help="T (default: two chunks; with --batch and --heads the grids of a real shape, "
                             "for programs per SM)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a tiling field (repeatable), e.g. dv_block_v=256")
    parser.add_argument("--table", action="store_true",
                        help="write the compiled-resources table of the structural model (every default "
                             "tiling of the table's head dims and chunk sizes) instead")
    parser.add_argument("--reference", action="store_true",
                        help="the launches of mlstm_kernels' mLSTMsig xl_chunk (the reference) at "
                             "--dqk, --dv, --chunk instead of ours")
    parser.add_argument("--reference-table", action="store_true",
                        help="add mlstm_kernels' mLSTMsig xl_chunk (the reference kernel) at the "
                             "table's head dims and chunk sizes to the table")
    parser.add_argument("--head-dims", action="append", type=_head_dims, metavar="DQKxDV",
                        help="with --table or --reference-table: compile only this pair of the table's head "
                             "dims (repeatable) and merge it into the table, e.g. 64x192")
    parser.add_argument("--chunks", action="append", type=int, metavar="L",
                        help="with --table: compile only this chunk size (repeatable) and merge it into the "
                             "table, e.g. 32")
    parser.add_argument("--inner-loops", action="store_true",
                        help="add the instructions of the recurrences' sub-chunk loops to the table's "
                             "entries whose chunks hold several sub-chunks")
    parser.add_argument("--block-loops", action="store_true",
                        help="add the loop structure (`sass.top_loops`) of the kernels whose head-dim block "
                             "loops make several trips to the table's entries")
    parser.add_argument("--product-waits", action="store_true",
                        help="add the warpgroup product waits of the output and dK/dV kernels' tile loops to "
                             "the entries the model reads for committed rows and today's default tilings")
    parser.add_argument("--load-bytes", action="store_true",
                        help="add the spilled loads per loop trip (LDL bytes) to the kernels of the table's "
                             "entries that spill in programs of 8 or more warps")
    parser.add_argument("--sweep-config", type=Path, metavar="TOML",
                        help="add the entries of the tilings a sweep config runs (today's kernels) to the "
                             "table: a held-out run's, before it runs")
    args = parser.parse_args()
    if args.sweep_config:
        add_sweep_tilings(args.sweep_config)
        return
    if args.inner_loops:
        add_inner_loop_counts()
        return
    if args.block_loops:
        add_top_loops()
        return
    if args.product_waits:
        add_product_waits()
        return
    if args.load_bytes:
        add_load_bytes()
        return
    head_dims = set(args.head_dims) if args.head_dims else None
    if args.table:
        write_table(head_dims=head_dims, chunks=set(args.chunks) if args.chunks else None)
        return
    if args.reference_table:
        write_reference_table(head_dims=head_dims)
        return
    print(f"{'kernel':<26}{'warps':>6}{'stages':>7}{'shared KB':>10}{'regs':>6}{'local B':>8}{'stack B':>8}"
          f"{'instr':>7}{'loop':>6}{'programs':>9}{'/SM':>6}")
    launches = _reference_launches(args.dqk, args.dv, args.chunk) if args.reference else _launches(args)
    for launch in launches:
        row = resources(launch)
        flag = "  over the 227 KB limit" if row["shared_kb"] > SHARED_LIMIT_KB else ""
        programs = math.prod(launch.grid)
        print(f"{row['kernel']:<26}{row.get('num_warps', 4):>6}{row.get('num_stages', 3):>7}"
              f"{row['shared_kb']:>10.1f}{row['registers']:>6}{row['local_bytes']:>8}{row['stack_bytes']:>8}"
              f"{row['instructions']:>7}{row['loop_instructions']:>6}{programs:>9}"
              f"{programs / HOPPER_SMS:>6.1f}{flag}")


if __name__ == "__main__":
    main()
