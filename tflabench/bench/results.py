"""Results of a sweep run under ``<out>/<run-name>/``.

* ``results.csv``: `schema.COLUMNS`, one row per (kernel, point), appended, flushed and fsynced row by
  row, so a killed sweep loses at most the point that was running; a half-written last line is cut
  off when the file is opened again. ``--resume`` skips the (kernel, point) keys already present.
* ``meta.json``: provenance (GPU, driver, CUDA, torch, triton and peer versions, git commit and dirty
  flag, command line, ceilings, the sweep itself, start/finish times and every resume).
* ``logs/<kernel>.log``: stderr of the kernel's worker processes (compiler messages, tracebacks).

Derived columns (`tflabench.bench.derived`) are computed as rows are written and recomputed by `rederive`.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import shutil
from collections import Counter, defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tflabench.bench.derived import DERIVED_COLUMNS, Derivation
from tflabench.bench.registry import KernelSpec
from tflabench.core import SweepPoint
from tflabench.errors import InputError
from tflabench.provenance import command_line, git_state, software_versions
from tflabench.schema import COLUMNS, MAX_SPREAD, gpu_row_spread, known_header, launch_bound

RESULTS_FILE = "results.csv"
META_FILE = "meta.json"
LOG_DIR = "logs"


def now_iso() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


# ----------------------------------------------------------------------------------------------- table


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _cut_partial_last_line(path: Path) -> None:
    """Remove a last line without newline (the process was killed while writing it)."""
    with open(path, "rb+") as handle:
        data = handle.read()
        if data and not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)


class ResultsWriter:
    """Appends rows to ``results.csv``; every row is flushed and fsynced before `write` returns."""

    def __init__(self, path: Path) -> None:
        if path.exists():
            _cut_partial_last_line(path)
            _check_header(path)
        is_new = not path.exists() or path.stat().st_size == 0
        self._file = open(path, "a", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=COLUMNS, lineterminator="\n")
        if is_new:
            self._writer.writeheader()
            self._sync()

    def write(self, row: dict[str, Any]) -> None:
        self._writer.writerow({column: _cell(row.get(column)) for column in COLUMNS})
        self._sync()

    def _sync(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _check_header(path: Path) -> None:
    """A table of today's columns is continued; one of an earlier version's (`schema.known_header`) is
    rewritten first with the later columns appended, empty; any other refused."""
    with open(path, newline="") as handle:
        header = next(csv.reader(handle), None)
    if header is None or tuple(header) == COLUMNS:
        return
    if known_header(header):
        _write_table(path, read_rows(path))
        return
    raise InputError(f"{path} has other columns than this version writes; start a new --run-name")


def read_rows(path: Path) -> list[dict[str, str]]:
    """All complete rows of a results.csv (empty list if it does not exist)."""
    if not path.exists():
        return []
    with open(path, newline="") as handle:
        text = handle.read()
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines = lines[:-1]
    return list(csv.DictReader(lines))


def point_from_row(row: dict[str, str]) -> SweepPoint:
    """The sweep point of a row (its tiling from the row's params)."""
    return SweepPoint(
        batch=int(row["batch"]), seq_len=int(row["seq_len"]), heads=int(row["heads"]),
        head_dim_qk=int(row["head_dim_qk"]), head_dim_v=int(row["head_dim_v"]),
        chunk_size=int(row["chunk_size"]) if row["chunk_size"] else None,
        dtype=row["dtype"], mode=row["mode"], tiling=row_params(row).get("tiling"),
    )


def row_params(row: dict[str, str]) -> dict[str, Any]:
    """A row's params column as a dict (empty when the column is)."""
    return json.loads(row["params"]) if row.get("params") else {}


def finished_keys(path: Path) -> set[tuple[str, str]]:
    """(kernel, point key) of every row already written, whatever its status."""
    return set(row_statuses(path))


def row_statuses(path: Path) -> dict[tuple[str, str], str]:
    """(kernel, point key) -> status of every row already written (the last row of a key wins)."""
    return {(row["kernel"], point_from_row(row).key()): row["status"] for row in read_rows(path)}


def make_row(*, run: str, kernel: KernelSpec, version: str | None, point: SweepPoint, device: str, gpu: str,
             measured: dict[str, Any], derived: dict[str, Any]) -> dict[str, Any]:
    """One results-table row: identity, point, measured and derived columns (the reason on one line);
    params: the kernel's, with those the measurement decided for this point (``measured["point_params"]``)
    and the point's tiling, if it has one."""
    measured = dict(measured)
    params = {**kernel.params, **measured.pop("point_params", {})}
    columns = asdict(point)
    tiling = columns.pop("tiling")
    if tiling is not None:
        params["tiling"] = tiling
    return {
        "run": run, "kernel": kernel.name, "family": kernel.family, "version": version,
        "device": device, "gpu": gpu,
        **columns,
        **measured, **derived,
        "reason": " ".join(str(measured.get("reason") or "").split()),
        "params": json.dumps(params, sort_keys=True, default=str) if params else "",
        "timestamp": now_iso(),
    }


def rederive(run_dir: Path, kernels: dict[str, KernelSpec]) -> int:
    """Recompute the derived columns of every measured row of ``run_dir`` with the current cost models and
    ceilings (after a model was corrected), and record the kernel's current ``cost_params`` in the row's
    params; the measured columns are not touched, meta.json's ceilings become the ones used. The previous
    table is kept next to it as ``results.<time>.before-rederive.csv`` and meta.json records the
    recomputation (nothing is written when no row changes). Rows of kernels that are no longer registered
    stay as they are. Returns the number of rows whose derived columns changed."""
    path = run_dir / RESULTS_FILE
    meta_path = run_dir / META_FILE
    if not path.exists() or not meta_path.exists():
        raise InputError(f"{str(run_dir)!r} is not a run directory (no {RESULTS_FILE} and {META_FILE})")
    meta = read_meta(meta_path)
    derivations: dict[str, Derivation] = {}
    rows, changed = read_rows(path), 0
    for row in rows:
        kernel = kernels.get(row["kernel"])
        if kernel is None or row["status"] != "ok":
            continue
        point = point_from_row(row)
        derivation = derivations.setdefault(row["gpu"], Derivation(row["gpu"]))
        derived = derivation.columns(kernel, point, float(row["time_ms"]) if row["time_ms"] else None)
        new = {column: _cell(derived.get(column)) for column in DERIVED_COLUMNS}
        new["params"] = _with_cost_params(row["params"], kernel)
        if any(_differs(row[column], value) for column, value in new.items()):
            row.update(new)
            changed += 1
    if not changed:
        return 0
    backup = path.with_name(f"results.{_stamp()}.before-rederive.csv")
    shutil.copyfile(path, backup)
    _write_table(path, rows)
    dtypes = tuple(sorted({row["dtype"] for row in rows}))
    if len(derivations) == 1:
        meta["ceilings"] = ceilings_record(next(iter(derivations.values())), dtypes)
    for gpu, derivation in derivations.items():
        if gpu in meta.get("gpus", {}):
            meta["gpus"][gpu]["ceilings"] = ceilings_record(derivation, dtypes)
    meta.setdefault("rederived", []).append({"at": now_iso(), "command": command_line(), "git": git_state(),
                                             "changed_rows": changed, "previous_table": backup.name})
    write_meta(meta_path, meta)
    return changed


def set_aside(path: Path, statuses: set[str], keys: set[tuple[str, str]]) -> tuple[int, str | None]:
    """Move the rows of ``statuses`` whose (kernel, point key) is in ``keys`` from the table ``path`` into
    ``results.<time>.retried.csv`` beside it, so that a resumed sweep measures them again and nothing is
    lost. Returns (rows moved, the file's name or None when none was)."""
    rows = read_rows(path)
    def retried(row: dict[str, str]) -> bool:
        return row["status"] in statuses and (row["kernel"], point_from_row(row).key()) in keys

    moved = [row for row in rows if retried(row)]
    if not moved:
        return 0, None
    kept = [row for row in rows if not retried(row)]
    aside = path.with_name(f"results.{_stamp()}.retried.csv")
    _write_table(aside, moved)
    _write_table(path, kept)
    return len(moved), aside.name


def _stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _write_table(path: Path, rows: list[dict[str, str]]) -> None:
    """Write a whole table atomically (a temporary file replaces ``path``)."""
    temporary = path.with_suffix(".csv.tmp")
    with open(temporary, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({column: row.get(column, "") for column in COLUMNS} for row in rows)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def _with_cost_params(params: str, kernel: KernelSpec) -> str:
    """A row's params (JSON) with the kernel's current ``cost_params``, the inputs of its derived columns."""
    values = json.loads(params) if params else {}
    if "cost_params" in kernel.params:
        values["cost_params"] = kernel.params["cost_params"]
    else:
        values.pop("cost_params", None)
    return json.dumps(values, sort_keys=True, default=str) if values else params


def _differs(old: str, new: str) -> bool:
    """Whether two cells differ beyond the rounding of a time re-read from the table (6 digits)."""
    try:
        old_value, new_value = float(old), float(new)
    except ValueError:
        return old != new
    return abs(old_value - new_value) > 1e-4 * max(abs(old_value), abs(new_value))


# ----------------------------------------------------------------------------------------------- meta


def ceilings_record(derivation: Derivation, dtypes: tuple[str, ...]) -> dict[str, Any]:
    record: dict[str, Any] = {"gpu_key": derivation.gpu.key if derivation.gpu else None}
    for dtype in dtypes:
        datasheet, measured = derivation.ceilings(dtype)
        record[dtype] = {
            "datasheet": vars(datasheet) if datasheet else None,
            "measured": vars(measured) if measured else None,
            "runtime_model_uses": "measured" if measured else "datasheet" if datasheet else None,
        }
    return record


def new_meta(*, run: str, device: str, gpu_info: dict[str, str], kernels: list[KernelSpec],
             derivation: Derivation, sweep: dict[str, Any], dtypes: tuple[str, ...]) -> dict[str, Any]:
    """The provenance record of a new run."""
    return {
        "run": run,
        "started": now_iso(),
        "finished": None,
        "command": command_line(),
        "device": device,
        "gpu": gpu_info,
        "host": {"platform": platform.platform(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "versions": software_versions([kernel.package for kernel in kernels if kernel.package]),
        "git": git_state(),
        "ceilings": ceilings_record(derivation, dtypes),
        "kernels": sorted(kernel.name for kernel in kernels),
        "sweep": sweep,
        "resumed": [],
    }


def resume_record(*, gpu_info: dict[str, str], kernels: list[KernelSpec]) -> dict[str, Any]:
    """What a resumed sweep appends to its run's ``resumed``: when, the command, and the commit, software and
    GPU (serial, UUID) the rows it adds were measured with, which may be another machine's than the run's."""
    return {"at": now_iso(), "command": command_line(), "git": git_state(), "gpu": gpu_info,
            "versions": software_versions([kernel.package for kernel in kernels if kernel.package])}


def write_meta(path: Path, meta: dict[str, Any]) -> None:
    """Write atomically (a killed sweep never leaves a truncated meta.json)."""
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    os.replace(temporary, path)


def read_meta(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from None


# ----------------------------------------------------------------------------------------------- summary


def status_counts(rows: list[dict[str, str]]) -> dict[str, Counter]:
    """Per kernel, how many rows have each status."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        counts[row["kernel"]][row["status"]] += 1
    return dict(counts)


def unsteady_rows(rows: list[dict[str, str]]) -> list[str]:
    """"kernel point" of the measured GPU rows whose interquartile range is above `MAX_SPREAD` of the median
    (`schema.gpu_row_spread`)."""
    return [f"{row['kernel']} {point_from_row(row).key()}" for row in rows
            if (gpu_row_spread(row) or 0.0) > MAX_SPREAD]


def launch_bound_rows(rows: list[dict[str, str]]) -> list[str]:
    """"kernel point" of the measured GPU rows near the launcher's pace (`schema.launch_bound`)."""
    return [f"{row['kernel']} {point_from_row(row).key()}" for row in rows if launch_bound(row)]


RankKey = tuple[str, str, int, int, int]


def rankings(rows: list[dict[str, str]]) -> dict[RankKey, list[tuple[float, str, str]]]:
    """Measured rows grouped by problem size (mode, dtype, batch, seq_len, embedding = heads x head_dim_v),
    as (time_ms, kernel, shape label), fastest first. Only status ok is ranked: a kernel that failed its
    reference check never is."""
    groups: dict[RankKey, list[tuple[float, str, str]]] = defaultdict(list)
    for row in rows:
        if row["status"] != "ok":
            continue
        point = point_from_row(row)
        key = (point.mode, point.dtype, point.batch, point.seq_len, point.heads * point.head_dim_v)
        label = f"{point.heads}x{point.head_dim_qk}/{point.head_dim_v}"
        if point.chunk_size:
            label += f" L{point.chunk_size}"
        if point.tiling:
            label += f" tiling {point.tiling}"
        groups[key].append((float(row["time_ms"]), row["kernel"], label))
    return {key: sorted(entries) for key, entries in sorted(groups.items())}
