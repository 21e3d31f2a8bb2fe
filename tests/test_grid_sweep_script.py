"""scripts/grid_sweep.sh, the sweep stage shared by scripts/gpu_grid.sh and scripts/grid_slices.sh, run with a
stub `python3` that records its arguments and prints what a sweep would: the options each call passes, the
resume of an existing run, the log, and the return code from the sweep's status and "budget reached"."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "grid_sweep.sh"

STUB = """#!/usr/bin/env bash
printf '%s\\n' "$@" > "$STUB_ARGS"
echo "${STUB_OUTPUT:-done}"
exit "${STUB_STATUS:-0}"
"""


def _grid_sweep(tmp_path: Path, *args: str, command_s: int = 570, output: str = "done", status: int = 0):
    """(return code, the stub's arguments) of `grid_sweep ARGS` with command_s seconds and report_s = 60."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "python3"
    stub.write_text(STUB)
    stub.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_ARGS=str(tmp_path / "args"),
               STUB_OUTPUT=output, STUB_STATUS=str(status))
    env.pop("TFLABENCH_SWEEP_ARGS", None)
    line = f'command_s={command_s} report_s=60; source "{SCRIPT}"; grid_sweep "$@"'
    done = subprocess.run(["bash", "-c", line, "grid_sweep", *args], env=env, cwd=tmp_path, timeout=60)
    recorded = (tmp_path / "args").read_text().splitlines() if (tmp_path / "args").exists() else None
    return done.returncode, recorded


def _option(arguments: list[str], name: str) -> str:
    return arguments[arguments.index(name) + 1]


def test_a_new_run_is_started_in_its_folder_with_the_budget_of_the_calls_time(tmp_path):
    code, arguments = _grid_sweep(tmp_path, "tflabench.*.xl_chunk", "results/grid-x", "heads.toml")
    assert code == 0
    assert arguments[:4] == ["-m", "tflabench", "sweep", "--preset"]
    assert _option(arguments, "--run-name") == "grid-x" and _option(arguments, "--out") == "results"
    assert _option(arguments, "--config") == "heads.toml"
    assert _option(arguments, "--kernels") == "tflabench.*.xl_chunk"
    assert int(_option(arguments, "--budget")) in range(570 - 60 - 150 - 2, 570 - 60 - 150 + 1)
    assert "--resume" not in arguments
    log = (tmp_path / "results/grid-x/sweep-log.txt").read_text()
    assert "grid-x: tflabench.*.xl_chunk" in log and log.rstrip().endswith("done")
    assert not (tmp_path / "results/grid-x/last-sweep.txt").exists()


def test_an_existing_run_is_resumed_and_a_config_is_optional(tmp_path):
    (tmp_path / "results/grid-x").mkdir(parents=True)
    (tmp_path / "results/grid-x/meta.json").write_text("{}")
    code, arguments = _grid_sweep(tmp_path, "tflabench.*.auto", "results/grid-x")
    assert code == 0 and "--resume" in arguments and "--config" not in arguments


@pytest.mark.parametrize(("output", "status"), [("budget reached: 3 points left", 0), ("error", 1)])
def test_a_sweep_cut_off_or_failed_is_not_done(tmp_path, output, status):
    code, _ = _grid_sweep(tmp_path, "k", "results/grid-x", output=output, status=status)
    assert code == 1
    assert output in (tmp_path / "results/grid-x/sweep-log.txt").read_text()


def test_no_sweep_starts_without_time_for_a_point(tmp_path):
    code, arguments = _grid_sweep(tmp_path, "k", "results/grid-x", command_s=60 + 149)
    assert code == 1 and arguments is None
