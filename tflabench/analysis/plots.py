"""Figures of a tflabench run, after the kernel-benchmark and roofline figures of the TFLA paper.

The input is a `Run` as `tflabench.analysis.run_data.load_run` reads it (``results/<run>/results.csv``
and ``meta.json``; the chunk sweeps, optima and ceilings derived from it are in `run_data` too). Every
``plot_*`` function returns a matplotlib `Figure` on the Agg canvas (no pyplot, no global state) drawn in
the module's one style (`STYLE`); `render` saves the figures of the requested kinds as PNG and/or SVG.

Kinds (`PLOT_KINDS`):

* ``runtime``: runtime vs sequence length per kernel, forward and forward+backward panels (TFLA Fig. 4);
  rows that were not measured are listed under the plot with their status and reason (this and the
  head-dim figure).
* ``headdim``: runtime vs head dim per kernel and chunk size at one sequence length, forward and
  forward+backward panels (TFLA Fig. 14).
* ``memory``: runtime vs peak memory across chunk sizes (Fig. 5), each point labelled with its chunk
  size, the measured optimum and the theoretical one (Eq. 121 rounded to a runnable L) marked.
* ``roofline``: achieved FLOP/s vs arithmetic intensity under the run GPU's datasheet and measured roofs,
  with H100 and A100 roofs for reference (Fig. 19).
* ``optimal-chunk``: runtime-optimal chunk size (Eq. 121) vs head dim per GPU and the FLOP-optimal one
  (Eq. 111) (Figs. 21-22), with the run's measured optima overlaid.
* ``model``: the additive runtime model F/alpha + B/beta (the form of Eq. 116, measured ceilings) and the
  overlap bound max(F/alpha, B/beta) against the measured runtime over chunk sizes.

The analysis layer (hardware DB, roofline, optimal chunk size) is imported inside the functions that
need it.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from tflabench.analysis.run_data import (
    CAUSAL_FACTOR,
    STATE_BYTES,
    ChunkOptimum,
    ChunkSweep,
    Run,
    ceilings_label,
    chunk_optima,
    chunk_sweeps,
    config_label,
    count_label,
    device_label,
    model_ceilings,
    modes_of,
    not_measured,
    on_cpu_interpreter,
    run_ceilings,
    run_dtype,
    run_gpu,
    runs_by_gpu,
)
from tflabench.core import MODES
from tflabench.errors import InputError

#: the formats a figure can be saved in
PLOT_FORMATS = ("png", "svg")
#: the formats `render` (and so `tflabench report`) writes unless told: PNG alone, as committed under
#: results/ (an SVG beside every PNG doubled the folder's size; `tflabench plot --format svg` draws them)
DEFAULT_FORMATS = ("png",)

#: The one style of every tflabench figure (matplotlib rcParams, applied per figure).
STYLE = {
    "font.family": "DejaVu Sans",
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "figure.titlesize": 11,
    "legend.fontsize": 7.5,
    "legend.title_fontsize": 8,
    "legend.frameon": False,
    "axes.grid": True,
    "axes.grid.which": "major",
    "grid.alpha": 0.35,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 5,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
    "svg.fonttype": "none",
    "svg.hashsalt": "tflabench",
}
#: PNG resolution: at 100 dpi a plot keeps 8-point labels legible at 0.6x the bytes of 150 dpi (results/ holds
#: over 500 plots)
SAVE_DPI = 100
PANEL_SIZE = (5.0, 3.8)  # inches per panel

MODE_TITLES = {"fwd": "forward", "fwdbw": "forward + backward"}
MODE_MARKERS = {"fwd": "o", "fwdbw": "s"}
SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
#: with the markers, 36 distinct (marker, line style) pairs per family
LINE_STYLES = ("-", "--", "-.", ":")
FAMILY_PALETTE = matplotlib.colormaps["tab10"].colors + matplotlib.colormaps["Dark2"].colors
#: legend labels wrap at this many characters; one legend column per this many inches of figure width
LEGEND_LABEL_CHARS = 58
LEGEND_COLUMN_INCHES = 4.8
#: height of one legend text line in inches (7.5 pt with the legend's line spacing)
LEGEND_LINE_INCHES = 0.18
#: characters of the footnote font (7 pt monospace) per inch of figure width
NOTE_CHARS_PER_INCH = 16
LEGEND_TITLE = "kernel   heads×d_qk/d_v   chunk L"
#: GPUs whose structural-model L* the optimal-chunk figure draws (keys of results/calibration/), and the head
#: dims d_v it is computed at
STRUCTURAL_GPUS = ("h100-sxm", "h200")
STRUCTURAL_HEAD_DIMS = (64, 128, 256, 512, 1024)
#: GPUs of the optimal-chunk figure (hardware DB names; the TFLA paper's set plus the H200).
CHUNK_FIGURE_GPUS = ("v100", "a100", "h100", "h200", "b200")
#: Reference roofs drawn on every roofline (Fig. 19), besides the run's own GPU.
REFERENCE_ROOF_GPUS = ("h100", "a100")
MAX_NOTE_LINES = 14


class NoDataError(InputError):
    """The run has no rows that a requested plot can show (the message says which rows are needed)."""


# ------------------------------------------------------------------------------------ figure helpers


def kernel_colors(table: pd.DataFrame) -> dict[str, tuple]:
    """One colour per kernel name, stable across all figures of a run (figures of few kernels)."""
    kernels = sorted(set(table["kernel"]))
    return {kernel: FAMILY_PALETTE[index % len(FAMILY_PALETTE)] for index, kernel in enumerate(kernels)}


def series_styles(series: Iterable[tuple[str, str]], table: pd.DataFrame) -> dict[str, dict]:
    """Style per series from (family, label) pairs, in family then label order: the colour of its kernel
    family, and a marker and line style that no other series of the family has (figures of many kernels:
    colour says which family, marker and line which kernel)."""
    families = sorted(set(table["family"]))
    colors = {family: FAMILY_PALETTE[index % len(FAMILY_PALETTE)] for index, family in enumerate(families)}
    styles: dict[str, dict] = {}
    used: dict[str, int] = {}
    for family, label in sorted(set(series)):
        index = used.get(family, 0)
        used[family] = index + 1
        styles[label] = {"color": colors[family], "marker": SERIES_MARKERS[index % len(SERIES_MARKERS)],
                         "ls": LINE_STYLES[index % len(LINE_STYLES)]}
    return styles


def _figure(ncols: int, nrows: int = 1, width: float | None = None, height: float | None = None, **grid):
    """A figure on the Agg canvas holding one subfigure with an nrows x ncols grid of axes.

    The subfigure keeps the legend (placed outside its axes) clear of the figure's title.
    Returns (figure, panels subfigure, 2-d array of axes).
    """
    fig = Figure(
        figsize=(width or PANEL_SIZE[0] * ncols, height or PANEL_SIZE[1] * nrows), layout="constrained"
    )
    FigureCanvasAgg(fig)
    panels = fig.subfigures(1, 1)
    axes = panels.subplots(nrows, ncols, squeeze=False, **grid)
    return fig, panels, axes


def _styled(draw: Callable[..., Figure]) -> Callable[..., Figure]:
    def styled(*args, **kwargs) -> Figure:
        with matplotlib.rc_context(STYLE):
            return draw(*args, **kwargs)

    styled.__name__, styled.__doc__ = draw.__name__, draw.__doc__
    return styled


def _log2_axis(ax: Axes, which: str, values: Iterable[float]) -> None:
    """Base-2 log x or y axis with a tick at every value (sequence lengths, chunk sizes, head dims)."""
    getattr(ax, f"set_{which}scale")("log", base=2)
    axis = getattr(ax, f"{which}axis")
    axis.set_ticks(sorted({float(v) for v in values}))
    axis.set_major_formatter(FuncFormatter(count_label))
    axis.set_minor_formatter(NullFormatter())


def _log10_axis(ax: Axes, which: str) -> None:
    """Base-10 log x or y axis labelled at 1-2-5 steps with plain numbers."""
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())


def _shared_legend(panels, axes: Iterable[Axes], title: str, extra: Iterable[Line2D] = ()) -> None:
    """One legend for all panels, below them in as many columns as the figure's width holds, its labels
    wrapped (so it is never wider than the panels)."""
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, handle)
    for proxy in extra:
        handles.setdefault(proxy.get_label(), proxy)
    if not handles:
        return
    labels = [textwrap.fill(label, LEGEND_LABEL_CHARS, subsequent_indent="    ") for label in handles]
    fig = panels.figure
    columns = min(len(labels), max(1, int(fig.get_figwidth() // LEGEND_COLUMN_INCHES)))
    panels.legend(handles.values(), labels, loc="outside lower center", title=title, alignment="left",
                  ncols=columns)
    text_lines = sum(label.count("\n") + 1 for label in labels)
    fig.set_figheight(fig.get_figheight() + (math.ceil(text_lines / columns) + 2) * LEGEND_LINE_INCHES)


def _note_below(fig: Figure, heading: str, lines: list[str]) -> None:
    """List lines of text under the figure (saved with bbox_inches="tight", so they extend it), each
    wrapped to the figure's width."""
    if not lines:
        return
    if len(lines) > MAX_NOTE_LINES:
        lines = [
            *lines[: MAX_NOTE_LINES - 1],
            f"… and {len(lines) - MAX_NOTE_LINES + 1} more (see report.md)",
        ]
    width = int(fig.get_figwidth() * NOTE_CHARS_PER_INCH)
    wrapped = [textwrap.fill(line, width, initial_indent="  ", subsequent_indent="      ") for line in lines]
    text = "\n".join([heading, *wrapped])
    fig.text(0.005, -0.01, text, ha="left", va="top", fontsize=7, family="DejaVu Sans Mono", color="#333333")


