"""The structural model against a measured run (`tflabench model-check`, the report's model column).

Each ``ok`` row of an mLSTM kernel the model covers is predicted at its shape, mode, variant, algorithm and
chunk size (harness kernels ``tflabench.mlstm_<variant>.<algorithm>`` with algorithm xl_chunk, limit_chunk,
fused_chunk or auto, whose row params hold the chosen algorithm and chunk size, and
``mlstm_kernels.mlstm_<variant>.xl_chunk``, modelled as `structural`'s ``reference``), with the tiling
variant the row's params name (``tiling``; the default tilings without one), with the calibration of the
row's GPU. Per group (kernel, tiling, GPU, shape, mode) the predicted best row is compared with the
measured best: a match when it is the same row or its measured time is within `BEST_TOLERANCE` of the
best.

Rows without a tiling ran the default tilings of their version (meta.json ``versions.tflabench_kernels``):
the model takes that version's tilings where `tilings.FORMER_DEFAULTS` reproduces them, today's otherwise
(the check says which: ``tilings``).
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

import pandas as pd

from tflabench.analysis import structural
from tflabench.analysis.run_data import Run, run_gpu, runs_by_gpu
from tflabench.errors import InputError

BEST_TOLERANCE = 0.05
SHAPE_KEYS = ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v", "mode")


@dataclass(frozen=True)
class RowCheck:
    """One measured row with its prediction, and the problem and tiling fields (the row's kernels version's
    defaults with its own tiling, `row_tiling`) it was predicted with."""

    kernel: str
    tiling: str | None
    gpu: str
    group: tuple
    algorithm: str
    chunk: int
    measured_ms: float
    predicted_ms: float
    problem: structural.Problem = field(compare=False)
    fields: dict | None = field(compare=False)

    @property
    def ratio(self) -> float:
        return self.predicted_ms / self.measured_ms

    @property
    def abs_error(self) -> float:
        return abs(self.ratio - 1)


def modelled_algorithm(kernel: str, params: dict) -> tuple[str, str] | None:
    """(variant, structural algorithm) of a harness kernel name, or None when the model does not cover it.
    For ``*.auto`` the chosen algorithm comes from the row's params."""
    parts = kernel.split(".")
    if len(parts) != 3 or parts[1] not in ("mlstm_sig", "mlstm_exp"):
        return None
    source, family, algorithm = parts
    variant = family.removeprefix("mlstm_")
    if source == "mlstm_kernels":
        return (variant, "reference") if algorithm == "xl_chunk" else None
    if source != "tflabench":
        return None
    if algorithm == "auto":
        algorithm = _choice(params).get("algorithm")
    return (variant, algorithm) if algorithm in ("xl_chunk", "limit_chunk", "fused_chunk") else None


def _choice(params: dict) -> dict:
    """What an ``auto`` row chose ({"algorithm", "chunk_size", "reason"}), or {}."""
    choice = params.get("choice")
    return choice if isinstance(choice, dict) else {}


def _row_params(row: pd.Series) -> dict:
    try:
        params = json.loads(row["params"]) if row["params"] else {}
    except ValueError:
        return {}
    return params if isinstance(params, dict) else {}


def _row_chunk(row: pd.Series, params: dict) -> int | None:
    chunk = row["chunk_size"]
    if pd.isna(chunk) or chunk == "":
        chunk = _choice(params).get("chunk_size")
    return int(chunk) if chunk not in (None, "") and not pd.isna(chunk) else None


def kernels_version(run: Run) -> str | None:
    """The version of our default tilings the run measured (meta.json; a merged run's when all its sources
    agree), or None when it does not say."""
    metas = [source.get("meta", {}) for source in run.meta.get("merged", [])] or [run.meta]
    found = {_meta_kernels_version(meta) for meta in metas}
    return found.pop() if len(found) == 1 else None


def _meta_kernels_version(meta: dict) -> str | None:
    versions = meta.get("versions")
    version = versions.get("tflabench_kernels") if isinstance(versions, dict) else None
    return version if isinstance(version, str) else None


