"""One kernel's group of points measured where it runs: in the sweep's own process, or in a Ray task on a
node of a cluster (`tflabench.bench.ray_engine`).

Either way the points go to the kernel's isolated worker processes (`tflabench.bench.worker`), so a crash,
an OOM or a hang becomes the status of a point. `GpuFacts` describes the GPU a group ran on, which every
row records; `GroupSettings` is what a group needs from the sweep, small enough to ship to a Ray task.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tflabench.core import SweepPoint


@dataclass(frozen=True)
class GpuFacts:
    """The device of a process: name of its GPU ("" without CUDA), the sweep device ("cuda" or
    "cpu-interpreter") and NVML facts (driver, memory, clocks) for meta.json."""

    name: str
    device: str
    info: dict[str, str] = field(default_factory=dict)


def local_gpu_facts() -> GpuFacts:
    """The facts of this process's device (CUDA device 0 of its visible devices)."""
    from tflabench.bench.measure import prepare_device
    from tflabench.nvml import device_info

    device = prepare_device()
    info = device_info()
    if device != "cuda":
        return GpuFacts("", device, info)
    if "name" not in info:
        import torch

        info["name"] = torch.cuda.get_device_name(0)
    return GpuFacts(info["name"], device, info)


def model_matches(model: str, gpu_name: str) -> bool:
    """Whether a GPU model as ``--gpu-models`` names it (h100, H200, A100) is the GPU named ``gpu_name``
    (``NVIDIA H100 80GB HBM3``): the model is one of the name's words, case ignored."""
    words = re.split(r"[\s_-]+", gpu_name.lower())
    return model.lower().split("-")[0] in words


@dataclass(frozen=True)
class GroupSettings:
    """What measuring a group needs from the sweep: worker settings, kernel modules, the budget's end
    (``deadline``, seconds since the epoch, so that it means the same on every node; None: no budget) and
    the size of the correctness gate (``check_at``, `tflabench.bench.measure.ReferenceGate`)."""

    warmup: int
    repeats: int
    timeout_s: float
    modules: tuple[str, ...] = ()
    deadline: float | None = None
    check_at: str = "small"

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def time_left_for(self, seconds: float) -> bool:
        """Whether the budget leaves ``seconds`` (a kernel's first call: compilation and autotuning) before
        it ends: a first call of minutes started just before the budget ends would be cut off by the
        command's time limit and lost, so such a kernel waits for the next --resume."""
        return self.deadline is None or time.time() + seconds <= self.deadline


def measure_group(kernel_name: str, first_call_s: float, points: list[SweepPoint], settings: GroupSettings,
                  device: str, log_path: Path, *, env: dict[str, str] | None = None,
                  on_start: Callable[[SweepPoint], None] | None = None
                  ) -> Iterator[tuple[SweepPoint, dict[str, Any]]]:
    """(point, measured columns) of the points of one kernel, in order, from its worker processes, until
    the budget ends. A kernel whose first call does not fit in the budget left is not started (a line in
    its log says so). ``on_start`` is told of each point before it is measured."""
    from tflabench.bench.worker import measure_kernel_points

    first_call_s = first_call_s if device == "cuda" else 0.0
    if not settings.time_left_for(first_call_s):
        with open(log_path, "a") as log:
            log.write(f"== not started: its first call takes about {first_call_s:.0f} s, more than the "
                      "budget has left; it comes first with --resume\n")
        return
    yield from measure_kernel_points(
        kernel_name, _points_in_budget(points, settings, on_start), device=device,
        timeout_s=settings.timeout_s + first_call_s, warmup=settings.warmup, repeats=settings.repeats,
        modules=settings.modules, log_path=log_path, env=env, check_at=settings.check_at)


def _points_in_budget(points: Iterable[SweepPoint], settings: GroupSettings,
                      on_start: Callable[[SweepPoint], None] | None) -> Iterator[SweepPoint]:
    for point in points:
        if settings.out_of_time():
            return
        if on_start is not None:
            on_start(point)
        yield point
