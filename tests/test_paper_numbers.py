"""The TFLA paper's published numbers (docs/reference/paper-numbers.md), their comparison with a run, and
the report section that shows it (fixture runs tests/fixtures/h100_paper and tests/fixtures/h200_small)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tflabench.analysis import paper_numbers, plots, report, run_data
from tflabench.analysis.paper_numbers import (
    CUDNN_FA2,
    FA3,
    MAMBA2,
    MLSTM_EXP_XL,
    MLSTM_SIG_XL,
    PUBLISHED,
    SIMPLE_GLA,
    TORCH_FA2,
    paper_comparison,
)
from tflabench.bench.registry import all_kernels
from tflabench.cli import main
from tflabench.schema import COLUMNS

DOCUMENT = Path(__file__).resolve().parents[1] / paper_numbers.DOCUMENT
FIXTURES = Path(__file__).parent / "fixtures"
H100_RUN = FIXTURES / "h100_paper"
H200_RUN = FIXTURES / "h200_small"
SECTION = "## Comparison with the TFLA paper (H100)"


def published(figure: str, quantity: str | None = "time_ms", **config) -> list[float]:
    """Values of the published numbers of a figure (of one quantity, or all when None) whose fields equal
    ``config``, in PUBLISHED order."""
    return [
        number.value
        for number in PUBLISHED
        if number.figure == figure
        and quantity in (None, number.quantity)
        and all(getattr(number, name) == value for name, value in config.items())
    ]


def table_cells(line: str) -> tuple[str, list[float | None]]:
    """Label and numbers of a Markdown table row of the document ("–" is None, bold marks dropped)."""
    label, *cells = (cell.strip().strip("*") for cell in line.strip().strip("|").split("|"))
    return label, [None if cell == "–" else float(cell) for cell in cells]


# ------------------------------------------------------------------------ the numbers against the text

#: Anchors of the document's tables of published numbers
FIG4_FORWARD = "#fig-4-forward-runtimes"
FIG4_TRAINING = "#fig-4-training-runtimes"
FIG4_MEMORY = "#fig-4-peak-memory"
FIG5_TABLE = "#fig-5-chunk-sizes"
FIG12_TABLE = "#fig-12-fla-kernels"
FIG13_TABLE = "#fig-13-lightningattention-2"
FIG14_TABLE = "#fig-14-head-dimensions"

#: Rows copied from the document (section, line).
QUOTED_ROWS = (
    (FIG4_FORWARD, "| mLSTMsig xl_chunk cs128 | 4.41 | 4.38 | 4.37 | 4.36 | 4.39 | 4.40 | 4.43 | 5.21 |"),
    (FIG4_FORWARD, "| Torch FA2 (32×128, non-causal) | 2.46 | 3.95 | 6.88 | 12.80 | 24.62 | 48.28 | 103.23 "
                   "| 206.59 |"),
    (FIG4_TRAINING, "| cuDNN FA2 (non-causal) | 12.50 | 14.58 | 19.17 | 30.83 | 56.30 | 112.73 | 222.13 "
                    "| 447.15 |"),
    (FIG4_TRAINING, "| Mamba 2 (64 heads) | 28.10 | 28.13 | 28.04 | 28.01 | 26.95 | 27.32 | 26.78 | 26.86 |"),
    (FIG4_MEMORY, "| Simple GLA chunk | 3.01 | 8.93 |"),
    (FIG5_TABLE, "| 256 | **18.89** | 6.78 | **6.30** | 2.98 |"),
    (FIG12_TABLE, "| mLSTMexp xl cs256 | 21.37 | 6.78 |"),
    (FIG13_TABLE, "| LightningAttention2 64 × 64 | 20.71 | 6.16 |"),
    (FIG14_TABLE, "| chunk_simple_gla | – | – | 8.78 | 10.85 | 15.66 | 28.89 |"),
)


def test_quoted_rows_of_the_document_are_reproduced_exactly():
    sig, torch_fa2, cudnn, mamba2, simple_gla, fig5, fig12, fig13, fig14 = (
        table_cells(line)[1] for _, line in QUOTED_ROWS)
    chunk = int(table_cells(QUOTED_ROWS[5][1])[0])
    assert published("Fig. 4", kernel=MLSTM_SIG_XL, mode="fwd", chunk_size=128) == sig
    assert published("Fig. 4", kernel=TORCH_FA2, mode="fwd") == torch_fa2
    assert published("Fig. 4", kernel=CUDNN_FA2, mode="fwdbw") == cudnn
    assert published("Fig. 4", kernel=MAMBA2, mode="fwdbw") == mamba2
    assert published("Fig. 4", "peak_gb", kernel=SIMPLE_GLA) == simple_gla
    training_ms, training_gb, forward_ms, forward_gb = fig5
    assert published("Fig. 5", chunk_size=chunk, mode="fwdbw") == [training_ms]
    assert published("Fig. 5", "peak_gb", chunk_size=chunk) == [training_gb, forward_gb]
    assert published("Fig. 5", chunk_size=chunk, mode="fwd") == [forward_ms]
    assert published("Fig. 12", kernel=MLSTM_EXP_XL, chunk_size=256) == fig12[:1]
    assert published("Fig. 12", "peak_gb", kernel=MLSTM_EXP_XL, chunk_size=256) == fig12[1:]
    assert published("Fig. 13", heads=64) + published("Fig. 13", "peak_gb", heads=64) == fig13
    assert published("Fig. 14", kernel=SIMPLE_GLA) == [value for value in fig14 if value is not None]


def test_every_number_carries_its_configuration_gpu_and_source():
    cudnn_8k = next(n for n in PUBLISHED if n.kernel is CUDNN_FA2 and n.seq_len == 8192 and n.mode == "fwd")
    assert (cudnn_8k.value, cudnn_8k.batch, cudnn_8k.heads, cudnn_8k.head_dim_qk, cudnn_8k.head_dim_v) == (
        13.99, 8, 32, 128, 128)
    assert cudnn_8k.causal is False and cudnn_8k.gpu == "NVIDIA H100 80GB"
    assert cudnn_8k.source == f"TFLA paper Fig. 4, docs/reference/paper-numbers.md{FIG4_FORWARD}"
    assert {n.kernel.label for n in PUBLISHED if not n.causal} == {TORCH_FA2.label, CUDNN_FA2.label}
    assert FA3.causal and all(n.gpu == paper_numbers.PAPER_GPU for n in PUBLISHED)
    fig4 = [n for n in PUBLISHED if n.figure == "Fig. 4"]
    assert {n.batch * n.seq_len for n in fig4} == {65536}
    fig14 = [n for n in PUBLISHED if n.figure == "Fig. 14"]
    assert {n.heads * n.head_dim_v for n in fig14} == {4096} and {n.batch for n in fig14} == {4}
    assert {n.chunk_size for n in fig4 if n.kernel is MLSTM_SIG_XL} == {128}


def _document_sections() -> dict[str, list[str]]:
    """Table rows (header and separator dropped) of each ``###`` section of the document's published
    numbers, by the section's anchor."""
    sections: dict[str, list[str]] = {}
    current = None
    published = False
    for line in DOCUMENT.read_text().splitlines():
        if line.startswith("## "):
            published = line == "## Published numbers"
            current = None
        elif line.startswith("### ") and published:
            current = "#" + re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", line[4:]).strip().lower())
            sections[current] = []
        elif current and line.startswith("|"):
            sections[current].append(line)
    return {name: rows[2:] for name, rows in sections.items()}


