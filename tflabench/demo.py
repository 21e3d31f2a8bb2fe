"""`tflabench demo`: the main job on any machine, one step per CLI command.

Steps: `gpus`, `optimal-chunk`, `roofline`, a small `sweep` of our Triton kernels (``tflabench.*``), then
`plot` and `report` of that sweep. Each step runs the real command through the CLI's entry point (which
`register` receives), under a heading that shows the equivalent command line.

Without a GPU the sweep runs our kernels on CPU tensors under the Triton interpreter (tiny float32
shapes): its timings are CPU-interpreter timings that exercise the pipeline, not GPU performance, and
the demo says so. ``TRITON_INTERPRET=1`` is set in this process before any kernel module is imported;
the sweep's worker processes inherit the environment.
"""

from __future__ import annotations

import datetime
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from tflabench.inputs import output_dir

DEFAULT_OUT = Path("results/_scratch/demo")


@dataclass(frozen=True)
class DemoSweep:
    """The sweep of the demo: our kernels on one small problem family, forward and forward+backward."""

    kernels: str
    seq_len: str
    heads: int
    head_dim_qk: int
    head_dim_v: int
    chunk_size: str
    dtype: str
    warmup: int
    repeats: int
    batch: int = 1
    timeout_s: int = 300

    def argv(self) -> tuple[str, ...]:
        """`tflabench sweep` options."""
        options = {"kernels": self.kernels, "seq-len": self.seq_len, "batch": self.batch, "heads": self.heads,
                   "head-dim-qk": self.head_dim_qk, "head-dim-v": self.head_dim_v,
                   "chunk-size": self.chunk_size, "dtype": self.dtype, "mode": "fwd,fwdbw",
                   "warmup": self.warmup, "repeats": self.repeats, "timeout": self.timeout_s}
        return tuple(item for name, value in options.items() for item in (f"--{name}", str(value)))


#: Tiny float32 sweep of our kernels for the Triton interpreter (about a minute on 2 CPU cores).
CPU_SWEEP = DemoSweep("tflabench.*", "64,128", heads=2, head_dim_qk=16, head_dim_v=32, chunk_size="16,32",
                      dtype="float32", warmup=1, repeats=3)
#: `--quick` on CPU (the demo's test): the xl_chunk kernels at two short sequence lengths (the runtime figure
#: needs two).
CPU_QUICK_SWEEP = DemoSweep("tflabench.*.xl_chunk", "32,64", heads=2, head_dim_qk=16, head_dim_v=32,
                            chunk_size="16,32", dtype="float32", warmup=1, repeats=2)
#: A modest bf16 sweep of our kernels on a GPU (a few minutes, mostly Triton compilation).
GPU_SWEEP = DemoSweep("tflabench.*", "1024,4096", heads=8, head_dim_qk=128, head_dim_v=256,
                      chunk_size="64,128,256", dtype="bfloat16", warmup=5, repeats=20, batch=2)
GPU_QUICK_SWEEP = DemoSweep("tflabench.*.xl_chunk", "1024,2048", heads=8, head_dim_qk=128, head_dim_v=256,
                            chunk_size="64,128", dtype="bfloat16", warmup=3, repeats=10, batch=2)
#: Plot kinds a CPU-interpreter run has data for: no peak memory (CUDA only) and no GPU ceilings, so
#: neither the runtime-vs-memory figure nor the runtime model applies.
CPU_PLOT_KINDS = "runtime,roofline,optimal-chunk"

CPU_INTERPRETER_NOTE = (
    "No CUDA GPU: the sweep runs our Triton kernels on CPU tensors under the Triton interpreter "
    "(TRITON_INTERPRET=1), float32, tiny shapes. Its times are CPU-interpreter timings: they show that "
    "the kernels, the harness, the plots and the report work, NOT GPU performance."
)


@dataclass(frozen=True)
class DemoStep:
    """One CLI command of the demo and the line printed above it."""

    title: str
    argv: tuple[str, ...]

    @property
    def command(self) -> str:
        return shlex.join(["tflabench", *self.argv])


