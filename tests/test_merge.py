"""`tflabench merge`: an H100 run and an H200 run as one run, whose report and plots are per GPU."""

import json
from pathlib import Path

import pytest
from cli_capture import run_cli

from tflabench.analysis import run_data
from tflabench.bench.results import read_rows

FIXTURES = Path(__file__).parent / "fixtures"
H100, H200 = FIXTURES / "h100_paper", FIXTURES / "h200_small"
H100_NAME, H200_NAME = "NVIDIA H100 80GB HBM3", "NVIDIA H200"


@pytest.fixture(scope="module")
def merged(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("merge") / "h100-h200"
    code, stdout, stderr = run_cli(["merge", str(H100), str(H200), "--out", str(out)])
    assert code == 0, stderr
    assert stdout.strip() == f"{out}: 151 rows of 2 runs"
    return out


def test_the_merged_run_has_every_row_and_the_provenance_of_each_run(merged):
    rows = read_rows(merged / "results.csv")
    sources = read_rows(H100 / "results.csv") + read_rows(H200 / "results.csv")
    assert rows == [{**row, "timing_rounds": "", "issue_cpu_ms": ""} for row in sources]  # older tables
    meta = json.loads((merged / "meta.json").read_text())
    assert meta["run"] == "h100-h200" and meta["finished"]
    assert [source["meta"]["run"] for source in meta["merged"]] == ["h100-paper", "h200-small"]
    assert set(meta["gpus"]) == {H100_NAME, H200_NAME}
    assert meta["gpus"][H200_NAME]["info"]["name"] == H200_NAME


def test_the_merged_run_splits_into_one_run_per_gpu_with_that_gpus_ceilings(merged):
    parts = dict(run_data.runs_by_gpu(run_data.load_run(merged)))
    assert list(parts) == [H100_NAME, H200_NAME]
    assert set(parts[H200_NAME].table["gpu"]) == {H200_NAME} and len(parts[H200_NAME].table) == 134
    assert run_data.run_gpu(parts[H200_NAME]).key.startswith("h200")
    assert run_data.run_gpu(parts[H100_NAME]).key.startswith("h100")
    single = run_data.load_run(H200)
    assert run_data.runs_by_gpu(single) == [(H200_NAME, single)]


def test_the_report_of_a_merged_run_has_tables_and_plots_per_gpu(merged):
    code, _, stderr = run_cli(["report", str(merged)])
    assert code == 0, stderr
    text = (merged / "report.md").read_text()
    across = text.split("## The same kernel across GPUs")[1].split("\n## ")[0]
    assert f"| {H100_NAME} | {H200_NAME} |" in across
    same_point = "| tflabench.mlstm_sig.xl_chunk 16×128/256 L=128 fwd T=8k B=8 | 3.950 (35%) | 1.626 (65%) |"
    assert same_point in across
    for gpu in (H100_NAME, H200_NAME):
        assert f"## Runtime and speed-up against `torch.sdpa.cudnn` — {gpu}" in text
        assert f"## Plots — {gpu}" in text
    for plot in ("plots/runtime_vs_seqlen.png", "plots/nvidia-h200/roofline.png",
                 "plots/nvidia-h100-80gb-hbm3/roofline.png"):
        assert (merged / plot).is_file() and f"]({plot})" in text


@pytest.mark.parametrize("arguments, message", [
    ([str(H100), str(H100)], "both have a row of"),
    ([str(H100)], "merge needs two or more runs"),
    ([str(H100), str(FIXTURES)], "is not a run directory"),
])
def test_merge_refuses_bad_input_in_one_line(tmp_path, arguments, message):
    code, _, stderr = run_cli(["merge", *arguments, "--out", str(tmp_path / "out")])
    assert code == 2 and stderr.startswith("error: ") and message in stderr and stderr.count("\n") == 1
    assert not (tmp_path / "out" / "results.csv").exists()


def test_merge_does_not_overwrite_a_run(merged):
    code, _, stderr = run_cli(["merge", str(H100), str(H200), "--out", str(merged)])
    assert code == 2 and "exists: merge into a new run directory" in stderr
