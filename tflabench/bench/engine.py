"""The sweep engine: measures a sweep's jobs into a run directory and prints the run's summary.

Rows decided without running (skipped, unavailable) are written at once; the groups of points to measure,
one group per kernel (and per GPU model of ``--gpu-models``), go to a scheduler: `LocalScheduler` measures
them in this process one kernel after the other, `tflabench.bench.ray_engine.RayScheduler` (``--ray``,
``--gpus``) as Ray tasks on the GPUs of a machine or a cluster. Each group's points run in its worker
processes (`tflabench.bench.groups`). Whatever the scheduler, this process alone writes the rows as they
arrive (`Recorder`, `tflabench.bench.results`), so a killed or budget-stopped run continues with
``--resume``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import typer

from tflabench.bench.groups import GpuFacts, GroupSettings, local_gpu_facts, measure_group, model_matches
from tflabench.bench.sweep import Job, SweepSpec

#: A group of one kernel's jobs to measure on a GPU model (None: whichever GPU the scheduler has).
Work = tuple[str | None, list[Job]]


class Scheduler(Protocol):
    """Where and how the groups of points are measured."""

    #: the GPU models of the run (``--gpu-models``); ``(None,)``: the GPUs the scheduler has
    targets: tuple[str | None, ...]

    def facts(self, target: str | None) -> GpuFacts:
        """The GPU that measures the target's points (that of the decided rows, and of meta.json)."""

    def run(self, work: list[Work], settings: GroupSettings, recorder: Recorder,
            describe: Callable[[str], None]) -> None:
        """Measure every group (until the budget ends), handing each row to ``recorder``."""


class LocalScheduler:
    """Groups measured in this process, one kernel after the other, on its device."""

    targets: tuple[str | None, ...] = (None,)

    def __init__(self) -> None:
        self._facts = local_gpu_facts()

    def facts(self, target: str | None) -> GpuFacts:
        return self._facts

    def run(self, work: list[Work], settings: GroupSettings, recorder: Recorder,
            describe: Callable[[str], None]) -> None:
        for _, group in work:
            if settings.out_of_time():
                return
            jobs = {job.point: job for job in group}
            for point, measured in self._measure(group[0].kernel, list(jobs), settings, recorder, describe):
                recorder.write(jobs[point], measured, self._facts)

    def _measure(self, kernel, points, settings: GroupSettings, recorder: Recorder, describe):
        return measure_group(kernel.name, kernel.first_call_s, points, settings, self._facts.device,
                             recorder.log_path(kernel.name),
                             on_start=lambda point: describe(f"{kernel.name}  {point.key()}"))


class Recorder:
    """The run's writer: rows with the derived columns of the GPU that measured them (appended and fsynced
    by `results.ResultsWriter`), the workers' logs, and every GPU of the run in meta.json."""

    def __init__(self, run_dir: Path, writer, meta: dict[str, Any], advance: Callable[[], None]) -> None:
        self.run_dir, self._writer, self._meta, self._advance = run_dir, writer, meta, advance
        self._derivations: dict[str, Any] = {}
        self.written = 0

    def log_path(self, kernel_name: str) -> Path:
        from tflabench.bench.results import LOG_DIR

        return self.run_dir / LOG_DIR / f"{kernel_name}.log"

    def append_log(self, kernel_name: str, text: str) -> None:
        if text:
            with open(self.log_path(kernel_name), "a") as log:
                log.write(text)

    def gpu_seen(self, facts: GpuFacts) -> None:
        """Record a GPU of the run in meta.json (its facts and the ceilings its rows are derived with)."""
        from tflabench.bench.results import META_FILE, ceilings_record, write_meta

        gpus = self._meta.setdefault("gpus", {})
        if facts.name in gpus:
            return
        gpus[facts.name] = {"device": facts.device, "info": facts.info,
                            "ceilings": ceilings_record(self._derivation(facts.name),
                                                        tuple(self._meta["sweep"]["dtypes"]))}
        write_meta(self.run_dir / META_FILE, self._meta)

    def _derivation(self, gpu_name: str):
        from tflabench.bench.derived import Derivation

        if gpu_name not in self._derivations:
            self._derivations[gpu_name] = Derivation(gpu_name)
        return self._derivations[gpu_name]

    def write(self, job: Job, measured: dict[str, Any], facts: GpuFacts) -> None:
        from tflabench.bench.results import make_row

        self.gpu_seen(facts)
        derived = self._derivation(facts.name).columns(job.kernel, job.point, measured.get("time_ms"))
        self._writer.write(make_row(run=self.run_dir.name, kernel=job.kernel, version=job.version,
                                    point=job.point, device=facts.device, gpu=facts.name, measured=measured,
                                    derived=derived))
        self.written += 1
        self._advance()


# ----------------------------------------------------------------------------------------------- running


