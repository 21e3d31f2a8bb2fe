"""CLI commands of the analysis layer: `gpus`, `optimal-chunk`, `roofline`, `calibrate`, `calibrate-median`
(all with --json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from tflabench.analysis import hardware, model_limits
from tflabench.analysis import optimal_chunk as oc
from tflabench.analysis.hardware import GPU, Ceilings
from tflabench.analysis.roofline import RooflinePoint, roofline_point
from tflabench.core import FAMILIES, PEAK_DTYPE_BYTES
from tflabench.errors import InputError
from tflabench.families.mlstm import MLSTM_VARIANTS
from tflabench.inputs import finite_number, positive_int
from tflabench.nvml import NvmlSampler, device_info

DEFAULT_CHUNK_SIZES = "16,32,64,128,256,512,1024,2048,4096"
#: seconds between NVML samples of the clocks during a calibration (coarse: the sampling thread must not
#: compete with the timed launches for the interpreter)
CALIBRATION_SAMPLE_INTERVAL_S = 0.5
_CHUNKLESS_FAMILIES = ("softmax_attention",)

JsonFlag = Annotated[bool, typer.Option(
    "--json", help='Print plain JSON instead of tables; on an error {"error": "..."} and exit code 2.')]
GpuOption = Annotated[str, typer.Option(help="GPU key or alias (see `tflabench gpus`).")]
MeasuredFlag = Annotated[
    bool, typer.Option("--measured", help="Use the stored calibration of the GPU (datasheet if none).")
]
ChunkSizesOption = Annotated[
    str, typer.Option(help="Comma-separated chunk sizes to evaluate (those above --seq-len are dropped).")
]


def register(app: typer.Typer) -> None:
    app.command("gpus")(gpus)
    app.command("optimal-chunk")(optimal_chunk)
    app.command("roofline")(roofline)
    app.command("calibrate")(calibrate)
    app.command("calibrate-median")(calibrate_median)


# ---------------------------------------------------------------------------------------------- helpers
def _console() -> Console:
    return Console(markup=False, highlight=False)


def _table(title: str, columns: list[str], left: tuple[str, ...] = (), caption: str | None = None) -> Table:
    table = Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        caption_justify="left",
        collapse_padding=True,
        pad_edge=False,
    )
    for column in columns:
        table.add_column(column, justify="left" if column in left else "right", no_wrap=True)
    return table


def _echo_json(payload: dict) -> None:
    typer.echo(json.dumps(payload, indent=2))


def _parse_chunk_sizes(text: str, seq_len: int) -> list[int]:
    sizes = []
    for item in text.split(","):
        try:
            size = int(item)
        except ValueError:
            raise InputError(f"chunk sizes must be comma-separated positive integers, got {text!r}") from None
        sizes.append(positive_int(size, "chunk size"))
    kept = sorted({size for size in sizes if size <= seq_len})
    if not kept:
        raise InputError(f"no chunk size in {text!r} is at most seq_len={seq_len}")
    return kept


def _parse_family_params(items: list[str]) -> dict:
    params = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise InputError(f"--param expects NAME=VALUE, got {item!r}")
        params[name] = _parse_scalar(text)
    return params


def _parse_scalar(text: str) -> int | float | str:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text


def _ceilings(gpu: GPU, dtype: str, measured: bool) -> Ceilings:
    if dtype not in PEAK_DTYPE_BYTES:
        raise InputError(f"unknown dtype {dtype!r} (known: {', '.join(PEAK_DTYPE_BYTES)})")
    if measured:
        if dtype != "bfloat16":
            raise InputError("measured ceilings are bf16 matmul rates: use --dtype bfloat16 with --measured")
        stored = hardware.load_measured_ceilings(gpu.key)
        if stored is not None:
            return stored
    return hardware.datasheet_ceilings(gpu, dtype)


def _ceilings_json(ceilings: Ceilings) -> dict:
    return {
        "flops": ceilings.flops,
        "bandwidth": ceilings.bandwidth,
        "ridge": ceilings.ridge,
        "source": ceilings.source,
    }


def _gpu_lines(gpu: GPU, ceilings: Ceilings, dtype: str, measured: bool) -> list[str]:
    note = " (no stored calibration)" if measured and ceilings.source == "datasheet" else ""
    return [
        f"GPU: {gpu.key} ({gpu.name})",
        f"ceilings: {ceilings.source}{note}, {ceilings.flops / 1e12:.1f} TFLOP/s {dtype}, "
        f"{ceilings.bandwidth / 1e12:.3g} TB/s, ridge {ceilings.ridge:.1f} FLOP/B",
    ]


# ---------------------------------------------------------------------------------------------- gpus
def gpus(as_json: JsonFlag = False) -> None:
    """List the GPU database (dense datasheet peaks, bandwidth, sources, stored measured ceilings)."""
    rows = []
    for gpu in hardware.GPUS.values():
        measured = hardware.load_measured_ceilings(gpu.key)
        rows.append((gpu, measured))
    if as_json:
        _echo_json(
            {
                "gpus": [
                    {
                        "key": gpu.key,
                        "name": gpu.name,
                        "year": gpu.year,
                        "peak_flops": gpu.peak_flops,
                        "bandwidth": gpu.bandwidth,
                        "ridge_bfloat16": hardware.datasheet_ceilings(gpu).ridge,
                        "source": gpu.source,
                        "measured": measured and _ceilings_json(measured),
                    }
                    for gpu, measured in rows
                ],
                "aliases": hardware.ALIASES,
            }
        )
        return
    table = _table(
        "GPU database: dense TFLOP/s, TB/s, bf16 ridge in FLOP/B",
        ["key", "year", "bf16", "fp16", "tf32", "fp32", "TB/s", "ridge", "measured bf16"],
        left=("key", "measured bf16"),
    )
    for gpu, measured in rows:
        peaks = [f"{gpu.peak_flops[dtype] / 1e12:g}" for dtype in hardware.PEAK_DTYPES]
        measured_text = f"{measured.flops / 1e12:.0f} / {measured.bandwidth / 1e12:.2f}" if measured else "-"
        table.add_row(
            gpu.key,
            str(gpu.year or "-"),
            *peaks,
            f"{gpu.bandwidth / 1e12:g}",
            f"{hardware.datasheet_ceilings(gpu).ridge:.1f}",
            measured_text,
        )
    console = _console()
    console.print(table)
    aliases = ", ".join(f"{alias} -> {key}" for alias, key in hardware.ALIASES.items())
    console.print(f"aliases: {aliases} (the entries that reproduce the TFLA paper's numbers)")
    for gpu, measured in rows:
        console.print(
            f"{gpu.key}: {gpu.name}. {gpu.source}" + (f"; measured: {measured.source}" if measured else "")
        )


# ---------------------------------------------------------------------------------------------- optimal-chunk
def optimal_chunk(
    gpu: GpuOption = "h100",
    head_dim_v: Annotated[int, typer.Option(help="Value head dimension d_hv.")] = 512,
    qk_ratio: Annotated[float, typer.Option(help="p = d_qk / d_hv, in (0, 4].")] = 0.5,
    state_bytes: Annotated[int, typer.Option(help="Bytes per state element (4 fp32, 2 bf16).")] = 4,
    causal_factor: Annotated[float, typer.Option(help="Computed fraction F_c of the L x L matrix.")] = 0.5,
    seq_len: Annotated[int, typer.Option(help="Sequence length T.")] = 8192,
    batch: Annotated[int, typer.Option(help="Batch size (runtime table only).")] = 8,
    heads: Annotated[int, typer.Option(help="Number of heads (runtime table only).")] = 8,
    chunk_sizes: ChunkSizesOption = DEFAULT_CHUNK_SIZES,
    measured: MeasuredFlag = False,
    model_choice: Annotated[str, typer.Option(
        "--model",
        help="structural (needs the GPU's building-block calibration), paper (Eq. 116/121) or auto: "
             "structural when the calibration exists.")] = "auto",
    as_json: JsonFlag = False,
) -> None:
    """FLOP- and runtime-optimal chunk size of the mLSTM kernels, the runnable choice, Eq. 116 over L; with a
    building-block calibration also the structural model's time over L and its best chunk size."""
    device = hardware.get_gpu(gpu)
    ceilings = _ceilings(device, "bfloat16", measured)
    sizes = {"--head-dim-v": head_dim_v, "--batch": batch, "--heads": heads, "--seq-len": seq_len,
             "--state-bytes": state_bytes}
    for option, value in sizes.items():
        positive_int(value, option)
    finite_number(qk_ratio, "--qk-ratio", 0.0, oc.MAX_QK_RATIO)
    finite_number(causal_factor, "--causal-factor", 0.5, 1.0, low_inclusive=True)
    model = {
        "head_dim_v": head_dim_v,
        "qk_ratio": qk_ratio,
        "state_bytes": state_bytes,
        "causal_factor": causal_factor,
    }
    problem = {"seq_len": seq_len, "batch": batch, "heads": heads}
    sizes = _parse_chunk_sizes(chunk_sizes, seq_len)
    report = _optimal_chunk_report(ceilings, model, problem, sizes)
    structural_report = _structural_report(device, model_choice, model, problem, sizes)
    if as_json:
        _echo_json(
            {
                "gpu": device.key,
                "ceilings": _ceilings_json(ceilings),
                "params": {**model, **problem},
                "model": "structural" if structural_report else "paper",
                "structural": structural_report,
                **report,
            }
        )
        return
    console = _console()
    if structural_report:
        _print_structural(console, structural_report)
    for line in _gpu_lines(device, ceilings, "bf16", measured):
        console.print(line)
    console.print(
        f"mLSTM forward: d_hv={head_dim_v}, d_qk={qk_ratio * head_dim_v:g} (p={qk_ratio:g}), "
        f"{state_bytes}-byte states, F_c={causal_factor:g}"
    )
    console.print(f"Eq. 116 runtimes for B={batch}, NH={heads}, T={seq_len}")
    _print_optimal_chunk(console, report, oc.admissible_chunk_sizes(seq_len))


