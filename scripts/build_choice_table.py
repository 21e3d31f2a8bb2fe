"""Write the measured table of `tflabench.kernels.mlstm.choice` (choices.json) from tfla-grid runs.

Usage: python scripts/build_choice_table.py RUN_DIR [RUN_DIR ...]   (oldest run first)
Each run's measured rows (status ok) of our explicit algorithms (tflabench.mlstm_{sig,exp}.{xl_chunk,
limit_chunk,fused_chunk}) at their default tilings (an A/B run's other tilings left out) become table rows
keyed by GPU model, variant, mode and shape; `choice.choose`
takes the fastest row that fits what it is asked. A run replaces the rows of the runs before it wherever it
measured the same algorithm for the same GPU model, variant, mode and shape (a newer kernels version's
timings replace the older ones; the algorithms it did not measure keep theirs).
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

from tflabench.kernels.mlstm import choice

EXPLICIT = ("xl_chunk", "limit_chunk", "fused_chunk")
SHAPE_COLUMNS = ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v")


def table_rows(run_dir: Path) -> list[dict]:
    rows = []
    with open(run_dir / "results.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            _, family, algorithm = (row["kernel"].split(".") + ["", ""])[:3]
            gpu = choice.gpu_key(row["gpu"])
            ours = row["kernel"].startswith("tflabench.") and algorithm in EXPLICIT
            default_tiling = json.loads(row.get("params") or "{}").get("tiling", "default") == "default"
            measured = row["status"] == "ok" and row["dtype"] == "bfloat16"
            if not (measured and ours and default_tiling) or gpu is None:
                continue
            rows.append({"gpu": gpu, "variant": family.removeprefix("mlstm_"), "mode": row["mode"],
                         "shape": {name: int(row[name]) for name in SHAPE_COLUMNS}, "algorithm": algorithm,
                         "chunk_size": int(row["chunk_size"]), "median_ms": round(float(row["time_ms"]), 4)})
    return rows


def _key(row: dict) -> tuple:
    """What a newer run's row replaces: the same GPU model, variant, mode, shape and algorithm."""
    return row["gpu"], row["variant"], row["mode"], tuple(row["shape"].values()), row["algorithm"]


def newest_rows(runs_rows: list[list[dict]]) -> list[dict]:
    """The rows of runs given oldest first, each (GPU, variant, mode, shape, algorithm) from the last run
    that measured it."""
    newest: dict[tuple, list[dict]] = {}
    for rows in runs_rows:
        measured: dict[tuple, list[dict]] = {}
        for row in rows:
            measured.setdefault(_key(row), []).append(row)
        newest.update(measured)
    return [row for rows in newest.values() for row in rows]


def main(run_dirs: list[str]) -> None:
    rows = newest_rows([table_rows(Path(run_dir)) for run_dir in run_dirs])
    runs = ", ".join(Path(run_dir).as_posix() for run_dir in run_dirs)
    source = f"bf16 medians of the runs {runs} (a later run's rows replace an earlier one's)"
    path = Path(choice.__file__).with_name(choice.TABLE)
    path.write_text(json.dumps({"source": source, "rows": rows}, indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {len(rows)} rows to {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
