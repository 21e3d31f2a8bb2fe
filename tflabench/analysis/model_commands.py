"""CLI commands of the structural performance model: `predict` and `model-check` (both with --json)."""

from __future__ import annotations

from typing import Annotated

import typer

from tflabench.analysis import hardware, model_check, model_limits, structural
from tflabench.analysis.commands import JsonFlag, _console, _echo_json, _table
from tflabench.analysis.run_data import load_run


def register(app: typer.Typer) -> None:
    app.command("predict")(predict)
    app.command("model-check")(model_check_command)


def predict(
    gpu: Annotated[str, typer.Option(help="GPU key or alias with a building-block calibration.")] = "h100",
    batch: Annotated[int, typer.Option(help="Batch size B.")] = 8,
    seq_len: Annotated[int, typer.Option(help="Sequence length T.")] = 8192,
    heads: Annotated[int, typer.Option(help="Number of heads H.")] = 16,
    head_dim_qk: Annotated[int, typer.Option(help="Query/key head dimension Dqk.")] = 128,
    head_dim_v: Annotated[int, typer.Option(help="Value head dimension Dv.")] = 256,
    variant: Annotated[str, typer.Option(help="sig or exp.")] = "sig",
    mode: Annotated[str, typer.Option(help="fwd or fwdbw.")] = "fwd",
    reference: Annotated[bool, typer.Option(help="Also predict mlstm_kernels' xl_chunk.")] = False,
    tiling: Annotated[str | None, typer.Option(
        help="A tiling of our kernels, as a sweep takes it (docs/sweep-toml.md#tilings), e.g. keep-states "
             "(the forward's states kept for the backward); default: their measured default.")] = None,
    as_json: JsonFlag = False,
) -> None:
    """Predicted time of our kernels per (algorithm, chunk size) from the GPU's calibration, and the best;
    each with the model's known weak points it falls into and what committed runs of those measured."""
    problem = structural.Problem(batch, seq_len, heads, head_dim_qk, head_dim_v, variant=variant, mode=mode)
    if as_json:
        _echo_json(prediction_document(gpu, problem, reference=reference, tiling=tiling))
        return
    rates, predictions, references, weak, classes = _predictions(gpu, problem, reference, tiling)
    gpu_key = hardware.get_gpu(gpu).key
    console = _console()
    console.print(f"{problem.variant} {problem.mode}: B={batch}, T={seq_len}, H={heads}, "
                  f"Dqk={head_dim_qk}, Dv={head_dim_v}; tiling {tiling or 'default'}; structural model, "
                  f"{rates.source}")
    table = _table("Predicted time per (algorithm, chunk size), fastest first",
                   ["algorithm", "L", "ms", "x best", "slowest launch", "weak points"],
                   left=("algorithm", "slowest launch", "weak points"))
    best = predictions[0].ms
    for prediction in [*predictions, *references]:
        slowest = max(prediction.launches, key=lambda launch: launch.seconds)
        slowest_text = f"{slowest.name} {slowest.seconds * 1e3:.3f} ms ({slowest.bound})"
        table.add_row(prediction.algorithm, str(prediction.chunk), f"{prediction.ms:.3f}",
                      f"{prediction.ms / best:.2f}", slowest_text,
                      ", ".join(weak[prediction.algorithm, prediction.chunk]) or "-")
    console.print(table)
    console.print(f"predicted best: {predictions[0].algorithm} at L = {predictions[0].chunk} "
                  f"({best:.3f} ms)")
    console.print("How far the model was off before, by class (docs/performance-model.md#known-weak-points):")
    for name in classes:
        console.print(f"  {model_limits.describe(gpu_key, name)}")


def _predictions(gpu: str, problem: structural.Problem, reference: bool, tiling: str | None) -> tuple:
    """(rates, our predictions fastest first, the reference's, the weak points per (algorithm, chunk), the
    weak-point classes they fall into)."""
    rates = structural.load_rates(gpu)
    fields = structural.tiling_fields(tiling)
    predictions = structural.predict_all(problem, rates, tiling=fields)
    references = structural.predict_all(problem, rates, ("reference",)) if reference else []
    weak = {(p.algorithm, p.chunk): model_limits.weak_points(problem, p.algorithm, p.chunk, fields)
            for p in [*predictions, *references]}
    classes = [model_limits.COVERED, *(name for name in model_limits.WEAK_POINTS
                                       if any(name in found for found in weak.values()))]
    return rates, predictions, references, weak, classes


