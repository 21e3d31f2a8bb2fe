"""`tflabench demo --quick` end to end, as `make demo` runs it: a fresh process without TRITON_INTERPRET
(the demo must switch the interpreter on itself when there is no GPU), every step's output, the sweep's
rows, plots and report."""

import os
import subprocess
import sys

import pytest
import torch

from tflabench.bench.results import read_rows
from tflabench.demo import CPU_QUICK_SWEEP, demo_steps

STEP_COMMANDS = ("gpus", "optimal-chunk", "roofline", "sweep", "plot", "report")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """(stdout, run directory) of one quick demo in a subprocess."""
    out = tmp_path_factory.mktemp("demo")
    env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, "-m", "tflabench", "demo", "--quick", "--out", str(out)],
                            capture_output=True, text=True, env={**env, "COLUMNS": "120"}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (run_dir,) = out.iterdir()
    return result.stdout, run_dir


def test_demo_prints_every_step_as_a_command(demo_run):
    stdout, _ = demo_run
    for number, command in enumerate(STEP_COMMANDS, start=1):
        assert f"{number}/{len(STEP_COMMANDS)}" in stdout
        assert f"$ tflabench {command}" in stdout
    assert "633.5" in stdout  # Eq. 121 on an H100, d_hv = 512, p = 0.5, fp32 states


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-interpreter labelling")
def test_demo_labels_cpu_interpreter_timings(demo_run):
    stdout, run_dir = demo_run
    assert "CPU-interpreter timings" in stdout
    assert "not GPU performance" in stdout
    assert run_dir.name.startswith("kernels-cpu-interpreter-")


def test_demo_sweep_measures_every_point_of_our_kernels(demo_run):
    _, run_dir = demo_run
    rows = read_rows(run_dir / "results.csv")
    device = "cuda" if torch.cuda.is_available() else "cpu-interpreter"
    assert len(rows) == 2 * 2 * 2 * 2  # xl_chunk kernels (sig, exp) x sequence lengths x chunk sizes x modes
    assert {row["device"] for row in rows} == {device}
    assert {row["kernel"] for row in rows} == {"tflabench.mlstm_sig.xl_chunk", "tflabench.mlstm_exp.xl_chunk"}
    assert all(row["status"] == "ok" and float(row["time_ms"]) > 0 for row in rows), rows


def test_demo_writes_plots_and_report(demo_run):
    _, run_dir = demo_run
    assert (run_dir / "meta.json").is_file()
    for stem in ("runtime_vs_seqlen", "roofline", "optimal_chunk"):
        plot = run_dir / "plots" / f"{stem}.png"
        assert plot.is_file() and plot.stat().st_size > 10_000, plot
    report = (run_dir / "report.md").read_text()
    assert "tflabench.mlstm_sig.xl_chunk" in report
    assert "](plots/runtime_vs_seqlen.png)" in report


def test_cpu_steps_skip_the_plots_that_need_cuda(tmp_path):
    steps = demo_steps(tmp_path, "run", on_gpu=False, quick=True)
    assert [step.argv[0] for step in steps] == list(STEP_COMMANDS)
    plot = next(step for step in steps if step.argv[0] == "plot")
    kinds = plot.argv[plot.argv.index("--kind") + 1].split(",")
    assert "memory" not in kinds and "model" not in kinds
    sweep = next(step for step in steps if step.argv[0] == "sweep")
    assert sweep.argv[1:1 + len(CPU_QUICK_SWEEP.argv())] == CPU_QUICK_SWEEP.argv()
    assert "float32" in sweep.argv
