"""`tflabench kernels` and `tflabench bundle` (pip is replaced by a recorder), and the isolated-check runner
used by scripts/gpu_adapters_check.py."""

import hashlib
import json
import subprocess
from pathlib import Path

from cli_capture import run_cli

from tflabench.bench import isolated_checks, peer_commands
from tflabench.bench.registry import all_kernels
from tflabench.core import SweepPoint


def test_kernels_json_lists_every_kernel_with_availability_version_and_reason():
    code, out, err = run_cli(["kernels", "--json"])
    assert code == 0, err
    listing = json.loads(out)
    rows = {row["name"]: row for row in listing["kernels"]}
    assert set(rows) == set(all_kernels())
    for row in rows.values():
        assert {"family", "package", "version", "available", "reason", "modes", "mode_reasons"} <= set(row)
        assert row["available"] or row["reason"]
    assert rows["torch.sdpa.flash"]["version"]
    assert listing["device"] in ("cuda", "cpu-interpreter")


def test_kernels_table_shows_names_and_reasons():
    code, out, _ = run_cli(["kernels"])
    assert code == 0
    assert "torch.sdpa.cudnn" in out and "fla.chunk_simple_gla" in out and "kernels," in out


class PipRecorder:
    """Stands in for subprocess.run: records pip commands and writes the wheels pip would produce."""

    def __init__(self, wheels, returncode=0):
        self.commands, self.envs = [], []
        self.wheels, self.returncode = wheels, returncode

    def __call__(self, command, capture_output, text, env):
        self.commands.append(command)
        self.envs.append(env)
        dest = Path(command[command.index("--dest" if "download" in command else "--wheel-dir") + 1])
        for wheel in self.wheels.get(command[3], ()):
            (dest / wheel).write_bytes(wheel.encode())
        return subprocess.CompletedProcess(command, self.returncode, "collected\n", "boom: no network\n")


PURE = {"download": ["fla_core-0.6.0-py3-none-any.whl", "einops-0.8.2-py3-none-any.whl"],
        "wheel": ["mamba_ssm-2.3.2.post1-py3-none-any.whl"]}


def test_bundle_downloads_pure_wheels_builds_mamba_and_writes_checksums(monkeypatch, tmp_path):
    recorder = PipRecorder(PURE)
    monkeypatch.setattr(peer_commands.subprocess, "run", recorder)
    code, out, err = run_cli(["bundle", "--python", "3.12", "--platform", "manylinux_2_28_x86_64",
                              "--dest", str(tmp_path / "wheels")])
    assert code == 0, err
    download, build = recorder.commands
    assert download[3] == "download" and "--only-binary=:all:" in download and "--no-deps" in download
    assert download[download.index("--python-version") + 1] == "3.12"
    assert download[download.index("--platform") + 1] == "manylinux_2_28_x86_64"
    assert set(peer_commands.PURE_WHEELS) <= set(download)
    assert build[3] == "wheel" and peer_commands.MAMBA_SDIST in build and "--no-build-isolation" in build
    build_env = recorder.envs[1]
    assert build_env["MAMBA_SKIP_CUDA_BUILD"] == "TRUE" and build_env["MAMBA_FORCE_BUILD"] == "TRUE"
    sums = (tmp_path / "wheels" / "SHA256SUMS").read_text().splitlines()
    assert len(sums) == 3
    for line in sums:
        digest, name = line.split("  ")
        assert hashlib.sha256((tmp_path / "wheels" / name).read_bytes()).hexdigest() == digest
    assert "$ " in out and "mamba_ssm-2.3.2.post1-py3-none-any.whl" in out and "make install-offline" in out


def test_bundle_rejects_platform_wheels_bad_versions_and_reports_pip_failures(monkeypatch, tmp_path):
    monkeypatch.setattr(peer_commands.subprocess, "run",
                        PipRecorder({"download": ["vidrial-0.1.3-py3-none-manylinux2014_x86_64.whl"]}))
    code, _, err = run_cli(["bundle", "--dest", str(tmp_path / "a")])
    assert code == 2 and err.startswith("error: not pure-Python") and err.count("\n") == 1
    code, _, err = run_cli(["bundle", "--python", "python3", "--dest", str(tmp_path / "b")])
    assert code == 2 and "--python must look like 3.12" in err
    monkeypatch.setattr(peer_commands.subprocess, "run", PipRecorder({}, returncode=1))
    code, _, err = run_cli(["bundle", "--dest", str(tmp_path / "c")])
    assert code == 1 and "pip exited with 1" in err and "no network" in err


def test_bundle_names_missing_build_modules(monkeypatch, tmp_path):
    monkeypatch.setattr(peer_commands, "MAMBA_BUILD_MODULES", ("surely_absent_build_tool",))
    code, _, err = run_cli(["bundle", "--dest", str(tmp_path)])
    assert code == 2 and "pip install surely_absent_build_tool" in err