def _empty_panel(ax: Axes, message: str) -> None:
    ax.text(0.5, 0.5, message, transform=ax.transAxes, ha="center", va="center", color="#777777")


def run_caption(run: Run) -> str:
    """``<run> · <device> · <dtype>``, plus the token count when it is constant (Fig. 4 style)."""
    caption = f"{run.name} · {device_label(run.table)} · {run_dtype(run)}"
    tokens = (run.table["batch"] * run.table["seq_len"]).dropna().unique()
    if len(tokens) == 1:
        caption += f" · {int(tokens[0]):,} tokens per batch"
    return caption


# ------------------------------------------------------------------------------------------- figures


def seqlen_series(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Lines of the runtime figure: one per kernel configuration (and batch when a config has several).

    Configurations measured at a single sequence length (chunk sweeps) are left out when any
    configuration has two or more sequence lengths; the memory and model figures show them.
    """
    series = []
    labelled = rows.assign(_label=rows.apply(config_label, axis=1))
    for label, group in labelled.groupby("_label", sort=True):
        if group["seq_len"].is_unique:
            series.append((label, group.sort_values("seq_len")))
            continue
        for batch, by_batch in group.groupby("batch", sort=True):
            series.append((f"{label}  B={int(batch)}", by_batch.sort_values("seq_len")))
    if any(len(rows) > 1 for _, rows in series):
        series = [(label, rows) for label, rows in series if len(rows) > 1]
    return series


def headdim_series(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Lines of the head-dim figure: one per kernel, chunk size, sequence length, batch, d_qk/d_v ratio and
    model width (heads × d_v) that was measured at two or more value head dims, sorted by head dim."""
    keyed = rows.assign(_chunk=rows["chunk_size"].fillna(0), _ratio=rows["head_dim_qk"] / rows["head_dim_v"],
                        _width=rows["heads"] * rows["head_dim_v"])
    several_lengths, several_widths = keyed["seq_len"].nunique() > 1, keyed["_width"].nunique() > 1
    series = []
    for (kernel, chunk, seq_len, batch, ratio, width), group in keyed.groupby(
        ["kernel", "_chunk", "seq_len", "batch", "_ratio", "_width"], sort=True
    ):
        if group["head_dim_v"].nunique() < 2:
            continue
        label = kernel + (f"  L={int(chunk)}" if chunk else "")
        label += f"  T={count_label(seq_len)} B={int(batch)}" if several_lengths else ""
        label += f"  d_qk={ratio:g}·d_v" if ratio != 1 else ""
        label += f"  heads×d_v={int(width)}" if several_widths else ""
        series.append((label, group.sort_values("head_dim_v")))
    return series


def _series_by_gpu(run: Run, series_of: Callable[[pd.DataFrame], list]) -> list[tuple[str, dict[str, list]]]:
    """(GPU, ``series_of`` of each mode's measured rows on that GPU) for every GPU of the run; the GPU is
    "" for a run of one GPU (its panels need no GPU in their titles)."""
    if run.measured.empty:
        raise NoDataError("no row of this run was measured (status ok): nothing to plot")
    parts = runs_by_gpu(run)
    modes = modes_of(run.table)
    return [("" if len(parts) == 1 else gpu or "no GPU",
             {mode: series_of(part.measured[part.measured["mode"] == mode]) for mode in modes})
            for gpu, part in parts]


def _draw_runtime_panels(run: Run, panel_rows: list[tuple[str, dict[str, list]]], x: str, xlabel: str,
                         legend_title: str = LEGEND_TITLE) -> Figure:
    """One panel per mode (and one row of panels per GPU of ``panel_rows``: (GPU, series by mode)): median
    runtime (ms, log) against column ``x`` (log2) for each of the mode's series (label, rows), the
    interquartile range shaded; the rows that were not measured listed under the plot."""
    styles = series_styles(
        ((rows["family"].iloc[0], label) for _, series_by_mode in panel_rows
         for series in series_by_mode.values() for label, rows in series),
        run.table,
    )
    order = {label: rank for rank, label in enumerate(styles)}
    fig, panels, axes = _figure(len(panel_rows[0][1]), len(panel_rows), sharey=len(panel_rows) > 1)
    for row_axes, (gpu, series_by_mode) in zip(axes, panel_rows, strict=True):
        for ax, (mode, series) in zip(row_axes, series_by_mode.items(), strict=True):
            _draw_runtime_panel(ax, sorted(series, key=lambda item: order[item[0]]), styles, x)
            if not series:
                _empty_panel(ax, f"no kernel measured in mode {mode}")
            ax.set_title(f"{gpu} · {MODE_TITLES[mode]}" if gpu else MODE_TITLES[mode])
            ax.set_xlabel(xlabel)
            ax.set_ylabel("runtime (ms, median)")
            _log2_axis(ax, "x", run.table[x].dropna())
            _log10_axis(ax, "y")
    _shared_legend(panels, axes.flat, legend_title)
    _note_below(
        fig, "Not measured (status: reason):", [entry.describe() for entry in not_measured(run.table)]
    )
    return fig


def _draw_runtime_panel(ax: Axes, series: list, styles: dict[str, dict], x: str) -> None:
    """Each series (label, rows) in its style, the interquartile range shaded."""
    for label, rows in series:
        style = styles[label]
        ax.plot(rows[x], rows["time_ms"], label=label, **style)
        band = (rows["time_ms_q25"], rows["time_ms_q75"])
        ax.fill_between(rows[x], *band, color=style["color"], alpha=0.1, lw=0)


@_styled
def plot_runtime_vs_seqlen(run: Run) -> Figure:
    """Median runtime (ms, log) vs sequence length (log2) per kernel configuration; one panel per mode,
    and one row of panels per GPU when the run has rows of several.

    The shaded band is the interquartile range. Rows that were not measured (crash, timeout, unavailable,
    failed check, ...) are listed under the plot with their reason. A run whose every configuration has
    one sequence length (a chunk-size or head-dim sweep) has no such figure.
    """
    panel_rows = _series_by_gpu(run, seqlen_series)
    lines = [rows for _, by_mode in panel_rows for series in by_mode.values() for _, rows in series]
    if not any(len(rows) > 1 for rows in lines):
        raise NoDataError("every kernel configuration was measured at one sequence length (the head-dim "
                          "and memory figures show such runs)")
    fig = _draw_runtime_panels(run, panel_rows, "seq_len", "sequence length T (tokens)")
    fig.suptitle(f"Runtime vs sequence length — {run_caption(run)}")
    return fig


@_styled
def plot_runtime_vs_headdim(run: Run) -> Figure:
    """Median runtime (ms, log) vs value head dim (log2) per kernel and chunk size at one sequence length
    (TFLA Fig. 14: d_qk = d_v = d, heads = d_model / d); panels as in the runtime figure."""
    panel_rows = _series_by_gpu(run, headdim_series)
    if not any(series for _, by_mode in panel_rows for series in by_mode.values()):
        raise NoDataError("no kernel was measured at two or more head dims with the same chunk size, "
                          "sequence length and batch")
    measured = run.measured
    equal = bool((measured["head_dim_qk"] == measured["head_dim_v"]).all())
    xlabel = "head dim d (d_qk = d_v)" if equal else "value head dim d_v"
    fig = _draw_runtime_panels(run, panel_rows, "head_dim_v", xlabel, legend_title="kernel   chunk L")
    model_dims = (measured["heads"] * measured["head_dim_v"]).unique()
    heads_note = f" · heads × d_v = {int(model_dims[0])}" if len(model_dims) == 1 else ""
    fig.suptitle(f"Runtime vs head dim — {run_caption(run)}{heads_note}")
    return fig


@_styled
def plot_runtime_vs_memory(run: Run) -> Figure:
    """Runtime (ms) vs peak memory (MiB) across chunk sizes per kernel configuration (TFLA Fig. 5).

    Every point is labelled with its chunk size; a ring marks the measured optimum and a star the
    theoretical optimum (runnable L from Eq. 121 with the run's ceilings) when it was measured.
    """
    sweeps = [sweep for sweep in chunk_sweeps(run) if sweep.rows["peak_mem_mib"].notna().sum() >= 2]
    if not sweeps:
        why = ("CPU-interpreter runs measure no peak memory" if on_cpu_interpreter(run.table)
               else "the figure needs a sweep over chunk sizes")
        raise NoDataError(f"no kernel configuration of this run has a peak memory at two or more chunk sizes "
                          f"({why})")
    optima = {id(optimum.sweep): optimum for optimum in chunk_optima(run, sweeps)}
    colors = kernel_colors(run.table)
    modes = [mode for mode in MODES if any(sweep.mode == mode for sweep in sweeps)]
    fig, panels, axes = _figure(len(modes))
    for ax, mode in zip(axes[0], modes, strict=True):
        for sweep in (sweep for sweep in sweeps if sweep.mode == mode):
            _draw_memory_sweep(ax, sweep, optima.get(id(sweep)), colors[sweep.kernel])
        ax.set_title(MODE_TITLES[mode])
        ax.set_xlabel("peak memory (MiB, increase over the inputs)")
        ax.set_ylabel("runtime (ms, median)")
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5))
        _log10_axis(ax, "y")
    proxies = [
        Line2D([], [], ls="none", marker="o", ms=11, mfc="none", mec="black", label="measured optimum"),
        Line2D(
            [],
            [],
            ls="none",
            marker="*",
            ms=12,
            color="black",
            label="theoretical optimum (Eq. 121 → runnable L)",
        ),
    ]
    _shared_legend(panels, axes[0], "kernel   heads×d_qk/d_v   T, batch", proxies)
    fig.suptitle(f"Runtime vs peak memory across chunk sizes — {run_caption(run)}")
    _note_below(fig, "Optimal chunk size (measured vs theory):", [_optimum_line(o) for o in optima.values()])
    return fig


