"""`tflabench sweep`, `tflabench rederive` and `tflabench merge`: the command-line side of a benchmark sweep.

The sweep comes from defaults < ``--preset`` < ``--config FILE.toml`` < axis flags (the TOML format:
docs/sweep-toml.md); `plan_sweep` checks every input, the same for ``--dry-run`` and the run;
`tflabench.bench.engine` measures it into ``<out>/<run-name>/`` (results.csv + meta.json).
"""

from __future__ import annotations

import datetime
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from tflabench.bench.results import META_FILE, RESULTS_FILE, row_statuses
from tflabench.bench.sweep import (
    PRESETS,
    Job,
    SweepSpec,
    apply_measure,
    apply_sweep_values,
    load_preset,
    load_sweep_file,
    option_label,
    same_tilings,
)
from tflabench.errors import InputError
from tflabench.inputs import existing_dir, finite_number, output_dir, runs_under
from tflabench.inputs import run_name as checked_run_name

#: Files of which either marks a folder under --out as a run (meta.json is written first).
RUN_MARKERS = (RESULTS_FILE, META_FILE)

_AXIS_HELP = "comma list, or A..B for powers of two from A to B"
#: the value of a bare ``--ray``: start a local Ray instance
LOCAL_RAY = "local"


def register(app) -> None:
    app.command(name="sweep")(sweep)
    app.command(name="rederive")(rederive)
    app.command(name="merge")(merge)


def merge(
    runs: Annotated[list[Path], typer.Argument(help="Run directories to merge (results/<run>), 2 or more.")],
    out: Annotated[Path, typer.Option(help="The merged run's directory (a new one).")],
) -> None:
    """Merge runs (e.g. the same preset on an H100 and on an H200) into one run: rows as they are, every
    source's provenance in meta.json; its report and plots are per GPU."""
    from tflabench.bench.merge import merge_runs

    typer.echo(f"{out}: {merge_runs(runs, out)} rows of {len(runs)} runs")


def rederive(
    run_dir: Annotated[Path, typer.Argument(help="Run directory (results/<run>).")],
) -> None:
    """Recompute a run's derived columns (FLOPs, bytes, TFLOP/s, roofline fractions, model times) with the
    current cost models; the measured columns stay, the previous table is kept beside it."""
    from tflabench.bench.registry import all_kernels
    from tflabench.bench.results import rederive as rederive_run

    output_dir(existing_dir(run_dir, "run directory"), "run directory")
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
    tiling: Annotated[list[str] | None, typer.Option(
        help="Tiling variant of our xl_chunk / fused_chunk kernels, repeatable: default, a named tiling "
             "(out-q2, dv-v256, ...) or field overrides FIELD=VALUE,... (docs/sweep-toml.md#tilings).")
    ] = None,
    warmup: Annotated[int | None, typer.Option(help="Untimed calls per point (compile/autotune).")] = None,
    repeats: Annotated[int | None, typer.Option(
        help="Timed calls per point (median, IQR); on a GPU an unsteady round (IQR above 3 % of the median) "
             "is timed again, up to three rounds.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds per point, warm-up included.")] = None,
    check_at: Annotated[str | None, typer.Option(
        help="Size of the float64 correctness gate: small (each configuration at a small batch and "
             "length) or full (at the timed size).")] = None,
    run_name: Annotated[str | None, typer.Option(help="Run directory name (default: preset + time).")] = None,
    out: Annotated[Path, typer.Option(help="Parent directory of the run directories.")] = Path("results"),
    resume: Annotated[bool, typer.Option(
        help="Continue the existing run --run-name: skip points already in its results.csv.")] = False,
    retry: Annotated[str | None, typer.Option(
        help="With --resume: measure again the points whose rows have these statuses (comma list, e.g. "
             "failed_check,crash); their rows move to results.<time>.retried.csv.")] = None,
    budget: Annotated[float | None, typer.Option(
        help="Start no new point after this many seconds (continue later with --resume).")] = None,
    kernel_module: Annotated[list[str] | None, typer.Option(
        help="Import this module first to register extra kernels (repeatable).")] = None,
    gpus: Annotated[str | None, typer.Option(
        help="CUDA device indices, comma list (e.g. 0,1): kernels run in parallel, one at a time per GPU, "
             "as tasks of a local Ray instance (needs ray: pip install 'tflabench[cluster]').")] = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", metavar="[ADDRESS]",
        help="Run each kernel's points as a Ray task holding one GPU: alone, on a local Ray instance; with "
             "an address (auto, ray://host:port), on that cluster. See docs/cluster.md.")] = None,
    gpu_models: Annotated[str | None, typer.Option(
        help="With --ray: measure every point on each of these GPU models of the cluster (comma list, e.g. "
             "h100,h200), or on all of them (all).")] = None,
    dry_run: Annotated[bool, typer.Option(
        help="Make every check of the run, then list each job with what the run would do (measure, skip, "
             "or with --resume: done, measure again); measure nothing.")] = False,
) -> None:
    """Benchmark kernels over a sweep: runtime (median, IQR), peak memory, roofline columns."""
    flags = {"kernels": kernels, "seq_len": seq_len, "tokens": tokens, "batch": batch, "heads": heads,
             "embedding_dim": embedding_dim, "head_dim_qk": head_dim_qk, "qk_ratio": qk_ratio,
             "head_dim_v": head_dim_v, "chunk_size": chunk_size, "dtype": dtype, "mode": mode,
             "tilings": tiling or None}
    measure = {"warmup": warmup, "repeats": repeats, "timeout": timeout, "check_at": check_at}
    target = RunTarget(out, run_name or f"{preset or 'sweep'}-{datetime.datetime.now():%Y%m%d-%H%M%S}",
                       named=run_name is not None, resume=resume)
    plan = plan_sweep(build_spec(preset, config, _given(flags), _given(measure)), target, retry=retry,
                      budget=budget, modules=tuple(kernel_module or ()),
                      scheduling=Scheduling(ray, gpu_models, gpus))
    for line in same_tilings(plan.jobs):
        typer.echo(f"warning: {line}", err=True)
    if dry_run:
        _print_plan(plan)
        return
    from tflabench.bench.engine import run_sweep

    run_sweep(plan.spec, plan.jobs, plan.run_dir, modules=plan.modules, budget_s=plan.budget_s,
              retry=plan.retry, scheduler=_scheduler(plan))


