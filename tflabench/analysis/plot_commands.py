"""CLI: `tflabench plot` (figures of a run) and `tflabench report` (its Markdown report).

matplotlib and pandas are imported only when one of these commands runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tflabench.errors import InputError
from tflabench.inputs import output_dir

#: Plot kinds in drawing order (the keys of `tflabench.analysis.plots.PLOT_KINDS`).
PLOT_KIND_NAMES = ("runtime", "headdim", "memory", "roofline", "optimal-chunk", "model")
FORMAT_NAMES = ("png", "svg")

RunArgument = Annotated[str, typer.Argument(help="Run directory results/<run> (or its results.csv).")]
KindOption = Annotated[
    list[str] | None,
    typer.Option(
        "--kind",
        "-k",
        help="Plot kind, repeatable or comma-separated: runtime (runtime vs sequence length, Fig. 4), "
        "headdim (runtime vs head dim, Fig. 14), memory (runtime vs peak memory over chunk sizes, Fig. 5), "
        "roofline (Fig. 19), optimal-chunk (optimal chunk size vs head dim, Figs. 21-22), model (runtime "
        "model vs measurement over chunk sizes), or all.",
    ),
]
OutOption = Annotated[
    Path | None, typer.Option("--out", "-o", help="Output folder (default: <run dir>/plots).")
]
ReportOutOption = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Folder of report.md and its plots/ (default: the run directory)."),
]
FormatOption = Annotated[str, typer.Option("--format", "-f", help="Comma-separated: png, svg.")]
BaselineOption = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        "-b",
        help="Kernel the speed-ups are measured against (default: the most-measured softmax attention).",
    ),
]


def parse_kinds(values: list[str]) -> tuple[list[str], bool]:
    """Kinds from ``--kind`` values (repeatable, comma-separated, ``all``; none given means all), and
    whether they were named explicitly (a named kind without data is an error, ``all`` skips it)."""
    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    if not names or "all" in names:
        return list(PLOT_KIND_NAMES), False
    unknown = [name for name in names if name not in PLOT_KIND_NAMES]
    if unknown:
        raise InputError(f"unknown plot kind {unknown[0]!r} (known: {', '.join(PLOT_KIND_NAMES)}, all)")
    return list(dict.fromkeys(names)), True


def parse_formats(value: str) -> list[str]:
    """Formats from ``--format png,svg``."""
    formats = [fmt.strip().lower() for fmt in value.split(",") if fmt.strip()]
    unknown = [fmt for fmt in formats if fmt not in FORMAT_NAMES] or ([] if formats else [value])
    if unknown:
        raise InputError(f"unknown plot format {unknown[0]!r} (known: {', '.join(FORMAT_NAMES)})")
    return list(dict.fromkeys(formats))


def plot_command(
    run: RunArgument, kind: KindOption = None, out: OutOption = None, formats: FormatOption = "png"
) -> None:
    """Draw the TFLA-paper figures of a benchmark run as PNG and/or SVG."""
    kinds, strict = parse_kinds(kind or [])
    chosen_formats = parse_formats(formats)
    from tflabench.analysis import plots, run_data

    loaded = run_data.load_run(run)
    out_dir = output_dir(out or loaded.directory / "plots", "--out")
    rendered = plots.render(loaded, kinds, out_dir, chosen_formats, strict=strict)
    for paths in rendered.files.values():
        for path in paths:
            typer.echo(f"wrote {path}")
    for name, reason in rendered.skipped.items():
        typer.echo(f"skipped {name}: {reason}")


def report_command(run: RunArgument, baseline: BaselineOption = None, out: ReportOutOption = None) -> None:
    """Write report.md of a run (into the run directory, or --out): speed-up tables, the TFLA paper's
    published numbers next to the run's, plots, failures with reasons and provenance."""
    from tflabench.analysis.report import write_report

    typer.echo(f"wrote {write_report(run, baseline, out)}")


def register(app: typer.Typer) -> None:
    app.command("plot")(plot_command)
    app.command("report")(report_command)