def _draw_memory_sweep(ax: Axes, sweep: ChunkSweep, optimum: ChunkOptimum | None, color) -> None:
    rows = sweep.rows.dropna(subset=["peak_mem_mib"])
    ax.plot(rows["peak_mem_mib"], rows["time_ms"], marker="o", color=color, label=sweep.label)
    for row in rows.itertuples():
        ax.annotate(
            f"L={int(row.chunk_size)}",
            (row.peak_mem_mib, row.time_ms),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=7,
            color=color,
        )
    best = sweep.best
    ax.plot(
        best["peak_mem_mib"], best["time_ms"], ls="none", marker="o", ms=11, mfc="none", mec=color, mew=1.5
    )
    if optimum is not None and optimum.runnable_chunk is not None:
        theory = rows[rows["chunk_size"] == optimum.runnable_chunk]
        ax.plot(
            theory["peak_mem_mib"],
            theory["time_ms"],
            ls="none",
            marker="*",
            ms=12,
            color=color,
            mec="black",
            mew=0.6,
            zorder=4,
        )


def _optimum_line(optimum: ChunkOptimum) -> str:
    sweep = optimum.sweep
    line = f"{sweep.label} [{sweep.mode}]: measured L={optimum.measured_chunk} ({optimum.measured_ms:.2f} ms)"
    if optimum.theory_chunk is None:
        return f"{line}; theory: {optimum.reason}"
    measured = set(sweep.rows["chunk_size"].astype(int))
    note = "" if optimum.runnable_chunk in measured else ", not measured"
    return (
        f"{line}; theory L*={optimum.theory_chunk:.0f} → L={optimum.runnable_chunk}{note} "
        f"({optimum.ceilings.source} ceilings)"
    )


