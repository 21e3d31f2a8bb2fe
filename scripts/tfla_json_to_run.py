"""Convert the committed side-by-side GPU benchmark (results/h200/tfla-vs-reference/results.json, written by
the earlier, stand-alone form of scripts/bench_tfla_vs_reference.py, which now runs `tflabench sweep`) into
a harness run directory, so that `tflabench plot` and `tflabench report` draw it like a sweep.

Writes ``<dest>/results.csv`` (the columns of `tflabench.schema.COLUMNS`, one row per kernel x chunk
size x mode) and ``<dest>/meta.json`` (the benchmark's provenance). Kernel names become the registry's
(``tflabench.sig.xl_chunk`` -> ``tflabench.mlstm_sig.xl_chunk``). Our kernels were timed under several
tilings; one tiling is kept per point (default ``state-bl128``: the benchmark's default tiling with the
128-row state sub-chunk, which is the kernels' default tiling since commit 783b1f4). The derived columns
(model FLOPs and bytes, TFLOP/s, roofline fractions, runtime models) come from
`tflabench.bench.results.Derivation` with the ceilings the benchmark measured on its own GPU.

Usage: python scripts/tfla_json_to_run.py [--source results/h200/tfla-vs-reference/results.json]
                                          [--dest results/h200/tfla-vs-reference/run] [--tiling state-bl128]
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

from tflabench import __version__
from tflabench.analysis.hardware import Ceilings, datasheet_ceilings
from tflabench.bench.derived import Derivation
from tflabench.bench.registry import get_kernel
from tflabench.bench.results import META_FILE, RESULTS_FILE, ResultsWriter, make_row, write_meta
from tflabench.core import SweepPoint

RUN_NAME = "tfla-vs-reference"
DEVICE = "cuda"
TIMING = "triton.testing.do_bench: CUDA events, median and IQR, L2 flushed before every call"


class BenchmarkDerivation(Derivation):
    """Derived columns with the ceilings the benchmark measured during its run (instead of the stored
    calibration of the GPU)."""

    def __init__(self, gpu_name: str, measured: Ceilings) -> None:
        super().__init__(gpu_name)
        self._measured = measured

    def ceilings(self, dtype: str) -> tuple[Any, Any]:
        return datasheet_ceilings(self.gpu, dtype), self._measured


def registry_name(benchmark_kernel: str) -> str:
    """``tflabench.sig.xl_chunk`` -> ``tflabench.mlstm_sig.xl_chunk`` (same for mlstm_kernels)."""
    package, variant, algorithm = benchmark_kernel.split(".")
    return f"{package}.mlstm_{variant}.{algorithm}"


def iso_time(date: str) -> str:
    """The benchmark's ``YYYY-MM-DD HH:MM:SS`` (UTC) as ISO 8601."""
    parsed = datetime.datetime.strptime(date, "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    return parsed.isoformat(timespec="seconds")


def selected_rows(rows: list[dict], tiling: str) -> list[dict]:
    """The reference kernel's rows (no tiling) and ours at ``tiling``; ValueError if it has none."""
    ours = [row for row in rows if row.get("tiling") == tiling]
    if not ours:
        known = sorted({row["tiling"] for row in rows if row.get("tiling")})
        raise ValueError(f"no rows with tiling {tiling!r} (known: {', '.join(known)})")
    return [row for row in rows if "tiling" not in row] + ours


def harness_row(row: dict, meta: dict, derivation: Derivation) -> dict[str, Any]:
    """One results-table row of a benchmark row (timed with triton.testing.do_bench: repeats unknown)."""
    kernel = get_kernel(registry_name(row["kernel"]))
    point = SweepPoint(**meta["config"], chunk_size=int(row["chunk"]), dtype=meta["dtype"], mode=row["mode"])
    measured = {"status": row["status"], "reason": row.get("reason", ""), "warmup_s": row.get("warmup_s"),
                "time_ms": row.get("time_ms"), "time_ms_q25": row.get("q25_ms"),
                "time_ms_q75": row.get("q75_ms"), "peak_mem_mib": row.get("peak_mib")}
    version = meta["mlstm_kernels"] if kernel.package == "mlstm-kernels" else __version__
    derived = derivation.columns(kernel, point, measured["time_ms"])
    result = make_row(run=RUN_NAME, kernel=kernel, version=version, point=point, device=DEVICE,
                      gpu=meta["gpu"], measured=measured, derived=derived)
    return {**result, "timestamp": iso_time(meta["date"])}


def run_meta(meta: dict, measured: Ceilings, derivation: Derivation, kernels: list[str], source: Path,
             tiling: str) -> dict[str, Any]:
    """meta.json in the sweep's layout, from the benchmark's provenance."""
    datasheet = datasheet_ceilings(derivation.gpu, meta["dtype"])
    return {
        "run": RUN_NAME,
        "started": iso_time(meta["date"]),
        "finished": iso_time(meta["date"]),
        "command": f"python {meta['command']}",
        "converted": f"python scripts/tfla_json_to_run.py --source {source} --tiling {tiling}",
        "device": DEVICE,
        "gpu": {"name": meta["gpu"]},
        "versions": {"torch": meta["torch"], "triton": meta["triton"], "cuda": meta["cuda"],
                     "peers": {"mlstm-kernels": meta["mlstm_kernels"]}},
        "git": {"commit": meta["commit"], "note": meta.get("commit_note", "")},
        "ceilings": {"gpu_key": derivation.gpu.key,
                     meta["dtype"]: {"datasheet": vars(datasheet), "measured": vars(measured),
                                     "measured_by": "the benchmark, on its GPU, before timing the kernels",
                                     "runtime_model_uses": "measured"}},
        "kernels": kernels,
        "sweep": {"shape": meta["config"], "dtypes": [meta["dtype"]], "modes": ["fwd", "fwdbw"],
                  "tiling_of_our_kernels": {tiling: meta["tilings"][tiling]},
                  "timing": TIMING},
        "checks_bf16_vs_float64": meta["checks"],
    }


def convert(source: Path, dest: Path, tiling: str) -> Path:
    """Write ``dest/results.csv`` and ``dest/meta.json`` (replacing them); returns dest."""
    benchmark = json.loads(source.read_text())
    meta = benchmark["meta"]
    measured = Ceilings(meta["ceilings"]["flops"], meta["ceilings"]["bandwidth"],
                        f"measured {meta['date'][:10]} {meta['gpu']}")
    derivation = BenchmarkDerivation(meta["gpu"], measured)
    rows = [harness_row(row, meta, derivation) for row in selected_rows(benchmark["rows"], tiling)]
    dest.mkdir(parents=True, exist_ok=True)
    (dest / RESULTS_FILE).unlink(missing_ok=True)
    with ResultsWriter(dest / RESULTS_FILE) as writer:
        for row in rows:
            writer.write(row)
    kernels = sorted({row["kernel"] for row in rows})
    write_meta(dest / META_FILE, run_meta(meta, measured, derivation, kernels, source, tiling))
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=Path, default=Path("results/h200/tfla-vs-reference/results.json"))
    parser.add_argument("--dest", type=Path, default=Path("results/h200/tfla-vs-reference/run"))
    parser.add_argument("--tiling", default="state-bl128", help="tiling of our kernels to keep")
    args = parser.parse_args()
    print(f"wrote {convert(args.source, args.dest, args.tiling)}")


if __name__ == "__main__":
    main()