#: Row labels of the document's Fig. 4 tables (runtimes and peak memory) start with these, in _FIG4 order.
FIG4_ROW_PREFIXES = ("Torch FA2", "cuDNN FA2", "FA3", "GLA chunk", "Simple GLA chunk", "Mamba", "Mamba 2",
                     "mLSTMexp limit", "mLSTMexp xl", "mLSTMsig xl")
FIG12_ROW_LABELS = ("chunk_gla", "fused_chunk_gla", "chunk_simple_gla", "mLSTMexp limit cs64",
                    "mLSTMexp xl cs128", "mLSTMexp xl cs256", "mLSTMsig xl cs128", "mLSTMsig xl cs256")
FIG14_ROW_LABELS = ("mLSTMexp limit cs64", "mLSTMexp xl cs128", "mLSTMsig xl cs128", "mLSTMsig xl cs256",
                    "chunk_gla", "chunk_simple_gla")


def _check_rows(rows: list[str], labels, expected_rows) -> int:
    """Each document row starts with its label and holds exactly the expected numbers; returns their count."""
    assert len(rows) == len(labels)
    count = 0
    for line, label, expected in zip(rows, labels, expected_rows, strict=True):
        row_label, cells = table_cells(line)
        assert row_label.startswith(label)
        assert [cell for cell in cells if cell is not None] == expected
        count += len(expected)
    return count