@dataclass(frozen=True)
class RunTarget:
    """Where a sweep writes: ``out/name``; named: the name was given (not the default one); resume: the run
    must exist and is continued."""

    out: Path
    name: str
    named: bool
    resume: bool


@dataclass(frozen=True)
class Scheduling:
    """Where the points run: ray, the ``--ray`` address (`LOCAL_RAY`: a local instance; None: no Ray);
    gpu_models, ``--gpu-models``; gpus, ``--gpus`` (a local Ray instance on those devices)."""

    ray: str | None
    gpu_models: str | None
    gpus: str | None

    @property
    def address(self) -> str | None:
        """The cluster to join, or None for a local instance."""
        return None if self.ray in (None, LOCAL_RAY) else self.ray

    @property
    def uses_ray(self) -> bool:
        """Whether the points run as Ray tasks (``--ray`` or ``--gpus``)."""
        return self.ray is not None or self.gpus is not None


@dataclass(frozen=True)
class SweepPlan:
    """A sweep whose every input was checked: what a run measures and a dry run lists.

    previous: (kernel, point key) -> status of the rows the run already has (empty for a new run)."""

    spec: SweepSpec
    jobs: list[Job]
    run_dir: Path
    device: str
    modules: tuple[str, ...]
    scheduling: Scheduling
    visible_gpus: str | None
    budget_s: float | None
    retry: frozenset[str]
    previous: dict[tuple[str, str], str]


def plan_sweep(spec: SweepSpec, target: RunTarget, *, retry: str | None, budget: float | None,
               modules: tuple[str, ...], scheduling: Scheduling) -> SweepPlan:
    """Check every input of a sweep (the same checks for a dry run and a run) and expand its jobs."""
    from tflabench.bench.measure import prepare_device

    budget_s = None if budget is None else finite_number(budget, "--budget", 0.0, low_inclusive=True)
    retry_statuses = _retry_statuses(retry, target.resume)
    run_dir = _run_dir(target)
    device = prepare_device()
    visible_gpus = _visible_gpus(scheduling, device)
    jobs = _expand(spec, modules)
    previous = row_statuses(run_dir / RESULTS_FILE) if target.resume else {}
    return SweepPlan(spec, jobs, run_dir, device, modules, scheduling, visible_gpus, budget_s, retry_statuses,
                     previous)


