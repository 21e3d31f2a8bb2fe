"""Write tflabench/analysis/model_limits.json: per GPU and class of `model_limits.WEAK_POINTS` (and
``covered``, the rows in none), the predicted / measured ratios of the committed rows the structural model
covers (every run under results/ with a meta.json whose kernels version the model reproduces, as
`tflabench model-check` checks them). Run after a change of the model or of a calibration; `tflabench
predict` quotes the file.

    python scripts/model_limits.py
"""

import json
import subprocess
from collections import defaultdict
from pathlib import Path

from tflabench.analysis import model_check, model_limits
from tflabench.analysis.run_data import committed_run_dirs, load_run, runs_by_gpu
from tflabench.errors import InputError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"


def _row_classes(check: model_check.RowCheck) -> tuple[str, ...]:
    """The weak-point classes of one checked row (its problem, algorithm, chunk size and tiling as
    predicted)."""
    return (model_limits.weak_points(check.problem, check.algorithm, check.chunk, check.fields)
            or (model_limits.COVERED,))


def collect() -> dict[str, dict[str, list[float]]]:
    """{GPU key: {class: [predicted / measured of each committed row in it]}}."""
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for run_dir in committed_run_dirs(RESULTS):
        run = load_run(run_dir)
        if model_check.modelled_tilings(run) != "as run":
            continue  # kernels of a version the model does not reproduce (today's tilings stand in)
        for _, part in runs_by_gpu(run):
            try:
                rates = model_check.run_rates(part)
            except InputError:
                continue
            gpu_key = rates.source.removeprefix("calibration ")
            for check in model_check.check_rows(part, rates):
                for name in _row_classes(check):
                    ratios[gpu_key][name].append(check.ratio)
    return ratios


def summaries(ratios: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict]]:
    """{GPU key: {class: `model_limits.ratio_summary`}} of `collect`'s ratios, sorted by key."""
    return {gpu: {name: model_limits.ratio_summary(values) for name, values in sorted(classes.items())}
            for gpu, classes in sorted(ratios.items())}


#: what the ratios depend on besides the committed runs: the model's code, its compiled-resources table and
#: the calibrations (the commit that last changed one of them names the model the file was computed with)
MODEL_INPUTS = ("tflabench/analysis/structural.py", "tflabench/analysis/compiled_resources.json.gz",
                "results/calibration")


def model_commit() -> str:
    """The short hash of the last commit that changed one of `MODEL_INPUTS`."""
    return subprocess.run(["git", "log", "-1", "--format=%h", "--", *MODEL_INPUTS], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()


def main() -> None:
    commit = model_commit()
    table = {"command": "python scripts/model_limits.py", "commit": commit, "gpus": summaries(collect())}
    path = Path(model_limits.__file__).with_name(model_limits.LIMITS_FILE)
    path.write_text(json.dumps(table, indent=1) + "\n")
    for gpu, classes in table["gpus"].items():
        for name, summary in classes.items():
            print(f"{gpu:9s} {name:15s} rows {summary['rows']:5d}  p10 {summary['p10']:.2f}  median "
                  f"{summary['median']:.2f}  p90 {summary['p90']:.2f}  min {summary['min']:.2f}  "
                  f"max {summary['max']:.2f}")


if __name__ == "__main__":
    main()