def _roofs(run: Run) -> list[tuple[str, object, dict]]:
    """(label, Ceilings, line style) of the run GPU's roofs and the reference GPUs' datasheet roofs."""
    from tflabench.analysis import hardware

    roofs = []
    gpu = run_gpu(run)
    name = gpu.name if gpu is not None else "run GPU"
    ceilings = run_ceilings(run)
    styles = {
        "datasheet": {"color": "black", "lw": 2.0},
        "measured": {"color": "black", "lw": 2.0, "ls": "--"},
    }
    for kind, style in styles.items():
        if kind in ceilings:
            roofs.append((f"{name} {kind} ({ceilings_label(ceilings[kind])})", ceilings[kind], style))
    reference_styles = (
        {"color": "#8c8c8c", "lw": 1.2, "ls": "-."},
        {"color": "#8c8c8c", "lw": 1.2, "ls": ":"},
    )
    for key, style in zip(REFERENCE_ROOF_GPUS, reference_styles, strict=True):
        reference = hardware.get_gpu(key)
        if gpu is not None and reference.key == gpu.key:
            continue
        reference_ceilings = hardware.datasheet_ceilings(reference, run_dtype(run))
        roofs.append(
            (f"{reference.name} datasheet ({ceilings_label(reference_ceilings)})", reference_ceilings, style)
        )
    return roofs


