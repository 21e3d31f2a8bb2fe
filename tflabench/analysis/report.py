"""Markdown report of one run: ``results/<run>/report.md``.

Sections: a summary line, the provenance block from meta.json, runtime and speed-up tables against a
baseline kernel per mode and sequence length, measured vs theoretical optimal chunk size (mLSTM chunk
sweeps), the comparison with the TFLA paper's published H100 numbers (`paper_numbers`), the plots
(rendered into ``results/<run>/plots/`` and linked relatively), and every row that was not measured with
its status and reason. Rows with status ``failed_check`` computed the wrong function:
they are listed, never ranked.
"""

from __future__ import annotations

import os
import shlex
from collections import Counter
from pathlib import Path

import pandas as pd

from tflabench.analysis import paper_claims, paper_numbers
from tflabench.analysis.plots import PLOT_KINDS, Rendered, render
from tflabench.analysis.run_data import (
    Run,
    ceilings_label,
    chunk_optima,
    config_label,
    count_label,
    device_label,
    dims_label,
    load_run,
    model_ceilings,
    modes_of,
    not_measured,
    runs_by_gpu,
)
from tflabench.errors import InputError
from tflabench.inputs import create_output_dir
from tflabench.schema import LAUNCH_BOUND, MAX_SPREAD, gpu_row_spread, launch_bound

REPORT_NAME = "report.md"
PLOTS_DIR = "plots"
ROW_KEYS = ("kernel", "heads", "head_dim_qk", "head_dim_v", "chunk_size", "dtype")
COLUMN_KEYS = ("seq_len", "batch")
#: plot kinds drawn once for a run of several GPUs, with a row of panels per GPU; the others are drawn per GPU
ACROSS_GPU_KINDS = ("runtime", "headdim")
POINT_KEYS = (*ROW_KEYS, "mode", *COLUMN_KEYS)


def write_report(path: str | Path, baseline: str | None = None, out_dir: Path | None = None) -> Path:
    """Render the plots of the run at ``path`` and write ``<out_dir>/report.md`` (default: the run
    directory) with its plots in ``<out_dir>/plots/``; return the report's path.

    baseline: kernel for the speed-up tables (default: see `choose_baseline`).
    """
    run = load_run(path)
    baseline = choose_baseline(run, baseline)
    out_dir = create_output_dir(out_dir or run.directory, "--out")
    plots_dir = out_dir / PLOTS_DIR
    parts = runs_by_gpu(run)
    if len(parts) == 1:
        rendered, rendered_by_gpu = render(run, PLOT_KINDS, plots_dir), {}
    else:
        per_gpu_kinds = [name for name in PLOT_KINDS if name not in ACROSS_GPU_KINDS]
        rendered = render(run, ACROSS_GPU_KINDS, plots_dir)
        rendered_by_gpu = {gpu: render(part, per_gpu_kinds, plots_dir / _file_name(gpu))
                           for gpu, part in parts}
    report_path = out_dir / REPORT_NAME
    report_path.write_text(report_markdown(run, baseline, rendered, rendered_by_gpu, out_dir))
    return report_path


