"""`tflabench sweep`: run a benchmark sweep into ``<out>/<run-name>/`` (results.csv + meta.json).

The sweep comes from defaults < ``--preset`` < ``--config FILE.toml`` < axis flags (see
`tflabench.bench.sweep` for the TOML format). Each kernel's points run in worker processes with a time
limit (`tflabench.bench.worker`); rows are written as they arrive, so ``--resume`` continues a killed or
budget-stopped run without duplicating rows.
"""

from __future__ import annotations

import datetime
import itertools
import os
import queue
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from tflabench.bench.sweep import (
    PRESETS,
    Job,
    SweepSpec,
    apply_measure,
    apply_sweep_values,
    load_preset,
    load_sweep_file,
    option_label,
)
from tflabench.errors import InputError

_AXIS_HELP = "comma list, or A..B for powers of two from A to B"


def register(app) -> None:
    app.command(name="sweep")(sweep)
    app.command(name="rederive")(rederive)


def rederive(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (results/<run>).")],
) -> None:
    """Recompute a run's derived columns (FLOPs, bytes, TFLOP/s, roofline fractions, model times) with the
    current cost models; the measured columns stay, the previous table is kept beside it."""
    from tflabench.bench.registry import all_kernels
    from tflabench.bench.results import rederive as rederive_run

    changed = rederive_run(run_dir, all_kernels())
    typer.echo(f"{run_dir}: derived columns of {changed} rows changed")


def sweep(
    preset: Annotated[str | None, typer.Option(help=f"Paper sweep: {', '.join(PRESETS)}.")] = None,
    config: Annotated[Path | None, typer.Option(help="Sweep TOML file (applied on top of --preset).")] = None,
    kernels: Annotated[str | None, typer.Option(
        help="Kernel-name globs or family names, comma list (e.g. 'tflabench.*,softmax_attention').")] = None,
    seq_len: Annotated[str | None, typer.Option(help=f"Sequence lengths: {_AXIS_HELP}.")] = None,
    tokens: Annotated[int | None, typer.Option(help="Total tokens: batch = tokens / seq_len.")] = None,
    batch: Annotated[str | None, typer.Option(help=f"Batch sizes (not with --tokens): {_AXIS_HELP}.")] = None,
    heads: Annotated[str | None, typer.Option(help=f"Head counts: {_AXIS_HELP}.")] = None,
    embedding_dim: Annotated[int | None, typer.Option(
        help="Heads = embedding_dim / head_dim_v (instead of --heads).")] = None,
    head_dim_qk: Annotated[str | None, typer.Option(help=f"Query/key head dims: {_AXIS_HELP}.")] = None,
    qk_ratio: Annotated[float | None, typer.Option(
        help="head_dim_qk = qk_ratio * head_dim_v (instead of --head-dim-qk).")] = None,
    head_dim_v: Annotated[str | None, typer.Option(help=f"Value head dims: {_AXIS_HELP}.")] = None,
    chunk_size: Annotated[str | None, typer.Option(help=f"Chunk sizes: {_AXIS_HELP}.")] = None,
    dtype: Annotated[str | None, typer.Option(help="bfloat16, float16, float32 (comma list).")] = None,
    mode: Annotated[str | None, typer.Option(help="fwd, fwdbw (comma list).")] = None,
    warmup: Annotated[int | None, typer.Option(help="Untimed calls per point (compile/autotune).")] = None,
    repeats: Annotated[int | None, typer.Option(help="Timed calls per point (median, IQR).")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds per point, warm-up included.")] = None,
    run_name: Annotated[str | None, typer.Option(help="Run directory name (default: preset + time).")] = None,
    out: Annotated[Path, typer.Option(help="Parent directory of the run directories.")] = Path("results"),
    resume: Annotated[bool, typer.Option(help="Continue a run: skip points already in results.csv.")] = False,
    retry: Annotated[str | None, typer.Option(
        help="With --resume: measure again the points whose rows have these statuses (comma list, e.g. "
             "failed_check,crash); their rows move to results.<time>.retried.csv.")] = None,
    budget: Annotated[float | None, typer.Option(
        help="Start no new point after this many seconds (continue later with --resume).")] = None,
    kernel_module: Annotated[list[str] | None, typer.Option(
        help="Import this module first to register extra kernels (repeatable).")] = None,
    gpus: Annotated[str | None, typer.Option(
        help="CUDA device indices, comma list (e.g. 0,1): kernels run in parallel, one at a time per GPU "
             "(the GPUs must be of one model).")] = None,
    dry_run: Annotated[bool, typer.Option(help="List the jobs and skip reasons; measure nothing.")] = False,
) -> None:
    """Benchmark kernels over a sweep: runtime (median, IQR), peak memory, roofline columns."""
    flags = {"kernels": kernels, "seq_len": seq_len, "tokens": tokens, "batch": batch, "heads": heads,
             "embedding_dim": embedding_dim, "head_dim_qk": head_dim_qk, "qk_ratio": qk_ratio,
             "head_dim_v": head_dim_v, "chunk_size": chunk_size, "dtype": dtype, "mode": mode}
    measure = {"warmup": warmup, "repeats": repeats, "timeout": timeout}
    spec = build_spec(preset, config, _given(flags), _given(measure))
    modules = tuple(kernel_module or ())
    device = _prepare_device()
    lanes = gpu_lanes(gpus, device)
    jobs = _expand(spec, modules)
    if dry_run:
        _print_jobs(jobs)
        return
    if budget is not None and budget < 0:
        raise InputError(f"--budget must be >= 0 seconds, got {budget}")
    retry_statuses = _retry_statuses(retry, resume)
    run = run_name or f"{preset or 'sweep'}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    run_sweep(spec, jobs, _run_dir(out, run, resume), device=device, modules=modules, budget_s=budget,
              retry=retry_statuses,
              lanes=lanes)