def _open_meta(run_dir: Path, spec: SweepSpec, jobs: list[Job], first: GpuFacts) -> dict[str, Any]:
    from dataclasses import asdict

    from tflabench.bench.derived import Derivation
    from tflabench.bench.results import META_FILE, new_meta, read_meta, resume_record, write_meta

    path = run_dir / META_FILE
    kernels = list({job.kernel.name: job.kernel for job in jobs}.values())
    if path.exists():
        meta = read_meta(path)
        meta.setdefault("resumed", []).append(resume_record(gpu_info=first.info, kernels=kernels))
        meta["finished"] = None
    else:
        meta = new_meta(run=run_dir.name, device=first.device, gpu_info=first.info, kernels=kernels,
                        derivation=Derivation(first.name), sweep=asdict(spec), dtypes=spec.dtypes)
    write_meta(path, meta)
    return meta


def _retry(run_dir: Path, meta: dict[str, Any], jobs: list[Job], retry: frozenset[str]) -> None:
    """Set aside the rows of the ``--retry`` statuses, so that their points are measured again."""
    from tflabench.bench.results import META_FILE, RESULTS_FILE, set_aside, write_meta

    moved, aside = set_aside(run_dir / RESULTS_FILE, set(retry), {job.key for job in jobs})
    if meta["resumed"]:  # a run that starts here has no rows to retry and no resume to record them on
        meta["resumed"][-1] |= {"retried_rows": moved, "retried_file": aside}
        write_meta(run_dir / META_FILE, meta)
    typer.echo(f"--retry: {moved} rows ({', '.join(sorted(retry))}) to measure again"
               + (f"; the old rows are in {aside}" if aside else ""))


def pending_work(jobs: list[Job], rows: list[dict[str, str]],
                 targets: tuple[str | None, ...]) -> list[Work]:
    """The groups of jobs, per kernel and target GPU model, that have no row yet (a row of a target is one
    whose GPU is of that model; with target None, any row)."""
    from tflabench.bench.results import point_from_row

    work: list[Work] = []
    for target in targets:
        done = {(row["kernel"], point_from_row(row).key()) for row in rows
                if target is None or model_matches(target, row["gpu"])}
        groups: dict[str, list[Job]] = {}
        for job in jobs:
            if job.key not in done:
                groups.setdefault(job.kernel.name, []).append(job)
        work += [(target, group) for group in groups.values()]
    return work


def run_sweep(spec: SweepSpec, jobs: list[Job], run_dir: Path, *, modules: tuple[str, ...],
              budget_s: float | None, retry: frozenset[str] = frozenset(),
              scheduler: Scheduler | None = None) -> None:
    """Measure the jobs not yet in ``run_dir/results.csv``, then print the summary of the whole run.

    scheduler: where the points are measured (default: `LocalScheduler`, this process); one group of
    jobs per kernel and target GPU model. retry: row statuses whose points are measured again
    (`results.set_aside` keeps the old rows)."""
    from tflabench.bench.results import (
        LOG_DIR,
        META_FILE,
        RESULTS_FILE,
        ResultsWriter,
        now_iso,
        read_rows,
        write_meta,
    )

    scheduler = scheduler or LocalScheduler()
    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    facts = {target: scheduler.facts(target) for target in scheduler.targets}
    meta = _open_meta(run_dir, spec, jobs, next(iter(facts.values())))
    if retry:
        _retry(run_dir, meta, jobs, retry)
    work = pending_work(jobs, read_rows(run_dir / RESULTS_FILE), scheduler.targets)
    pending = sum(len(group) for _, group in work)
    deadline = None if budget_s is None else time.time() + budget_s
    settings = GroupSettings(spec.warmup, spec.repeats, spec.timeout_s, modules, deadline, spec.check_at)
    with ResultsWriter(run_dir / RESULTS_FILE) as writer, _progress() as progress:
        task = progress.add_task("starting", total=pending)
        recorder = Recorder(run_dir, writer, meta, lambda: progress.advance(task))
        for target, group in work:
            recorder.gpu_seen(facts[target])
            for job in (job for job in group if job.status is not None):
                recorder.write(job, {"status": job.status, "reason": job.reason}, facts[target])
        to_measure = [(target, [job for job in group if job.status is None]) for target, group in work]
        scheduler.run([(target, group) for target, group in to_measure if group], settings, recorder,
                      lambda text: progress.update(task, description=text))
    left = pending - recorder.written
    if left == 0:
        meta["finished"] = now_iso()
        write_meta(run_dir / META_FILE, meta)
    _print_summary(read_rows(run_dir / RESULTS_FILE), run_dir, left)


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
    from tflabench.bench.results import launch_bound_rows, unsteady_rows
    from tflabench.schema import LAUNCH_BOUND, MAX_SPREAD

    for named, what in ((unsteady_rows(rows), f"unsteady after re-timing (interquartile range above "
                                              f"{MAX_SPREAD:.0%} of the median)"),
                        (launch_bound_rows(rows), f"near the launcher's pace (issuing a call took at "
                                                  f"least {LAUNCH_BOUND:.0%} of its time)")):
        if named:
            listed = ", ".join(named[:5]) + (" ..." if len(named) > 5 else "")
            console.print(f"{len(named)} rows {what}: {listed}")
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