def _file_name(gpu: str) -> str:
    """A folder name for a GPU's plots: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return "-".join("".join(c if c.isalnum() else " " for c in gpu.lower()).split()) or "no-gpu"


def choose_baseline(run: Run, requested: str | None) -> str | None:
    """The requested kernel if it was measured; by default the most-measured softmax-attention kernel
    (else the most-measured kernel), None if nothing was measured. InputError if the requested kernel
    is not in the run or has no measured row."""
    measured = run.measured
    if requested is not None:
        if requested not in set(run.table["kernel"]):
            known = ", ".join(sorted(set(run.table["kernel"])))
            raise InputError(f"baseline {requested!r} is not a kernel of run {run.name} (kernels: {known})")
        if requested not in set(measured["kernel"]):
            statuses = ", ".join(sorted(set(run.table.loc[run.table["kernel"] == requested, "status"])))
            raise InputError(
                f"baseline {requested!r} has no measured row in run {run.name} (status: {statuses})"
            )
        return requested
    if measured.empty:
        return None
    attention = measured[measured["family"] == "softmax_attention"]
    candidates = attention if not attention.empty else measured
    counts = candidates["kernel"].value_counts()
    return sorted(counts[counts == counts.max()].index)[0]


def report_markdown(run: Run, baseline: str | None, rendered: Rendered,
                    rendered_by_gpu: dict[str, Rendered] | None = None,
                    report_dir: Path | None = None) -> str:
    """The report text (baseline None: nothing was measured); plot links are relative to ``report_dir``,
    the report's folder (default: the run directory).

    A run with rows of several GPUs gets a table of the same kernel across GPUs, then the sections of
    each GPU's rows (headings end with the GPU; ``rendered_by_gpu``: the plots drawn per GPU); the
    ``rendered`` plots show every GPU, one row of panels each."""
    parts = runs_by_gpu(run)
    report_dir = report_dir or run.directory
    sections = [f"# tflabench report: {run.name}", summary_line(run), "## Provenance",
                provenance_markdown(run.meta)]
    if len(parts) > 1:
        sections += ["## The same kernel across GPUs", across_gpus_markdown(run)]
    for gpu, part in parts:
        suffix = f" — {gpu or 'no GPU'}" if len(parts) > 1 else ""
        sections += _gpu_sections(part, _baseline_of_part(part, baseline), suffix)
        if rendered_by_gpu and gpu in rendered_by_gpu:
            sections += [f"## Plots{suffix}", plots_markdown(rendered_by_gpu[gpu], report_dir)]
    sections += [
        "## Plots" + (" of every GPU" if len(parts) > 1 else ""),
        plots_markdown(rendered, report_dir),
        "## Not measured: failures, unavailable and skipped points",
        failures_markdown(run),
    ]
    return "\n\n".join(sections) + "\n"


def _gpu_sections(run: Run, baseline: str | None, suffix: str) -> list[str]:
    """The sections of one GPU's rows (headings end with ``suffix``)."""
    speedup = f"## Runtime and speed-up against `{baseline}`" if baseline else "## Runtime and speed-up"
    return [
        speedup + suffix,
        speedup_markdown(run, baseline),
        "## mLSTM kernels per shape: ours, the reference and the IO floor" + suffix,
        mlstm_groups_markdown(run),
        "## Chunk size: measured and theoretical optimum" + suffix,
        chunk_optimum_markdown(run),
        "## Structural performance model against this run" + suffix,
        structural_model_markdown(run),
        "## Comparison with the TFLA paper (H100)" + suffix,
        paper_comparison_markdown(run),
        "## The TFLA paper's statements, checked on this run" + suffix,
        paper_claims_markdown(run),
    ]


def _baseline_of_part(part: Run, baseline: str | None) -> str | None:
    """The run's baseline where this GPU measured it, else this GPU's own default baseline."""
    if baseline is not None and baseline in set(part.measured["kernel"]):
        return baseline
    return choose_baseline(part, None)


def across_gpus_markdown(run: Run) -> str:
    """Per kernel configuration and point measured on two or more GPUs: each GPU's median time and the
    fraction of that GPU's roofline it reached (measured ceilings where the row has them, else datasheet)."""
    measured = run.measured
    gpus = list(dict.fromkeys(measured["gpu"]))
    rows = []
    for _, point in measured.groupby(list(POINT_KEYS), dropna=False, sort=True):
        if point["gpu"].nunique() < 2:
            continue
        first = point.iloc[0]
        label = f"{config_label(first)}  {first['mode']}  {_column_label(first['seq_len'], first['batch'])}"
        by_gpu = {row.gpu: row for row in point.itertuples()}
        rows.append([label, *(_across_cell(by_gpu.get(gpu)) for gpu in gpus)])
    if not rows:
        return "No point was measured on two or more GPUs."
    note = ("Cells: median runtime in ms and, in parentheses, the fraction of that GPU's roofline at the "
            "point's intensity (measured ceilings where known, else the datasheet's).")
    return note + "\n\n" + _table(["kernel  heads×d_qk/d_v  chunk  mode  point", *gpus], rows)


