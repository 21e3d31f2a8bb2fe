"""`tflabench plot`: every figure from the hand-made fixture run tests/fixtures/h200_small (CPU only).

The fixture is an H200 run (meta.json in the harness's format) with a Fig. 4 part (65,536 tokens,
T = 2k..16k, fwd and fwdbw, ten kernels, crash / timeout / unavailable / failed_check rows) and a Fig. 5
part (mLSTMsig and mLSTMexp at 8 x 256/512, T = 8192, B = 8, L = 64..2048, one error and two skipped rows).
Its FLOP/byte columns come from `tflabench.analysis.models`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread
from PIL import Image

from tflabench.analysis import hardware, optimal_chunk, plots, run_data
from tflabench.analysis.plot_commands import PLOT_KIND_NAMES
from tflabench.cli import main
from tflabench.errors import InputError
from tflabench.schema import COLUMNS

FIXTURE = Path(__file__).parent / "fixtures" / "h200_small"
MEASURED_FLOPS, MEASURED_BANDWIDTH = 801e12, 4.3e12  # the fixture's meta.json ceilings.bfloat16.measured


@pytest.fixture(scope="module")
def run() -> run_data.Run:
    return run_data.load_run(FIXTURE)


@pytest.fixture(scope="module")
def rendered(run, tmp_path_factory) -> plots.Rendered:
    return plots.render(run, plots.PLOT_KINDS, tmp_path_factory.mktemp("plots"), plots.PLOT_FORMATS)


def _copy_fixture(tmp_path: Path, keep=None) -> Path:
    """The fixture run under tmp_path, optionally with only the rows where keep(table) is true."""
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE, run_dir)
    if keep is not None:
        table = pd.read_csv(run_dir / "results.csv", dtype=str)
        table[keep(table)].to_csv(run_dir / "results.csv", index=False)
    return run_dir


def _legend_labels(fig) -> list[str]:
    return [text.get_text() for legend in fig.subfigs[0].legends for text in legend.get_texts()]


def _figure_text(fig) -> str:
    return "\n".join(text.get_text() for text in fig.texts)


def _sweep_rows(run: run_data.Run, kernel: str, mode: str) -> pd.DataFrame:
    rows = run.measured[(run.measured["kernel"] == kernel) & (run.measured["mode"] == mode)]
    fig5 = (rows["heads"] == 8) & (rows["head_dim_qk"] == 256) & (rows["head_dim_v"] == 512)
    return rows[fig5].sort_values("chunk_size")


def test_cli_kind_names_match_the_plot_registry():
    assert PLOT_KIND_NAMES == tuple(plots.PLOT_KINDS)


@pytest.mark.parametrize("kind", list(plots.PLOT_KINDS))
def test_every_kind_is_written_as_nonblank_png_and_svg(rendered, kind):
    assert kind not in rendered.skipped
    png, svg = sorted(rendered.files[kind], key=lambda path: path.suffix)
    assert png.suffix == ".png" and png.stat().st_size > 15_000
    with Image.open(png) as image:
        assert image.mode == "P"  # a palette of 256 colors (`plots.palette_png`)
    pixels = imread(png)[..., :3]
    assert pixels.shape[0] > 500 and pixels.shape[1] > 800
    assert pixels.std() > 0.05
    assert (pixels.min(axis=-1) < 0.9).mean() > 0.02  # more than 2% of the pixels are not white
    text = svg.read_text()
    assert svg.suffix == ".svg" and text.startswith("<?xml") and "<svg" in text and len(text) > 20_000


def test_runtime_plot_draws_each_configuration_and_lists_what_was_not_measured(run):
    fig = plots.plot_runtime_vs_seqlen(run)
    labels = _legend_labels(fig)
    assert "tflabench.mlstm_sig.xl_chunk  16×128/256  L=128" in labels
    assert "torch.sdpa.cudnn  32×128" in labels
    assert not any("8×256/512" in label for label in labels)  # single-T chunk sweeps go to other figures
    forward = fig.subfigs[0].axes[0]
    cudnn = next(line for line in forward.get_lines() if line.get_label() == "torch.sdpa.cudnn  32×128")
    expected = run.measured.query("kernel == 'torch.sdpa.cudnn' and mode == 'fwd'").sort_values("seq_len")
    np.testing.assert_allclose(cudnn.get_ydata(), expected["time_ms"])
    note = _figure_text(fig)
    assert "mlstm_kernels.mlstm_exp.xl_chunk 16×128/256 [fwd, fwdbw] crash: worker died with SIGABRT" in note
    assert "fla.chunk_gla 16×128/256 [fwd, fwdbw] timeout" in note
    assert "flash_attn_interface.fa3 32×128 [fwd, fwdbw] unavailable" in note
    assert "lightning_attn.lightning_attn2 32×128 [fwd, fwdbw] failed_check" in note


def test_headdim_plot_draws_each_kernel_over_its_head_dims(run):
    fig = plots.plot_runtime_vs_headdim(run)
    labels = _legend_labels(fig)
    ours_label = "tflabench.mlstm_sig.xl_chunk  L=128  T=8k B=8"  # the run has several lengths: T, B named
    assert {ours_label, "mlstm_kernels.mlstm_sig.xl_chunk  L=128  T=8k B=8"} <= set(labels)
    forward = fig.subfigs[0].axes[0]
    ours = next(line for line in forward.get_lines() if line.get_label() == ours_label)
    expected = run.measured.query(
        "kernel == 'tflabench.mlstm_sig.xl_chunk' and mode == 'fwd' and head_dim_qk == head_dim_v"
    ).sort_values("head_dim_v")
    np.testing.assert_array_equal(ours.get_xdata(), [256, 512, 1024])
    np.testing.assert_allclose(ours.get_ydata(), expected["time_ms"])
    assert "head dim d" in forward.get_xlabel()
    assert "lightning_attn.lightning_attn2 32×128 [fwd, fwdbw] failed_check" in _figure_text(fig)


def test_a_run_at_one_sequence_length_has_a_headdim_figure_and_no_runtime_figure(tmp_path):
    run_dir = _copy_fixture(tmp_path, keep=lambda table: table["seq_len"] == "8192")
    stale = run_dir / "plots" / "runtime_vs_seqlen.png"
    stale.parent.mkdir()
    stale.write_bytes(b"an earlier rendering")
    rendered = plots.render(run_data.load_run(run_dir), plots.PLOT_KINDS, run_dir / "plots", ("png",))
    assert "one sequence length" in rendered.skipped["runtime"] and "headdim" in rendered.files
    assert not stale.exists()
    labels = _legend_labels(plots.plot_runtime_vs_headdim(run_data.load_run(run_dir)))
    assert "tflabench.mlstm_sig.xl_chunk  L=128" in labels  # one length: no T, B in the labels


def test_memory_plot_labels_every_chunk_size_and_marks_both_optima(run):
    fig = plots.plot_runtime_vs_memory(run)
    forward = fig.subfigs[0].axes[0]
    annotations = {text.get_text() for text in forward.texts}
    assert {f"L={size}" for size in (64, 128, 256, 512, 1024, 2048)} <= annotations
    sig = _sweep_rows(run, "tflabench.mlstm_sig.xl_chunk", "fwd")
    ceilings = hardware.Ceilings(MEASURED_FLOPS, MEASURED_BANDWIDTH, "fixture")
    runnable, _ = optimal_chunk.runnable_chunk("sig", ceilings, 512, 0.5, 8192)
    stars = [line for line in forward.get_lines() if line.get_marker() == "*"]
    theory_mem = sig.loc[sig["chunk_size"] == runnable, "peak_mem_mib"].item()
    assert any(np.allclose(line.get_xdata(), [theory_mem]) for line in stars)
    best = sig.loc[sig["time_ms"].idxmin()]
    rings = [
        line for line in forward.get_lines() if line.get_marker() == "o" and line.get_linestyle() == "None"
    ]
    assert any(np.allclose(line.get_xdata(), [best["peak_mem_mib"]]) for line in rings)
    assert f"measured L={int(best['chunk_size'])}" in _figure_text(fig)


def test_roofline_has_the_run_gpus_two_roofs_and_h100_a100_reference_roofs(run):
    fig = plots.plot_roofline(run)
    ax = fig.subfigs[0].axes[0]
    roofs = {line.get_label(): line for line in ax.get_lines() if "TFLOP/s," in line.get_label()}
    names = [hardware.get_gpu(key).name for key in ("h200", "h100", "a100")]
    assert all(any(label.startswith(name) for label in roofs) for name in names)
    measured = next(line for label, line in roofs.items() if "measured" in label)
    assert max(measured.get_ydata()) == pytest.approx(MEASURED_FLOPS / 1e12)
    points = np.concatenate([collection.get_offsets() for collection in ax.collections])
    assert len(points) == len(run.measured)


def test_optimal_chunk_plot_reproduces_eq_121_and_overlays_the_measured_optima(run):
    fig = plots.plot_optimal_chunk(run)
    half = fig.subfigs[0].axes[0]
    h100_name = hardware.get_gpu("h100").name
    h100 = next(line for line in half.get_lines() if line.get_label().startswith(h100_name))
    at_512 = np.argmin(np.abs(h100.get_xdata() - 512))
    assert h100.get_ydata()[at_512] == pytest.approx(633.5, abs=0.1)  # Eq. 121
    measured = [line for line in half.get_lines() if line.get_label().startswith("measured optimum")]
    assert len(measured) == 4  # sig and exp, fwd and fwdbw
    assert all(line.get_ydata()[0] == 256 for line in measured)


def test_model_plot_is_flops_over_alpha_plus_bytes_over_beta_with_measured_ceilings(run):
    fig = plots.plot_model_vs_measured(run)
    top, bottom = fig.subfigs[0].axes[0], fig.subfigs[0].axes[2]
    rows = _sweep_rows(run, "tflabench.mlstm_sig.xl_chunk", "fwd")
    additive = (rows["flops"] / MEASURED_FLOPS + rows["bytes"] / MEASURED_BANDWIDTH).to_numpy() * 1e3
    dashed = [line.get_ydata() for line in top.get_lines() if line.get_linestyle() == "--"]
    assert any(np.allclose(ydata, additive, rtol=1e-9) for ydata in dashed)
    ratios = [line.get_ydata() for line in bottom.get_lines() if len(line.get_ydata()) == len(rows)]
    assert any(np.allclose(ydata, rows["time_ms"].to_numpy() / additive) for ydata in ratios)


def test_kinds_without_data_are_skipped_with_the_reason_or_refused_when_named(tmp_path):
    run = run_data.load_run(_copy_fixture(tmp_path, keep=lambda table: table["heads"] != "8"))
    rendered = plots.render(run, plots.PLOT_KINDS, tmp_path / "plots", ("png",))
    assert set(rendered.skipped) == {"memory", "model"}
    assert "two or more chunk sizes" in rendered.skipped["memory"]
    with pytest.raises(plots.NoDataError, match="plot memory: .*two or more chunk sizes"):
        plots.render(run, ["memory"], tmp_path / "plots", ("png",), strict=True)


def test_a_cpu_interpreter_run_has_no_gpu_roofs_and_no_model(tmp_path):
    run_dir = _copy_fixture(tmp_path)
    (run_dir / "meta.json").unlink()
    table = pd.read_csv(run_dir / "results.csv", dtype=str)
    table["device"], table["gpu"] = "cpu-interpreter", ""
    table.to_csv(run_dir / "results.csv", index=False)
    run = run_data.load_run(run_dir)
    assert run_data.run_ceilings(run) == {}
    roofline = plots.plot_roofline(run)
    ax = roofline.subfigs[0].axes[0]
    assert not [line.get_label() for line in ax.get_lines() if "TFLOP/s," in line.get_label()]
    assert ax.get_ylabel().startswith("achieved MFLOP/s")
    assert any("GPU roofs do not apply" in text.get_text() for text in ax.texts)
    assert "no GPU ceilings known for cpu-interpreter" in _figure_text(plots.plot_runtime_vs_memory(run))
    with pytest.raises(plots.NoDataError, match="no GPU ceilings"):
        plots.plot_model_vs_measured(run)


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: shutil.rmtree(d), "no such run directory"),
        (lambda d: (d / "results.csv").unlink(), "no results.csv"),
        (lambda d: (d / "results.csv").write_text(""), "empty file"),
        (lambda d: (d / "results.csv").write_text(",".join(COLUMNS) + "\n"), "no rows"),
        (lambda d: (d / "results.csv").write_text("kernel,status\nx,ok\n"), "missing columns: run, family"),
        (lambda d: (d / "results.csv").write_text((d / "results.csv").read_text().replace(",ok,", ",fine,")),
         "unknown status values"),
        (lambda d: (d / "meta.json").write_text("{not json"), "meta.json: not valid JSON"),
    ],
)
def test_bad_run_input_is_one_input_error(tmp_path, setup, message):
    run_dir = _copy_fixture(tmp_path)
    setup(run_dir)
    with pytest.raises(InputError, match=message):
        run_data.load_run(run_dir)


def test_a_half_written_last_row_is_left_out(tmp_path):
    run_dir = _copy_fixture(tmp_path)
    complete = len(run_data.load_run(run_dir).table)
    with open(run_dir / "results.csv", "a") as handle:
        handle.write("h200-small,tflabench.mlstm_sig.xl_chunk,mlstm_sig,0.1.0,cuda,NVIDIA H200,8,81")
    assert len(run_data.load_run(run_dir).table) == complete


def test_plots_are_png_alone_unless_svg_is_asked_for(tmp_path):
    """`render` (what `tflabench report` draws) and `tflabench plot` without --format write PNG only."""
    rendered = plots.render(run_data.load_run(FIXTURE), ["roofline"], tmp_path / "render")
    assert [path.name for path in rendered.files["roofline"]] == ["roofline.png"]
    run_dir = _copy_fixture(tmp_path)
    main(["plot", str(run_dir), "--kind", "roofline"])
    assert sorted(path.name for path in (run_dir / "plots").iterdir()) == ["roofline.png"]


def test_plot_command_writes_the_requested_kinds_and_formats(tmp_path, capsys):
    run_dir = _copy_fixture(tmp_path)
    out = tmp_path / "out"
    main(["plot", str(run_dir), "--kind", "runtime,roofline", "--format", "svg", "--out", str(out)])
    assert sorted(path.name for path in out.iterdir()) == ["roofline.svg", "runtime_vs_seqlen.svg"]
    assert capsys.readouterr().out.count("wrote ") == 2
    main(["plot", str(run_dir / "results.csv"), "-f", "png"])
    assert len(list((run_dir / "plots").glob("*.png"))) == len(plots.PLOT_KINDS)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plot", "{missing}"], "no such run directory or results CSV"),
        (["plot", "{run}", "--kind", "histogram"], "unknown plot kind 'histogram'"),
        (["plot", "{run}", "--format", "jpg"], "unknown plot format 'jpg'"),
        (["plot", "{sweepless}", "--kind", "model"], "plot model: no kernel configuration"),
    ],
)
def test_plot_command_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    run_dir = _copy_fixture(tmp_path)
    sweepless = tmp_path / "sweepless"
    shutil.copytree(run_dir, sweepless)
    table = pd.read_csv(sweepless / "results.csv", dtype=str)
    table[table["heads"] != "8"].to_csv(sweepless / "results.csv", index=False)
    paths = {"missing": tmp_path / "missing", "run": run_dir, "sweepless": sweepless}
    with pytest.raises(SystemExit) as exit_info:
        main([arg.format(**paths) for arg in args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_a_gpu_run_without_chunk_sweeps_is_not_called_a_cpu_run(tmp_path):
    run_dir = _copy_fixture(tmp_path)
    table = pd.read_csv(run_dir / "results.csv", dtype=str)
    table[table["chunk_size"].isin(["128", ""])].to_csv(run_dir / "results.csv", index=False)
    with pytest.raises(plots.NoDataError, match="needs a sweep over chunk sizes") as raised:
        plots.plot_runtime_vs_memory(run_data.load_run(run_dir))
    assert "CPU" not in str(raised.value)


def test_many_kernels_get_their_family_colour_and_a_marker_and_line_of_their_own():
    families = ["mlstm_sig"] * 5 + ["softmax_attention"] * 3 + ["gla"]
    series = [(family, f"kernel{index}") for index, family in enumerate(families)]
    styles = plots.series_styles(series, pd.DataFrame({"family": families}))
    assert len({style["color"] for style in styles.values()}) == 3
    for family in set(families):
        members = [styles[label] for fam, label in series if fam == family]
        assert len({style["color"] for style in members}) == 1
        assert len({(style["marker"], style["ls"]) for style in members}) == len(members)


def test_the_legend_is_below_the_panels_and_the_footnotes_are_wrapped_not_cut(tmp_path):
    run_dir = _copy_fixture(tmp_path)
    table = pd.read_csv(run_dir / "results.csv", dtype=str)
    failed = table.index[table["status"] == "ok"][:1]
    table.loc[failed, ["status", "reason"]] = ["error", "a reason " + "long " * 80 + "END"]
    table.to_csv(run_dir / "results.csv", index=False)
    fig = plots.plot_runtime_vs_seqlen(run_data.load_run(run_dir))
    fig.canvas.draw()
    legend = fig.subfigs[0].legends[0]
    panels = [ax.get_window_extent() for ax in fig.subfigs[0].axes]
    legend_box = legend.get_window_extent()
    assert legend_box.y1 <= min(box.y0 for box in panels)
    assert legend_box.width <= max(box.x1 for box in panels) - min(box.x0 for box in panels)
    note = _figure_text(fig)
    assert "END" in note and "…" not in note
