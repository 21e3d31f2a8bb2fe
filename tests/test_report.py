"""`tflabench report`: the Markdown report of the fixture run tests/fixtures/h200_small (test_plots.py)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from tflabench.analysis import hardware, optimal_chunk, plots, report, run_data
from tflabench.cli import main

FIXTURE = Path(__file__).parent / "fixtures" / "h200_small"
SECTIONS = (
    "# tflabench report: h200-small",
    "## Provenance",
    "## Runtime and speed-up against `torch.sdpa.cudnn`",
    "### fwd",
    "### fwdbw",
    "## Chunk size: measured and theoretical optimum",
    "## Comparison with the TFLA paper (H100)",
    "## The TFLA paper's statements, checked on this run",
    "## Plots",
    "## Not measured: failures, unavailable and skipped points",
)


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> tuple[Path, str]:
    """The fixture run copied to a temporary directory, and the report `tflabench report` wrote there."""
    run_dir = tmp_path_factory.mktemp("report") / "h200_small"
    shutil.copytree(FIXTURE, run_dir)
    main(["report", str(run_dir)])
    return run_dir, (run_dir / "report.md").read_text()


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return run_data.load_run(FIXTURE).table


def _row(text: str, section: str, label: str) -> list[str]:
    """Cells of the table row starting with label inside the section that starts with heading section."""
    body = text.split(section, 1)[1]
    line = next(line for line in body.splitlines() if line.startswith(f"| {label} |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def _time(table: pd.DataFrame, kernel: str, mode: str, seq_len: int, heads: int | None = None) -> float:
    rows = table[(table["kernel"] == kernel) & (table["mode"] == mode) & (table["seq_len"] == seq_len)]
    if heads is not None:
        rows = rows[rows["heads"] == heads]
    return rows["time_ms"].min()


def test_report_has_every_section_in_order(written):
    _, text = written
    positions = [text.index(section) for section in SECTIONS]
    assert positions == sorted(positions)


def test_provenance_block_comes_from_meta_json(written):
    _, text = written
    meta = json.loads((FIXTURE / "meta.json").read_text())
    assert f"$ {' '.join(meta['command'])}" in text
    assert f"| `git.commit` | {meta['git']['commit']} |" in text
    assert f"| `versions.torch` | {meta['versions']['torch']} |" in text
    assert "| `versions.peers.mlstm-kernels` | 2.0.6 |" in text
    assert "| `ceilings.bfloat16.measured.flops` | 8.01e+14 |" in text


def test_speedups_are_baseline_time_over_kernel_time(written, table):
    _, text = written
    header = _row(text, "### fwd", "kernel  heads×d_qk/d_v  chunk")
    assert header[1:] == ["T=2k B=32", "T=4k B=16", "T=8k B=8", "T=16k B=4"]
    cells = _row(text, "### fwd", "tflabench.mlstm_sig.xl_chunk 16×128/256 L=128")
    for cell, seq_len in zip(cells[1:], (2048, 4096, 8192, 16384), strict=True):
        ours = _time(table, "tflabench.mlstm_sig.xl_chunk", "fwd", seq_len, heads=16)
        speedup = _time(table, "torch.sdpa.cudnn", "fwd", seq_len) / ours
        assert cell == f"**{ours:.2f}** ({speedup:.2f}×)"  # the fastest kernel of the fixture: bold
    baseline = _row(text, "### fwdbw", "torch.sdpa.cudnn 32×128")
    assert all(cell.endswith("(1.00×)") for cell in baseline[1:])


def test_rows_that_were_not_measured_show_their_status_and_are_never_ranked(written):
    _, text = written
    assert _row(text, "### fwd", "lightning_attn.lightning_attn2 32×128")[1:] == ["failed_check"] * 4
    assert _row(text, "### fwdbw", "mlstm_kernels.mlstm_exp.xl_chunk 16×128/256 L=128")[1:] == ["crash"] * 4
    assert _row(text, "### fwdbw", "tflabench.mlstm_exp.xl_chunk 8×256/512 L=2048")[3] == "error"


def test_failures_section_lists_every_non_ok_group_with_its_reason(written, table):
    _, text = written
    section = text.split("## Not measured", 1)[1]
    for row in table[table["status"] != "ok"].itertuples():
        assert f"| {row.kernel} |" in section and f"| {row.status} |" in section and row.reason in section
    assert "| fla.chunk_simple_gla | 16×128/256 | fwdbw | unavailable | 2k, 4k, 8k, 16k | 64 |" in section


def test_chunk_optimum_table_uses_the_measured_ceilings(written):
    _, text = written
    section = "## Chunk size: measured and theoretical optimum"
    cells = _row(text, section, "tflabench.mlstm_sig.xl_chunk")
    ceilings = hardware.Ceilings(801e12, 4.3e12, "fixture")
    theory = optimal_chunk.runtime_optimal_chunk("sig", ceilings, 512, 0.5)
    assert cells[3:6] == ["fwd", "256 (2.65 ms)", f"{theory:.0f}"]
    assert "801 TFLOP/s, 4.30 TB/s" in text


def test_chunk_verdict_uses_the_best_achieved_flop_rate_as_alpha(written, table):
    _, text = written
    section = "## Chunk size: measured and theoretical optimum"
    rows = table[(table["kernel"] == "tflabench.mlstm_sig.xl_chunk") & (table["mode"] == "fwd")
                 & (table["status"] == "ok") & (table["head_dim_v"] == 512)]
    achieved = rows["tflops"].max() * 1e12
    ceilings = hardware.Ceilings(achieved, 4.3e12, "achieved")
    chunk = optimal_chunk.runtime_optimal_chunk("sig", ceilings, 512, 0.5)
    cells = _row(text, section, "tflabench.mlstm_sig.xl_chunk")
    assert cells[-1] == f"{achieved / 1e12:.0f} TFLOP/s: L* = {chunk:.0f}"
    verdict = next(line for line in text.split(section, 1)[1].splitlines()
                   if line.startswith("- `tflabench.mlstm_sig.xl_chunk` fwd:"))
    fixture_ceilings = hardware.Ceilings(801e12, 4.3e12, "fixture")
    theory = optimal_chunk.runtime_optimal_chunk("sig", fixture_ceilings, 512, 0.5)
    ratio = theory / 256
    expected = f"within 2× ({ratio:.2f}×)." if 0.5 <= ratio <= 2 else f"off by {max(ratio, 1 / ratio):.1f}×."
    assert expected in verdict


def test_chunk_verdict_names_the_flop_term_when_the_theory_is_off():
    sweep = run_data.ChunkSweep(kernel="k", family="mlstm_sig", batch=8, seq_len=8192, heads=8,
                                head_dim_qk=256, head_dim_v=512, dtype="bfloat16", mode="fwd",
                                rows=pd.DataFrame())
    ceilings = hardware.Ceilings(747e12, 4.18e12, "measured")
    optimum = run_data.ChunkOptimum(sweep, 128, 2.92, 493.0, 512, "", ceilings, 161e12, 230.0)
    line = report._chunk_verdict(optimum)
    assert "off by 3.9×" in line and "161 TFLOP/s (22%)" in line and "L* = 230 (1.80×, within 2×)" in line


def test_every_plot_is_linked_relative_to_the_run_directory(written):
    run_dir, text = written
    links = re.findall(r"\]\((plots/[^)]+)\)", text)
    assert {Path(link).stem for link in links} == {kind.stem for kind in plots.PLOT_KINDS.values()}
    assert all((run_dir / link).is_file() for link in links)


def test_baseline_option_and_default_choice(table):
    run = run_data.load_run(FIXTURE)
    assert report.choose_baseline(run, None) == "torch.sdpa.cudnn"
    text = report.report_markdown(run, "torch.sdpa.flash", plots.Rendered())
    cells = _row(text, "### fwd", "torch.sdpa.cudnn 32×128")
    speedup = _time(table, "torch.sdpa.flash", "fwd", 8192) / _time(table, "torch.sdpa.cudnn", "fwd", 8192)
    assert cells[3].endswith(f"({speedup:.2f}×)")


def test_report_without_meta_json_says_provenance_is_unknown(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "run")
    (tmp_path / "run" / "meta.json").unlink()
    run = run_data.load_run(tmp_path / "run")
    assert "No meta.json" in report.report_markdown(run, "torch.sdpa.cudnn", plots.Rendered())


def test_an_unfinished_run_is_marked_at_the_top(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "run")
    finished = run_data.load_run(tmp_path / "run")
    assert "Unfinished run" not in report.summary_line(finished)
    meta_path = tmp_path / "run" / "meta.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "finished": None}))
    assert report.summary_line(run_data.load_run(tmp_path / "run")).startswith("**Unfinished run**")


@pytest.mark.parametrize(
    ("baseline", "message"),
    [
        ("torch.sdpa_nope", "baseline 'torch.sdpa_nope' is not a kernel of run h200-small"),
        ("flash_attn_interface.fa3",
         "'flash_attn_interface.fa3' has no measured row in run h200-small (status: unavailable)"),
    ],
)
def test_report_command_bad_baseline_is_one_line_and_exit_2(capsys, baseline, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(FIXTURE), "--baseline", baseline])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_run_where_nothing_was_measured_still_gets_a_report(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "run")
    table = pd.read_csv(tmp_path / "run" / "results.csv", dtype=str)
    table["status"], table["reason"] = "unavailable", "no CUDA device (torch.cuda.is_available() is False)"
    table.to_csv(tmp_path / "run" / "results.csv", index=False)
    run = run_data.load_run(tmp_path / "run")
    assert report.choose_baseline(run, None) is None
    text = report.report_markdown(run, None, plots.Rendered())
    assert "## Runtime and speed-up\n\nNo row of this run was measured" in text
    assert "| torch.sdpa.cudnn | 32×128 | fwd, fwdbw | unavailable | 2k, 4k, 8k, 16k | – | no CUDA" in text


def test_the_chunk_optimum_uses_the_state_bytes_the_kernel_records(table):
    """Our kernels store their chunk states in the inputs' dtype (cost_params state_bytes "operand"): the
    theory L* of a bf16 sweep uses 2-byte states; a kernel that records none gets the paper's fp32."""
    sweep = run_data.chunk_sweeps(run_data.load_run(FIXTURE))[0]

    def with_params(params: str) -> run_data.ChunkSweep:
        return replace(sweep, rows=sweep.rows.assign(params=params), dtype="bfloat16")

    assert with_params(json.dumps({"cost_params": {"state_bytes": "operand"}})).state_bytes == 2
    assert replace(with_params(json.dumps({"cost_params": {"state_bytes": "operand"}})),
                   dtype="float32").state_bytes == 4
    assert with_params(json.dumps({"cost_params": {"state_bytes": 1}})).state_bytes == 1
    assert with_params(json.dumps({"variant": "sig"})).state_bytes == run_data.STATE_BYTES == 4
    assert with_params("").state_bytes == 4


