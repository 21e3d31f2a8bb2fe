"""What a tflabench run is and how to read it.

A run is one benchmark sweep's output folder ``results/<run>/``: ``results.csv``, one row per kernel x
sweep point with the columns `tflabench.schema.COLUMNS` (rows with status ``ok`` carry the timings,
the others a reason), and ``meta.json``, the run's provenance written by `tflabench.bench.results`
(command, GPU, versions, git commit, the ceilings the sweep used; optional here).

`load_run` reads and validates both into a `Run`. The rest of the module derives what the plots and the
report show from it: chunk sweeps with their measured and theoretical optimal chunk size, the run GPU's
ceilings, the rows that were not measured, and the labels of kernel configurations.

The analysis layer (hardware DB, optimal chunk size) is imported inside the functions that need it.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from tflabench.core import DTYPE_BYTES, MODES, STATE_BYTES_OF_OPERANDS, resolved_state_bytes
from tflabench.errors import InputError
from tflabench.inputs import path_kind
from tflabench.schema import COLUMNS, LATER_COLUMNS, STATUSES

#: State bytes (the paper's fp32, for kernels that record none) and causal factor F_c of the theoretical
#: optimal chunk size (Eq. 121).
STATE_BYTES = 4
CAUSAL_FACTOR = 0.5

TEXT_COLUMNS = tuple("run kernel family version device gpu dtype mode status reason params timestamp".split())
SWEEP_KEYS = ("kernel", "family", "batch", "seq_len", "heads", "head_dim_qk", "head_dim_v", "dtype", "mode")


# ---------------------------------------------------------------------------------------------- run input


@dataclass(frozen=True, eq=False)
class Run:
    """One benchmark run: its results table (schema.COLUMNS, one row per kernel x point) and meta.json.

    ``directory`` is where results.csv lives; the report and the default plot folder go there.
    """

    name: str
    directory: Path
    table: pd.DataFrame
    meta: dict

    @property
    def measured(self) -> pd.DataFrame:
        """Rows with status ok and a positive median time: the only rows that are ranked or plotted."""
        table = self.table
        return table[(table["status"] == "ok") & (table["time_ms"] > 0)]


def gpu_names(table: pd.DataFrame) -> list[str]:
    """The GPUs of a table's rows (its gpu column; "" for rows measured without one), first seen first."""
    return list(dict.fromkeys(table["gpu"]))


def runs_by_gpu(run: Run) -> list[tuple[str, Run]]:
    """The run split by GPU: (GPU name, the run of that GPU's rows). Each part's meta.json view has that
    GPU's facts and ceilings (meta.json's ``gpus``, written by sweeps of several GPUs and by ``merge``)
    as its ``gpu`` and ``ceilings``; a run of one GPU is the one part."""
    names = gpu_names(run.table)
    if len(names) == 1:
        return [(names[0], run)]
    recorded = run.meta.get("gpus") if isinstance(run.meta.get("gpus"), dict) else {}
    parts = []
    for name in names:
        entry = recorded.get(name) if isinstance(recorded.get(name), dict) else {}
        meta = {key: value for key, value in run.meta.items() if key not in ("gpu", "ceilings")}
        meta |= {"gpu": entry.get("info", {}), "ceilings": entry.get("ceilings", {})}
        table = run.table[run.table["gpu"] == name].reset_index(drop=True)
        parts.append((name, replace(run, table=table, meta=meta)))
    return parts


#: folders under results/ whose runs are scratch work, not committed measurements
SCRATCH_DIR = "_scratch"


def committed_run_dirs(results: Path) -> list[Path]:
    """The run directories under ``results`` (every folder with a meta.json but those in `SCRATCH_DIR`),
    sorted."""
    return sorted(meta.parent for meta in results.rglob("meta.json") if SCRATCH_DIR not in meta.parts)


def load_run(path: str | Path) -> Run:
    """Read ``results/<run>/`` (or a results CSV, with the meta.json next to it if there is one).

    Raises InputError for a missing path, an empty table, missing columns or unknown status values.
    """
    path = Path(path)
    kind = path_kind(path, "run")
    if kind == "dir":
        csv_path = path / "results.csv"
    elif kind == "file" and path.suffix == ".csv":
        csv_path = path
    else:
        raise InputError(f"{path}: no such run directory or results CSV")
    if path_kind(csv_path, "run") != "file":
        raise InputError(f"{path}: no results.csv in this directory (expected results/<run>/results.csv)")
    table = _read_table(csv_path)
    meta = _read_meta(csv_path.parent / "meta.json")
    name = str(meta.get("run") or table["run"].iloc[0] or csv_path.parent.name)
    return Run(name=name, directory=csv_path.parent, table=table, meta=meta)