def _given(values: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in values.items() if value is not None}


def build_spec(preset: str | None, config: Path | None, flags: dict[str, Any],
               measure: dict[str, Any]) -> SweepSpec:
    """defaults < preset < config file < command-line flags."""
    spec = SweepSpec()
    if preset is not None:
        spec = load_preset(preset, spec)
    if config is not None:
        spec = load_sweep_file(config, spec)
    spec = apply_sweep_values(spec, flags, option_label)
    return apply_measure(spec, measure, option_label)


def _prepare_device() -> str:
    """Detect the device; without CUDA, Triton kernels must run under the interpreter, which has to be
    switched on before any @triton.jit module is imported (the adapters are imported next)."""
    from tflabench.bench.measure import CPU_INTERPRETER, detect_device

    device = detect_device()
    if device == CPU_INTERPRETER:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


def gpu_lanes(gpus: str | None, device: str) -> list[dict[str, str]]:
    """One environment override per GPU of ``--gpus`` (CUDA_VISIBLE_DEVICES of its workers); ``[{}]``, one
    lane with the parent's environment, without the option."""
    if gpus is None:
        return [{}]
    try:
        indices = [int(part) for part in gpus.split(",")]
    except ValueError:
        raise InputError(f"--gpus must be a comma list of device indices, got {gpus!r}") from None
    if len(set(indices)) != len(indices):
        raise InputError(f"--gpus lists a device twice: {gpus!r}")
    if device != "cuda":
        raise InputError("--gpus needs CUDA devices, and this machine has none")
    import torch

    count = torch.cuda.device_count()
    if any(not 0 <= index < count for index in indices):
        raise InputError(f"--gpus {gpus!r}: this machine has CUDA devices 0 to {count - 1}")
    names = {torch.cuda.get_device_name(index) for index in indices}
    if len(names) > 1:
        raise InputError(f"--gpus mixes GPU models ({', '.join(sorted(names))}): the rows of one run "
                         "share one GPU name and one set of roofline ceilings")
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = visible.split(",") if visible else [str(index) for index in range(count)]
    return [{"CUDA_VISIBLE_DEVICES": physical[index].strip()} for index in indices]