STRUCTURAL_VARIANTS = ("sig", "exp")


def _structural_report(device: GPU, choice: str, model: dict, problem: dict, sizes: list[int]) -> dict | None:
    """Per variant, the structural model's forward time of TFLA (xl_chunk) over the chunk sizes it runs and
    its best chunk size; None for the paper's model (asked for, or auto without a calibration)."""
    from tflabench.analysis import structural

    if choice not in ("auto", "structural", "paper"):
        raise InputError(f"--model must be auto, structural or paper, got {choice!r}")
    if choice == "paper" or (choice == "auto" and hardware.load_calibration_blocks(device.key) is None):
        return None
    rates = structural.load_rates(device.key)
    head_dim_qk = round(model["qk_ratio"] * model["head_dim_v"])
    variants = {}
    for variant in STRUCTURAL_VARIANTS:
        shape = structural.Problem(problem["batch"], problem["seq_len"], problem["heads"], head_dim_qk,
                                   model["head_dim_v"], variant=variant)
        runnable = set(structural.runnable_chunks(shape, "xl_chunk", sizes))
        runtimes = [{"chunk_size": L, "ms": structural.predict(shape, "xl_chunk", L, rates).ms}
                    for L in sizes if L in runnable]
        if not runtimes:
            raise InputError(f"no chunk size in {sizes} runs at seq_len={problem['seq_len']}")
        best = min(runtimes, key=lambda row: row["ms"])
        variants[variant] = {"best_chunk": best["chunk_size"], "best_ms": best["ms"], "runtime_ms": runtimes,
                             "weak_points": list(model_limits.weak_points(shape, "xl_chunk",
                                                                          best["chunk_size"]))}
    return {"calibration": rates.source, "gpu": device.key, "algorithm": "xl_chunk", "variants": variants}


