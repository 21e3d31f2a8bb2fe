"""Ray as the sweep's scheduler: ``tflabench sweep --ray [ADDRESS]`` (a local Ray instance, or a running
cluster: ``auto``, ``ray://host:port``, ``host:port``) and ``--gpus 0,1`` (a local instance on those GPUs).

Each kernel's group of points is one Ray task holding one GPU; the task starts the kernel's isolated worker
processes (`tflabench.bench.groups.measure_group`) on its node, so a crash, an OOM or a hang becomes a row
with its reason and the Ray worker lives on. The task streams back, point by point, the measured columns
and the new lines of the workers' log; the sweep process alone writes results.csv and meta.json. A task
lost with its node (or its Ray worker killed) is submitted again for the points it had not reported, at
most `TASK_RESUBMISSIONS` times; after that those points get a ``crash`` row with the reason.

With ``--gpu-models`` every group runs once per GPU model (Ray's ``accelerator_type`` resources); one
task per model first reports the model's GPU and, when the sweep host stores no calibration for it,
measures its ceilings there (`tflabench.analysis.calibrate`), which are stored like ``tflabench calibrate``
does.

The environment variable ``TFLABENCH_RAY_GPU_RESOURCE`` names a custom Ray resource that tasks hold instead
of a GPU (a CPU machine standing in for a GPU cluster, as the tests do). ray is imported here only, when
a sweep asks for it (the optional extra ``cluster``).
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tflabench.bench.groups import GpuFacts, GroupSettings, local_gpu_facts, measure_group
from tflabench.bench.sweep import Job
from tflabench.errors import InputError

GPU_RESOURCE_ENV = "TFLABENCH_RAY_GPU_RESOURCE"
INSTALL_HINT = ("--ray and --gpus need the ray package, which is not installed: "
                "pip install 'tflabench[cluster]' (or pip install 'ray[default]')")
#: how often the points of a lost task are submitted again before they are recorded as crashed
TASK_RESUBMISSIONS = 2
_ACCELERATOR_PREFIX = "accelerator_type:"
#: seconds the sweep process waits for a row before it looks again (Ctrl-C is handled between waits)
_WAIT_S = 1.0


def import_ray():
    """The ray module, or InputError telling how to install it."""
    try:
        import ray
    except ImportError:
        raise InputError(INSTALL_HINT) from None
    return ray


def gpu_resource() -> str:
    """The Ray resource a task holds one unit of: ``GPU``, or the custom one of TFLABENCH_RAY_GPU_RESOURCE."""
    return os.environ.get(GPU_RESOURCE_ENV) or "GPU"


def local_gpu_selection(gpus: str, device: str) -> str:
    """CUDA_VISIBLE_DEVICES of a local Ray instance on the CUDA devices ``--gpus`` lists (indices among
    this process's visible devices)."""
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
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = visible.split(",") if visible else [str(index) for index in range(count)]
    return ",".join(physical[index].strip() for index in indices)


def connect(address: str | None, visible_gpus: str | None = None) -> None:
    """Join the Ray cluster at ``address``, or start a local instance (on ``visible_gpus`` only, when
    given); nothing when this process is connected already."""
    ray = import_ray()
    if ray.is_initialized():
        return
    if address is not None:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        return
    resources = {} if gpu_resource() == "GPU" else {gpu_resource(): float(os.cpu_count() or 1)}
    if visible_gpus is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible_gpus
    ray.init(resources=resources, include_dashboard=False, log_to_driver=False,
             logging_level=logging.WARNING)


def resolve_models(gpu_models: str | None) -> tuple[str | None, ...]:
    """The targets of ``--gpu-models``: Ray accelerator types of the cluster (``H100``, ``A100-80G``) for
    the listed models (h100, a100), or all of them for ``all``; ``(None,)`` (any GPU) without it."""
    if gpu_models is None:
        return (None,)
    ray = import_ray()
    present = sorted(key[len(_ACCELERATOR_PREFIX):] for key in ray.cluster_resources()
                     if key.startswith(_ACCELERATOR_PREFIX))
    if gpu_models.strip().lower() == "all":
        if not present:
            raise InputError("--gpu-models all: the Ray cluster reports no GPU models (accelerator types)")
        return tuple(present)
    targets = []
    for model in (part.strip() for part in gpu_models.split(",") if part.strip()):
        matches = [name for name in present if name.lower().split("-")[0] == model.lower().split("-")[0]]
        if not matches:
            raise InputError(f"--gpu-models: no node of the Ray cluster has a {model} GPU "
                             f"(it has: {', '.join(present) or 'no GPU models'})")
        targets += matches
    return tuple(dict.fromkeys(targets))


def _task_options(target: str | None) -> dict[str, Any]:
    """One GPU (or unit of the stand-in resource), on a node of the target model, never retried by Ray
    (lost tasks are submitted again by the sweep, for the points they had not reported)."""
    resource = gpu_resource()
    options: dict[str, Any] = {"num_cpus": 1, "max_retries": 0}
    resources = {} if resource == "GPU" else {resource: 1}
    if resource == "GPU":
        options["num_gpus"] = 1
    if target is not None:
        resources[_ACCELERATOR_PREFIX + target] = 0.001
    if resources:
        options["resources"] = resources
    return options


# -------------------------------------------------------------------------------------- in the Ray task


def _task_gpu_facts(target: str | None) -> GpuFacts:
    """The task's GPU; without CUDA (a stand-in resource) it is named by the model it was scheduled on."""
    facts = local_gpu_facts()
    if not facts.name and target is not None:
        return GpuFacts(target, facts.device, facts.info)
    return facts


def gpu_facts_task(target: str | None, calibrated: frozenset[str]) -> tuple[GpuFacts, Any]:
    """A target's GPU facts, and its measured ceilings when its GPU model is not in ``calibrated`` (keys of
    the GPUs the sweep host has a calibration of); None when calibrated already or not a known CUDA GPU."""
    facts = _task_gpu_facts(target)
    if facts.device != "cuda":
        return facts, None
    from tflabench.analysis.hardware import gpu_from_device_name

    gpu = gpu_from_device_name(facts.name)
    if gpu is None or gpu.key in calibrated:
        return facts, None
    from tflabench.analysis.calibrate import measure_ceilings

    return facts, measure_ceilings()


def kernel_group_task(kernel_name: str, first_call_s: float, points: list, settings: GroupSettings,
                      target: str | None, python_path: str):
    """The Ray task of one kernel's points: yields the GPU's facts, then per point
    ``{"point", "measured", "log"}`` (log: the workers' new log text), then ``{"log"}``."""
    facts = _task_gpu_facts(target)
    yield {"facts": facts}
    with tempfile.TemporaryDirectory(prefix="tflabench-") as folder:
        log = _LogTail(Path(folder) / f"{kernel_name}.log")
        results = measure_group(kernel_name, first_call_s, points, settings, facts.device, log.path,
                                env={"PYTHONPATH": python_path})
        for point, measured in results:
            yield {"point": point, "measured": measured, "log": log.new_text()}
        yield {"log": log.new_text()}


class _LogTail:
    """A log file and what of it was not read yet."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.path.touch()
        self._offset = 0

    def new_text(self) -> str:
        with open(self.path, errors="replace") as handle:
            handle.seek(self._offset)
            text = handle.read()
            self._offset = handle.tell()
        return text


# --------------------------------------------------------------------------------- in the sweep process


@dataclass
class _Submission:
    """One kernel's task: its target, the jobs it has not reported yet, the GPU it reported."""

    kernel: Any
    target: str | None
    jobs: dict[Any, Job]
    attempt: int = 0
    facts: GpuFacts | None = None
    errors: list[str] = field(default_factory=list)


class RayScheduler:
    """Groups of points as Ray tasks on the GPUs of a Ray cluster (see the module's docstring)."""

    def __init__(self, targets: tuple[str | None, ...]) -> None:
        self.ray = import_ray()
        self.targets = targets
        self._facts: dict[str | None, GpuFacts] = {}

    def facts(self, target: str | None) -> GpuFacts:
        """The target's GPU, asked of a task on a node of that model (calibrating it there if needed)."""
        if target not in self._facts:
            from tflabench.analysis.hardware import gpu_from_device_name, save_measured_ceilings

            task = self.ray.remote(max_calls=1)(gpu_facts_task).options(**_task_options(target))
            facts, ceilings = self.ray.get(task.remote(target, _calibrated_gpu_keys()))
            if ceilings is not None:
                save_measured_ceilings(gpu_from_device_name(facts.name).key, ceilings)
            self._facts[target] = facts
        return self._facts[target]

    def run(self, work: list[tuple[str | None, list[Job]]], settings: GroupSettings, recorder,
            describe: Callable[[str], None]) -> None:
        running: dict[Any, _Submission] = {}
        for target, group in work:
            self._submit(_Submission(group[0].kernel, target, {job.point: job for job in group}), settings,
                         running)
        while running:
            ready, _ = self.ray.wait(list(running), num_returns=1, timeout=_WAIT_S)
            for stream in ready:
                self._take(stream, running, settings, recorder, describe)

    def _submit(self, submission: _Submission, settings: GroupSettings, running: dict) -> None:
        kernel = submission.kernel
        task = self.ray.remote(kernel_group_task).options(**_task_options(submission.target))
        stream = task.remote(kernel.name, kernel.first_call_s, list(submission.jobs), settings,
                             submission.target, os.pathsep.join(path for path in sys.path if path))
        running[stream] = submission

    def _take(self, stream, running: dict, settings: GroupSettings, recorder, describe) -> None:
        """Handle the next item of a task's stream: facts, a row, log text, its end or its loss."""
        submission = running[stream]
        try:
            item = self.ray.get(next(stream))
        except StopIteration:
            del running[stream]
            return
        except self.ray.exceptions.RayError as exc:
            del running[stream]
            self._lost(submission, exc, settings, recorder, running)
            return
        recorder.append_log(submission.kernel.name, item.get("log", ""))
        if "facts" in item:
            submission.facts = item["facts"]
            recorder.gpu_seen(submission.facts)
        if "point" in item:
            job = submission.jobs.pop(item["point"])
            describe(f"{job.kernel.name}  {job.point.key()}  {submission.facts.name}")
            recorder.write(job, item["measured"], submission.facts)

    def _lost(self, submission: _Submission, exc: Exception, settings: GroupSettings, recorder,
              running: dict) -> None:
        """A task died (node lost, Ray worker killed): submit its unreported points again, or record them
        as crashed once it was lost `TASK_RESUBMISSIONS` + 1 times; after the budget's end they are left
        for --resume."""
        from tflabench.bench.worker import one_line

        kernel_name = submission.kernel.name
        reason = one_line(f"{type(exc).__name__}: {exc}", 300)
        submission.errors.append(reason)
        recorder.append_log(kernel_name, f"== Ray task lost: {reason}\n")
        if not submission.jobs or settings.out_of_time():
            return
        if submission.attempt < TASK_RESUBMISSIONS:
            submission.attempt += 1
            self._submit(submission, settings, running)
            return
        facts = submission.facts or self.facts(submission.target)
        for job in submission.jobs.values():
            recorder.write(job, {"status": "crash", "reason": f"the Ray task measuring it was lost "
                                 f"{len(submission.errors)} times: {reason}"}, facts)


def _calibrated_gpu_keys() -> frozenset[str]:
    """Keys of the GPUs with a stored calibration on the sweep host."""
    from tflabench.analysis.hardware import calibration_dir

    return frozenset(path.stem for path in calibration_dir().glob("*.json"))


def check_ray_options(address: str | None, gpus: str | None, device: str) -> str | None:
    """Check ``--ray ADDRESS`` / ``--gpus`` without starting Ray (Ray must be importable); the
    CUDA_VISIBLE_DEVICES of the local instance of ``--gpus``, or None."""
    if gpus is not None and address is not None:
        raise InputError("--gpus starts a local Ray instance on this machine's GPUs: not with --ray ADDRESS")
    visible = local_gpu_selection(gpus, device) if gpus is not None else None
    import_ray()
    return visible


def ray_scheduler(address: str | None, gpu_models: str | None, visible_gpus: str | None) -> RayScheduler:
    """The scheduler of ``--ray ADDRESS`` / ``--gpu-models`` / ``--gpus`` (checked by `check_ray_options`):
    joins the cluster or starts the local instance."""
    connect(address, visible_gpus)
    return RayScheduler(resolve_models(gpu_models))