def modelled_tilings(run: Run) -> str:
    """"as run" when the model can take the tilings of the run's kernels version, else what it takes."""
    from tflabench.kernels.mlstm import tilings

    version = kernels_version(run)
    if tilings.former_default(version, "sig") is not None:
        return "as run"
    return f"today's defaults ({tilings.KERNELS_VERSION}; the run's kernels {version} are not reproduced)"


def row_tiling(version: str | None, variant: str, tiling: str | None,
               head_dims: tuple[int, int] | None = None) -> dict | None:
    """The tiling overrides of a row: its kernels version's former defaults, then its own tiling, which
    replaces a former default of the same field also where that one is scoped to an algorithm
    (``ALGORITHM.FIELD``, which `structural` otherwise lets win): the row ran its tiling on top of that
    version's defaults at its head_dims (Dqk, Dv)."""
    from tflabench.kernels.mlstm import tilings

    own = structural.tiling_fields(tiling)
    defaults = tilings.former_default(version, variant, head_dims) or {}
    former = {name: value for name, value in defaults.items() if name.rpartition(".")[2] not in own}
    fields = {**former, **own}
    return fields or None


def modelled_rows(run: Run) -> set[tuple[str, str, int, int, int, str | None, str]]:
    """(algorithm, variant, Dqk, Dv, chunk, tiling, mode) of the run's ``ok`` rows of our kernels, the
    algorithm as the model takes it and the tiling text None where the row ran the default."""
    found = set()
    for _, row in run.table[run.table["status"] == "ok"].iterrows():
        params = _row_params(row)
        modelled = modelled_algorithm(str(row["kernel"]), params)
        chunk = _row_chunk(row, params)
        if modelled is None or chunk is None or modelled[1] == "reference":
            continue
        variant, algorithm = modelled
        tiling = params.get("tiling")
        found.add((algorithm, variant, int(row["head_dim_qk"]), int(row["head_dim_v"]), chunk,
                   tiling if isinstance(tiling, str) else None, str(row["mode"])))
    return found


def check_rows(run: Run, rates: structural.Rates) -> list[RowCheck]:
    """Predicted vs measured for every ``ok`` row the model covers."""
    checks = []
    version = kernels_version(run)
    table = run.table[run.table["status"] == "ok"]
    for _, row in table.iterrows():
        params = _row_params(row)
        modelled = modelled_algorithm(str(row["kernel"]), params)
        chunk = _row_chunk(row, params)
        if modelled is None or chunk is None:
            continue
        variant, algorithm = modelled
        element_bytes = 4 if row["dtype"] == "float32" else 2
        problem = structural.Problem(*(int(row[key]) for key in SHAPE_KEYS[:-1]), variant=variant,
                                     mode=str(row["mode"]), element_bytes=element_bytes)
        tiling = params.get("tiling") if isinstance(params.get("tiling"), str) else None
        try:
            fields = (row_tiling(version, variant, tiling, (problem.head_dim_qk, problem.head_dim_v))
                      if algorithm != "reference" else None)
            predicted = structural.predict(problem, algorithm, chunk, rates, fields)
        except InputError:
            continue
        gpu = str(row["gpu"])
        group = (str(row["kernel"]), tiling, gpu, *(row[key] for key in SHAPE_KEYS))
        checks.append(RowCheck(str(row["kernel"]), tiling, gpu, group, algorithm, chunk,
                               float(row["time_ms"]), predicted.ms, problem, fields))
    return checks


def group_matches(checks: list[RowCheck]) -> list[dict]:
    """Per group (kernel, tiling, GPU, shape, mode) of at least two rows: measured best, predicted best,
    match."""
    groups: dict[tuple, list[RowCheck]] = {}
    for check in checks:
        groups.setdefault(check.group, []).append(check)
    results = []
    for group, rows in groups.items():
        if len(rows) < 2:
            continue
        measured = min(rows, key=lambda row: row.measured_ms)
        predicted = min(rows, key=lambda row: row.predicted_ms)
        slower = predicted.measured_ms / measured.measured_ms - 1
        results.append({
            "kernel": group[0],
            "tiling": group[1],
            "gpu": group[2],
            "shape": dict(zip(SHAPE_KEYS, (_plain(value) for value in group[3:]), strict=True)),
            "measured_best": {"algorithm": measured.algorithm, "chunk_size": measured.chunk,
                              "ms": measured.measured_ms},
            "predicted_best": {"algorithm": predicted.algorithm, "chunk_size": predicted.chunk,
                               "measured_ms": predicted.measured_ms},
            "match": slower <= BEST_TOLERANCE,
        })
    return results