def _expand(spec: SweepSpec, modules: tuple[str, ...]) -> list[Job]:
    from tflabench.bench.registry import all_kernels
    from tflabench.bench.sweep import expand, import_kernel_modules

    import_kernel_modules(modules)
    return expand(spec, all_kernels())


def _retry_statuses(retry: str | None, resume: bool) -> frozenset[str]:
    """The row statuses of ``--retry``: failure statuses of the schema, only with --resume."""
    from tflabench.bench.schema import STATUSES

    if retry is None:
        return frozenset()
    if not resume:
        raise InputError("--retry continues a run: pass --resume as well")
    statuses = frozenset(name.strip() for name in retry.split(",") if name.strip())
    failures = set(STATUSES) - {"ok"}
    if not statuses or not statuses <= failures:
        known = ", ".join(sorted(failures))
        raise InputError(f"--retry takes statuses other than ok ({known}), got {retry!r}")
    return statuses


def _run_dir(out: Path, run: str, resume: bool) -> Path:
    if not run or run in (".", "..") or "/" in run or os.sep in run:
        raise InputError(f"invalid run name {run!r} (a plain directory name is expected)")
    from tflabench.bench.results import RESULTS_FILE

    run_dir = out / run
    if (run_dir / RESULTS_FILE).exists() and not resume:
        raise InputError(f"run {str(run_dir)!r} exists: pass --resume to continue it, or another --run-name")
    return run_dir


# ----------------------------------------------------------------------------------------------- running


def _gpu_name(device: str) -> tuple[str, dict[str, str]]:
    from tflabench.bench.nvml import device_info

    info = device_info()
    if device != "cuda":
        return "", info
    if "name" not in info:
        import torch

        info["name"] = torch.cuda.get_device_name(0)
    return info["name"], info


def _open_meta(run_dir: Path, spec: SweepSpec, jobs: list[Job], device: str, gpu_info: dict[str, str],
               derivation) -> dict[str, Any]:
    from dataclasses import asdict

    from tflabench.bench.results import META_FILE, command_line, new_meta, now_iso, read_meta, write_meta

    path = run_dir / META_FILE
    if path.exists():
        meta = read_meta(path)
        meta.setdefault("resumed", []).append({"at": now_iso(), "command": command_line()})
        meta["finished"] = None
    else:
        kernels = list({job.kernel.name: job.kernel for job in jobs}.values())
        meta = new_meta(run=run_dir.name, device=device, gpu_info=gpu_info, kernels=kernels,
                        derivation=derivation, sweep=asdict(spec), dtypes=spec.dtypes)
    write_meta(path, meta)
    return meta


def run_sweep(spec: SweepSpec, jobs: list[Job], run_dir: Path, *, device: str, modules: tuple[str, ...],
              budget_s: float | None, lanes: list[dict[str, str]] | None = None,
              retry: frozenset[str] = frozenset()) -> None:
    """Measure the jobs not yet in ``run_dir/results.csv``, then print the summary of the whole run.

    lanes: one environment override per lane (`gpu_lanes`); kernels run in parallel, one per lane.
    retry: row statuses whose points are measured again (`results.set_aside` keeps the old rows)."""
    from tflabench.bench.results import (
        LOG_DIR,
        META_FILE,
        RESULTS_FILE,
        Derivation,
        ResultsWriter,
        finished_keys,
        now_iso,
        read_rows,
        set_aside,
        write_meta,
    )

    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    gpu, gpu_info = _gpu_name(device)
    derivation = Derivation(gpu)
    meta = _open_meta(run_dir, spec, jobs, device, gpu_info, derivation)
    if retry:
        moved, aside = set_aside(run_dir / RESULTS_FILE, set(retry), {job.key for job in jobs})
        if meta["resumed"]:  # a run that starts here has no rows to retry and no resume to record them on
            meta["resumed"][-1] |= {"retried_rows": moved, "retried_file": aside}
            write_meta(run_dir / META_FILE, meta)
        typer.echo(f"--retry: {moved} rows ({', '.join(sorted(retry))}) to measure again"
                   + (f"; the old rows are in {aside}" if aside else ""))
    done = finished_keys(run_dir / RESULTS_FILE)
    pending = [job for job in jobs if job.key not in done]
    deadline = None if budget_s is None else time.monotonic() + budget_s
    context = _RunContext(run_dir, device, gpu, derivation, spec, modules, deadline)
    with ResultsWriter(run_dir / RESULTS_FILE) as writer, _progress() as progress:
        task = progress.add_task("starting", total=len(pending))
        written = _run_jobs(pending, context, writer, lambda text: progress.update(task, description=text),
                            lambda: progress.advance(task), lanes or [{}])
    left = len(pending) - written
    if left == 0:
        meta["finished"] = now_iso()
        write_meta(run_dir / META_FILE, meta)
    _print_summary(read_rows(run_dir / RESULTS_FILE), run_dir, left)


