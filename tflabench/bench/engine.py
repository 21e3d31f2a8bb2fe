"""The sweep engine: measures a sweep's jobs into a run directory and prints the run's summary.

Kernels are measured one at a time per lane (`gpu_lanes`: one lane per GPU of ``--gpus``), each kernel's
points in its worker processes (`tflabench.bench.worker`) under a time limit; rows are written as they
arrive (`tflabench.bench.results`), so a killed or budget-stopped run continues with ``--resume``.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from pathlib import Path
from typing import Any

import typer

from tflabench.bench.sweep import Job, SweepSpec
from tflabench.errors import InputError


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
    from tflabench.bench.derived import Derivation
    from tflabench.bench.results import (
        LOG_DIR,
        META_FILE,
        RESULTS_FILE,
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
    from tflabench.schema import STATUSES

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