def _print_structural(console: Console, report: dict) -> None:
    best = ", ".join(f"{variant} L* = {result['best_chunk']} ({result['best_ms']:.3f} ms)"
                     for variant, result in report["variants"].items())
    console.print(f"structural model ({report['calibration']}), TFLA xl_chunk forward: {best}")
    table = _table("Structural model: forward time over L (xl_chunk)", ["L", "sig ms", "exp ms"])
    by_chunk = {}
    for variant, result in report["variants"].items():
        for row in result["runtime_ms"]:
            by_chunk.setdefault(row["chunk_size"], {})[variant] = row["ms"]
    for L, times in by_chunk.items():
        table.add_row(str(L), *(f"{times[v]:.3f}" if v in times else "-" for v in STRUCTURAL_VARIANTS))
    console.print(table)
    weak = dict.fromkeys(name for result in report["variants"].values() for name in result["weak_points"])
    for name in weak:
        console.print(f"known weak point at L*: {model_limits.describe(report['gpu'], name)}")
    console.print("paper's model (Eq. 116/121), beside it:")


def _optimal_chunk_report(ceilings: Ceilings, model: dict, problem: dict, chunk_sizes: list[int]) -> dict:
    """Per variant: FLOP- and runtime-optimal L, runnable L with its reason; Eq. 116 over L in ms."""
    seq_len, batch_heads = problem["seq_len"], problem["batch"] * problem["heads"]

    def eq116_ms(variant: str, L: float) -> float:
        return batch_heads * 1e3 * oc.runtime_per_head(variant, ceilings, L, seq_len, **model)

    variants = {}
    for variant in oc.VARIANTS:
        optimum = oc.runtime_optimal_chunk(variant, ceilings, **model)
        runnable, reason = oc.runnable_chunk(variant, ceilings, seq_len=seq_len, **model)
        flop_optimum = oc.flop_optimal_chunk(
            model["head_dim_v"], model["qk_ratio"], model["causal_factor"], variant=variant
        )
        variants[variant] = {
            "flop_optimal": flop_optimum,
            "runtime_optimal": optimum,
            "runtime_optimal_ms": eq116_ms(variant, optimum),
            "runnable": runnable,
            "runnable_ms": eq116_ms(variant, runnable),
            "reason": reason,
        }
    runtimes = [{"chunk_size": L, **{v: eq116_ms(v, L) for v in oc.VARIANTS}} for L in chunk_sizes]
    return {"variants": variants, "runtime_ms": runtimes}