def test_every_published_number_equals_its_cell_in_the_document():
    sections = _document_sections()
    fig4_kernels = [entry[0] for entry in paper_numbers._FIG4]
    count = sum(
        _check_rows(sections[section], FIG4_ROW_PREFIXES,
                    [published("Fig. 4", quantity, kernel=kernel, **mode) for kernel in fig4_kernels])
        for section, quantity, mode in ((FIG4_FORWARD, "time_ms", {"mode": "fwd"}),
                                        (FIG4_TRAINING, "time_ms", {"mode": "fwdbw"}),
                                        (FIG4_MEMORY, "peak_gb", {}))
    )
    chunks = [int(table_cells(line)[0]) for line in sections[FIG5_TABLE]]
    count += _check_rows(sections[FIG5_TABLE], [str(chunk) for chunk in chunks],
                         [published("Fig. 5", None, chunk_size=chunk) for chunk in chunks])
    fig12 = [n.value for n in PUBLISHED if n.figure == "Fig. 12"]
    fig12_rows = [fig12[i:i + 2] for i in range(0, len(fig12), 2)]
    count += _check_rows(sections[FIG12_TABLE], FIG12_ROW_LABELS, fig12_rows)
    lightning = [line for line in sections[FIG13_TABLE] if line.startswith("| LightningAttention2")]
    fig13 = [n.value for n in PUBLISHED if n.figure == "Fig. 13"]
    count += _check_rows(lightning, ["LightningAttention2 32 × 128", "LightningAttention2 64 × 64"],
                         [fig13[:2], fig13[2:]])
    count += _check_rows(sections[FIG14_TABLE], FIG14_ROW_LABELS,
                         [published("Fig. 14", kernel=kernel, chunk_size=chunk)
                          for kernel, chunk, _ in paper_numbers._FIG14])
    assert count == len(PUBLISHED) == 260


def test_registry_mapping_names_real_kernels_and_unmapped_kernels_say_why():
    registered = set(all_kernels())
    mapped = {name for names in paper_numbers.REGISTRY_KERNELS.values() for name in names}
    assert mapped <= registered
    assert paper_numbers.REGISTRY_KERNELS["cuDNN FlashAttention"] == ("torch.sdpa.cudnn",)
    assert "mamba_ssm.mamba2_ssd" in mapped and "lightning_attn.lightning_attn2" in mapped
    assert all(kernel.note.startswith("not compared") for kernel in paper_numbers.PAPER_KERNELS
               if not kernel.kernels)


# ------------------------------------------------------------------------------------ paper_comparison

GPU_H100 = "NVIDIA H100 80GB HBM3"
SHAPE_COLUMNS = ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v", "chunk_size")