def test_the_summary_names_unsteady_gpu_rows():
    """Rows whose interquartile range is above 3 % of the median are named with their spread; CPU rows and
    rows not measured are not."""
    shape = dict(kernel="k", heads=2, head_dim_qk=64, head_dim_v=64, seq_len=8192, batch=8, chunk_size=64,
                 mode="fwd")
    rows = [dict(shape, status="ok", device="cuda", time_ms=2.0, time_ms_q25=1.9, time_ms_q75=2.1),
            dict(shape, status="ok", device="cuda", time_ms=2.0, time_ms_q25=1.99, time_ms_q75=2.01),
            dict(shape, status="ok", device="cpu-interpreter", time_ms=2.0, time_ms_q25=1.0, time_ms_q75=3.0),
            dict(shape, status="crash", device="cuda", time_ms=float("nan"), time_ms_q25=float("nan"),
                 time_ms_q75=float("nan"))]
    note = report.unsteady_note(pd.DataFrame(rows))
    assert note == (" **1 row unsteady** (interquartile range above 3% of the median): "
                    "k 2×64 T=8k B=8 L=64 fwd (10%).")
    assert report.unsteady_note(pd.DataFrame(rows[1:])) == ""


def test_the_summary_names_gpu_rows_bound_by_the_launchers_cpu_time():
    """Rows whose CPU time of issuing a call is at least 90 % of their time are named with both; rows
    below it, without the column (NaN: written before it) or on the CPU interpreter are not."""
    shape = dict(kernel="k", heads=2, head_dim_qk=64, head_dim_v=64, seq_len=8192, batch=8, chunk_size=64,
                 mode="fwd", status="ok", time_ms=0.6, time_ms_q25=0.599, time_ms_q75=0.601)
    rows = [dict(shape, device="cuda", issue_cpu_ms=0.58), dict(shape, device="cuda", issue_cpu_ms=0.3),
            dict(shape, device="cuda", issue_cpu_ms=float("nan")),
            dict(shape, device="cpu-interpreter", issue_cpu_ms=0.6)]
    note = report.launch_bound_note(pd.DataFrame(rows))
    assert note == (" **1 row near the launcher's pace** (issuing a call took at least 90% of its "
                    "time): k 2×64 T=8k B=8 L=64 fwd (0.580 of 0.600 ms).")
    assert report.launch_bound_note(pd.DataFrame(rows[1:])) == ""
