"""`tflabench merge RUN... --out RUN`: several runs (say one made on an H100 and one on an H200 of the same
preset) as one run, whose report and plots are per GPU.

The rows are copied as they are (each keeps its ``run`` and ``gpu``); a (GPU, kernel, point) that two runs
both measured is an error. The merged meta.json lists every source run with its own provenance under
``merged``, and every GPU under ``gpus`` with the facts and ceilings its rows were derived with, as a
sweep of several GPU models writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tflabench.bench.results import (
    META_FILE,
    RESULTS_FILE,
    ResultsWriter,
    now_iso,
    point_from_row,
    read_meta,
    read_rows,
    write_meta,
)
from tflabench.errors import InputError
from tflabench.provenance import command_line
from tflabench.schema import known_header


def merge_runs(sources: list[Path], out: Path) -> int:
    """Write the run ``out`` holding the rows of every source run; returns the number of rows."""
    if len(sources) < 2:
        raise InputError("merge needs two or more runs")
    if (out / RESULTS_FILE).exists():
        raise InputError(f"run {str(out)!r} exists: merge into a new run directory")
    tables = [(source, _rows_of(source)) for source in sources]
    _refuse_shared_points(tables)
    metas = [(source, _meta_of(source)) for source in sources]
    out.mkdir(parents=True, exist_ok=True)
    with ResultsWriter(out / RESULTS_FILE) as writer:
        for _, rows in tables:
            for row in rows:
                writer.write(row)
    write_meta(out / META_FILE, _merged_meta(out.name, metas, tables))
    return sum(len(rows) for _, rows in tables)


def _rows_of(source: Path) -> list[dict[str, str]]:
    path = source / RESULTS_FILE
    if not path.is_file():
        raise InputError(f"{str(source)!r} is not a run directory (no {RESULTS_FILE})")
    rows = read_rows(path)
    if rows and not known_header(rows[0]):
        raise InputError(f"{path} has other columns than this version writes; it cannot be merged")
    return rows


def _meta_of(source: Path) -> dict[str, Any]:
    path = source / META_FILE
    return read_meta(path) if path.is_file() else {}


def _refuse_shared_points(tables: list[tuple[Path, list[dict[str, str]]]]) -> None:
    """InputError when two runs have a row of the same GPU, kernel and point."""
    seen: dict[tuple[str, str, str], Path] = {}
    for source, rows in tables:
        for row in rows:
            key = (row["gpu"], row["kernel"], point_from_row(row).key())
            if key in seen:
                raise InputError(f"{seen[key]} and {source} both have a row of {key[1]} at {key[2]} on "
                                 f"{key[0] or 'no GPU'}: merge runs of different GPUs or points")
            seen[key] = source


def _gpus_of(meta: dict[str, Any], rows: list[dict[str, str]]) -> dict[str, Any]:
    """The GPUs of one source run as meta.json's ``gpus`` records them (a run of one GPU records it in
    ``gpu``, ``device`` and ``ceilings``)."""
    if isinstance(meta.get("gpus"), dict):
        return meta["gpus"]
    entry = {"device": meta.get("device", ""), "info": meta.get("gpu", {}),
             "ceilings": meta.get("ceilings", {})}
    return {name: entry for name in dict.fromkeys(row["gpu"] for row in rows)}


def _merged_meta(name: str, metas: list[tuple[Path, dict[str, Any]]],
                 tables: list[tuple[Path, list[dict[str, str]]]]) -> dict[str, Any]:
    gpus: dict[str, Any] = {}
    for (_, meta), (_, rows) in zip(metas, tables, strict=True):
        for gpu, entry in _gpus_of(meta, rows).items():
            gpus.setdefault(gpu, entry)
    first = metas[0][1]
    finished = all(meta.get("finished") for _, meta in metas)
    return {
        "run": name,
        "started": min((str(meta["started"]) for _, meta in metas if meta.get("started")), default=None),
        "finished": now_iso() if finished else None,
        "command": command_line(),
        "device": first.get("device", ""),
        "gpu": first.get("gpu", {}),
        "ceilings": first.get("ceilings", {}),
        "gpus": gpus,
        "kernels": sorted({row["kernel"] for _, rows in tables for row in rows}),
        "merged": [{"path": str(source), "meta": meta} for source, meta in metas],
        "resumed": [],
    }