def run_row(name: str, shape: tuple, mode: str = "fwd", time_ms: float = 5.0, **columns) -> dict:
    """One measured results-table row of kernel ``name`` on an H100, with ``columns`` replaced; shape is
    (batch, seq_len, heads, head_dim_qk, head_dim_v, chunk_size)."""
    spec = all_kernels()[name]
    row = dict.fromkeys(COLUMNS, "") | dict(zip(SHAPE_COLUMNS, shape, strict=True))
    row |= {"run": "unit", "kernel": name, "family": spec.family, "version": "0.1.0", "device": "cuda",
            "gpu": GPU_H100, "dtype": "bfloat16", "mode": mode, "status": "ok", "time_ms": time_ms,
            "peak_mem_mib": 1000.0, "params": json.dumps(spec.params)}
    return row | columns


SIG_FIG4 = ("tflabench.mlstm_sig.xl_chunk", (8, 8192, 16, 128, 256, 128))
CUDNN_FIG4 = ("torch.sdpa.cudnn", (8, 8192, 32, 128, 128, None))


def compare(*rows: dict, triton: str | None = "3.1.0") -> pd.DataFrame:
    return paper_comparison(pd.DataFrame(rows), triton)


def test_a_matching_row_gives_measured_published_and_their_ratio():
    result = compare(run_row(*SIG_FIG4, time_ms=3.9, peak_mem_mib=1500.0, version="2.0"))
    assert list(result.columns) == list(paper_numbers.COMPARISON_COLUMNS) and len(result) == 1
    row = result.iloc[0]
    assert (row.figure, row.paper_kernel, row.measured_ms, row.published_ms) == (
        "Fig. 4", "mLSTMsig (TFLA xl_chunk)", 3.9, 4.39)
    assert row.ratio == pytest.approx(3.9 / 4.39, rel=1e-12)
    assert row.measured_peak_gb == pytest.approx(1500 * 2**20 / 1e9) and row.published_peak_gb == 2.97
    assert row.source == f"TFLA paper Fig. 4, docs/reference/paper-numbers.md{FIG4_FORWARD}"
    assert row.difference == (
        "tflabench 2.0 here, mlstm_kernels TFLA kernels (version not recorded) in the paper")


@pytest.mark.parametrize(
    "changes",
    [
        {"chunk_size": 256},  # the paper publishes the mLSTM kernels at L = 128 in Fig. 4
        {"dtype": "float32"},
        {"batch": 4},
        {"head_dim_qk": 256},
        {"status": "failed_check"},
        {"status": "timeout", "time_ms": ""},
        {"kernel": "tflabench.mlstm_sig.limit_chunk"},
    ],
)
def test_rows_that_differ_in_a_key_or_were_not_measured_are_not_compared(changes):
    assert compare(run_row(*SIG_FIG4), run_row(*SIG_FIG4, **changes)).index.size == 1


def test_non_causal_paper_attention_is_noted_for_causal_runs_only():
    causal = compare(run_row(*CUDNN_FIG4, version="2.5.1+cu124")).difference.iloc[0]
    assert causal == "causal attention here, non-causal in the paper (about 2× the work)"
    full = run_row(*CUDNN_FIG4, version="2.5.1", params=json.dumps({"causal": False}))
    assert compare(full).difference.iloc[0] == ""
    fa3 = compare(run_row("flash_attn_interface.fa3", CUDNN_FIG4[1], version="3.0.0b1")).difference.iloc[0]
    assert "causal" not in fa3 and "flash-attention 3 (version not recorded)" in fa3


def test_gpu_triton_and_library_versions_are_noted_where_they_differ():
    h200 = compare(run_row(*SIG_FIG4, gpu="NVIDIA H200"), triton="3.6.0").difference.iloc[0].split("; ")
    assert h200[:2] == [
        "NVIDIA H200 (989 TFLOP/s bf16, 4.80 TB/s) here, "
        "NVIDIA H100 80GB (989 TFLOP/s bf16, 3.35 TB/s) in the paper",
        "Triton 3.6.0 here, 3.1.0 in the paper",
    ]
    cpu = compare(run_row(*SIG_FIG4, gpu="", device="cpu-interpreter"), triton=None).difference.iloc[0]
    assert cpu.startswith("cpu-interpreter here, NVIDIA H100 80GB in the paper; Triton version of the run")
    sdpa = compare(run_row(*CUDNN_FIG4, version="2.11.0+cu130"), triton="3.6.0").difference.iloc[0]
    assert "Triton" not in sdpa and "torch 2.11.0+cu130 here, PyTorch 2.5.1 in the paper" in sdpa
    fla = compare(run_row("fla.chunk_simple_gla", (8, 8192, 16, 128, 256, 64), version="0.1.0"))
    assert fla.difference.iloc[0] == ""