@_styled
def plot_roofline(run: Run) -> Figure:
    """Achieved TFLOP/s vs arithmetic intensity (FLOP/byte, both log) of every measured row (TFLA Fig. 19).

    Roofs min(alpha, beta * I): the run GPU's datasheet (solid) and measured (dashed) ceilings, H100 and
    A100 datasheet roofs in grey. Colour says the kernel family, the marker the kernel; forward points are
    filled, forward+backward ones hollow. Points of chunk sweeps are joined and labelled with their
    smallest and largest chunk size. A CPU-interpreter run gets no roofs (GPU ceilings say nothing about
    CPU-interpreter timings, which lie decades below them): its points are drawn in MFLOP/s on axes fitted
    to them.
    """
    points = run.measured.dropna(subset=["intensity", "tflops"])
    points = points[(points["intensity"] > 0) & (points["tflops"] > 0)]
    if points.empty:
        raise NoDataError(
            "no measured row has model FLOPs and bytes (intensity and tflops columns are empty)"
        )
    on_cpu = on_cpu_interpreter(run.table)
    unit, per_tflops = ("MFLOP/s", 1e6) if on_cpu else ("TFLOP/s", 1.0)
    points = points.assign(rate=points["tflops"] * per_tflops)
    fig, panels, axes = _figure(1, width=10.0, height=5.2)
    ax = axes[0][0]
    if on_cpu:
        ax.text(0.01, 0.98, "CPU-interpreter timings: GPU roofs do not apply and are not drawn",
                transform=ax.transAxes, ha="left", va="top", fontsize=8, color="#777777")
    else:
        _draw_roofs(ax, _roofs(run), points["intensity"])
    labelled = points.assign(_label=points.apply(config_label, axis=1, with_chunk=False))
    styles = series_styles(zip(labelled["family"], labelled["_label"], strict=True), run.table)
    order = {label: rank for rank, label in enumerate(styles)}
    groups = sorted(labelled.groupby(["_label", "mode"], sort=True), key=lambda item: order[item[0][0]])
    for (label, mode), group in groups:
        color, marker = styles[label]["color"], styles[label]["marker"]
        ax.scatter(group["intensity"], group["rate"], marker=marker, s=30, linewidths=0.9, zorder=3,
                   facecolors=color if mode == "fwd" else "none", edgecolors=color, label=label)
    for sweep in chunk_sweeps(run):
        style = styles.get(config_label(sweep.rows.iloc[0], with_chunk=False))
        if style is not None:
            _draw_roofline_sweep(ax, sweep, style["color"], per_tflops, label_chunks=not on_cpu)
    if on_cpu:
        _log10_axis(ax, "x")
    else:
        ax.set_xscale("log")
    _log10_axis(ax, "y")
    ax.set_xlabel("arithmetic intensity (FLOP/byte, model FLOPs / model bytes)")
    ax.set_ylabel(f"achieved {unit} (model FLOPs / median time)")
    proxies = [
        Line2D([], [], ls="none", marker="o", color="#555555", mfc="#555555" if mode == "fwd" else "none",
               label=MODE_TITLES[mode])
        for mode in modes_of(points)
    ]
    title = "kernel  heads×d_qk/d_v" if on_cpu else "roofs min(α, β·I) · kernel  heads×d_qk/d_v"
    _shared_legend(panels, [ax], title, proxies)
    fig.suptitle(f"Roofline — {run_caption(run)}" + (" (no roofs: CPU interpreter)" if on_cpu else ""))
    return fig