def _print_optimal_chunk(console: Console, report: dict, admissible: list[int]) -> None:
    summary = _table(
        "Optimal chunk size",
        [
            "variant",
            "FLOP-opt.\nL",
            "runtime-opt.\nL*",
            "Eq. 116\nat L* ms",
            "runnable\nL",
            "Eq. 116 at\nrunnable ms",
        ],
        left=("variant",),
        caption="sig: Eq. 111 and Eq. 121; exp: the same recipe with the exp counts "
                "(docs/reference/mlstm-math.md#optimal-chunk-size)",
    )
    for variant, result in report["variants"].items():
        summary.add_row(
            variant,
            f"{result['flop_optimal']:.1f}",
            f"{result['runtime_optimal']:.1f}",
            f"{result['runtime_optimal_ms']:.3f}",
            str(result["runnable"]),
            f"{result['runnable_ms']:.3f}",
        )
    console.print(summary)
    console.print(
        f"admissible chunk sizes (powers of two >= {oc.MIN_RUNNABLE_CHUNK} dividing T): "
        + ", ".join(map(str, admissible))
    )
    for variant, result in report["variants"].items():
        console.print(f"{variant}: {result['reason']}")
    console.print()
    table = _table(
        "Eq. 116 forward runtime (additive model) over L", ["L", "sig ms", "exp ms", "note"], left=("note",)
    )
    for row in report["runtime_ms"]:
        L = row["chunk_size"]
        chosen = [v for v, result in report["variants"].items() if result["runnable"] == L]
        note = (
            f"runnable choice ({', '.join(chosen)})" if chosen else "" if L in admissible else "not runnable"
        )
        table.add_row(str(L), *(f"{row[v]:.2f}" for v in oc.VARIANTS), note)
    console.print(table)


