"""The shared input checks (tflabench.inputs) and the cases they settle: resume of a missing run, dry run
with --resume, run names that would leave --out, output folders that are files or unwritable, --warmup 0,
report --out, JSON errors, absurd head dims."""

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from cli_capture import run_cli

from tflabench import inputs
from tflabench.errors import InputError

FIXTURE_RUN = Path(__file__).parent / "fixtures" / "h200_small"
#: the fixture run's tflabench.mlstm_sig.xl_chunk rows at T = 2048 and 4096 (65,536 tokens, 16 x 128/256)
FIXTURE_SWEEP = ["--kernels", "tflabench.mlstm_sig.xl_chunk", "--tokens", "65536", "--heads", "16",
                 "--head-dim-qk", "128", "--head-dim-v", "256", "--chunk-size", "128", "--dtype", "bfloat16",
                 "--mode", "fwd"]
#: /proc takes no new files, also for root (for whom permission bits never stop writing)
UNWRITABLE = Path("/proc/tflabench-test")


@pytest.fixture
def runs(tmp_path) -> Path:
    """An --out folder holding one run, ``existing`` (a copy of the fixture run)."""
    shutil.copytree(FIXTURE_RUN, tmp_path / "runs" / "existing")
    return tmp_path / "runs"


@pytest.fixture(autouse=True)
def wide_tables(monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")


def one_error_line(code: int, err: str) -> str:
    assert code == 2 and err.count("\n") == 1 and err.startswith("error: "), err
    return err


# ----------------------------------------------------------------------------------------------- inputs


def test_output_dir_accepts_a_folder_to_create_and_rejects_files_and_unwritable_places(tmp_path):
    assert inputs.output_dir(tmp_path / "new" / "deeper", "--out") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is a file, not a directory"):
        inputs.output_dir(tmp_path / "file", "--out")
    with pytest.raises(InputError, match="'.*file' is a file, not a directory"):
        inputs.output_dir(tmp_path / "file" / "child", "--out")
    with pytest.raises(InputError, match="cannot write in '/proc'"):
        inputs.output_dir(UNWRITABLE, "--out")
    with pytest.raises(InputError, match="NUL character"):
        inputs.output_dir(tmp_path / "a\0b", "--out")
    assert inputs.create_output_dir(tmp_path / "made", "--out").is_dir()


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "../escape", "a\0b", "x" * 256])
def test_a_run_name_must_be_a_plain_folder_name(name):
    with pytest.raises(InputError, match="--run-name"):
        inputs.run_name(name)


def test_numbers_at_and_beyond_their_bounds():
    assert inputs.non_negative_int(0, "--warmup") == 0
    assert inputs.positive_int(inputs.MAX_SIZE, "--seq-len") == inputs.MAX_SIZE
    for bad in (0, -1, inputs.MAX_SIZE + 1, True, 2.0):
        with pytest.raises(InputError, match="--seq-len must be a positive integer"):
            inputs.positive_int(bad, "--seq-len")
    assert inputs.finite_number(0, "--budget", low_inclusive=True) == 0.0
    for bad in (0, -1.0, math.nan, math.inf, 5.0):
        with pytest.raises(InputError, match="--qk-ratio must be a finite number greater than 0 and at most"):
            inputs.finite_number(bad, "--qk-ratio", 0.0, 4.0)


# ----------------------------------------------------------------------------------------------- sweep


def test_resume_of_a_missing_run_names_its_folder_and_lists_the_runs(runs):
    code, _, err = run_cli(["sweep", "--preset", "tiny", "--out", str(runs), "--run-name", "nope",
                            "--resume"])
    message = one_error_line(code, err)
    assert str(runs / "nope") in message and "existing" in message
    assert not (runs / "nope").exists()
    code, _, err = run_cli(["sweep", "--preset", "tiny", "--out", str(runs), "--resume", "--dry-run"])
    assert "pass its --run-name" in one_error_line(code, err) and "existing" in err