def row_label(row: dict) -> str:
    """A checked row's kernel, with its tiling variant in brackets where it ran one."""
    return f"{row['kernel']} [{row['tiling']}]" if row.get("tiling") else row["kernel"]


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def summary(checks: list[RowCheck]) -> dict:
    """Per kernel: rows, median and max abs(predicted / measured - 1), groups and the best-match fraction;
    the same over all rows under ``all``."""
    groups = group_matches(checks)
    kernels = sorted({check.kernel for check in checks})
    per_kernel = {kernel: _stats([c for c in checks if c.kernel == kernel],
                                 [g for g in groups if g["kernel"] == kernel]) for kernel in kernels}
    return {"all": _stats(checks, groups), "kernels": per_kernel}


def _stats(checks: list[RowCheck], groups: list[dict]) -> dict:
    errors = [check.abs_error for check in checks]
    return {
        "rows": [{"kernel": c.kernel, "tiling": c.tiling, "gpu": c.gpu,
                  "shape": dict(zip(SHAPE_KEYS, map(_plain, c.group[3:]), strict=True)),
                  "algorithm": c.algorithm, "chunk_size": c.chunk, "measured_ms": c.measured_ms,
                  "predicted_ms": c.predicted_ms, "ratio": c.ratio} for c in checks],
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "groups": groups,
        "best_match_fraction": sum(g["match"] for g in groups) / len(groups) if groups else None,
    }


def run_rates(run: Run, gpu: str | None = None) -> structural.Rates:
    """The building-block rates of the run's GPU (or `gpu`); InputError when unknown or not calibrated."""
    if gpu is None:
        device = run_gpu(run)
        if device is None:
            raise InputError(f"run {run.name!r}: its GPU is not in the database; pass --gpu KEY")
        gpu = device.key
    return structural.load_rates(gpu)


def predicted_ms(run: Run) -> dict[tuple, float]:
    """{(kernel, batch, seq_len, heads, head_dim_qk, head_dim_v, mode, chunk): predicted ms} of the rows the
    model covers at the default tilings; empty when the run's GPU has no building-block calibration."""
    try:
        rates = run_rates(run)
    except InputError:
        return {}
    return {(check.kernel, *check.group[3:], check.chunk): check.predicted_ms
            for check in check_rows(run, rates) if check.tiling is None}


def check_run_rows(run: Run, gpu: str | None = None) -> tuple[list[RowCheck], list[str]]:
    """The checked rows of a run and the calibrations used: the rows of each GPU of a run of several with
    that GPU's calibration, or all with `gpu`'s. InputError for a GPU without a calibration."""
    parts = [part for _, part in runs_by_gpu(run)] if gpu is None else [run]
    checks, sources = [], []
    for part in parts:
        rates = run_rates(part, gpu)
        sources.append(rates.source)
        checks += check_rows(part, rates)
    return checks, list(dict.fromkeys(sources))


def check_run(run: Run, gpu: str | None = None) -> dict:
    """`summary` of the run against the model (`check_run_rows`), InputError when no row of it is
    modelled."""
    checks, sources = check_run_rows(run, gpu)
    if not checks:
        raise InputError(f"run {run.name!r} has no measured row of a kernel the model covers "
                         "(tflabench.mlstm_*.xl_chunk|limit_chunk|fused_chunk|auto, "
                         "mlstm_kernels.mlstm_*.xl_chunk)")
    return {"run": run.name, "calibration": ", ".join(sources),
            "kernels_version": kernels_version(run),
            "tilings": modelled_tilings(run), **summary(checks)}