def demo_steps(out: Path, run_name: str, on_gpu: bool, quick: bool) -> list[DemoStep]:
    """The commands of the demo; the sweep writes ``out/run_name`` and plot/report read it."""
    run_dir = str(out / run_name)
    if on_gpu:
        sweep, plot_kinds = (GPU_QUICK_SWEEP if quick else GPU_SWEEP), "all"
        sweep_title = "Sweep of our Triton kernels on the GPU (bf16)"
    else:
        sweep, plot_kinds = (CPU_QUICK_SWEEP if quick else CPU_SWEEP), CPU_PLOT_KINDS
        sweep_title = "Sweep of our Triton kernels: CPU-interpreter timings, not GPU speed"
    return [
        DemoStep("GPU database (datasheet peaks, stored calibrations)", ("gpus",)),
        DemoStep("Optimal chunk size of mLSTM on an H100 (d_hv = 512, p = 0.5, fp32 states)",
                 ("optimal-chunk", "--gpu", "h100", "--head-dim-v", "512", "--qk-ratio", "0.5",
                  "--state-bytes", "4")),
        DemoStep("Roofline of chunkwise mLSTMsig on an H100 over chunk sizes (same problem)",
                 ("roofline", "--gpu", "h100", "--family", "mlstm_sig", "--head-dim-qk", "256",
                  "--head-dim-v", "512", "--chunk-sizes", "64,128,256,512,1024")),
        DemoStep(sweep_title, ("sweep", *sweep.argv(), "--out", str(out), "--run-name", run_name)),
        DemoStep("Plots of the sweep", ("plot", run_dir, "--kind", plot_kinds, "--format", "png")),
        DemoStep("Markdown report of the sweep", ("report", run_dir)),
    ]


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _use_triton_interpreter() -> None:
    """Triton decides at ``@triton.jit`` time whether to interpret, so this must precede every kernel
    import; the sweep's worker processes inherit the variable."""
    os.environ["TRITON_INTERPRET"] = "1"


def run_demo(out: Path, quick: bool, run_command: Callable[[list[str]], None]) -> None:
    """Run the demo's steps under headings; ``run_command(argv)`` runs one `tflabench` command line."""
    from rich.console import Console
    from rich.panel import Panel

    output_dir(out, "--out")
    console = Console()
    on_gpu = _cuda_available()
    if not on_gpu:
        _use_triton_interpreter()
        console.print(Panel(CPU_INTERPRETER_NOTE, title="CPU-interpreter mode", border_style="yellow"))
    device = "cuda" if on_gpu else "cpu-interpreter"
    run_name = f"kernels-{device}-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    steps = demo_steps(out, run_name, on_gpu, quick)
    for number, step in enumerate(steps, start=1):
        console.rule(f"[bold]{number}/{len(steps)}  {step.title}")
        console.print(f"$ {step.command}", style="cyan", markup=False, highlight=False, soft_wrap=True)
        run_command(list(step.argv))
    _print_outputs(console, out / run_name, on_gpu)


def _print_outputs(console, run_dir: Path, on_gpu: bool) -> None:
    console.rule("[bold]done")
    for label, path in (("results table", "results.csv"), ("provenance", "meta.json"), ("plots", "plots/"),
                        ("report", "report.md")):
        console.print(f"{label:<14} {run_dir / path}", markup=False, highlight=False, soft_wrap=True)
    if not on_gpu:
        console.print("The times above are CPU-interpreter timings, not GPU performance "
                      "(GPU results: README.md).", style="yellow")


def register(app: typer.Typer, run_command: Callable[[list[str]], None]) -> None:
    """Add `tflabench demo` to ``app``; its steps run through ``run_command`` (the CLI's entry point)."""

    def demo(
        out: Annotated[Path, typer.Option(help="Parent directory of the demo's sweep run.")] = DEFAULT_OUT,
        quick: Annotated[bool, typer.Option(
            "--quick", help="Smaller sweep: the xl_chunk kernels at two short sequence lengths.")] = False,
    ) -> None:
        """The main job: analysis commands, a small sweep of our Triton kernels, its plots and report."""
        run_demo(out, quick, run_command)

    app.command("demo")(demo)