def _read_table(csv_path: Path) -> pd.DataFrame:
    """The table with text columns as str ("" when empty) and the others numeric (NaN when empty).

    A last line without newline (a sweep still writing, or killed mid-row) is left out.
    """
    text = csv_path.read_text(errors="replace")
    if not text.strip():
        raise InputError(f"{csv_path}: empty file, not a results table")
    if not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1] or text
    try:
        table = pd.read_csv(io.StringIO(text), dtype={column: str for column in TEXT_COLUMNS})
    except pd.errors.ParserError as exc:
        raise InputError(f"{csv_path}: not a readable CSV ({str(exc).splitlines()[0]})") from None
    missing = [column for column in COLUMNS if column not in table.columns and column not in LATER_COLUMNS]
    if missing:
        raise InputError(f"{csv_path}: not a results table, missing columns: {', '.join(missing)}")
    for column in LATER_COLUMNS:
        if column not in table.columns:
            table[column] = float("nan")
    if table.empty:
        raise InputError(f"{csv_path}: the results table has no rows")
    for column in COLUMNS:
        if column in TEXT_COLUMNS:
            table[column] = table[column].fillna("").astype(str)
        else:
            table[column] = pd.to_numeric(table[column], errors="coerce")
    unknown = sorted(set(table["status"]) - set(STATUSES))
    if unknown:
        raise InputError(f"{csv_path}: unknown status values {unknown} (known: {', '.join(STATUSES)})")
    return table


