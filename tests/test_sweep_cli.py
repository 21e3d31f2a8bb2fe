"""`tflabench sweep` end to end on CPU with the fake kernels of sweep_fake_kernels: every failure mode
becomes a row and the sweep finishes; a killed sweep resumes without duplicate or lost rows."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tflabench.bench.results import read_rows

TESTS_DIR = Path(__file__).parent
TINY_SHAPE = ["--batch", "1", "--heads", "2", "--head-dim-qk", "8", "--head-dim-v", "8", "--dtype", "float32",
              "--warmup", "1", "--repeats", "2"]


def sweep_command(out: Path, run: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "tflabench", "sweep", "--kernel-module", "sweep_fake_kernels",
            "--out", str(out), "--run-name", run, *TINY_SHAPE, *args]


def environment() -> dict[str, str]:
    path = os.pathsep.join([str(TESTS_DIR), os.environ.get("PYTHONPATH", "")])
    return dict(os.environ, COLUMNS="200", PYTHONPATH=path)


def run_sweep(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=environment(), timeout=120)


#: a sweep over a kernel of every failure mode (`check_failure_mode_rows` checks its rows)
FAILURE_MODES = ["--kernels", "fake.correct,fake.wrong,fake.abort,fake.hang", "--seq-len", "16",
                 "--chunk-size", "8,32", "--mode", "fwd", "--timeout", "2"]


def test_sweep_finishes_with_a_row_for_every_failure_mode(tmp_path):
    result = run_sweep(sweep_command(tmp_path, "e2e", *FAILURE_MODES))
    assert result.returncode == 0, result.stderr
    check_failure_mode_rows(read_rows(tmp_path / "e2e" / "results.csv"))

    ranking = result.stdout.split("Ranking")[1].split("Failures")[0]
    assert "fake.correct" in ranking and "fake.wrong" not in ranking
    meta = json.loads((tmp_path / "e2e" / "meta.json").read_text())
    assert meta["finished"] and meta["device"] == "cpu-interpreter" and "--kernel-module" in meta["command"]


def check_failure_mode_rows(rows: list[dict[str, str]]) -> None:
    """Each fake kernel of `FAILURE_MODES` has the row of its failure, and the points that do not fit the
    kernel are skipped."""
    measured = {row["kernel"]: row for row in rows if row["chunk_size"] == "8"}
    assert {name: row["status"] for name, row in measured.items()} == {
        "fake.correct": "ok", "fake.wrong": "failed_check", "fake.abort": "crash", "fake.hang": "timeout"}
    assert "SIGABRT" in measured["fake.abort"]["reason"]
    assert measured["fake.wrong"]["reason"].startswith("reference check failed: rel error")
    correct = measured["fake.correct"]
    assert float(correct["time_ms"]) > 0 and correct["device"] == "cpu-interpreter" and correct["flops"]
    skipped = [row for row in rows if row["chunk_size"] == "32"]
    assert len(skipped) == 4 and {row["status"] for row in skipped} == {"skipped"}
    assert {row["reason"] for row in skipped} == {"chunk size 32 is larger than seq_len 16"}


def wait_for_rows(path: Path, count: int, process: subprocess.Popen, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while len(read_rows(path)) < count:
        assert process.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline, "the sweep wrote no rows"
        time.sleep(0.05)


def test_a_killed_sweep_resumes_without_duplicate_or_lost_rows(tmp_path):
    command = sweep_command(tmp_path, "killed", "--kernels", "fake.correct,fake.slow", "--seq-len", "8..32",
                            "--chunk-size", "8", "--mode", "fwd,fwdbw", "--timeout", "30")
    results = tmp_path / "killed" / "results.csv"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=environment())
    try:
        wait_for_rows(results, 8, process)
    finally:
        process.kill()
        process.wait()
    before = read_rows(results)
    assert 8 <= len(before) < 12
    with open(results, "a") as handle:
        handle.write("killed,fake.slow,simple_gla,0.0-test,cpu-interp")

    resumed = run_sweep([*command, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    after = read_rows(results)
    keys = [(row["kernel"], row["seq_len"], row["mode"]) for row in after]
    assert len(keys) == len(set(keys)) == 12
    assert after[: len(before)] == before
    assert {row["status"] for row in after} == {"ok"}

    again = run_sweep([*command, "--resume"])
    assert again.returncode == 0 and read_rows(results) == after
    meta = json.loads((tmp_path / "killed" / "meta.json").read_text())
    assert len(meta["resumed"]) == 2 and meta["finished"]
    for resume in meta["resumed"]:  # the rows a resume adds may come from another machine and commit
        assert {"at", "command", "git", "gpu", "versions"} <= set(resume)
        assert resume["versions"]["python"] and "commit" in resume["git"]


def test_an_existing_run_needs_resume_and_a_budget_stops_early(tmp_path):
    command = sweep_command(tmp_path, "budget", "--kernels", "fake.slow", "--seq-len", "8..64",
                            "--chunk-size", "8", "--mode", "fwd", "--budget", "0")
    stopped = run_sweep(command)
    assert stopped.returncode == 0 and "budget reached: 4 points left" in stopped.stdout
    assert read_rows(tmp_path / "budget" / "results.csv") == []
    refused = run_sweep(command)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: run ") and "--resume" in refused.stderr


@pytest.mark.parametrize("gpus, message", [
    ("0,1", "--gpus needs CUDA devices"),
    ("0,x", "comma list of device indices"),
    ("1,1", "lists a device twice"),
])
def test_gpus_option_rejects_bad_input_in_one_line(tmp_path, gpus, message):
    result = run_sweep(sweep_command(tmp_path, "gpus", "--kernels", "fake.correct", "--seq-len", "16",
                                     "--chunk-size", "8", "--gpus", gpus))
    assert result.returncode == 2 and result.stderr.startswith("error: ") and message in result.stderr


def test_retry_measures_the_failed_points_again_and_keeps_their_old_rows(tmp_path):
    command = sweep_command(tmp_path, "retry", "--kernels", "fake.correct,fake.wrong", "--seq-len", "8,16",
                            "--chunk-size", "8", "--mode", "fwd")
    assert run_sweep(command).returncode == 0
    first = read_rows(tmp_path / "retry" / "results.csv")
    retried = run_sweep([*command, "--resume", "--retry", "failed_check"])
    assert retried.returncode == 0, retried.stderr
    assert "--retry: 2 rows (failed_check) to measure again" in retried.stdout
    rows = read_rows(tmp_path / "retry" / "results.csv")
    ok_rows = [row for row in first if row["status"] == "ok"]
    assert rows[: len(ok_rows)] == ok_rows and len(rows) == len(first)  # ok rows untouched, none duplicated
    assert {row["kernel"] for row in rows[len(ok_rows):]} == {"fake.wrong"}
    meta = json.loads((tmp_path / "retry" / "meta.json").read_text())
    aside = meta["resumed"][-1]["retried_file"]
    assert meta["resumed"][-1]["retried_rows"] == 2
    assert read_rows(tmp_path / "retry" / aside) == [row for row in first if row["status"] == "failed_check"]


def test_resume_of_a_run_that_does_not_exist_names_its_folder_and_the_runs_there(tmp_path):
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / "meta.json").write_text("{}")
    result = run_sweep(sweep_command(tmp_path, "fresh", "--kernels", "fake.correct", "--seq-len", "16",
                                     "--chunk-size", "8", "--mode", "fwd", "--resume", "--retry", "crash"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert str(tmp_path / "fresh") in result.stderr and "earlier" in result.stderr
    assert not (tmp_path / "fresh").exists()


@pytest.mark.parametrize("arguments, message", [
    (["--retry", "failed_check"], "pass --resume as well"),
    (["--resume", "--retry", "ok"], "statuses other than ok"),
    (["--resume", "--retry", "failed"], "statuses other than ok"),
])
def test_retry_rejects_bad_input_in_one_line(tmp_path, arguments, message):
    result = run_sweep(sweep_command(tmp_path, "bad-retry", "--kernels", "fake.correct", "--seq-len", "16",
                                     "--chunk-size", "8", *arguments))
    assert result.returncode == 2 and result.stderr.startswith("error: ") and message in result.stderr