# ---------------------------------------------------------------------------------------------- roofline
def roofline(
    gpu: GpuOption = "h100",
    family: Annotated[str, typer.Option(help=f"Kernel family: {', '.join(FAMILIES)}.")] = "mlstm_sig",
    head_dim_qk: Annotated[int, typer.Option(help="Query/key head dimension d_qk.")] = 256,
    head_dim_v: Annotated[int, typer.Option(help="Value head dimension d_v.")] = 512,
    seq_len: Annotated[int, typer.Option(help="Sequence length T.")] = 8192,
    batch: Annotated[int, typer.Option(help="Batch size.")] = 8,
    heads: Annotated[int, typer.Option(help="Number of heads.")] = 8,
    chunk_sizes: ChunkSizesOption = DEFAULT_CHUNK_SIZES,
    mode: Annotated[str, typer.Option(help="fwd or fwdbw.")] = "fwd",
    dtype: Annotated[str, typer.Option(
        help=f"Input dtype and peak: {', '.join(PEAK_DTYPE_BYTES)}.")] = "bfloat16",
    state_bytes: Annotated[int, typer.Option(help="Bytes per materialized state element.")] = 4,
    causal_factor: Annotated[float, typer.Option(help="Computed fraction F_c of the causal matrix.")] = 0.5,
    formulation: Annotated[
        str, typer.Option(help="mLSTM only: chunkwise, parallel or recurrent.")
    ] = "chunkwise",
    param: Annotated[list[str] | None, typer.Option(help="Family parameter NAME=VALUE (repeatable).")] = None,
    measured: MeasuredFlag = False,
    as_json: JsonFlag = False,
) -> None:
    """Per chunk size: FLOPs, bytes, intensity, roofline bound, additive and overlapped model time."""
    device = hardware.get_gpu(gpu)
    ceilings = _ceilings(device, dtype, measured)
    positive_int(seq_len, "--seq-len")
    chunked = family not in _CHUNKLESS_FAMILIES and (
        family not in MLSTM_VARIANTS or formulation == "chunkwise"
    )
    sizes = _parse_chunk_sizes(chunk_sizes, seq_len) if chunked else [None]
    cost_kwargs = {
        "batch": batch,
        "seq_len": seq_len,
        "heads": heads,
        "head_dim_qk": head_dim_qk,
        "head_dim_v": head_dim_v,
        "mode": mode,
        "dtype_bytes": PEAK_DTYPE_BYTES[dtype],
        "state_bytes": state_bytes,
        "causal_factor": causal_factor,
        "formulation": formulation,
        **_parse_family_params(param or []),
    }
    points = [roofline_point(family, ceilings, L, **cost_kwargs) for L in sizes]
    if as_json:
        _echo_json(
            {
                "gpu": device.key,
                "family": family,
                "ceilings": _ceilings_json(ceilings),
                "params": cost_kwargs,
                "points": [_point_json(point) for point in points],
            }
        )
        return
    console = _console()
    for line in _gpu_lines(device, ceilings, dtype, measured):
        console.print(line)
    console.print(
        f"{family} {mode}"
        + (f" ({formulation})" if family in MLSTM_VARIANTS else "")
        + f": B={batch}, NH={heads}, T={seq_len}, d_qk={head_dim_qk}, d_v={head_dim_v}"
    )
    console.print(f"{dtype} inputs, {state_bytes}-byte states, F_c={causal_factor:g}")
    _print_roofline(console, points)


def _point_json(point: RooflinePoint) -> dict:
    return {
        "chunk_size": point.chunk_size,
        "flops": point.cost.flops,
        "bytes": point.cost.bytes,
        "intensity": point.cost.intensity,
        "attainable_flops": point.attainable_flops,
        "runtime_additive_s": point.runtime_additive,
        "runtime_overlap_s": point.runtime_overlap,
        "bound": point.bound,
    }


def _print_roofline(console: Console, points: list[RooflinePoint]) -> None:
    table = _table(
        "Roofline per chunk size (attainable = min(alpha, beta I))",
        ["L", "GFLOP", "GB", "FLOP/B", "attainable\nTFLOP/s", "additive\nms", "overlap\nms", "bound"],
        left=("bound",),
        caption="additive = F/alpha + B/beta, overlap = max(F/alpha, B/beta)",
    )
    for p in points:
        table.add_row(
            "-" if p.chunk_size is None else str(p.chunk_size),
            f"{p.cost.flops / 1e9:,.1f}",
            f"{p.cost.bytes / 1e9:,.3f}",
            f"{p.cost.intensity:.1f}",
            f"{p.attainable_flops / 1e12:.1f}",
            f"{p.runtime_additive * 1e3:.3f}",
            f"{p.runtime_overlap * 1e3:.3f}",
            p.bound,
        )
    console.print(table)


