"""The structural performance model on a fixture calibration (tests/fixtures/calibration, plausible H100
figures, not a measurement): launches from the kernels' own tilings, occupancy, predictions, the model-check
of a run, and the `predict` / `model-check` / `optimal-chunk` commands with their errors."""

import json
from pathlib import Path

import pytest
from cli_capture import run_cli

from tflabench.analysis import hardware, model_check, structural
from tflabench.analysis.run_data import load_run
from tflabench.errors import InputError
from tflabench.kernels.mlstm.fused_chunk import FusedTiling
from tflabench.kernels.mlstm.xl_chunk import Tiling

FIXTURES = Path(__file__).parent / "fixtures"
FIG4 = structural.Problem(8, 8192, 16, 128, 256)


@pytest.fixture(autouse=True)
def fixture_calibration(monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(FIXTURES / "calibration"))


@pytest.fixture
def rates():
    return structural.load_rates("h100")


def test_the_output_launch_follows_the_kernels_tiling():
    tiling = Tiling.default(128, 128, 256)
    output = next(launch for launch in structural.launches(FIG4, "xl_chunk", 128) if launch.name == "output")
    per_chunk = (256 // tiling.out_block_v) * (128 // (tiling.block_q * tiling.out_q_tiles))
    assert output.programs == per_chunk * (8192 // 128) * 8 * 16
    assert output.warps == tiling.out_num_warps and output.stages == tiling.out_num_stages


def test_the_fused_forward_follows_its_tiling_and_the_backward_is_tflas():
    problem = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    launches = structural.launches(problem, "fused_chunk", 64)
    assert launches[0].programs == 256 // FusedTiling.default(64, 128, 256).block_v * 8 * 16
    names = [launch.name for launch in launches]
    assert names[1:7] == ["gate cumsum", "states (recomputed)", "dQ", "state gradients", "dK", "dV"]


def test_flops_match_the_chunkwise_count_at_one_tile_per_chunk():
    """With L = 64 every tile is a whole chunk: the output launch's tile products are the chunkwise form's
    (Q K^T and S V on the causal half, rounded up to whole tiles, and Q C)."""
    problem = structural.Problem(1, 1024, 1, 64, 64)
    launches = structural.launches(problem, "xl_chunk", 64)
    output = next(launch for launch in launches if launch.name == "output")
    chunks = 1024 // 64
    assert output.flops == chunks * (2 * 64 * 64 * 64 * 3)


def test_occupancy_is_limited_by_shared_memory(rates):
    small = structural.Launch("small", 1000, 4, 1, 64 * 64, 16 * 1024)
    large = structural.Launch("large", 1000, 4, 2, 64 * 64, 100 * 1024)
    assert structural.resident_programs(small, rates) > structural.resident_programs(large, rates) == 1


def test_predictions_grow_with_the_work_and_fwdbw_costs_more(rates):
    fwd = structural.predict(FIG4, "xl_chunk", 128, rates)
    longer = structural.predict(structural.Problem(8, 16384, 16, 128, 256), "xl_chunk", 128, rates)
    training = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    fwdbw = structural.predict(training, "xl_chunk", 128, rates)
    assert 0 < fwd.seconds < longer.seconds and fwd.seconds < fwdbw.seconds
    assert all(launch.seconds > 0 for launch in fwdbw.launches)


def test_large_chunks_cost_more_than_the_best_and_bad_chunks_are_input_errors(rates):
    ranked = structural.predict_all(FIG4, rates)
    assert ranked[0].seconds == min(prediction.seconds for prediction in ranked)
    assert structural.predict(FIG4, "xl_chunk", 4096, rates).seconds > ranked[0].seconds
    for algorithm, chunk in (("fused_chunk", 256), ("xl_chunk", 96), ("reference", 32), ("xl_chunk", 16384)):
        with pytest.raises(InputError):
            structural.predict(FIG4, algorithm, chunk, rates)


def test_a_gpu_without_building_blocks_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    with pytest.raises(InputError, match="no building-block calibration"):
        structural.load_rates("h100")


def test_model_check_names_kernels_and_auto_choices():
    assert model_check.modelled_algorithm("tflabench.mlstm_sig.xl_chunk", {}) == ("sig", "xl_chunk")
    assert model_check.modelled_algorithm("mlstm_kernels.mlstm_sig.xl_chunk", {}) == ("sig", "reference")
    auto = {"algorithm": "auto", "choice": {"algorithm": "fused_chunk", "chunk_size": 64}}
    assert model_check.modelled_algorithm("tflabench.mlstm_exp.auto", auto) == ("exp", "fused_chunk")
    assert model_check.modelled_algorithm("torch.sdpa.cudnn", {}) is None
    assert model_check.modelled_algorithm("mlstm_kernels.mlstm_sig.limit_chunk", {}) is None


def test_model_check_of_a_run(rates):
    result = model_check.check_run(load_run(FIXTURES / "h200_small"), "h100")
    assert set(result["all"]) == {"rows", "median_abs_error", "max_abs_error", "groups",
                                  "best_match_fraction"}
    assert "tflabench.mlstm_sig.xl_chunk" in result["kernels"]
    for stats in result["kernels"].values():
        assert stats["max_abs_error"] >= stats["median_abs_error"] >= 0
    group = result["kernels"]["tflabench.mlstm_sig.xl_chunk"]["groups"][0]
    assert {"kernel", "shape", "measured_best", "predicted_best", "match"} <= set(group)


def test_predict_command_prints_the_best_and_json():
    args = ["predict", "--gpu", "h100", "--batch", "8", "--seq-len", "8192", "--heads", "16",
            "--head-dim-qk", "128", "--head-dim-v", "256"]
    code, out, _ = run_cli(args)
    assert code == 0 and "predicted best:" in out
    payload = json.loads(run_cli([*args, "--mode", "fwdbw", "--variant", "exp", "--json"])[1])
    assert payload["best"]["ms"] == min(p["ms"] for p in payload["predictions"])
    assert {p["algorithm"] for p in payload["predictions"]} == {"xl_chunk", "fused_chunk"}


def test_model_check_command_json_fields():
    code, out, _ = run_cli(["model-check", str(FIXTURES / "h200_small"), "--gpu", "h100", "--json"])
    assert code == 0
    payload = json.loads(out)
    for stats in (payload["all"], *payload["kernels"].values()):
        assert {"rows", "median_abs_error", "max_abs_error", "groups", "best_match_fraction"} <= set(stats)


@pytest.mark.parametrize("args, message", [
    (["predict", "--seq-len", "100"], "no chunk size runs"),
    (["predict", "--head-dim-qk", "24"], "multiples of 16"),
    (["predict", "--variant", "tanh"], "variant must be"),
    (["predict", "--gpu", "h200"], "no building-block calibration"),
    (["model-check", str(FIXTURES / "h200_small")], "no building-block calibration for h200"),
    (["model-check", str(FIXTURES / "nowhere")], ""),
    (["optimal-chunk", "--model", "exact"], "--model must be"),
])
def test_bad_input_is_one_error_line(args, message):
    code, _, err = run_cli(args)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and message in err


def test_optimal_chunk_uses_the_structural_model_when_calibrated():
    payload = json.loads(run_cli(["optimal-chunk", "--gpu", "h100", "--json"])[1])
    assert payload["model"] == "structural"
    sig = payload["structural"]["variants"]["sig"]
    assert sig["best_ms"] == min(row["ms"] for row in sig["runtime_ms"])
    paper = json.loads(run_cli(["optimal-chunk", "--gpu", "h100", "--model", "paper", "--json"])[1])
    assert paper["model"] == "paper" and paper["structural"] is None
    assert json.loads(run_cli(["optimal-chunk", "--gpu", "h200", "--json"])[1])["model"] == "paper"


def test_the_model_vs_measured_figure_draws_the_structural_model(tmp_path, monkeypatch):
    from tflabench.analysis.plots import plot_model_vs_measured

    record = json.loads((FIXTURES / "calibration" / "h100-sxm.json").read_text())
    (tmp_path / "h200.json").write_text(json.dumps({**record, "gpu": "h200"}))
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    run = load_run(FIXTURES / "h200_small")
    assert model_check.predicted_ms(run)
    figure = plot_model_vs_measured(run)
    labels = [text.get_text() for part in (figure, *figure.subfigs) for legend in part.legends
              for text in legend.get_texts()]
    assert any("structural model" in label for label in labels)


def test_compiled_resources_set_occupancy_and_spills(rates):
    """With the compiled table's registers the occupancy is the compiler's, and a spilling loop adds its
    local-memory traffic per trip; a launch without compiled resources keeps the rule and spills nothing."""
    launch = structural.Launch("fused", 1000, 8, 2, 64 * 64, 32 * 1024, kernel="k", loop_trips=10)
    assert structural.spilled_bytes(launch) == 0
    launch.compiled = {"registers": 255, "shared_bytes": 60 * 1024, "stack_bytes": 800,
                       "loop_local_bytes": 1000}
    assert structural.resident_programs(launch, rates) == 1  # 255 registers x 256 threads
    assert structural.spilled_bytes(launch) == 1000 * 256 * 10
    spilling = structural.launch_time(launch, rates)
    launch.compiled = dict(launch.compiled, stack_bytes=0, loop_local_bytes=0)
    assert structural.launch_time(launch, rates).compute_s < spilling.compute_s


def test_compiled_entries_are_used_only_for_the_tiling_the_kernels_run(monkeypatch):
    """A table entry whose tiling differs from today's default is stale: the model falls back to the rule."""
    problem = structural.Problem(8, 8192, 16, 128, 256, variant="exp")
    tiling = FusedTiling.default(64, 128, 256, variant="exp")
    kernels = {"fused_forward_kernel": {"registers": 255, "shared_bytes": 1, "stack_bytes": 8,
                                        "loop_local_bytes": 8}}
    entry = {"tiling": tiling.__dict__.copy(), "kernels": kernels}
    monkeypatch.setattr(structural, "_compiled_table", lambda: {"fused_chunk/exp/128x256/L64": entry})
    assert structural.compiled_kernels(problem, "fused_chunk", 64) == kernels
    assert structural.launches(problem, "fused_chunk", 64)[0].compiled == kernels["fused_forward_kernel"]
    entry["tiling"]["num_warps"] = 2
    assert structural.compiled_kernels(problem, "fused_chunk", 64) is None
    assert structural.compiled_kernels(problem, "fused_chunk", 32) is None


def test_the_shipped_table_matches_todays_tilings():
    """Every entry of compiled_resources.json is for the tiling the kernels use now
    (`python scripts/kernel_resources.py --table` regenerates it after a tiling change)."""
    table = structural._compiled_table()
    assert table
    for key in table:
        algorithm, variant, dims, chunk = key.split("/")
        head_dim_qk, head_dim_v = map(int, dims.split("x"))
        problem = structural.Problem(1, 4096, 1, head_dim_qk, head_dim_v, variant=variant)
        assert structural.compiled_kernels(problem, algorithm, int(chunk[1:])) is not None, key


def test_structural_optimal_chunks_per_head_dim():
    from tflabench.analysis import plots

    dims, best = plots.structural_optimal_chunks("h100-sxm", 1.0)
    assert dims == list(plots.STRUCTURAL_HEAD_DIMS) and all(chunk >= 16 for chunk in best)
    assert plots.structural_optimal_chunks("a100", 1.0) == ([], [])


def test_the_reference_is_modelled_from_its_launches():
    """mlstm_kernels' xl_chunk: its backward launches state gradients, dV, dK, dQ and one compiled
    gate-gradient kernel; its dQ and dK blocks are 128 wide at Dqk 128, and the compiled table gives its
    kernels' registers (its forward output kernel at 255: two programs per SM)."""
    problem = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    launch_list = structural.launches(problem, "reference", 128)
    names = [launch.name for launch in launch_list]
    assert names == ["gate cumsum", "states", "output", "gate cumsum", "states (recomputed)",
                     "state gradients", "dV", "dK", "dQ", "gate grads"]
    by_name = {launch.name: launch for launch in launch_list}
    assert by_name["dQ"].programs == 1 * 2 * 64 * 128  # (Dqk / 128) x (L / 64) x NC x B*H
    assert by_name["dV"].programs == 2 * 2 * 64 * 128  # (Dv / 128) x (L / 64) x NC x B*H
    assert by_name["output"].compiled["registers"] == 255
    assert all(launch.compiled is not None for launch in launch_list
               if launch.name in structural.REFERENCE_KERNELS)


def test_a_stale_reference_entry_falls_back_to_the_rule(monkeypatch):
    """A reference entry compiled with other tiles than `reference_tiling` is ignored."""
    problem = structural.Problem(8, 8192, 16, 128, 256)
    entry = structural._compiled_table()["reference/sig/128x256/L128"]
    assert structural.compiled_kernels(problem, "reference", 128) is not None
    stale = json.loads(json.dumps(entry))
    stale["kernels"][structural.REFERENCE_KERNELS["output"]]["blocks"]["siz_b_DHHV"] = 64
    monkeypatch.setattr(structural, "_compiled_table", lambda: {"reference/sig/128x256/L128": stale})
    assert structural.compiled_kernels(problem, "reference", 128) is None


def test_new_calibration_figures_are_used_and_their_absence_keeps_todays_rule(rates):
    """The row reductions of mLSTMexp are timed only with ``row_reduce_elements_per_s``; spill traffic hits
    the cache at ``spills.local_bytes_per_s`` when the calibration has it, else at the L2 load rate."""
    exp = structural.Problem(8, 8192, 16, 128, 256, variant="exp")
    assert "row_reduce_elements_per_s" not in rates.blocks["pointwise"]
    before = structural.predict(exp, "xl_chunk", 128, rates).seconds
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["pointwise"]["row_reduce_elements_per_s"] = blocks["pointwise"]["fma_elements_per_s"] / 4
    assert structural.predict(exp, "xl_chunk", 128, structural.Rates(blocks)).seconds > before
    launch = structural.Launch("fused", 1000, 8, 2, 64 * 64, 32 * 1024, kernel="k", loop_trips=10)
    launch.compiled = {"registers": 255, "shared_bytes": 60 * 1024, "stack_bytes": 800,
                       "loop_local_bytes": 1000}
    today = structural.launch_time(launch, rates).compute_s
    blocks["spills"] = {"local_bytes_per_s": blocks["memory"]["l2_read_bytes_per_s"] / 4}
    assert structural.launch_time(launch, structural.Rates(blocks)).compute_s > today