def prediction_document(gpu: str, problem: structural.Problem, *, reference: bool = False,
                        tiling: str | None = None) -> dict:
    """What `predict --json` prints: the predicted time of our kernels per (algorithm, chunk size) with the
    GPU's calibration (and of the reference's with ``reference``), the best, and the model's weak points
    they fall into with what committed runs of those measured."""
    rates, predictions, references, weak, classes = _predictions(gpu, problem, reference, tiling)
    gpu_key = hardware.get_gpu(gpu).key

    def prediction_json(prediction):
        found = weak[prediction.algorithm, prediction.chunk]
        return _prediction_json(prediction) | {"weak_points": list(found)}

    return {
        "gpu": gpu,
        "calibration": rates.source,
        "problem": problem.__dict__,
        "tiling": tiling or "default",
        "predictions": [prediction_json(p) for p in predictions],
        "best": prediction_json(predictions[0]),
        "reference": [prediction_json(p) for p in references],
        "weak_points": {name: {"description": model_limits.description(name),
                               "measured_ratios": model_limits.measured_ratios(gpu_key, name)}
                        for name in classes},
    }


def _prediction_json(prediction: structural.Prediction) -> dict:
    return {
        "algorithm": prediction.algorithm,
        "chunk_size": prediction.chunk,
        "ms": prediction.ms,
        "launches": [{"name": launch.name, "programs": launch.programs, "resident": launch.resident,
                      "waves": launch.waves, "compute_ms": launch.compute_s * 1e3,
                      "memory_ms": launch.memory_s * 1e3, "issue_ms": launch.issue_s * 1e3,
                      "exposed_load_ms": launch.exposed_load_s * 1e3, "walk_ms": launch.walk_s * 1e3,
                      "overhead_ms": launch.overhead_s * 1e3, "dispatch_ms": launch.dispatch_s * 1e3,
                      "ms": launch.seconds * 1e3, "bound": launch.bound} for launch in prediction.launches],
    }


def model_check_command(
    run: Annotated[str, typer.Argument(help="Run folder (results.csv, meta.json).")],
    gpu: Annotated[str | None, typer.Option(help="GPU whose calibration to use (default: the run's).")] = (
        None),
    as_json: JsonFlag = False,
) -> None:
    """The structural model against a measured run: per row predicted / measured, per group the best."""
    result = model_check.check_run(load_run(run), gpu)
    if as_json:
        _echo_json(result)
        return
    console = _console()
    version = result["kernels_version"] or "(version not recorded)"
    console.print(f"run {result['run']}: structural model, {result['calibration']}; our kernels {version}, "
                  f"tilings modelled: {result['tilings']}")
    rows = _table("Predicted / measured per row", ["kernel", "shape", "mode", "L", "measured ms", "model ms",
                                                     "ratio"], left=("kernel", "shape", "mode"))
    for row in result["all"]["rows"]:
        shape = row["shape"]
        rows.add_row(model_check.row_label(row), _shape_text(shape), shape["mode"], str(row["chunk_size"]),
                     f"{row['measured_ms']:.3f}", f"{row['predicted_ms']:.3f}", f"{row['ratio']:.2f}")
    console.print(rows)
    kernels = _table("Per kernel", ["kernel", "rows", "median |err|", "max |err|", "best match"],
                     left=("kernel",))
    for kernel, stats in result["kernels"].items():
        kernels.add_row(kernel, str(len(stats["rows"])), *_stats_cells(stats))
    kernels.add_row("all", str(len(result["all"]["rows"])), *_stats_cells(result["all"]))
    console.print(kernels)


def _shape_text(shape: dict) -> str:
    return (f"{shape['batch']}x{shape['seq_len']}, {shape['heads']}x"
            f"{shape['head_dim_qk']}/{shape['head_dim_v']}")


def _stats_cells(stats: dict) -> list[str]:
    fraction = stats["best_match_fraction"]
    groups = stats["groups"]
    return [f"{stats['median_abs_error']:.3f}", f"{stats['max_abs_error']:.3f}",
            "-" if fraction is None else f"{sum(g['match'] for g in groups)}/{len(groups)} ({fraction:.0%})"]