def test_a_dry_run_of_a_resume_lists_what_is_done_and_what_would_be_measured(runs):
    argv = ["sweep", "--dry-run", "--resume", "--out", str(runs), "--run-name", "existing", *FIXTURE_SWEEP]
    code, out, _ = run_cli([*argv, "--seq-len", "512,2048,4096"])
    assert code == 0
    assert "3 jobs in" in out and ": 2 done, 1 " in out
    done = [line for line in out.splitlines() if re.search(r"│ done\s+│", line)]
    assert len(done) == 2 and all("row with status ok" in line for line in done)
    assert "T512" not in "".join(done) and "T512" in out
    code, out, _ = run_cli([*argv, "--seq-len", "2048", "--retry", "failed_check"])
    assert code == 0 and "1 done" in out


@pytest.mark.parametrize("argv, message", [
    (["--budget", "-1"], "--budget must be a finite number at least 0"),
    (["--budget", "nan"], "--budget must be a finite number"),
    (["--retry", "crash"], "pass --resume as well"),
    (["--resume", "--retry", "bogus"], "statuses other than ok"),
    (["--run-name", "../escape"], "invalid run name"),
    (["--run-name", "existing"], "exists: pass --resume"),
    (["--out", str(UNWRITABLE)], "cannot write in '/proc'"),
])
def test_a_dry_run_rejects_what_the_run_rejects(runs, argv, message):
    base = ["sweep", "--preset", "tiny", "--out", str(runs), *argv]
    dry_code, _, dry_err = run_cli([*base, "--dry-run"])
    assert message in one_error_line(dry_code, dry_err)
    assert run_cli(base)[::2] == (dry_code, dry_err)


def test_an_out_folder_that_is_a_file_is_one_error_line(tmp_path):
    (tmp_path / "file").write_text("x")
    for argv in (["sweep", "--preset", "tiny"], ["demo", "--quick"]):
        code, _, err = run_cli([*argv, "--out", str(tmp_path / "file")])
        assert "is a file, not a directory" in one_error_line(code, err)


def test_zero_warmup_is_accepted(runs):
    code, out, err = run_cli(["sweep", "--preset", "tiny", "--warmup", "0", "--out", str(runs), "--dry-run"])
    assert code == 0, err
    code, _, err = run_cli(["sweep", "--preset", "tiny", "--warmup", "-1", "--out", str(runs), "--dry-run"])
    assert "--warmup must be an integer from 0" in one_error_line(code, err)


# ----------------------------------------------------------------------------------------------- analysis


def test_report_out_leaves_the_run_folder_untouched(runs, tmp_path):
    run = runs / "existing"
    before = sorted(path.name for path in run.iterdir())
    code, out, err = run_cli(["report", str(run), "--out", str(tmp_path / "report")])
    assert code == 0, err
    assert sorted(path.name for path in run.iterdir()) == before
    text = (tmp_path / "report" / "report.md").read_text()
    assert "](plots/roofline.png)" in text and (tmp_path / "report" / "plots" / "roofline.png").is_file()


def test_plot_out_must_be_a_writable_folder(runs):
    code, _, err = run_cli(["plot", str(runs / "existing"), "--out", "/etc/passwd"])
    assert "is a file, not a directory" in one_error_line(code, err)


def test_optimal_chunk_rejects_absurd_sizes_as_roofline_does():
    for command in ("optimal-chunk", "roofline"):
        code, _, err = run_cli([command, "--head-dim-v", "99999999999"])
        assert "must be a positive integer (at most 2147483647)" in one_error_line(code, err)
    code, _, err = run_cli(["optimal-chunk", "--causal-factor", "nan"])
    assert "--causal-factor" in one_error_line(code, err)


def test_an_error_with_json_output_is_a_json_object_too():
    code, out, err = run_cli(["optimal-chunk", "--gpu", "nonexistent", "--json"])
    message = one_error_line(code, err)
    assert json.loads(out) == {"error": message.removeprefix("error: ").strip()}