# ---------------------------------------------------------------------------------------------- calibrate
def calibrate(
    gpu: Annotated[str | None, typer.Option(help="Database key to store under (default: detected).")] = None,
    matmul_size: Annotated[int, typer.Option(help="n of the n x n x n bf16 matmul.")] = 8192,
    copy_mib: Annotated[int, typer.Option(help="Size of the device copy in MiB.")] = 1024,
    repeats: Annotated[int, typer.Option(help="Timed repeats (median reported).")] = 20,
    blocks: Annotated[bool, typer.Option(
        help="Also time the kernels' building blocks (tl.dot tiles, exp, tile loads/stores, launches).",
    )] = True,
    save: Annotated[bool, typer.Option(help="Store the result under results/calibration/.")] = True,
    as_json: JsonFlag = False,
) -> None:
    """Measure this GPU's bf16 matmul rate and copy bandwidth (read + write) and, with --blocks, the
    building blocks of the mLSTM kernels (about a minute on an H100 or H200); store them."""
    from tflabench.analysis.calibrate import cuda_device_name, measure_ceilings

    for option, value in (("--matmul-size", matmul_size), ("--copy-mib", copy_mib), ("--repeats", repeats)):
        positive_int(value, option)
    requested = hardware.get_gpu(gpu) if gpu else None
    device_name = cuda_device_name()
    device = requested or hardware.gpu_from_device_name(device_name)
    if device is None:
        raise InputError(
            f"GPU {device_name!r} is not in the database: pass --gpu KEY to store its calibration"
        )
    with NvmlSampler(interval_s=CALIBRATION_SAMPLE_INTERVAL_S) as sampler:
        measured = measure_ceilings(matmul_size, copy_mib * 2**20, repeats)
        block_figures = _measure_blocks() if blocks else None
    path = None
    if save:
        provenance = calibration_provenance(sampler.summary())
        path = hardware.save_measured_ceilings(device.key, measured, block_figures, provenance)
    datasheet = hardware.datasheet_ceilings(device)
    if as_json:
        _echo_json(
            {
                "gpu": device.key,
                "device": device_name,
                "measured": _ceilings_json(measured),
                "datasheet": _ceilings_json(datasheet),
                "blocks": block_figures,
                "stored": str(path) if path else None,
            }
        )
        return
    table = _table(
        f"Calibration of {device_name} ({device.key})",
        ["ceiling", "measured", "datasheet", "fraction"],
        left=("ceiling",),
    )
    table.add_row(
        "bf16 matmul TFLOP/s",
        f"{measured.flops / 1e12:.1f}",
        f"{datasheet.flops / 1e12:.1f}",
        f"{measured.flops / datasheet.flops:.2f}",
    )
    table.add_row(
        "copy TB/s (read+write)",
        f"{measured.bandwidth / 1e12:.2f}",
        f"{datasheet.bandwidth / 1e12:.2f}",
        f"{measured.bandwidth / datasheet.bandwidth:.2f}",
    )
    table.add_row("ridge FLOP/B", f"{measured.ridge:.1f}", f"{datasheet.ridge:.1f}", "")
    console = _console()
    console.print(table)
    if block_figures is not None:
        _print_blocks(console, block_figures)
    console.print(f"stored in {path}" if path else "not stored (--no-save)")


