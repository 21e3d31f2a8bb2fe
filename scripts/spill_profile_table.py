#!/usr/bin/env python
"""The fused forwards' register spills as Nsight Compute measured them (`scripts/profile_spills.sh`) beside
what the structural model charges for them, one Markdown row per configuration:

    python scripts/spill_profile_table.py results/h100/profile-spills --gpu h100-sxm

(``--configs`` prints the configurations instead, which `scripts/profile_spills.sh` profiles.)

Per configuration: the profiled time; the local-memory bytes through L1 (loads + stores) against the model's
count (`structural.spilled_bytes`: the compiled LDL/STL bytes of one loop trip x threads x trips, summed over
the programs); the L1 hit rate of the local loads; L2 and DRAM bytes; the model's time with and without the
spill term; and the per-SM rate at which the spilled bytes would have to move to make up the difference
between the profiled time and the model's time without spills (what the spills cost, as far as the rest of
the model is right), and the rate the model's spill term amounts to.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import gzip
import io
from pathlib import Path

from tflabench.analysis import structural

#: name -> (variant, Dqk, Dv, chunk, tiling, B, T, H) of each profiled configuration
#: (`scripts/profile_spills.sh` reads them from ``--configs``)
CONFIGS = {
    "exp256L64": ("exp", 256, 256, 64, "default", 4, 16384, 8),
    "exp256L128": ("exp", 256, 256, 128, "default", 4, 16384, 8),
    "exp128L128": ("exp", 128, 128, 128, "default", 4, 16384, 16),
    "exp64L128w8": ("exp", 64, 64, 128, "num_warps=8", 8, 8192, 32),
    "sig256L128": ("sig", 256, 256, 128, "default", 4, 16384, 8),
    "sig128L128": ("sig", 128, 128, 128, "default", 4, 16384, 16),
    "sig64L64": ("sig", 64, 64, 64, "default", 8, 8192, 32),
}
LOCAL = "l1tex__t_{}_pipe_lsu_mem_local_op_{}{}.sum"


def metrics(path: Path) -> dict[str, float]:
    """Metric name -> value of the one profiled launch in a gzipped `ncu --csv --page details` file."""
    text = gzip.decompress(path.read_bytes()).decode()
    lines = "".join(line for line in text.splitlines(keepends=True) if line.startswith('"'))
    values = {}
    for row in csv.DictReader(io.StringIO(lines)):
        try:
            values[row["Metric Name"]] = float(row["Metric Value"].replace(",", ""))
        except ValueError:
            continue
    return values


def row(name: str, measured: dict[str, float], rates: structural.Rates) -> str:
    variant, dqk, dv, chunk, tiling, batch, seq_len, heads = CONFIGS[name]
    problem = structural.Problem(batch, seq_len, heads, dqk, dv, variant=variant)
    launch = structural.launches(problem, "fused_chunk", chunk, tiling)[0]
    without = dataclasses.replace(launch, compiled=dict(launch.compiled, loop_local_bytes=0, stack_bytes=0))
    modelled, spill_free = (structural.launch_time(item, rates).seconds for item in (launch, without))
    seconds = measured["gpu__time_duration.sum"] * 1e-9
    local = sum(measured[LOCAL.format("bytes", op, "")] for op in ("ld", "st"))
    hits = measured[LOCAL.format("sectors", "ld", "_lookup_hit")]
    lookups = hits + measured[LOCAL.format("sectors", "ld", "_lookup_miss")]
    counted = structural.spilled_bytes(launch) * launch.programs
    dram = measured["dram__bytes_read.sum"] + measured["dram__bytes_write.sum"]
    sms = min(launch.programs, rates.sm_count)

    def rate(moved: float, spill_s: float) -> str:
        return f"{moved / sms / spill_s / 1e9:.1f}" if moved and spill_s > 0 else "-"

    l1_hit = hits / lookups if lookups else 0.0
    return (f"| {name} | {seconds * 1e3:.2f} | {local / 1e9:.2f} / {counted / 1e9:.2f} | {l1_hit:.2f} | "
            f"{measured['lts__t_bytes.sum'] / 1e9:.1f} | {dram / 1e9:.1f} | "
            f"{modelled * 1e3:.2f} / {spill_free * 1e3:.2f} | {rate(local, seconds - spill_free)} / "
            f"{rate(counted, modelled - spill_free)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, nargs="?", help="a profile-spills folder (its ncu/*.csv.gz files)")
    parser.add_argument("--gpu", help="calibration key: h100-sxm or h200")
    parser.add_argument("--configs", action="store_true",
                        help="print the configurations to profile instead, one line each (name and fields)")
    args = parser.parse_args()
    if args.configs:
        for name, config in CONFIGS.items():
            print(name, *config)
        return
    if args.run is None or args.gpu is None:
        parser.error("a profile-spills folder and --gpu are needed for the table")
    rates = structural.load_rates(args.gpu)
    print("| config | time (ms) | local GB: measured / model | L1 hit (local loads) | L2 GB | DRAM GB "
          "| model ms / without spills | spill rate measured / model (GB/s per SM) |")
    print("|---|---|---|---|---|---|---|---|")
    for name in CONFIGS:
        print(row(name, metrics(args.run / "ncu" / f"{name}.csv.gz"), rates))


if __name__ == "__main__":
    main()