def test_mamba2_chunk_size_and_kernel_difference_and_mlstm_normalize_are_noted():
    mamba = "mamba_ssm.mamba2_ssd", (8, 8192, 64, 128, 64)
    notes = compare(run_row(mamba[0], (*mamba[1], 128), version="2.2.4")).difference.iloc[0].split("; ")
    assert notes[0] == "chunk size 128 here, 256 in the paper" and "bare SSD scan" in notes[1]
    same_chunk = compare(run_row(mamba[0], (*mamba[1], 256), version="2.2.4")).difference.iloc[0]
    assert "chunk size" not in same_chunk and "bare SSD scan" in same_chunk
    normalized = run_row(*SIG_FIG4, params=json.dumps({"normalize": True}))
    assert "normalize=True here, False in the paper" in compare(normalized).difference.iloc[0]


def test_a_point_of_figs_5_and_12_is_compared_once_and_results_come_in_figure_order():
    fig5 = ("tflabench.mlstm_sig.xl_chunk", (8, 8192, 8, 256, 512, 128))
    rows = [run_row("tflabench.mlstm_sig.xl_chunk", (4, 8192, 32, 128, 128, 256), "fwdbw"),
            run_row(*fig5, "fwdbw"), run_row("tflabench.mlstm_exp.xl_chunk", fig5[1], "fwdbw"),
            run_row(*SIG_FIG4, "fwdbw")]
    result = compare(*rows)
    assert list(result.figure) == ["Fig. 4", "Fig. 5", "Fig. 12", "Fig. 14"]
    assert list(result.published_ms) == [12.84, 18.96, 21.06, 8.59]
    assert result.published_peak_gb.isna().tolist() == [False, False, False, True]


def test_no_measured_row_gives_an_empty_table_with_the_columns():
    result = compare(run_row(*SIG_FIG4, status="oom", time_ms=""))
    assert result.empty and list(result.columns) == list(paper_numbers.COMPARISON_COLUMNS)


# ------------------------------------------------------------------------------------- report section


def section_of(text: str) -> str:
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def figure_row(section: str, figure: str, label: str, kernel: str, mode: str) -> list[str]:
    body = section.split(f"### {figure}:", 1)[1].split("\n### ", 1)[0]
    start = f"| {label} | {kernel} | {mode} |"
    line = next(line for line in body.splitlines() if line.startswith(start))
    return [cell.strip() for cell in line.strip("|").split("|")]


@pytest.fixture(scope="module")
def h100_report(tmp_path_factory) -> str:
    """report.md that `tflabench report --baseline torch.sdpa.cudnn` wrote for a copy of the H100 fixture."""
    run_dir = tmp_path_factory.mktemp("paper") / "h100_paper"
    shutil.copytree(H100_RUN, run_dir)
    main(["report", str(run_dir), "--baseline", "torch.sdpa.cudnn"])
    return (run_dir / "report.md").read_text()


def test_report_section_sits_between_the_chunk_size_and_plot_sections(h100_report):
    positions = [h100_report.index(heading) for heading in
                 ("## Chunk size: measured and theoretical optimum", SECTION, "## Plots")]
    assert positions == sorted(positions)