class _RunContext:
    """What every row of one run shares."""

    def __init__(self, run_dir: Path, device: str, gpu: str, derivation, spec: SweepSpec,
                 modules: tuple[str, ...], deadline: float | None) -> None:
        self.run_dir, self.device, self.gpu, self.derivation = run_dir, device, gpu, derivation
        self.spec, self.modules, self.deadline = spec, modules, deadline

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def time_left_for(self, seconds: float) -> bool:
        """Whether the budget leaves ``seconds`` (a kernel's first call: compilation and autotuning) before
        it ends: a first call of minutes started just before the budget ends would be cut off by the
        command's time limit and lost, so such a kernel waits for the next --resume."""
        return self.deadline is None or time.monotonic() + seconds <= self.deadline

    def row(self, job: Job, measured: dict[str, Any]) -> dict[str, Any]:
        from tflabench.bench.results import make_row

        derived = self.derivation.columns(job.kernel, job.point, measured.get("time_ms"))
        return make_row(run=self.run_dir.name, kernel=job.kernel, version=job.version, point=job.point,
                        device=self.device, gpu=self.gpu, measured=measured, derived=derived)


def _run_jobs(jobs: list[Job], context: _RunContext, writer, describe, advance,
              lanes: list[dict[str, str]]) -> int:
    """Write a row for every job (decided ones at once, the others measured kernel by kernel, one kernel
    at a time per lane) until the budget runs out; returns the number of rows written."""
    groups: queue.SimpleQueue = queue.SimpleQueue()
    for _, group in itertools.groupby(jobs, key=lambda job: job.kernel.name):
        groups.put(list(group))
    lock = threading.Lock()
    written = 0

    def emit(row: dict[str, Any]) -> None:
        nonlocal written
        with lock:
            writer.write(row)
            written += 1
            advance()

    def lane(env: dict[str, str]) -> None:
        while not context.out_of_time():
            try:
                group = groups.get_nowait()
            except queue.Empty:
                return
            _run_kernel_group(group, context, emit, describe, env)

    if len(lanes) == 1:
        lane(lanes[0])
    else:
        _run_lanes(lane, lanes)
    return written