def _read_meta(meta_path: Path) -> dict:
    if not meta_path.is_file():
        return {}
    try:
        meta = json.loads(meta_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{meta_path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise InputError(f"{meta_path}: expected a JSON object")
    return meta


def modes_of(table: pd.DataFrame) -> list[str]:
    """Modes present in the table, in MODES order."""
    present = set(table["mode"])
    return [mode for mode in MODES if mode in present]


# ------------------------------------------------------------------------------------------- labels


def dims_label(heads: float, head_dim_qk: float, head_dim_v: float) -> str:
    """``16×128/256`` (heads × d_qk/d_v), or ``32×128`` when d_qk == d_v."""
    heads, head_dim_qk, head_dim_v = int(heads), int(head_dim_qk), int(head_dim_v)
    if head_dim_qk == head_dim_v:
        return f"{heads}×{head_dim_qk}"
    return f"{heads}×{head_dim_qk}/{head_dim_v}"


def config_label(row: pd.Series, with_chunk: bool = True) -> str:
    """Legend label of one row's kernel configuration: kernel, heads × dims and (if any) chunk size."""
    label = f"{row['kernel']}  {dims_label(row['heads'], row['head_dim_qk'], row['head_dim_v'])}"
    if with_chunk and pd.notna(row["chunk_size"]):
        label += f"  L={int(row['chunk_size'])}"
    return label


def count_label(value: float, _position: object = None) -> str:
    """Tick label for token counts and sizes: 512, 2k, 64k."""
    if value >= 1024 and value % 1024 == 0:
        return f"{int(value) // 1024}k"
    return f"{value:g}"


def device_label(table: pd.DataFrame) -> str:
    """The GPU names of the table's gpu column, else its device values (``cpu-interpreter``)."""
    names = dict.fromkeys(name for name in table["gpu"] if name) or dict.fromkeys(
        d for d in table["device"] if d
    )
    return ", ".join(names) or "unknown device"


#: the device column of rows measured on CPU tensors under the Triton interpreter
CPU_INTERPRETER_DEVICE = "cpu-interpreter"


def on_cpu_interpreter(table: pd.DataFrame) -> bool:
    """Whether every row of the table ran under the Triton interpreter on CPU (no GPU, no peak memory)."""
    devices = set(table["device"])
    return devices == {CPU_INTERPRETER_DEVICE}


def ceilings_label(ceilings) -> str:
    return f"{ceilings.flops / 1e12:.0f} TFLOP/s, {ceilings.bandwidth / 1e12:.2f} TB/s"


# ------------------------------------------------------------------------------------- chunk sweeps


@dataclass(frozen=True, eq=False)
class ChunkSweep:
    """Measured rows of one kernel configuration at two or more chunk sizes, sorted by chunk size."""

    kernel: str
    family: str
    batch: int
    seq_len: int
    heads: int
    head_dim_qk: int
    head_dim_v: int
    dtype: str
    mode: str
    rows: pd.DataFrame

    @property
    def label(self) -> str:
        dims = dims_label(self.heads, self.head_dim_qk, self.head_dim_v)
        return f"{self.kernel}  {dims}  T={count_label(self.seq_len)} B={self.batch}"

    @property
    def best(self) -> pd.Series:
        """The measured row with the smallest median time."""
        return self.rows.loc[self.rows["time_ms"].idxmin()]

    @property
    def state_bytes(self) -> int:
        """Bytes per element of the kernel's materialized chunk states, from its recorded cost parameters
        (``state_bytes``: a number, or "operand" for the inputs' dtype); the paper's fp32 without them."""
        params = self.rows["params"].iloc[0] if "params" in self.rows else ""
        try:
            recorded = json.loads(params).get("cost_params", {}).get("state_bytes") if params else None
        except (TypeError, ValueError, AttributeError):
            recorded = None
        if recorded == STATE_BYTES_OF_OPERANDS and self.dtype in DTYPE_BYTES:
            return resolved_state_bytes(recorded, self.dtype)
        return int(recorded) if isinstance(recorded, int | float) else STATE_BYTES


def chunk_sweeps(run: Run) -> list[ChunkSweep]:
    """Every kernel configuration of the run measured at two or more chunk sizes."""
    measured = run.measured[run.measured["chunk_size"].notna()]
    sweeps = []
    for key, rows in measured.groupby(list(SWEEP_KEYS), sort=True):
        rows = rows.sort_values("chunk_size").drop_duplicates("chunk_size")
        if len(rows) < 2:
            continue
        values = dict(zip(SWEEP_KEYS, key, strict=True))
        for name in ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v"):
            values[name] = int(values[name])
        sweeps.append(ChunkSweep(**values, rows=rows))
    return sweeps


# ------------------------------------------------------------------------------------------- ceilings


def run_gpu(run: Run):
    """The hardware-DB GPU the run used, or None (CPU interpreter, or a GPU the DB does not know).

    Looked up from meta.json's ``ceilings.gpu_key``, else from the GPU names of the table's gpu column.
    """
    from tflabench.analysis import hardware

    recorded = run.meta.get("ceilings")
    gpu_key = recorded.get("gpu_key") if isinstance(recorded, dict) else None
    if gpu_key:
        try:
            return hardware.get_gpu(str(gpu_key))
        except InputError:
            pass
    for name in dict.fromkeys(name for name in run.table["gpu"] if name):
        gpu = hardware.gpu_from_device_name(name)
        if gpu is not None:
            return gpu
    return None


def run_dtype(run: Run) -> str:
    """The dtype most rows of the run used."""
    dtypes = run.table["dtype"][run.table["dtype"] != ""]
    return str(dtypes.mode().iloc[0]) if not dtypes.empty else "bfloat16"


def run_ceilings(run: Run) -> dict:
    """The run GPU's ceilings for the run's dtype: ``{"datasheet": Ceilings, "measured": Ceilings}``,
    each only when known.

    meta.json's ``ceilings.<dtype>`` come first (those the sweep used); otherwise the hardware DB entry of
    the run's GPU and, for bfloat16 (the calibration measures a bf16 matmul), its stored calibration.
    """
    from tflabench.analysis import hardware

    dtype = run_dtype(run)
    recorded = run.meta.get("ceilings")
    by_kind = recorded.get(dtype) if isinstance(recorded, dict) else None
    ceilings = {}
    for kind in ("datasheet", "measured"):
        entry = by_kind.get(kind) if isinstance(by_kind, dict) else None
        if isinstance(entry, dict) and entry.get("flops") and entry.get("bandwidth"):
            source = str(entry.get("source") or kind)
            ceilings[kind] = hardware.Ceilings(float(entry["flops"]), float(entry["bandwidth"]), source)
    gpu = run_gpu(run)
    if gpu is not None and "datasheet" not in ceilings:
        ceilings["datasheet"] = hardware.datasheet_ceilings(gpu, dtype)
    if gpu is not None and "measured" not in ceilings and dtype == "bfloat16":
        measured = hardware.load_measured_ceilings(gpu.key)
        if measured is not None:
            ceilings["measured"] = measured
    return ceilings


def model_ceilings(run: Run):
    """Ceilings for the runtime model and the theoretical optimum: measured if known, else datasheet."""
    ceilings = run_ceilings(run)
    return ceilings.get("measured") or ceilings.get("datasheet")


# ------------------------------------------------------------------------------------- chunk optima


@dataclass(frozen=True, eq=False)
class ChunkOptimum:
    """Measured optimum of one chunk sweep next to the theoretical one (mLSTM families only).

    theory_chunk is the continuous L* (Eq. 121; docs/reference/mlstm-math.md#optimal-chunk-size),
    runnable_chunk the chunk size our kernels can run chosen from it (with the analysis layer's reason); both
    None when no ceilings are known. achieved_flops is the best model-FLOP rate of the sweep (FLOP/s, reached
    where the FLOP term dominates, at large L) and achieved_theory_chunk the L* with it in place of the matmul
    ceiling alpha: where theory and measurement disagree, it tells whether the FLOP term is what the model
    misses.
    """

    sweep: ChunkSweep
    measured_chunk: int
    measured_ms: float
    theory_chunk: float | None
    runnable_chunk: int | None
    reason: str
    ceilings: object | None
    achieved_flops: float | None = None
    achieved_theory_chunk: float | None = None

    @property
    def theory_ratio(self) -> float | None:
        """theory L* / measured optimum (> 1: the model asks for larger chunks than the fastest one)."""
        return None if self.theory_chunk is None else self.theory_chunk / self.measured_chunk


def chunk_optima(run: Run, sweeps: Iterable[ChunkSweep] | None = None) -> list[ChunkOptimum]:
    """Measured and theoretical optimal chunk size of every mLSTM chunk sweep of the run."""
    from tflabench.analysis import optimal_chunk
    from tflabench.families.mlstm import MLSTM_VARIANTS

    ceilings = model_ceilings(run)
    optima = []
    for sweep in chunk_sweeps(run) if sweeps is None else sweeps:
        variant = MLSTM_VARIANTS.get(sweep.family)
        if variant is None:
            continue
        best = sweep.best
        theory, runnable, reason = None, None, f"no GPU ceilings known for {device_label(sweep.rows)}"
        if ceilings is not None:
            ratio = sweep.head_dim_qk / sweep.head_dim_v
            theory = optimal_chunk.runtime_optimal_chunk(
                variant,
                ceilings,
                sweep.head_dim_v,
                ratio,
                state_bytes=sweep.state_bytes,
                causal_factor=CAUSAL_FACTOR,
            )
            runnable, reason = optimal_chunk.runnable_chunk(
                variant,
                ceilings,
                sweep.head_dim_v,
                ratio,
                sweep.seq_len,
                state_bytes=sweep.state_bytes,
                causal_factor=CAUSAL_FACTOR,
            )
        achieved, achieved_theory = _achieved_flop_rate(sweep), None
        if ceilings is not None and achieved is not None:
            achieved_ceilings = replace(ceilings, flops=achieved, source="achieved")
            achieved_theory = optimal_chunk.runtime_optimal_chunk(
                variant,
                achieved_ceilings,
                sweep.head_dim_v,
                sweep.head_dim_qk / sweep.head_dim_v,
                state_bytes=sweep.state_bytes,
                causal_factor=CAUSAL_FACTOR,
            )
        optima.append(
            ChunkOptimum(
                sweep, int(best["chunk_size"]), float(best["time_ms"]), theory, runnable, reason, ceilings,
                achieved, achieved_theory,
            )
        )
    return optima


def _achieved_flop_rate(sweep: ChunkSweep) -> float | None:
    """The best model-FLOP rate (FLOP/s) over the sweep's chunk sizes, or None without FLOP columns."""
    rates = pd.to_numeric(sweep.rows["tflops"], errors="coerce").dropna()
    return float(rates.max()) * 1e12 if len(rates) else None


# ------------------------------------------------------------------------------------- not measured


@dataclass(frozen=True)
class NotMeasured:
    """Rows of one kernel configuration that share a status and a reason (everything but ok)."""

    kernel: str
    dims: str
    modes: tuple[str, ...]
    status: str
    reason: str
    seq_lens: tuple[int, ...]
    chunk_sizes: tuple[int, ...]

    def describe(self, max_reason: int | None = None) -> str:
        reason = self.reason or "no reason recorded"
        if max_reason is not None and len(reason) > max_reason:
            reason = reason[: max_reason - 1] + "…"
        where = f"T={','.join(count_label(t) for t in self.seq_lens)}"
        if self.chunk_sizes:
            where += f" L={','.join(str(c) for c in self.chunk_sizes)}"
        return f"{self.kernel} {self.dims} [{', '.join(self.modes)}] {self.status}: {reason} ({where})"


def not_measured(table: pd.DataFrame) -> list[NotMeasured]:
    """Every non-ok row of the table, grouped by kernel configuration, status and reason."""
    rows = table[table["status"] != "ok"]
    groups = rows.groupby(["kernel", "heads", "head_dim_qk", "head_dim_v", "status", "reason"], sort=True)
    entries = []
    for (kernel, heads, head_dim_qk, head_dim_v, status, reason), group in groups:
        modes = tuple(mode for mode in MODES if mode in set(group["mode"]))
        chunks = tuple(sorted({int(c) for c in group["chunk_size"].dropna()}))
        seq_lens = tuple(sorted({int(t) for t in group["seq_len"].dropna()}))
        entries.append(
            NotMeasured(
                kernel, dims_label(heads, head_dim_qk, head_dim_v), modes, status, reason, seq_lens, chunks
            )
        )
    return entries