def test_report_cells_are_measured_over_published_with_the_ratio(h100_report):
    section = section_of(h100_report)
    table = run_data.load_run(H100_RUN).table
    header = figure_row(section, "Fig. 4", "paper kernel", "kernel", "mode")
    assert header[3:] == ["T=512", "T=8k", "differences"]
    sig = "mLSTMsig (TFLA xl_chunk) L=128", "tflabench.mlstm_sig.xl_chunk"
    cells = figure_row(section, "Fig. 4", *sig, "fwd")
    ours = table[(table.kernel == sig[1]) & (table["mode"] == "fwd") & (table.chunk_size == 128)
                 & (table.heads == 16)].set_index("seq_len").time_ms
    for cell, seq_len, paper_ms in zip(cells[3:5], (512, 8192), (4.41, 4.39), strict=True):
        assert cell == f"{ours[seq_len]:.2f} / {paper_ms:.2f} ({ours[seq_len] / paper_ms:.2f}×)"
    assert figure_row(section, "Fig. 14", *sig, "fwdbw")[3] == f"7.90 / 8.18 ({7.9 / 8.18:.2f}×)"
    lightning = figure_row(section, "Fig. 13", "LightningAttention2", "lightning_attn.lightning_attn2",
                           "fwdbw")
    assert lightning[3] == f"48.70 / 55.79 ({48.7 / 55.79:.2f}×)"


def test_report_notes_differences_per_row_and_leaves_out_what_does_not_match(h100_report):
    section = section_of(h100_report)
    cudnn = figure_row(section, "Fig. 4", "cuDNN FlashAttention", "torch.sdpa.cudnn", "fwdbw")
    # the fixture's torch is 2.5.1, its GPU an H100: causality is the only difference of the SDPA rows
    assert cudnn[-1] == "causal attention here, non-causal in the paper (about 2× the work)"
    mamba = figure_row(section, "Fig. 4", "Mamba 2 L=256", "mamba_ssm.mamba2_ssd", "fwd")[-1]
    assert "chunk size 128 here, 256 in the paper" in mamba and "Triton 3.6.0 here, 3.1.0 in the" in mamba
    assert "H100 80GB (" not in section
    not_compared = ("torch.sdpa.flash", "fla.chunk_gla", "fla.chunk_simple_gla",
                    "tflabench.mlstm_sig.limit_chunk")
    assert all(f"| {kernel} |" not in section for kernel in not_compared)
    memory = "| fwdbw | 8×256/512 T=8k B=8 L=256 | 2.77 | 6.78 |"
    assert f"| Fig. 5 | mLSTMsig (TFLA xl_chunk) | tflabench.mlstm_sig.xl_chunk {memory}" in section
    assert "- Mamba: not compared" in section and "empty_cache" in section


def test_report_lists_notes_common_to_every_row_once():
    section = report.paper_comparison_markdown(run_data.load_run(H200_RUN))
    gpu_note = "- NVIDIA H200 (989 TFLOP/s bf16, 4.80 TB/s) here, NVIDIA H100 80GB (989 TFLOP/s bf16, 3.35"
    assert section.count(gpu_note) == 1 and section.count("4.80 TB/s") == 1
    # the fixture's SDPA rows (torch kernels, no Triton) match too, so the Triton note is per row
    assert "- Triton 3.6.0 here, 3.1.0 in the paper" not in section
    assert "Triton 3.6.0 here, 3.1.0 in the paper" in section
    cells = figure_row(section, "Fig. 5", "mLSTMsig (TFLA xl_chunk)", "tflabench.mlstm_sig.xl_chunk", "fwd")
    assert len(cells) == 3 + 6 + 1 and cells[5].endswith("/ 6.30 (0.42×)")


def test_report_says_so_in_one_line_when_nothing_matches(tmp_path):
    shutil.copytree(H100_RUN, tmp_path / "run")
    table = pd.read_csv(tmp_path / "run" / "results.csv", dtype=str)
    table["dtype"] = "float32"
    table.to_csv(tmp_path / "run" / "results.csv", index=False)
    text = report.report_markdown(run_data.load_run(tmp_path / "run"), None, plots.Rendered())
    body = section_of(text).strip()
    assert body.startswith("No measured row of this run matches") and "\n" not in body