def _draw_roofs(ax: Axes, roofs: list[tuple[str, object, dict]], intensities: pd.Series) -> None:
    """The roofs over the points' intensities and the roofs' ridges, a factor 4 beyond both ends."""
    from tflabench.analysis import roofline

    ridges = [ceilings.ridge for _, ceilings, _ in roofs]
    grid = np.geomspace(min([intensities.min(), *ridges]) / 4, max([intensities.max(), *ridges]) * 4, 400)
    for label, ceilings, style in roofs:
        attainable = [roofline.attainable_flops(ceilings, intensity) / 1e12 for intensity in grid]
        ax.plot(grid, attainable, label=label, **style)


def _draw_roofline_sweep(ax: Axes, sweep: ChunkSweep, color, per_tflops: float = 1.0,
                         label_chunks: bool = True) -> None:
    """Join a chunk sweep's points in chunk order (rates in units of 1/per_tflops TFLOP/s) and label its
    smallest and largest chunk size."""
    rows = sweep.rows.dropna(subset=["intensity", "tflops"])
    if len(rows) < 2:
        return
    rates = rows["tflops"] * per_tflops
    ax.plot(rows["intensity"], rates, color=color, lw=0.8, alpha=0.6, zorder=2)
    if not label_chunks:
        return
    for index in (0, -1):
        row = rows.iloc[index]
        ax.annotate(
            f"L={int(row['chunk_size'])}",
            (row["intensity"], rates.iloc[index]),
            xytext=(4, -10),
            textcoords="offset points",
            fontsize=6.5,
            color=color,
        )