def _run_lanes(lane, lanes: list[dict[str, str]]) -> None:
    """``lane(env)`` for every lane in daemon threads. A lane's exception ends the sweep, as it would
    without lanes; so does Ctrl-C (the main thread waits interruptibly, and the workers exit with the
    sweep process)."""
    errors: list[BaseException] = []

    def run(env: dict[str, str]) -> None:
        try:
            lane(env)
        except BaseException as exc:  # re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(env,), name=f"lane-{number}", daemon=True)
               for number, env in enumerate(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _run_kernel_group(group: list[Job], context: _RunContext, emit, describe, env: dict[str, str]) -> None:
    """Rows of one kernel's jobs: decided ones first, then the measured ones from its worker processes."""
    from tflabench.bench.results import LOG_DIR
    from tflabench.bench.worker import measure_kernel_points

    kernel_name = group[0].kernel.name
    for job in (job for job in group if job.status is not None):
        emit(context.row(job, {"status": job.status, "reason": job.reason}))
    to_measure = {job.point: job for job in group if job.status is None}
    first_call_s = group[0].kernel.first_call_s if context.device == "cuda" else 0.0
    if not to_measure:
        return
    log_path = context.run_dir / LOG_DIR / f"{kernel_name}.log"
    if not context.time_left_for(first_call_s):
        with open(log_path, "a") as log:
            log.write(f"== not started: its first call takes about {first_call_s:.0f} s, more than the "
                      "budget has left; it comes first with --resume\n")
        return
    if env:
        with open(log_path, "a") as log:
            log.write(f"== lane: {' '.join(f'{name}={value}' for name, value in env.items())}\n")
    points = _points_in_budget(to_measure.values(), context, describe)
    results = measure_kernel_points(
        kernel_name, points, device=context.device, timeout_s=context.spec.timeout_s + first_call_s,
        warmup=context.spec.warmup, repeats=context.spec.repeats, modules=context.modules,
        log_path=log_path, env=env)
    for point, measured in results:
        emit(context.row(to_measure[point], measured))


def _points_in_budget(jobs, context: _RunContext, describe):
    for job in jobs:
        if context.out_of_time():
            return
        describe(f"{job.kernel.name}  {job.point.key()}")
        yield job.point


# ----------------------------------------------------------------------------------------------- output


def _progress():
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("ETA"), TimeRemainingColumn(), console=Console(stderr=True))


def _print_jobs(jobs: list[Job]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("kernel", "point", "plan", "reason", title=f"{len(jobs)} jobs")
    for job in jobs:
        table.add_row(job.kernel.name, job.point.key(), job.status or "measure", job.reason)
    Console().print(table)


def _print_summary(rows: list[dict[str, str]], run_dir: Path, left: int) -> None:
    from rich.console import Console

    console = Console()
    console.print(_status_table(rows))
    console.print(_ranking_table(rows))
    problems = _problem_table(rows)
    if problems.row_count:
        console.print(problems)
    console.print(f"results: {run_dir}")
    if left:
        console.print(f"budget reached: {left} points left; run the same command with --resume to continue")


def _status_table(rows: list[dict[str, str]]):
    from rich.table import Table

    from tflabench.bench.results import status_counts
    from tflabench.bench.schema import STATUSES

    counts = status_counts(rows)
    present = [status for status in STATUSES if any(counter[status] for counter in counts.values())]
    table = Table("kernel", *present, title="Rows per status")
    for kernel, counter in sorted(counts.items()):
        table.add_row(kernel, *(str(counter[status] or "") for status in present))
    return table


def _ranking_table(rows: list[dict[str, str]]):
    from rich.table import Table

    from tflabench.bench.results import rankings

    table = Table("mode", "dtype", "B x T", "d_model", "ranking (median ms)",
                  title="Ranking (status ok only; failed_check is never ranked)")
    for (mode, dtype, batch, seq_len, width), entries in rankings(rows).items():
        ranking = "\n".join(f"{rank}. {kernel} {label}: {ms:.3f}"
                            for rank, (ms, kernel, label) in enumerate(entries, start=1))
        table.add_row(mode, dtype, f"{batch} x {seq_len}", str(width), ranking)
    return table


def _problem_table(rows: list[dict[str, str]], limit: int = 20):
    from rich.table import Table

    from tflabench.bench.results import point_from_row

    failed = [row for row in rows if row["status"] in ("failed_check", "crash", "timeout", "oom", "error")]
    table = Table("kernel", "point", "status", "reason",
                  title=f"Failures ({len(failed)}" + (f", first {limit})" if len(failed) > limit else ")"))
    for row in failed[:limit]:
        table.add_row(row["kernel"], point_from_row(row).key(), row["status"], row["reason"])
    return table