def test_isolated_checks_report_failures_errors_timeouts_and_the_deadline():
    def run(names, timeout_s=60.0, deadline_s=60.0):
        return isolated_checks.run_checks(names, "float32", "cpu", timeout_s=timeout_s, jobs=2,
                                          deadline_s=deadline_s)

    wrong, absent = run(["wrong.sdpa_math_non_causal", "surely.absent.kernel"])
    assert wrong.status == isolated_checks.FAILED and wrong.rel_error > 0.1
    assert "|out|/|ref|" in wrong.detail and "wrong from t = 0 of 128" in wrong.detail
    assert absent.status == isolated_checks.ERROR and "unknown kernel" in absent.detail
    assert run(["wrong.sdpa_math_non_causal"], timeout_s=0.01)[0].status == isolated_checks.TIMED_OUT
    assert run(["wrong.sdpa_math_non_causal"], deadline_s=-1)[0].status == isolated_checks.NOT_RUN


def test_isolated_checks_classify_a_killed_child_as_a_crash(monkeypatch):
    def aborted(command, capture_output, text, timeout):
        return subprocess.CompletedProcess(command, -6, "", "python: SLPVectorizer.cpp: Assertion failed\n")

    monkeypatch.setattr(isolated_checks.subprocess, "run", aborted)
    outcome = isolated_checks.run_isolated("any.kernel", "bfloat16", "cuda", timeout_s=1)
    assert outcome.status == isolated_checks.CRASHED and outcome.detail.startswith("SIGABRT: python: SLP")


def test_an_erroring_child_is_described_by_its_error_line_not_the_advice_after_it(monkeypatch):
    cuda_error = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                  "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
                  "Search for `cudaErrorIllegalAddress' in https://docs.nvidia.com/cuda/ for more.\n"
                  "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                  "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")

    def failing(command, capture_output, text, timeout):
        return subprocess.CompletedProcess(command, 1, "", cuda_error)

    monkeypatch.setattr(isolated_checks.subprocess, "run", failing)
    outcome = isolated_checks.run_isolated("mlstm_kernels.mlstm_exp.limit_chunk", "bfloat16", "cuda", 1)
    assert outcome.status == isolated_checks.ERROR
    assert outcome.detail == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"
    assert isolated_checks.is_known_failure(outcome)


def test_only_the_listed_defect_of_a_listed_kernel_is_a_known_failure():
    outcome = isolated_checks.CheckOutcome
    crashing, racing = "mlstm_kernels.mlstm_exp.xl_chunk", "mlstm_kernels.mlstm_sig.xl_chunk"
    wrong = dict(rel_error=1.1, tolerance=0.03, detail="B2-T128 on cuda; |out|/|ref| 1.01")
    nondeterministic = dict(wrong, detail=wrong["detail"] + "; not deterministic: a second call differs")
    assert isolated_checks.is_known_failure(outcome(crashing, isolated_checks.CRASHED))
    assert not isolated_checks.is_known_failure(outcome(crashing, isolated_checks.FAILED, **wrong))
    at_dv32 = dict(wrong, detail="B2-T128-H2-dqk64-dv32-L64-bfloat16-fwd on cuda; |out|/|ref| 1.01")
    known = isolated_checks.known_failure(outcome(crashing, isolated_checks.FAILED, **at_dv32))
    assert known.note.startswith("where it compiles")
    assert isolated_checks.is_known_failure(outcome(racing, isolated_checks.FAILED, **nondeterministic))
    assert not isolated_checks.is_known_failure(outcome(racing, isolated_checks.FAILED, **wrong))
    assert not isolated_checks.is_known_failure(outcome(racing, isolated_checks.CRASHED))
    assert not isolated_checks.is_known_failure(outcome("torch.sdpa.flash", isolated_checks.CRASHED))
    limit = "mlstm_kernels.mlstm_exp.limit_chunk"
    assert not isolated_checks.is_known_failure(outcome(limit, isolated_checks.FAILED, **wrong))
    assert not isolated_checks.is_known_failure(outcome(limit, isolated_checks.ERROR, detail="KeyError: 'q'"))


def test_an_isolated_check_takes_the_configuration_it_is_given(monkeypatch):
    commands = []

    def passed(command, capture_output, text, timeout):
        commands.append(command)
        result = {"passed": True, "rel_error": 0.0, "tolerance": 0.03, "detail": ""}
        return subprocess.CompletedProcess(command, 0, json.dumps(result) + "\n", "")

    monkeypatch.setattr(isolated_checks.subprocess, "run", passed)
    point = SweepPoint(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256, chunk_size=128)
    isolated_checks.run_checks(["a", "b"], "bfloat16", "cuda", timeout_s=5, jobs=1, deadline_s=5,
                               configurations={"b": point})
    assert len(commands[0]) == 6 and SweepPoint(**json.loads(commands[1][-1])) == point