@_styled
def plot_optimal_chunk(run: Run) -> Figure:
    """Chunk size vs head dim d_v (log2 both), one panel per qk ratio p = d_qk/d_v (TFLA Figs. 21-22).

    Curves: runtime-optimal L* (Eq. 121, mLSTMsig forward, 4-byte states, F_c = 0.5) per GPU datasheet
    and for the run's measured ceilings, the FLOP-optimal L (Eq. 111), and per GPU with a building-block
    calibration the structural model's best chunk size (`structural_optimal_chunks`, squares); points:
    measured optima of the run's mLSTM chunk sweeps.
    """
    from tflabench.analysis import hardware, optimal_chunk

    optima = chunk_optima(run)
    ratios = sorted({0.5, 1.0} | {round(o.sweep.head_dim_qk / o.sweep.head_dim_v, 3) for o in optima})
    head_dims = np.geomspace(32, 1024, 41)
    # datasheet curves thinner in list order, so that nearly equal ones (H100, B200) both stay visible
    curves = [
        (f"{gpu.name} (I={c.ridge:.0f} FLOP/B)", c, {"lw": 2.6 - 0.3 * index})
        for index, (gpu, c) in enumerate(_datasheet_gpus(hardware))
    ]
    measured = run_ceilings(run).get("measured")
    if measured is not None:
        gpu = run_gpu(run)
        label = f"{gpu.name if gpu else 'run GPU'} measured (I={measured.ridge:.0f} FLOP/B)"
        curves.append((label, measured, {"color": "black", "ls": "--"}))
    colors = kernel_colors(run.table)
    fig, panels, axes = _figure(len(ratios), sharey=True)
    for ax, ratio in zip(axes[0], ratios, strict=True):
        for label, ceilings, style in curves:
            chunks = [
                optimal_chunk.runtime_optimal_chunk("sig", ceilings, d, ratio, STATE_BYTES, CAUSAL_FACTOR)
                for d in head_dims
            ]
            ax.plot(head_dims, chunks, label=label, **style)
        flop_optimal = [optimal_chunk.flop_optimal_chunk(d, ratio, CAUSAL_FACTOR) for d in head_dims]
        ax.plot(
            head_dims, flop_optimal, color="#555555", ls=":", lw=2, label="FLOP-optimal (Eq. 111, any GPU)"
        )
        for gpu_key, style in zip(STRUCTURAL_GPUS, ({"color": "#d62728"}, {"color": "#9467bd"}), strict=True):
            dims, best = structural_optimal_chunks(gpu_key, ratio)
            if dims:
                ax.plot(dims, best, marker="s", ms=5, lw=1.6, drawstyle="steps-mid", **style,
                        label=f"{gpu_key} structural model L* (xl_chunk fwd, calibration)")
        panel_optima = [o for o in optima if round(o.sweep.head_dim_qk / o.sweep.head_dim_v, 3) == ratio]
        for optimum, head_dim in zip(panel_optima, _dodged_head_dims(panel_optima), strict=True):
            sweep = optimum.sweep
            ax.plot(
                head_dim,
                optimum.measured_chunk,
                ls="none",
                marker=MODE_MARKERS[sweep.mode],
                ms=8,
                color=colors[sweep.kernel],
                mec="black",
                zorder=4,
                label=f"measured optimum: {sweep.kernel} ({sweep.mode})",
            )
        ax.set_title(f"p = d_qk / d_v = {ratio:g}")
        ax.set_xlabel("head dim d_v")
        ax.set_ylabel("chunk size L")
        _log2_axis(ax, "x", [32, 64, 128, 256, 512, 1024])
        _log2_axis(ax, "y", [4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    _shared_legend(panels, axes[0], "runtime-optimal L* (Eq. 121)")
    fig.suptitle("Optimal chunk size vs head dim — mLSTMsig forward, 4-byte states, F_c = 0.5")
    return fig


def structural_optimal_chunks(gpu_key: str, ratio: float) -> tuple[list[int], list[int]]:
    """(head dims d_v, the structural model's best chunk size of our mLSTMsig xl_chunk forward) at
    d_qk = ratio * d_v for d_v in `STRUCTURAL_HEAD_DIMS` on a calibrated GPU: B = 8, T = 8192 and
    4096 / d_v heads (an embedding of 4096, as the tfla-grid preset). Empty when the GPU has no
    calibration."""
    from tflabench.analysis import structural
    from tflabench.errors import InputError

    try:
        rates = structural.load_rates(gpu_key)
    except InputError:
        return [], []
    dims, best = [], []
    for head_dim_v in STRUCTURAL_HEAD_DIMS:
        head_dim_qk = int(ratio * head_dim_v)
        if head_dim_qk < 16 or head_dim_qk % 16:
            continue
        problem = structural.Problem(8, 8192, max(1, 4096 // head_dim_v), head_dim_qk, head_dim_v)
        fastest = structural.predict_all(problem, rates, ("xl_chunk",))[0]
        dims.append(head_dim_v)
        best.append(fastest.chunk)
    return dims, best


def _dodged_head_dims(optima: list[ChunkOptimum]) -> list[float]:
    """x positions of measured optima: points at the same (d_v, L) spread by a few percent around d_v."""
    groups: dict[tuple[int, int], list[int]] = {}
    for index, optimum in enumerate(optima):
        groups.setdefault((optimum.sweep.head_dim_v, optimum.measured_chunk), []).append(index)
    positions = [0.0] * len(optima)
    for (head_dim, _), members in groups.items():
        for rank, index in enumerate(members):
            positions[index] = head_dim * 2 ** (0.07 * (rank - (len(members) - 1) / 2))
    return positions


def _datasheet_gpus(hardware) -> list[tuple[object, object]]:
    gpus = [hardware.get_gpu(key) for key in CHUNK_FIGURE_GPUS]
    return [(gpu, hardware.datasheet_ceilings(gpu, "bfloat16")) for gpu in gpus]


@_styled
def plot_model_vs_measured(run: Run) -> Figure:
    """Measured vs modelled runtime (ms, log) over chunk size (log2) per chunk sweep; one column per mode.

    Model: the additive form of Eq. 116, F/alpha + B/beta (dashed), and the overlap bound
    max(F/alpha, B/beta) (dotted), with each row's model FLOPs and bytes and the run's measured ceilings
    (datasheet when none were measured); the structural model (dash-dot, docs/performance-model.md) where
    the run's GPU has a building-block calibration. The lower panels show measured / additive model.
    """
    from tflabench.analysis import model_check, models, roofline

    sweeps = [s for s in chunk_sweeps(run) if s.rows[["flops", "bytes"]].notna().all(axis=None)]
    if not sweeps:
        raise NoDataError(
            "no kernel configuration was measured at two or more chunk sizes with model FLOPs/bytes"
        )
    ceilings = model_ceilings(run)
    if ceilings is None:
        raise NoDataError("no GPU ceilings known for this run's device: the runtime model needs them")
    colors = kernel_colors(run.table)
    structural = model_check.predicted_ms(run)
    modes = [mode for mode in MODES if any(sweep.mode == mode for sweep in sweeps)]
    fig, panels, axes = _figure(
        len(modes), nrows=2, height=PANEL_SIZE[1] * 1.45, sharex="col", gridspec_kw={"height_ratios": (3, 1)}
    )
    for column, mode in enumerate(modes):
        top, bottom = axes[0][column], axes[1][column]
        for sweep in (s for s in sweeps if s.mode == mode):
            rows, color = sweep.rows, colors[sweep.kernel]
            costs = [models.Cost(flops=row.flops, bytes=row.bytes) for row in rows.itertuples()]
            additive = np.array([roofline.runtime_additive(cost, ceilings) * 1e3 for cost in costs])
            overlap = np.array([roofline.runtime_overlap(cost, ceilings) * 1e3 for cost in costs])
            top.plot(rows["chunk_size"], rows["time_ms"], marker="o", color=color, label=sweep.label)
            top.plot(rows["chunk_size"], additive, ls="--", color=color)
            top.plot(rows["chunk_size"], overlap, ls=":", color=color)
            keys = [(sweep.kernel, sweep.batch, sweep.seq_len, sweep.heads, sweep.head_dim_qk,
                     sweep.head_dim_v, sweep.mode, int(chunk)) for chunk in rows["chunk_size"]]
            if all(key in structural for key in keys):
                top.plot(rows["chunk_size"], [structural[key] for key in keys], ls="-.", color=color)
            bottom.plot(rows["chunk_size"], rows["time_ms"] / additive, marker="o", color=color)
        top.set_title(MODE_TITLES[mode])
        top.set_ylabel("runtime (ms)")
        _log10_axis(top, "y")
        bottom.axhline(1.0, color="#777777", lw=1)
        bottom.set_ylabel("measured / model")
        bottom.set_xlabel("chunk size L")
        _log2_axis(bottom, "x", pd.concat([s.rows["chunk_size"] for s in sweeps]))
    proxies = [
        Line2D([], [], color="black", marker="o", label="measured (median)"),
        Line2D([], [], color="black", ls="--", label="model F/α + B/β (additive, Eq. 116 form)"),
        Line2D([], [], color="black", ls=":", label="model max(F/α, B/β) (overlap bound)"),
        *([Line2D([], [], color="black", ls="-.", label="structural model (calibrated building blocks)")]
          if structural else []),
    ]
    _shared_legend(panels, axes[0], "kernel   heads×d_qk/d_v   T, batch", proxies)
    fig.suptitle(f"Runtime model vs measurement — ceilings: {ceilings.source} ({ceilings_label(ceilings)})")
    return fig


# ------------------------------------------------------------------------------------------- render


@dataclass(frozen=True)
class PlotKind:
    name: str
    stem: str
    title: str
    draw: Callable[[Run], Figure]


PLOT_KINDS = {
    kind.name: kind
    for kind in (
        PlotKind(
            "runtime", "runtime_vs_seqlen", "Runtime vs sequence length (TFLA Fig. 4)", plot_runtime_vs_seqlen
        ),
        PlotKind(
            "headdim", "runtime_vs_headdim", "Runtime vs head dim (TFLA Fig. 14)", plot_runtime_vs_headdim
        ),
        PlotKind(
            "memory",
            "runtime_vs_memory",
            "Runtime vs peak memory across chunk sizes (TFLA Fig. 5)",
            plot_runtime_vs_memory,
        ),
        PlotKind("roofline", "roofline", "Roofline (TFLA Fig. 19)", plot_roofline),
        PlotKind(
            "optimal-chunk",
            "optimal_chunk",
            "Optimal chunk size vs head dim (TFLA Figs. 21-22)",
            plot_optimal_chunk,
        ),
        PlotKind(
            "model",
            "model_vs_measured",
            "Runtime model vs measurement over chunk sizes",
            plot_model_vs_measured,
        ),
    )
}


@dataclass
class Rendered:
    """Files written per plot kind, and the kinds not drawn with the reason."""

    files: dict[str, list[Path]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


def save_figure(fig: Figure, out_dir: Path, stem: str, formats: Iterable[str]) -> list[Path]:
    """Write ``<out_dir>/<stem>.<format>`` for each format (png, svg) and return the paths. PNGs are stored
    with a palette of 256 colors (`palette_png`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    with matplotlib.rc_context(STYLE):
        for fmt in formats:
            path = out_dir / f"{stem}.{fmt}"
            metadata = {"Date": None} if fmt == "svg" else {}
            fig.savefig(path, format=fmt, dpi=SAVE_DPI, bbox_inches="tight", metadata=metadata)
            if fmt == "png":
                palette_png(path)
            paths.append(path)
    return paths


def palette_png(path: Path) -> None:
    """Rewrite a PNG with a palette of 256 colors (median cut, no dithering): the line plots keep their
    look at about a third of the bytes of RGBA (results/ holds hundreds of them)."""
    from PIL import Image

    with Image.open(path) as image:
        palette = image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT,
                                                dither=Image.Dither.NONE)
    palette.save(path, optimize=True)


def render(run: Run, kinds: Iterable[str], out_dir: Path, formats: Iterable[str] = DEFAULT_FORMATS,
           strict: bool = False) -> Rendered:
    """Draw and save each plot kind; a kind without data is skipped with its reason (raised if strict),
    and its files of an earlier rendering in ``out_dir`` are removed (they would show other data)."""
    rendered = Rendered()
    formats = tuple(formats)
    for name in kinds:
        kind = PLOT_KINDS[name]
        try:
            fig = kind.draw(run)
        except NoDataError as exc:
            if strict:
                raise NoDataError(f"plot {name}: {exc}") from None
            rendered.skipped[name] = str(exc)
            for fmt in PLOT_FORMATS:
                (Path(out_dir) / f"{kind.stem}.{fmt}").unlink(missing_ok=True)
            continue
        rendered.files[name] = save_figure(fig, Path(out_dir), kind.stem, formats)
    return rendered
