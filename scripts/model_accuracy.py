"""The structural model against every committed run of our kernels with a calibrated GPU: one markdown row
per run (median / worst abs(predicted / measured - 1), best chunk size matched) for all rows, ours and the
reference, and the kernels version each run measured (docs/performance-model.md, "Measured accuracy").

    python scripts/model_accuracy.py [RUN ...]     (default: every run under results/ with a meta.json)
"""

import sys
from pathlib import Path

from tflabench.analysis import model_check
from tflabench.analysis.run_data import committed_run_dirs, load_run
from tflabench.errors import InputError

RESULTS = Path(__file__).resolve().parent.parent / "results"


def _cell(checks: list[model_check.RowCheck]) -> str:
    """median / worst abs error, best-match fraction of a set of checked rows ("-" when empty)."""
    if not checks:
        return "-"
    stats = model_check.summary(checks)["all"]
    fraction = stats["best_match_fraction"]
    matched = "-" if fraction is None else f"{fraction:.2f}"
    return f"{stats['median_abs_error']:.3f} / {stats['max_abs_error']:.3f} / {matched}"


def _row(run_dir: Path) -> str | None:
    run = load_run(run_dir)
    try:
        checks, _ = model_check.check_run_rows(run)
    except InputError:
        return None
    if not checks:
        return None
    ours = [check for check in checks if check.kernel.startswith("tflabench.")]
    reference = [check for check in checks if check.algorithm == "reference"]
    name = run_dir.relative_to(RESULTS)
    version = model_check.kernels_version(run) or "?"
    tilings = "as run" if model_check.modelled_tilings(run) == "as run" else "today's"
    cells = " | ".join(_cell(part) for part in (checks, ours, reference))
    return f"| {name} | {version} ({tilings}) | {len(checks)} | {cells} |"


def main() -> None:
    runs = [Path(arg).resolve() for arg in sys.argv[1:]] or committed_run_dirs(RESULTS)
    print("| run | kernels (tilings modelled) | rows | all: median / worst / best match | ours | reference |")
    print("|---|---|---|---|---|---|")
    for run_dir in runs:
        row = _row(run_dir)
        if row:
            print(row, flush=True)


if __name__ == "__main__":
    main()
