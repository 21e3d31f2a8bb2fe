#!/usr/bin/env python
"""The structural model's predictions for every shape of a sweep config, written before the sweep runs, so
that a held-out run can be checked against what the model said before it was measured.

For each (shape, variant, mode, tiling) of our mLSTM kernels in the config (`tflabench sweep --dry-run`
lists the same points), what `tflabench predict --gpu GPU ... --json` prints (with `--reference` where the
config has mlstm_kernels' mLSTMsig), into one gzipped JSON file (no timestamp in the gzip header: the same
model gives the same bytes):

    python scripts/holdout_predictions.py examples/holdout-v17-value-blocks.toml --gpu h100-sxm \\
        --out results/h100/holdout-v17-value-blocks/predictions.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from tflabench.analysis import structural
from tflabench.analysis.model_commands import prediction_document
from tflabench.bench.registry import all_kernels
from tflabench.bench.sweep import expand, load_sweep_file

REFERENCE = "mlstm_kernels.mlstm_sig.xl_chunk"


def predicted_points(config: Path) -> tuple[list[tuple], bool]:
    """((B, T, H, Dqk, Dv, variant, mode, tiling) of every point of our kernels in the config, in order, each
    once; whether the config times the reference)."""
    jobs = expand(load_sweep_file(config), all_kernels())
    points = []
    for job in jobs:
        if job.kernel.name.startswith("tflabench.mlstm_"):
            p = job.point
            points.append((p.batch, p.seq_len, p.heads, p.head_dim_qk, p.head_dim_v,
                           job.kernel.params["variant"], p.mode, p.tiling))
    return list(dict.fromkeys(points)), any(job.kernel.name == REFERENCE for job in jobs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("config", type=Path, help="the sweep's TOML file")
    parser.add_argument("--gpu", required=True, help="GPU key with a building-block calibration")
    parser.add_argument("--out", type=Path, required=True, help="the .json.gz file to write")
    args = parser.parse_args()
    points, reference = predicted_points(args.config)
    predictions = []
    for batch, seq_len, heads, dqk, dv, variant, mode, tiling in points:
        problem = structural.Problem(batch, seq_len, heads, dqk, dv, variant=variant, mode=mode)
        document = prediction_document(args.gpu, problem, reference=reference and variant == "sig",
                                       tiling=tiling)
        predictions.append({"shape": dict(batch=batch, seq_len=seq_len, heads=heads, head_dim_qk=dqk,
                                          head_dim_v=dv), "variant": variant, "mode": mode,
                            "tiling": tiling or "default", "prediction": document})
    doc = {"gpu": args.gpu, "config": str(args.config),
           "command": f"tflabench predict --gpu {args.gpu} --batch B --seq-len T --heads H --head-dim-qk DQK "
                      "--head-dim-v DV --variant V --mode M [--tiling TILING] [--reference] --json",
           "predictions": predictions}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as file:
        file.write((json.dumps(doc, indent=1) + "\n").encode())
    print(f"{len(predictions)} predictions -> {args.out}")


if __name__ == "__main__":
    main()