def _visible_gpus(scheduling: Scheduling, device: str) -> str | None:
    """Check the scheduling options (Ray importable when asked for); returns the CUDA_VISIBLE_DEVICES of
    ``--gpus``, or None."""
    if scheduling.gpu_models is not None and scheduling.ray is None:
        raise InputError("--gpu-models picks GPU models of a Ray cluster: pass --ray as well")
    if not scheduling.uses_ray:
        return None
    from tflabench.bench.ray_engine import check_ray_options

    return check_ray_options(scheduling.address, scheduling.gpus, device)


def _scheduler(plan: SweepPlan):
    """Ray's scheduler for --ray / --gpus, else None (the sweep's own process measures)."""
    scheduling = plan.scheduling
    if not scheduling.uses_ray:
        return None
    from tflabench.bench.ray_engine import ray_scheduler

    return ray_scheduler(scheduling.address, scheduling.gpu_models, plan.visible_gpus)


def with_bare_ray_address(argv: list[str]) -> list[str]:
    """The command line with the address of a bare ``--ray`` (the last argument, or followed by another
    option) filled in: `LOCAL_RAY`, a local Ray instance."""
    filled = list(argv)
    for index, argument in enumerate(argv):
        if argument == "--ray" and (index + 1 == len(argv) or argv[index + 1].startswith("-")):
            filled[index] = f"--ray={LOCAL_RAY}"
    return filled


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


def _expand(spec: SweepSpec, modules: tuple[str, ...]) -> list[Job]:
    from tflabench.bench.registry import all_kernels
    from tflabench.bench.sweep import expand, import_kernel_modules

    import_kernel_modules(modules)
    return expand(spec, all_kernels())


def _retry_statuses(retry: str | None, resume: bool) -> frozenset[str]:
    """The row statuses of ``--retry``: failure statuses of the schema, only with --resume."""
    from tflabench.schema import STATUSES

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


def _run_dir(target: RunTarget) -> Path:
    """``out/name``, checked: inside ``--out``, writable, existing exactly when resumed."""
    output_dir(target.out, "--out")
    run_dir = output_dir(target.out / checked_run_name(target.name), "--run-name")
    exists = any((run_dir / marker).is_file() for marker in RUN_MARKERS)
    if exists and not target.resume:
        raise InputError(f"run {str(run_dir)!r} exists: pass --resume to continue it, or another --run-name")
    if target.resume and not exists:
        raise InputError(_no_run_to_resume(target, run_dir))
    return run_dir


def _no_run_to_resume(target: RunTarget, run_dir: Path) -> str:
    runs = runs_under(target.out, RUN_MARKERS)
    out = str(target.out)
    listing = f"runs under {out!r}: {', '.join(runs)}" if runs else f"no runs under {out!r}"
    if not target.named:
        return f"--resume continues an existing run: pass its --run-name ({listing})"
    return f"--resume: no run to continue in {str(run_dir)!r} ({listing})"


def _print_plan(plan: SweepPlan) -> None:
    """The dry run's table: every job with what the run would do with it (measure, skip, already done,
    measure again) and why."""
    from rich.console import Console
    from rich.table import Table

    plans = [_job_plan(job, plan) for job in plan.jobs]
    counts = Counter(action for action, _ in plans)
    summary = ", ".join(f"{count} {action}" for action, count in counts.most_common())
    title = f"{len(plan.jobs)} jobs in {plan.run_dir}: {summary}"
    table = Table("kernel", "point", "plan", "reason", title=title)
    for job, (action, reason) in zip(plan.jobs, plans, strict=True):
        table.add_row(job.kernel.name, job.point.key(), action, reason)
    Console().print(table)


def _job_plan(job: Job, plan: SweepPlan) -> tuple[str, str]:
    """(action, reason) of one job: what the run would do with it."""
    status = plan.previous.get(job.key)
    if status is not None and status not in plan.retry:
        return "done", f"row with status {status} in results.csv"
    if status is not None:
        return "measure again", f"--retry {status}"
    return (job.status or "measure"), job.reason