def _across_cell(row) -> str:
    if row is None:
        return "–"
    fraction = row.roofline_frac_measured
    if pd.isna(fraction):
        fraction = row.roofline_frac_datasheet
    return f"{row.time_ms:.3f}" + (f" ({fraction:.0%})" if pd.notna(fraction) else "")


def summary_line(run: Run) -> str:
    """Rows, kernels, device and status counts; a run whose meta.json says it has not finished is marked."""
    statuses = Counter(run.table["status"])
    status_text = ", ".join(f"{status} {count}" for status, count in statuses.most_common())
    unfinished = run.meta and run.meta.get("started") and not run.meta.get("finished")
    note = ("**Unfinished run**: the sweep stopped before its last point (budget or time limit); the points "
            "not yet measured are not in this report (`tflabench sweep ... --resume` continues it).\n\n")
    kernels = run.table["kernel"].nunique()
    return (
        (note if unfinished else "")
        + f"{len(run.table)} rows, {kernels} kernels, device {device_label(run.table)}. "
        f"Status counts: {status_text}." + unsteady_note(run.table) + launch_bound_note(run.table)
    )


def unsteady_note(table: pd.DataFrame) -> str:
    """A sentence naming the measured GPU rows whose interquartile range is above `schema.MAX_SPREAD` of
    their median (`schema.gpu_row_spread`; unsteady after the harness's re-timing, or measured before
    it), or "" when none is."""
    spreads = [(row, gpu_row_spread(row) or 0.0) for _, row in table.iterrows()]
    labels = [f"{row.kernel} {_shape_label(row)} {row['mode']} ({spread:.0%})"
              for row, spread in spreads if spread > MAX_SPREAD]
    return _rows_note(labels, "unsteady", f"interquartile range above {MAX_SPREAD:.0%} of the median")


def launch_bound_note(table: pd.DataFrame) -> str:
    """A sentence naming the measured GPU rows near the launcher's pace (`schema.launch_bound`: issuing a
    call takes the CPU nearly the call's time, so the row may time the CPU, not the kernels), or "" when none
    is."""
    labels = [f"{row.kernel} {_shape_label(row)} {row['mode']} ({row.issue_cpu_ms:.3f} of {row.time_ms:.3f} "
              "ms)" for _, row in table.iterrows() if launch_bound(row)]
    return _rows_note(labels, "near the launcher's pace",
                      f"issuing a call took at least {LAUNCH_BOUND:.0%} of its time")


def _rows_note(labels: list[str], what: str, why: str) -> str:
    """" **N rows WHAT** (WHY): " and the first five labels and how many more, or "" without labels."""
    if not labels:
        return ""
    more = f" and {len(labels) - 5} more" if len(labels) > 5 else ""
    rows = "1 row" if len(labels) == 1 else f"{len(labels)} rows"
    return f" **{rows} {what}** ({why}): " + "; ".join(labels[:5]) + more + "."


def _cell(text: object) -> str:
    """A Markdown table cell: pipes escaped, one line."""
    return " ".join(str(text).replace("|", "\\|").split())


def _table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def _flatten(value: object, name: str = "") -> list[tuple[str, object]]:
    """(dotted name, scalar or list of scalars) for every leaf of a JSON value."""
    if isinstance(value, dict):
        return [
            item for key, child in value.items() for item in _flatten(child, f"{name}.{key}" if name else key)
        ]
    if isinstance(value, list) and any(isinstance(child, (dict, list)) for child in value):
        return [item for index, child in enumerate(value) for item in _flatten(child, f"{name}.{index}")]
    return [(name, value)]


