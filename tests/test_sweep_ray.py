"""`tflabench sweep --ray` on CPU: one local Ray instance for the whole module (2 CPUs, a custom resource
``fake_gpu`` standing in for GPUs through TFLABENCH_RAY_GPU_RESOURCE, and two stand-in GPU models FAKE1 and
FAKE2); every sweep is a separate process that joins it with ``--ray ADDRESS``, as on a cluster."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_sweep_cli import (
    FAILURE_MODES,
    check_failure_mode_rows,
    environment,
    sweep_command,
    wait_for_rows,
)

from tflabench.bench.commands import with_bare_ray_address
from tflabench.bench.groups import model_matches
from tflabench.bench.results import read_rows

ray = pytest.importorskip("ray")

RAY_RESOURCES = {"fake_gpu": 2.0, "accelerator_type:FAKE1": 1.0, "accelerator_type:FAKE2": 1.0}
#: a slice of preset tiny (our kernels under the Triton interpreter, and a peer that is not installed)
TINY_SLICE = ["--preset", "tiny", "--kernels", "tflabench.mlstm_sig.limit_chunk,tflabench.mlstm_exp.xl_chunk,"
              "fla.chunk_gla", "--seq-len", "64", "--chunk-size", "16", "--mode", "fwd,fwdbw"]
#: how long a test waits for a sweep under Ray to make progress before it calls the sweep stuck: as long as
#: `run` waits for a whole sweep, since Ray's workers start slowly on a loaded two-core machine
LIVENESS_S = 180.0
SLOW_SWEEP = ["--kernels", "fake.slow,fake.correct", "--seq-len", "8..64", "--chunk-size", "8",
              "--mode", "fwd,fwdbw", "--timeout", "30"]


@pytest.fixture(scope="module")
def ray_address():
    ray.init(num_cpus=2, resources=RAY_RESOURCES, include_dashboard=False, log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def ray_environment() -> dict[str, str]:
    return dict(environment(), TFLABENCH_RAY_GPU_RESOURCE="fake_gpu")


def run(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, env=ray_environment(), timeout=LIVENESS_S)


def row_keys(rows: list[dict[str, str]]) -> list[tuple[str, ...]]:
    return sorted((row["gpu"], row["kernel"], row["seq_len"], str(row["chunk_size"]), row["mode"])
                  for row in rows)


def test_the_tiny_preset_through_ray_gives_the_rows_of_a_sweep_without_it(tmp_path, ray_address):
    tiny = [sys.executable, "-m", "tflabench", "sweep", "--out", str(tmp_path), *TINY_SLICE]
    assert run([*tiny, "--run-name", "plain"]).returncode == 0
    through_ray = run([*tiny, "--run-name", "ray", "--ray", ray_address])
    assert through_ray.returncode == 0, through_ray.stderr

    def statuses(run_name: str) -> list[tuple[str, ...]]:
        rows = read_rows(tmp_path / run_name / "results.csv")
        return sorted((*key, row["status"], row["device"]) for key, row in zip(row_keys(rows), rows,
                                                                                strict=True))

    plain, ray_rows = statuses("plain"), statuses("ray")
    assert ray_rows == plain and len(plain) == 6
    assert {status for *_, status, _ in plain} == {"ok", "unavailable"}
    meta = json.loads((tmp_path / "ray" / "meta.json").read_text())
    assert meta["finished"] and list(meta["gpus"]) == [""]
    assert "== point tflabench.mlstm_sig.limit_chunk" in (tmp_path / "ray" / "logs" /
                                                           "tflabench.mlstm_sig.limit_chunk.log").read_text()


def test_crashing_hanging_and_wrong_kernels_give_the_rows_of_a_sweep_without_ray(tmp_path, ray_address):
    result = run(sweep_command(tmp_path, "failures", *FAILURE_MODES, "--ray", ray_address))
    assert result.returncode == 0, result.stderr
    check_failure_mode_rows(read_rows(tmp_path / "failures" / "results.csv"))


def _kill_ray_worker_of(kernel: str, results: Path, process: subprocess.Popen) -> None:
    """SIGKILL the Ray worker whose task measures ``kernel``, once it has written a row of it."""
    import psutil

    deadline = time.monotonic() + LIVENESS_S
    while time.monotonic() < deadline:
        assert process.poll() is None, "the sweep ended before its Ray worker could be killed"
        if any(row["kernel"] == kernel for row in read_rows(results)):
            for candidate in psutil.process_iter(["cmdline"]):
                command = candidate.info["cmdline"] or []
                if "tflabench.bench.worker" in command and kernel in command:
                    os.kill(candidate.ppid(), signal.SIGKILL)
                    return
        time.sleep(0.05)
    raise AssertionError(f"no worker of {kernel} to kill")


def test_a_killed_ray_worker_and_a_killed_sweep_lose_and_duplicate_no_row(tmp_path, ray_address):
    command = sweep_command(tmp_path, "killed", *SLOW_SWEEP, "--ray", ray_address)
    results = tmp_path / "killed" / "results.csv"
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=ray_environment())
    try:
        _kill_ray_worker_of("fake.slow", results, process)
        wait_for_rows(results, 10, process, timeout_s=LIVENESS_S)
    finally:
        process.kill()
        process.wait()
    before = read_rows(results)
    assert 10 <= len(before) < 16
    assert "== Ray task lost: " in (tmp_path / "killed" / "logs" / "fake.slow.log").read_text()

    resumed = run([*command, "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    after = read_rows(results)
    assert after[: len(before)] == before
    assert len(row_keys(after)) == len(set(row_keys(after))) == 16
    assert {row["status"] for row in after} == {"ok"}


def test_each_gpu_model_measures_every_point_and_resumes_on_its_own(tmp_path, ray_address):
    command = sweep_command(tmp_path, "models", "--kernels", "fake.correct", "--seq-len", "8,16",
                            "--chunk-size", "8,16", "--mode", "fwd", "--ray", ray_address,
                            "--gpu-models", "fake1")
    assert run(command).returncode == 0
    both = [*command[:-1], "all"]
    result = run([*both, "--resume"])
    assert result.returncode == 0, result.stderr
    rows = read_rows(tmp_path / "models" / "results.csv")
    assert len(row_keys(rows)) == len(set(row_keys(rows))) == 8
    assert [row["gpu"] for row in rows] == ["FAKE1"] * 4 + ["FAKE2"] * 4
    assert {row["status"] for row in rows} == {"ok", "skipped"}
    assert set(json.loads((tmp_path / "models" / "meta.json").read_text())["gpus"]) == {"FAKE1", "FAKE2"}
    unknown = run([*command[:-1], "h100", "--resume"])
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: --gpu-models: no node of the Ray cluster has a h100 GPU")


WITHOUT_RAY = """
import sys
sys.modules["ray"] = None  # as if ray were not installed
from tflabench.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("option", [["--ray"], ["--ray", "auto"], ["--gpus", "0"]])
def test_without_ray_the_ray_options_say_how_to_install_it(tmp_path, option):
    command = sweep_command(tmp_path, "no-ray", "--kernels", "fake.correct", "--seq-len", "16",
                            "--chunk-size", "8", *option)
    result = subprocess.run([sys.executable, "-c", WITHOUT_RAY, *command[3:]], capture_output=True,
                            text=True, env=environment(), timeout=60)
    if option[0] == "--gpus":  # on a CPU machine, --gpus is refused before Ray is needed
        assert result.stderr == "error: --gpus needs CUDA devices, and this machine has none\n"
    else:
        assert result.stderr.startswith("error: --ray and --gpus need the ray package")
        assert "pip install 'tflabench[cluster]'" in result.stderr and result.stderr.count("\n") == 1
    assert result.returncode == 2 and not (tmp_path / "no-ray").exists()


def test_a_bare_ray_option_means_a_local_instance():
    assert with_bare_ray_address(["sweep", "--ray"]) == ["sweep", "--ray=local"]
    assert with_bare_ray_address(["--ray", "--resume"]) == ["--ray=local", "--resume"]
    assert with_bare_ray_address(["--ray", "auto", "--resume"]) == ["--ray", "auto", "--resume"]


@pytest.mark.parametrize("model, name, matches", [
    ("h100", "NVIDIA H100 80GB HBM3", True),
    ("H200", "NVIDIA H200", True),
    ("A100-80G", "NVIDIA A100-SXM4-80GB", True),
    ("h100", "NVIDIA H200", False),
    ("FAKE1", "FAKE1", True),
])
def test_a_gpu_model_matches_the_device_names_of_its_gpus(model, name, matches):
    assert model_matches(model, name) is matches