def calibrate_median(
    files: Annotated[list[Path], typer.Argument(
        help="Calibration files of one GPU (`tflabench calibrate`, same tflabench), two or more.")],
    out: Annotated[Path | None, typer.Option(
        help="File to write (default: the GPU's calibration, results/calibration/<gpu>.json).")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Merge calibrations of several machines of one GPU model into one: the median of every measured
    figure (a calibration is one machine's draw; the model should see a typical one). Prints each
    scalar figure's spread over the files and stores the median."""
    from tflabench.analysis.calibrate_median import median_calibration
    from tflabench.provenance import command_line

    records = [hardware.read_calibration_file(path) for path in files]
    merged = median_calibration(records, [path.name for path in files], command_line())
    path = out or hardware.calibration_path(merged["gpu"])
    spread = {name: (min(values), merged_value, max(values))
              for name, values, merged_value in _scalar_figures(records, merged)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(merged, indent=2) + "\n")
    if as_json:
        _echo_json({"gpu": merged["gpu"], "median_of": [str(file) for file in files], "stored": str(path),
                     "figures": {name: dict(zip(("min", "median", "max"), values, strict=True))
                                 for name, values in spread.items()}})
        return
    table = _table(f"Median of {len(files)} calibrations of {merged['gpu']} (per second; launch: seconds)",
                   ["figure", "min", "median", "max", "max/min"], left=("figure",))
    for name, (low, middle, high) in spread.items():
        short = name.removesuffix("_bytes_per_s").removesuffix("_elements_per_s")
        short = short.replace("_one_per_sm", " 1/SM")
        ratio = f"{high / low:.2f}" if low > 0 else "-"
        table.add_row(short, f"{low:.3g}", f"{middle:.3g}", f"{high:.3g}", ratio)
    console = _console()
    console.print(table)
    console.print(f"stored in {path}")


def _scalar_figures(records: list[dict], merged: dict):
    """(name, the files' values, the median) of the calibration's scalar figures: the top level's (the
    matmul and copy ceilings) and the building blocks' pointwise, memory and launch figures (not the tile
    entries)."""
    def section(record: dict, name: str) -> dict:
        return record.get("blocks", {}).get(name, {}) if name else record

    for name in ("", "pointwise", "memory", "launch"):
        prefix = f"{name}." if name else ""
        for field, value in section(merged, name).items():
            if isinstance(value, float):
                yield f"{prefix}{field}", [float(section(record, name)[field]) for record in records], value


def calibration_provenance(clocks: dict | None = None, command: str | None = None) -> dict:
    """Where a calibration comes from: the checkout's commit, the software versions, the command line
    (``command``, default this `tflabench` command's), the GPU (NVML's name, serial, UUID, driver) with
    ``clocks``, its clocks during the calibration (`NvmlSampler.summary`)."""
    from tflabench.provenance import command_line, git_state, software_versions

    return {"git": git_state(), "versions": software_versions([]), "command": command or command_line(),
            "gpu": device_info() | (clocks or {})}


def _measure_blocks() -> dict:
    from tflabench.analysis.calibrate_blocks import measure_blocks

    return measure_blocks()


def spill_rate_row(rate: dict) -> tuple[str, str]:
    """(figure, value) of one calibrated spill-loop rate (`calibrate_blocks.spill_loop_rates`)."""
    label = ("spills, {num_warps} warps x {programs_per_sm} per SM, width {width}, "
             "stack {kb:.0f} KB per SM").format(kb=rate["stack_bytes_per_sm"] / 1024, **rate)
    loads = rate.get("load_bytes_per_s_per_sm")
    return label, f"{rate['bytes_per_s_per_sm'] / 1e9:.1f} GB/s per SM" + (
        "" if loads is None else f", its loads {loads / 1e9:.1f}")


def walk_step_row(walk: dict) -> tuple[str, str]:
    """(figure, value) of one calibrated walk (`calibrate_blocks.measure_walks`)."""
    label = "{kind} walk step, L {l}, {dqk} x {dv}, {num_warps} warps, {num_stages} stages".format(**walk)
    return label, f"{walk['step_s'] * 1e6:.2f} us"


def _print_blocks(console: Console, blocks: dict) -> None:
    """The building-block figures of a calibration as two tables (tl.dot tiles; the other rates)."""
    dots = _table("tl.dot tiles (bf16, fp32 accumulate, whole GPU)", ["M x N x K", "warps", "TFLOP/s"])
    for dot in blocks["dot"]:
        dots.add_row(f"{dot['m']} x {dot['n']} x {dot['k']}", str(dot["num_warps"]),
                     f"{dot['flops_per_s'] / 1e12:.1f}")
    console.print(dots)
    rates = _table("Other building blocks", ["figure", "value"], left=("figure",))
    for name, value in blocks["pointwise"].items():
        rates.add_row(name.replace("_", " "), f"{value / 1e12:.2f} T/s")
    for name, value in blocks["memory"].items():
        rates.add_row(name.replace("_", " "), f"{value / 1e12:.2f} TB/s")
    if "spills" in blocks:
        rates.add_row("local memory (spills)", f"{blocks['spills']['local_bytes_per_s'] / 1e12:.2f} TB/s")
    for spill in blocks.get("spill_loops", {}).get("rates", []):
        rates.add_row(*spill_rate_row(spill))
    for walk in blocks.get("walk", []):
        rates.add_row(*walk_step_row(walk))
    rates.add_row("launch", f"{blocks['launch']['launch_s'] * 1e6:.2f} us")
    rates.add_row("per program", f"{blocks['launch']['program_s'] * 1e9:.3f} ns")
    rates.add_row("SMs", str(blocks["device"]["sm_count"]))
    rates.add_row("measured in", f"{blocks['seconds']:.1f} s")
    console.print(rates)