def _format_value(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(str(v) for v in value)
    return "" if value is None else str(value)


def _command_line(command: object) -> str:
    return shlex.join(str(arg) for arg in command) if isinstance(command, list) else str(command)


def provenance_markdown(meta: dict) -> str:
    """The command line, then every field of meta.json (nested objects flattened to dotted names)."""
    if not meta:
        return "No meta.json next to the results table: GPU, versions and command line are unknown."
    parts = [f"```console\n$ {_command_line(meta['command'])}\n```"] if meta.get("command") else []
    fields = [(name, value) for name, value in _flatten(meta) if name != "command"]
    parts.append(_table(["field", "value"], [[f"`{name}`", _format_value(value)] for name, value in fields]))
    return "\n\n".join(parts)


def _column_label(seq_len: float, batch: float) -> str:
    return f"T={count_label(seq_len)} B={int(batch)}"


def speedup_markdown(run: Run, baseline: str | None) -> str:
    """Per mode: median ms and speed-up (baseline time / kernel time, > 1 is faster) per (T, batch)."""
    if baseline is None:
        return "No row of this run was measured (status ok): there are no runtimes to compare."
    parts = [
        f"Cells: median runtime in ms and, in parentheses, the speed-up over `{baseline}` at the same "
        "sequence length and batch (its fastest configuration there; > 1× is faster). **Bold**: fastest in "
        "the column. Other cells show the status of a point that was not measured; `failed_check` rows are "
        "never ranked."
    ]
    for mode in modes_of(run.table):
        parts += [f"### {mode}", _speedup_table(run, baseline, mode)]
    return "\n\n".join(parts)


def _speedup_table(run: Run, baseline: str, mode: str) -> str:
    table = run.table[(run.table["mode"] == mode) & (run.table["status"] != "skipped")]
    measured = run.measured[run.measured["mode"] == mode]
    columns = sorted(set(zip(table["seq_len"], table["batch"], strict=True)))
    base = measured[measured["kernel"] == baseline].groupby(list(COLUMN_KEYS))["time_ms"].min()
    fastest = measured.groupby(list(COLUMN_KEYS))["time_ms"].min()
    rows = []
    for _, config in table.groupby(list(ROW_KEYS), dropna=False, sort=True):
        first = config.iloc[0]
        cells = {(row.seq_len, row.batch): row for row in config.itertuples()}
        rows.append(
            [config_label(first)]
            + [_speedup_cell(cells.get(column), base.get(column), fastest.get(column)) for column in columns]
        )
    return _table(["kernel  heads×d_qk/d_v  chunk"] + [_column_label(*column) for column in columns], rows)


def _speedup_cell(row, baseline_ms: float | None, fastest_ms: float | None) -> str:
    if row is None:
        return "–"
    if row.status != "ok" or not row.time_ms > 0:
        return row.status
    text = f"{row.time_ms:.2f}"
    if fastest_ms is not None and row.time_ms == fastest_ms:
        text = f"**{text}**"
    if baseline_ms is not None and pd.notna(baseline_ms):
        text += f" ({baseline_ms / row.time_ms:.2f}×)"
    return text


def mlstm_groups_markdown(run: Run) -> str:
    """Per (shape, mode) group our fastest mLSTMsig row against the reference's, the ratios the kernels are
    judged by, and every mLSTM row's distance to the IO floor (`analysis.io_floor`)."""
    from tflabench.analysis.io_floor import mlstm_groups, row_configuration, with_io_floor

    ceilings = model_ceilings(run)
    bandwidth = ceilings.bandwidth if ceilings is not None else None
    groups = mlstm_groups(run.measured, bandwidth)
    if groups.empty:
        return "No measured row of our mLSTMsig kernels in this run."
    floor_note = (f"x IO floor at β = {bandwidth / 1e12:.2f} TB/s ({ceilings.source}), "
                  "docs/reference/io-floor.md" if bandwidth else "no bandwidth known: no IO floor")
    header = ["T", "B", "heads×d_qk/d_v", "mode", "ours (fastest sig row)", "ms", "x IO floor", "ref ms",
              "ours/ref", "exp/sig", "auto/best sig", "auto/best exp", "ours/FLA", "memory ours/ref"]
    rows = [[count_label(g.seq_len), int(g.batch), _heads_label(g), g.mode, g.ours, f"{g.ours_ms:.3f}",
             _fixed(g.ours_x_floor), _fixed(g.reference_ms, 3),
             *(_fixed(value) for value in (g.ours_over_reference, g.exp_over_sig, g.auto_over_best_sig,
                                           g.auto_over_best_exp, g.over_fla, g.memory_over_reference))]
            for g in groups.itertuples()]
    worst = {column: groups[column].max() for column in
             ("ours_over_reference", "exp_over_sig", "auto_over_best_sig", "auto_over_best_exp", "over_fla",
              "memory_over_reference")}
    worst_line = "Worst group: " + ", ".join(f"{name} {_fixed(value)}" for name, value in worst.items()) + "."
    parts = [f"Ratios are times (memory: peak memory) of the best row of each side; < 1 means ours is "
             f"faster / smaller. {floor_note}.", _table(header, rows), worst_line]
    if bandwidth:
        floors = with_io_floor(run.measured, bandwidth).sort_values(list(GROUP_ORDER))
        every_row = [[row.kernel, count_label(row.seq_len), int(row.batch), _heads_label(row), row.mode,
                      row_configuration(row), f"{row.time_ms:.3f}", f"{row.floor_ms:.3f}",
                      _fixed(row.x_io_floor)] for row in floors.itertuples()]
        parts.append("<details><summary>Every mLSTM row and its IO floor</summary>\n\n" + _table(
            ["kernel", "T", "B", "heads×d_qk/d_v", "mode", "configuration", "ms", "floor ms", "x IO floor"],
            every_row) + "\n\n</details>")
    return "\n\n".join(parts)


GROUP_ORDER = ("mode", "seq_len", "head_dim_v", "heads", "kernel", "chunk_size")


def _heads_label(row) -> str:
    return dims_label(row.heads, row.head_dim_qk, row.head_dim_v)


def _fixed(value: float, digits: int = 2) -> str:
    return "–" if pd.isna(value) else f"{value:.{digits}f}"


def chunk_optimum_markdown(run: Run) -> str:
    """Measured optimal chunk size of each mLSTM chunk sweep next to Eq. 121
    (docs/reference/mlstm-math.md#optimal-chunk-size) and the model time."""
    optima = chunk_optima(run)
    if not optima:
        return "No mLSTM kernel of this run was measured at two or more chunk sizes."
    rows = [_chunk_optimum_row(optimum) for optimum in optima]
    ceilings = next((o.ceilings for o in optima if o.ceilings is not None), None)
    state_bytes = " or ".join(str(size) for size in sorted({o.sweep.state_bytes for o in optima}))
    source = (
        f"Theory and model use the {ceilings.source} ceilings ({ceilings_label(ceilings)}), "
        f"{state_bytes}-byte chunk states (what each kernel stores: its recorded state_bytes, the paper's 4 "
        "where it records none), F_c = 0.5. Model: F/α + B/β (Eq. 116 form) at the measured optimum, and "
        "measured / model. "
        "Last column: the best FLOP rate the kernel reached over the sweep (model FLOPs / time) and L* "
        "with that rate as α."
        if ceilings is not None
        else optima[0].reason
    )
    header = [
        "kernel",
        "heads×d_qk/d_v",
        "shape",
        "mode",
        "measured optimum L (ms)",
        "theory L*",
        "runnable L (reason)",
        "model ms at measured L (measured/model)",
        "achieved α: L*",
    ]
    verdicts = [_chunk_verdict(optimum) for optimum in optima if optimum.theory_chunk is not None]
    return source + "\n\n" + _table(header, rows) + ("\n\n" + "\n".join(verdicts) if verdicts else "")


def structural_model_markdown(run: Run) -> str:
    """Model column (predicted / measured per modelled row) and the check per kernel
    (docs/performance-model.md), or why there is none."""
    from tflabench.analysis import model_check

    try:
        result = model_check.check_run(run)
    except InputError as exc:
        return f"Not available: {exc}"
    rows = [[model_check.row_label(row), _model_shape_label(row["shape"]), row["shape"]["mode"],
             row["chunk_size"], _fixed(row["measured_ms"], 3), _fixed(row["predicted_ms"], 3),
             _fixed(row["ratio"])]
            for row in result["all"]["rows"]]
    per_row = _table(["kernel", "shape", "mode", "L", "measured ms", "model ms", "model / measured"], rows)
    checks = []
    for kernel, stats in [*result["kernels"].items(), ("all", result["all"])]:
        groups = stats["groups"]
        matched = f"{sum(g['match'] for g in groups)}/{len(groups)}" if groups else "-"
        checks.append([kernel, len(stats["rows"]), _fixed(stats["median_abs_error"], 3),
                       _fixed(stats["max_abs_error"], 3), matched])
    check = _table(["kernel", "rows", "median abs error", "max abs error", "predicted best = measured best "
                    "(or within 5 %)"], checks)
    version = result["kernels_version"] or "not recorded"
    return (f"Calibration: {result['calibration']}. Our kernels' version in this run: {version}; tilings "
            f"modelled: {result['tilings']}.\n\n{per_row}\n\n{check}")


def _model_shape_label(shape: dict) -> str:
    """``16×128/256 T=8k B=8`` of a model-check row's shape."""
    label = dims_label(shape["heads"], shape["head_dim_qk"], shape["head_dim_v"])
    return label + f" T={count_label(shape['seq_len'])} B={shape['batch']}"


def _chunk_optimum_row(optimum) -> list[str]:
    """kernel, dims, shape, mode, measured optimum, theory L*, runnable L, model at the measured L, and L*
    with the achieved FLOP rate."""
    from tflabench.analysis import models, roofline

    sweep, best = optimum.sweep, optimum.sweep.best
    theory, runnable, model, achieved = "–", "–", "–", "–"
    if optimum.theory_chunk is not None:
        theory = f"{optimum.theory_chunk:.0f}"
        runnable = f"{optimum.runnable_chunk} ({optimum.reason})"
        if pd.notna(best["flops"]) and pd.notna(best["bytes"]):
            cost = models.Cost(flops=float(best["flops"]), bytes=float(best["bytes"]))
            model_ms = roofline.runtime_additive(cost, optimum.ceilings) * 1e3
            model = f"{model_ms:.2f} ({optimum.measured_ms / model_ms:.2f}×)"
    if optimum.achieved_theory_chunk is not None:
        achieved = f"{optimum.achieved_flops / 1e12:.0f} TFLOP/s: L* = {optimum.achieved_theory_chunk:.0f}"
    return [
        sweep.kernel,
        dims_label(sweep.heads, sweep.head_dim_qk, sweep.head_dim_v),
        f"T={count_label(sweep.seq_len)} B={sweep.batch}",
        sweep.mode,
        f"{optimum.measured_chunk} ({optimum.measured_ms:.2f} ms)",
        theory,
        runnable,
        model,
        achieved,
    ]


def _chunk_verdict(optimum) -> str:
    """One line: does the theory predict the measured optimum within a factor of 2, and if not, is the
    FLOP term (the kernel's achieved rate against the matmul ceiling) what the model misses?"""
    sweep, ratio = optimum.sweep, optimum.theory_ratio
    label = (f"- `{sweep.kernel}` {sweep.mode}: L* = {optimum.theory_chunk:.0f} vs measured "
             f"{optimum.measured_chunk}")
    if 0.5 <= ratio <= 2.0:
        return f"{label}: within 2× ({ratio:.2f}×)."
    line = f"{label}: off by {max(ratio, 1 / ratio):.1f}×."
    if optimum.achieved_theory_chunk is None:
        return line
    alpha, achieved = optimum.ceilings.flops, optimum.achieved_flops
    achieved_ratio = optimum.achieved_theory_chunk / optimum.measured_chunk
    verdict = "within 2×" if 0.5 <= achieved_ratio <= 2.0 else "still outside 2×"
    return (f"{line} The FLOP term assumes α = {alpha / 1e12:.0f} TFLOP/s; the kernel reaches at most "
            f"{achieved / 1e12:.0f} TFLOP/s ({achieved / alpha:.0%}) where that term dominates, so F/α "
            f"underestimates the intra-chunk cost that grows with L. With the achieved rate, L* = "
            f"{optimum.achieved_theory_chunk:.0f} ({achieved_ratio:.2f}×, {verdict}).")


def paper_comparison_markdown(run: Run) -> str:
    """Measured / published runtime per paper figure with the differences, and the published peak memory;
    notes that hold for every compared row are listed once above the tables."""
    versions = run.meta.get("versions")
    triton = versions.get("triton") if isinstance(versions, dict) else None
    comparison = paper_numbers.paper_comparison(run.table, triton)
    if comparison.empty:
        return (
            "No measured row of this run matches a configuration the TFLA paper published "
            f"({paper_numbers.DOCUMENT}#published-numbers): kernel, mode, bfloat16, batch, sequence length, "
            "heads and head dims, and for the mLSTM kernels the chunk size."
        )
    notes = comparison["difference"].map(_note_parts)
    common = [part for part in notes.iloc[0] if all(part in row for row in notes)]
    not_compared = [f"{kernel.label}: {kernel.note}." for kernel in paper_numbers.PAPER_KERNELS
                    if not kernel.kernels]
    parts = [
        f"Published: {paper_numbers.DOCUMENT}#published-numbers ({paper_numbers.PAPER_GPU}, PyTorch 2.5.1, "
        f"Triton {paper_numbers.PAPER_TRITON}, bf16). Cells: measured / published median ms and, in "
        "parentheses, their ratio (< 1×: this run is faster). Rows match on kernel, mode, batch, sequence "
        "length, heads and head dims, and for the mLSTM kernels the chunk size.",
        "\n".join(f"- {note}" for note in [*common, *paper_numbers.METHOD_NOTES, *not_compared]),
    ]
    for figure, rows in comparison.groupby("figure", sort=False):
        spec = paper_numbers.FIGURES[figure]
        parts += [f"### {figure}: {spec.title}", _paper_figure_table(rows, spec.axis, set(common))]
    parts += ["### Peak memory (GB)", _paper_memory_table(comparison)]
    return "\n\n".join(parts)


def paper_claims_markdown(run: Run) -> str:
    """The paper's statements about its benchmarks that this run's measured rows can check."""
    checked = paper_claims.check_claims(run.measured)
    if not checked:
        return ("This run has none of the rows the paper's statements are about (Fig. 4's 65,536-token "
                "sweep, Fig. 5's chunk sweep of mLSTMsig).")
    rows = [[claim.figure, claim.statement, claim.paper, verdict.measured,
             "holds" if verdict.holds else "**does not hold**"] for claim, verdict in checked]
    header = ["figure", "the paper says", "the paper's data", "this run", "verdict"]
    return ("Our mLSTM kernels stand in for the paper's; attention is causal here. The differences listed "
            "above apply.\n\n" + _table(header, rows))


def _note_parts(difference: str) -> list[str]:
    return [part for part in difference.split(paper_numbers.NOTE_SEPARATOR) if part]


def _axis_label(axis: str, value: float) -> str:
    """Column heading of a paper figure's axis value: T=8k, L=128, d=64."""
    return {"seq_len": f"T={count_label(value)}", "chunk_size": f"L={value:g}"}.get(axis, f"d={value:g}")


def _paper_row_label(row: pd.Series, axis: str) -> str:
    """The paper's kernel name, with its chunk size where the chunk size is not the figure's axis."""
    label = row["paper_kernel"]
    if axis != "chunk_size" and pd.notna(row["paper_chunk_size"]):
        label += f" L={int(row['paper_chunk_size'])}"
    return label


def _paper_figure_table(rows: pd.DataFrame, axis: str, common: set[str]) -> str:
    """One table row per (paper kernel, kernel, mode), one column per value of the figure's axis (the
    fastest measured row where several match), and the notes not in ``common``."""
    values = sorted(rows[axis].unique())
    labels = rows.apply(_paper_row_label, axis=1, args=(axis,))
    table_rows = []
    for (label, kernel, mode), group in rows.groupby([labels, "kernel", "mode"], sort=False):
        fastest = group.loc[group.groupby(axis)["measured_ms"].idxmin()].set_index(axis)
        cells = [_paper_cell(fastest.loc[value]) if value in fastest.index else "–" for value in values]
        parts = (part for text in group["difference"] for part in _note_parts(text))
        notes = dict.fromkeys(part for part in parts if part not in common)
        table_rows.append([label, kernel, mode, *cells, "; ".join(notes) or "–"])
    header = ["paper kernel", "kernel", "mode", *(_axis_label(axis, value) for value in values)]
    return _table([*header, "differences"], table_rows)


def _paper_cell(row: pd.Series) -> str:
    return f"{row['measured_ms']:.2f} / {row['published_ms']:.2f} ({row['ratio']:.2f}×)"


def _paper_memory_table(comparison: pd.DataFrame) -> str:
    """The run's incremental peak next to the paper's absolute peak, where the paper gives one."""
    rows = comparison[comparison["published_peak_gb"].notna()]
    if rows.empty:
        return "The paper publishes no peak memory for the compared points."
    table_rows = [
        [
            row.figure,
            row.paper_kernel,
            row.kernel,
            row.mode,
            _shape_label(row),
            f"{row.measured_peak_gb:.2f}" if pd.notna(row.measured_peak_gb) else "–",
            f"{row.published_peak_gb:.2f}",
        ]
        for row in rows.itertuples()
    ]
    header = ["figure", "paper kernel", "kernel", "mode", "shape", "measured (incremental)"]
    return _table([*header, "published (absolute)"], table_rows)


def _shape_label(row) -> str:
    """``16×128/256 T=8k B=8 L=128`` of a comparison row."""
    label = dims_label(row.heads, row.head_dim_qk, row.head_dim_v)
    label += f" T={count_label(row.seq_len)} B={int(row.batch)}"
    return label + (f" L={int(row.chunk_size)}" if pd.notna(row.chunk_size) else "")


def plots_markdown(rendered: Rendered, report_dir: Path) -> str:
    """The plot section: each drawn figure linked relative to ``report_dir``, each skipped one with why."""
    parts = []
    for name, kind in PLOT_KINDS.items():
        if name in rendered.skipped:
            parts.append(f"- **{kind.title}**: not drawn: {rendered.skipped[name]}.")
        if name not in rendered.files:
            continue
        links = {
            path.suffix[1:]: Path(os.path.relpath(path, report_dir)).as_posix()
            for path in rendered.files[name]
        }
        lines = [f"### {kind.title}"]
        if "png" in links:
            lines.append(f"![{kind.title}]({links['png']})")
        lines.append(" · ".join(f"[{fmt.upper()}]({link})" for fmt, link in links.items()))
        parts.append("\n\n".join(lines))
    return "\n\n".join(parts)


def failures_markdown(run: Run) -> str:
    entries = not_measured(run.table)
    if not entries:
        return "Every point was measured."
    header = ["kernel", "heads×d_qk/d_v", "modes", "status", "sequence lengths", "chunk sizes", "reason"]
    rows = [
        [
            entry.kernel,
            entry.dims,
            ", ".join(entry.modes),
            entry.status,
            ", ".join(count_label(t) for t in entry.seq_lens),
            ", ".join(str(c) for c in entry.chunk_sizes) or "–",
            entry.reason or "no reason recorded",
        ]
        for entry in entries
    ]
    return _table(header, rows)
