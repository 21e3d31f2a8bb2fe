"""The structural performance model on a fixture calibration (tests/fixtures/calibration, plausible H100
figures, not a measurement): launches from the kernels' own tilings, occupancy, predictions, the model-check
of a run, and the `predict` / `model-check` / `optimal-chunk` commands with their errors."""

import dataclasses
import json
import math
from pathlib import Path

import pytest
from cli_capture import run_cli

from tflabench.analysis import hardware, model_check, sass, structural
from tflabench.analysis.run_data import load_run
from tflabench.errors import InputError
from tflabench.kernels.mlstm.fused_chunk import FusedTiling
from tflabench.kernels.mlstm.tilings import FORMER_DEFAULTS, former_default
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


def test_the_dv_launch_takes_its_own_stages_and_the_others_keep_theirs():
    problem, default = dataclasses.replace(FIG4, mode="fwdbw"), Tiling.default(128, 128, 256)
    for fields, dv_stages in (({}, default.num_stages), ({"dv_num_stages": 1}, 1)):
        stages = {item.name: item.stages for item in structural.launches(problem, "xl_chunk", 128, fields)}
        assert stages["dV"] == dv_stages and stages["dQ"] == stages["dK"] == default.num_stages
    with pytest.raises(InputError, match="dv_num_stages"):
        dataclasses.replace(default, dv_num_stages=-1).check(128, 256)


def test_the_fused_forward_follows_its_tiling_and_the_backward_is_tflas():
    problem = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    launches = structural.launches(problem, "fused_chunk", 64)
    assert launches[0].programs == 256 // FusedTiling.default(64, 128, 256).block_v * 8 * 16
    names = [launch.name for launch in launches]
    assert names[1:7] == ["gate cumsum", "states (recomputed)", "dQ", "state gradients", "dK", "dV"]


def test_only_a_backward_after_the_fused_forward_recomputes_the_gate_sums():
    """xl_chunk's backward reads the gate sums its forward wrote (`xl_chunk._backward`); after fused_chunk's
    forward, `xl_chunk.tfla_backward` computes TFLA's again."""
    problem = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    for algorithm, chunk in (("xl_chunk", 128), ("limit_chunk", 64), ("fused_chunk", 64)):
        names = [launch.name for launch in structural.launches(problem, algorithm, chunk)]
        assert names.count("gate cumsum") == 1, (algorithm, names)


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
    for launch in payload["best"]["launches"]:
        terms = ("compute_ms", "memory_ms", "issue_ms", "exposed_load_ms", "walk_ms", "overhead_ms",
                 "dispatch_ms")
        assert all(launch[term] >= 0 for term in terms) and launch["ms"] >= launch["overhead_ms"]
        assert launch["bound"] in ("compute", "memory", "issue", "exposed loads", "walk")
    kept = json.loads(run_cli([*args, "--mode", "fwdbw", "--variant", "exp", "--tiling", "keep-states",
                               "--json"])[1])
    assert kept["tiling"] == "keep-states" and payload["tiling"] == "default"
    xl_chunk = {(p["algorithm"], p["chunk_size"]): p["ms"] for p in payload["predictions"]}
    for prediction in kept["predictions"]:
        key = (prediction["algorithm"], prediction["chunk_size"])
        launches = {launch["name"] for launch in prediction["launches"]}
        if prediction["algorithm"] == "xl_chunk":
            assert "states (recomputed)" not in launches and prediction["ms"] < xl_chunk[key]
        else:
            assert prediction["ms"] == pytest.approx(xl_chunk[key])


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
    (["predict", "--tiling", "wide-everything"], "unknown tiling 'wide-everything'"),
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


def test_spill_waits_are_hidden_by_the_warps_of_an_sms_schedulers(rates):
    """A program's spill time is divided by the warps each of the SM's four schedulers holds (c x warps / 4,
    at least 1): a lone 4-warp program waits for all of its spills, two resident programs or 8 warps hide
    half. A walking launch's floor is, per round of resident programs, one program's walk plus the spills its
    steps wait for."""
    compiled = {"registers": 128, "shared_bytes": 60 * 1024, "stack_bytes": 800, "loop_local_bytes": 1000}

    def spill_compute(warps: int, programs: int) -> float:
        launch = structural.Launch("k", programs, warps, 1, 64 * 64, 32 * 1024, kernel="k", loop_trips=10,
                                   compiled=compiled)
        free = dataclasses.replace(launch, compiled=dict(compiled, stack_bytes=0, loop_local_bytes=0))
        return structural.launch_time(launch, rates).compute_s - structural.launch_time(free, rates).compute_s

    sms = rates.sm_count
    lone, paired = structural.Launch("k", sms, 4, 1, 0, 0), structural.Launch("k", 2 * sms, 4, 1, 0, 0)
    assert structural.warps_per_scheduler(lone, 1) == 1 and structural.warps_per_scheduler(paired, 2) == 2
    assert structural.warps_per_scheduler(structural.Launch("k", sms, 2, 1, 0, 0), 1) == 1
    one_program = spill_compute(4, sms)
    assert spill_compute(8, sms) == pytest.approx(one_program * 2 / 2)  # twice the threads, half exposed
    assert spill_compute(4, 2 * sms) == pytest.approx(one_program * 2 / 2)  # two programs each, both resident
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["walk"] = [{"kind": "fused", "l": 64, "dqk": 64, "dv": 64, "num_warps": 4, "num_stages": 1,
                       "step_s": 1e-3, "spill_bytes_per_thread": 0}]
    walking = structural.Launch("k", sms, 4, 1, 64 * 64, 32 * 1024, kernel="k", loop_trips=10,
                                compiled=compiled, walk=("fused", 64, 64, 64))
    floor = structural.launch_time(walking, structural.Rates(blocks)).compute_s
    assert floor == pytest.approx(10 * 1e-3 + one_program)
    paired_walk = dataclasses.replace(walking, programs=2 * sms)  # one round of two programs per SM
    floor = structural.launch_time(paired_walk, structural.Rates(blocks)).compute_s
    assert floor == pytest.approx(10 * 1e-3 + one_program / 2)


def test_products_of_fewer_than_64_rows_take_the_calibrated_short_tiles(rates):
    """Without calibrated products of fewer than 64 rows, a 16-row product costs a 64-row one (a warpgroup
    MMA); with them it costs its own FLOPs at the nearest short tile's rate, and 64-row products never take a
    short tile's rate."""
    launch = structural.Launch("k", rates.sm_count, 4, 2, 0, 0)
    launch.dot(16, 64, 128, 10)
    padded = structural.launch_time(launch, rates).compute_s
    blocks = json.loads(json.dumps(rates.blocks))
    short = dict(blocks["dot"][0], m=16, n=64, k=128, num_warps=4)
    short.update({name: value / 8 for name, value in short.items() if name.endswith("flops_per_s")})
    blocks["dot"].append(short)
    calibrated = structural.Rates(blocks)
    assert calibrated.times_short_products and not rates.times_short_products
    rate = calibrated.dot_rate((16, 64, 128), 4, 1)
    assert rate == pytest.approx(short["one_per_sm_flops_per_s"] / calibrated.sm_count)
    own_rows = 2 * 16 * 64 * 128 * 10 / rate
    assert structural.launch_time(launch, calibrated).compute_s == pytest.approx(own_rows)
    assert padded == pytest.approx(2 * 64 * 64 * 128 * 10 / rates.dot_rate((64, 64, 128), 4, 1))
    assert calibrated.dot_rate((64, 64, 128), 4, 1) == rates.dot_rate((64, 64, 128), 4, 1)


def test_eight_warp_programs_move_their_spills_at_the_calibrated_spill_loop_rate(rates):
    """With spill loops in the calibration, an 8-warp program's spills take its spilled bytes over the rate
    calibrated for its warps and stack bytes per SM: interpolated in log2 of the stack within a warps-per-SM
    level, then in log2 of the warps. 4-warp programs keep the HBM-bound rate and the schedulers' divisor."""
    def level(warps_per_sm, points):
        return [{"warps_per_sm": warps_per_sm, "stack_bytes_per_sm": stack, "bytes_per_s_per_sm": rate}
                for stack, rate in points]

    blocks = json.loads(json.dumps(rates.blocks))
    blocks["spill_loops"] = {"loops": [], "rates": level(8, [(100e3, 80e9), (400e3, 20e9)])
                             + level(16, [(200e3, 40e9), (800e3, 10e9)])}
    calibrated = structural.Rates(blocks)
    assert calibrated.spill_rate(8, 50e3) == 80e9 and calibrated.spill_rate(8, 1e6) == 20e9  # the ends
    assert calibrated.spill_rate(8, 200e3) == pytest.approx(50e9)  # halfway in log2 between 100 and 400 KB
    assert calibrated.spill_rate(16, 400e3) == pytest.approx(25e9)
    assert calibrated.spill_rate(8 * 2 ** 0.5, 200e3) == pytest.approx((50e9 + 40e9) / 2)
    assert rates.spill_rate(8, 200e3) == 0  # a calibration without spill loops
    compiled = {"registers": 255, "shared_bytes": 60 * 1024, "stack_bytes": 800, "loop_local_bytes": 1000}
    sms = calibrated.sm_count
    for warps, programs in ((8, sms), (8, 3 * sms)):
        launch = structural.Launch("k", programs, warps, 1, 0, 0, kernel="k", loop_trips=10,
                                   compiled=compiled)
        stack = 800 * 32 * warps  # one program per SM at 255 registers
        expected = structural.spilled_bytes(launch) / calibrated.spill_rate(warps, stack)
        assert structural.program_spill_seconds(launch, calibrated, 1, 1e9, 1e9) == pytest.approx(expected)
        free = dataclasses.replace(launch, compiled=dict(compiled, stack_bytes=0, loop_local_bytes=0))
        added = (structural.launch_time(launch, calibrated).compute_s
                 - structural.launch_time(free, calibrated).compute_s)
        assert added == pytest.approx(programs // sms * expected)
    four_warps = structural.Launch("k", sms, 4, 1, 0, 0, kernel="k", loop_trips=10, compiled=compiled)
    assert (structural.program_spill_seconds(four_warps, calibrated, 1, 1e9, 1e9)
            == structural.program_spill_seconds(four_warps, rates, 1, 1e9, 1e9))


def test_eight_warp_programs_wait_for_their_spilled_loads_at_the_calibrated_load_rate(rates):
    """Where both the compiled entry (``loop_load_bytes``) and the calibration's spill loops
    (``load_bytes_per_s_per_sm``) have the loads, an 8-warp program's spills take its spilled loads over the
    calibrated load rate, whatever it stores; without either, all of its local bytes over the rate of all."""
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["spill_loops"] = {"loops": [], "rates": [
        {"warps_per_sm": 8, "stack_bytes_per_sm": stack, "bytes_per_s_per_sm": rate,
         "load_bytes_per_s_per_sm": loads}
        for stack, rate, loads in ((100e3, 80e9, 40e9), (400e3, 20e9, 12e9))]}
    calibrated = structural.Rates(blocks)
    assert calibrated.spill_rate(8, 200e3, "load_bytes_per_s_per_sm") == pytest.approx((40e9 + 12e9) / 2)
    compiled = {"registers": 255, "shared_bytes": 60 * 1024, "stack_bytes": 800, "loop_local_bytes": 1000,
                "loop_load_bytes": 600}
    launch = structural.Launch("k", calibrated.sm_count, 8, 1, 0, 0, kernel="k", loop_trips=10,
                               compiled=compiled)
    stack = 800 * 32 * 8
    loads = 600 * 32 * 8 * 10 / calibrated.spill_rate(8, stack, "load_bytes_per_s_per_sm")
    assert structural.program_spill_seconds(launch, calibrated, 1, 1e9, 1e9) == pytest.approx(loads)
    more_stores = dataclasses.replace(launch, compiled=dict(compiled, loop_local_bytes=1500))
    assert structural.program_spill_seconds(more_stores, calibrated, 1, 1e9, 1e9) == pytest.approx(loads)
    everything = 1000 * 32 * 8 * 10 / calibrated.spill_rate(8, stack)
    no_loads = dict(compiled)
    del no_loads["loop_load_bytes"]
    without = dataclasses.replace(launch, compiled=no_loads)
    assert structural.program_spill_seconds(without, calibrated, 1, 1e9, 1e9) == pytest.approx(everything)
    for item in blocks["spill_loops"]["rates"]:
        del item["load_bytes_per_s_per_sm"]
    older = structural.Rates(blocks)
    assert structural.program_spill_seconds(launch, older, 1, 1e9, 1e9) == pytest.approx(everything)


def test_chunk_sizes_whose_programs_do_not_fit_the_shared_memory_are_not_predicted(rates):
    """mLSTMexp's fused forward at 512/512 compiles to 288 KB of shared memory per program at L = 128 (the
    compiled table), more than an SM has: it does not launch, so no prediction offers it; L = 64 fits."""
    problem = structural.Problem(8, 8192, 4, 512, 512, variant="exp")
    too_large = structural.launches(problem, "fused_chunk", 128)
    assert too_large[0].compiled["shared_bytes"] > rates.blocks["device"]["shared_memory_per_sm"]
    assert not structural.fits_shared_memory(too_large, rates)
    assert structural.fits_shared_memory(structural.launches(problem, "fused_chunk", 64), rates)
    chunks = {prediction.chunk for prediction in structural.predict_all(problem, rates, ("fused_chunk",))}
    assert 64 in chunks and 128 not in chunks


def test_compiled_entries_are_used_only_for_the_tiling_the_kernels_run(monkeypatch):
    """A table entry whose tiling differs from today's default is stale: the model falls back to the rule."""
    problem = structural.Problem(8, 8192, 16, 128, 256, variant="exp")
    tiling = FusedTiling.default(64, 128, 256, variant="exp")
    kernels = {"fused_forward_kernel": {"registers": 255, "shared_bytes": 1, "stack_bytes": 8,
                                        "loop_local_bytes": 8}}
    entry = {"tiling": tiling.__dict__.copy(), "kernels": kernels}
    monkeypatch.setattr(structural, "_compiled_table", lambda: {"fused_chunk/exp/128x256/L64": [entry]})
    assert structural.compiled_kernels(problem, "fused_chunk", 64) == kernels
    assert structural.launches(problem, "fused_chunk", 64)[0].compiled == kernels["fused_forward_kernel"]
    entry["tiling"]["num_warps"] = 2
    assert structural.compiled_kernels(problem, "fused_chunk", 64) is None
    assert structural.compiled_kernels(problem, "fused_chunk", 32) is None


def test_the_shipped_table_matches_todays_tilings():
    """Every entry of compiled_resources.json.gz is for the tiling the kernels use now, (keys with a version
    suffix) the default of that former version, or (keys with a version and a tiling) a committed row's
    tiling in that version (`python scripts/kernel_resources.py --table` regenerates it after a tiling
    change)."""
    from tflabench.analysis import model_check

    table = structural.read_compiled_resources()["entries"]
    assert table
    assert any(len(key.split("/")) == 6 for key in table)
    for key in table:
        algorithm, variant, dims, chunk, *source = key.split("/")
        head_dim_qk, head_dim_v = map(int, dims.split("x"))
        problem = structural.Problem(1, 4096, 1, head_dim_qk, head_dim_v, variant=variant)
        version, tiling = (source + [None, None])[:2]
        dims = (head_dim_qk, head_dim_v)
        fields = model_check.row_tiling(version, variant, tiling, dims) if source else None
        assert structural.compiled_kernels(problem, algorithm, int(chunk[1:]), fields) is not None, key


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


@pytest.mark.parametrize("chunk", [16, 32])
def test_the_fused_forwards_backward_at_short_chunks_has_compiled_resources(chunk):
    """fused_chunk's fwd+bwd at L = 16 and 32 runs the xl_chunk backward kernels at that chunk size: the
    compiled table holds them (`scripts/kernel_resources.py`, FUSED_BACKWARD_CHUNKS), so every launch of
    our kernels gets registers, occupancy and instruction counts, not the rule."""
    problem = structural.Problem(8, 8192, 16, 48, 80, mode="fwdbw")
    launch_list = structural.launches(problem, "fused_chunk", chunk)
    assert [launch.name for launch in launch_list if launch.kernel and launch.compiled is None] == []


def test_a_launch_runs_the_warps_it_was_compiled_with(rates):
    """At Dqk 32 the reference's launchers run 2 warps per program where its modelled tiling has 4: the
    launches take the compiled warps, and with them the occupancy of 255 registers at 64 threads."""
    problem = structural.Problem(8, 8192, 32, 32, 64)
    output = {launch.name: launch for launch in structural.launches(problem, "reference", 128)}["output"]
    assert output.compiled["num_warps"] == 2
    assert output.warps == 2
    assert structural.resident_programs(output, rates) == 4  # 65,536 registers / (256 x 64)


def test_a_stale_reference_entry_falls_back_to_the_rule(monkeypatch):
    """A reference entry compiled with other tiles than `reference_tiling` is ignored."""
    problem = structural.Problem(8, 8192, 16, 128, 256)
    entry, = structural._compiled_table()["reference/sig/128x256/L128"]
    assert structural.compiled_kernels(problem, "reference", 128) is not None
    stale = json.loads(json.dumps(entry))
    stale["kernels"][structural.REFERENCE_KERNELS["output"]]["blocks"]["siz_b_DHHV"] = 64
    monkeypatch.setattr(structural, "_compiled_table", lambda: {"reference/sig/128x256/L128": [stale]})
    assert structural.compiled_kernels(problem, "reference", 128) is None


def test_new_calibration_figures_are_used_and_their_absence_keeps_todays_rule(rates):
    """The row reductions of mLSTMexp's online max (tiling out-online-max) are timed only with
    ``row_reduce_elements_per_s``, the row sums of its normalizer with the prefix max (the default; none in
    mLSTMsig) only with ``row_sum_elements_per_s``; spill traffic hits the cache at
    ``spills.local_bytes_per_s`` when the calibration has it, else at the L2 load rate."""
    exp = structural.Problem(8, 8192, 16, 128, 256, variant="exp")
    assert "row_reduce_elements_per_s" not in rates.blocks["pointwise"]
    output = _launch(exp, "xl_chunk", 128, "output", "out-online-max")
    before = structural.launch_time(output, rates).compute_s
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["pointwise"]["row_reduce_elements_per_s"] = blocks["pointwise"]["fma_elements_per_s"] / 4
    assert structural.launch_time(output, structural.Rates(blocks)).compute_s > before
    prefix_max = _launch(exp, "xl_chunk", 128, "output")  # the default: the normalizer's row sum alone
    sig = _launch(FIG4, "xl_chunk", 128, "output")
    assert prefix_max.row_sums == output.reductions > 0 == prefix_max.reductions == sig.row_sums
    before = [structural.launch_time(launch, rates).compute_s for launch in (prefix_max, sig)]
    blocks["pointwise"]["row_sum_elements_per_s"] = blocks["pointwise"]["fma_elements_per_s"] / 4
    after = [structural.launch_time(launch, structural.Rates(blocks)).compute_s
             for launch in (prefix_max, sig)]
    assert after[0] > before[0] and after[1] == before[1]
    launch = structural.Launch("fused", 1000, 8, 2, 64 * 64, 32 * 1024, kernel="k", loop_trips=10)
    launch.compiled = {"registers": 255, "shared_bytes": 60 * 1024, "stack_bytes": 800,
                       "loop_local_bytes": 1000}
    today = structural.launch_time(launch, rates).compute_s
    blocks["spills"] = {"local_bytes_per_s": blocks["memory"]["l2_read_bytes_per_s"] / 4}
    assert structural.launch_time(launch, structural.Rates(blocks)).compute_s > today


def _launch(problem, algorithm, chunk, name, tiling=None):
    return next(launch for launch in structural.launches(problem, algorithm, chunk, tiling)
                if launch.name == name)


def test_rows_of_a_tiling_variant_are_modelled_with_it():
    """A tiling text (named or FIELD=VALUE) or a dict of overrides changes the launches as it changes the
    kernels: stages of the recurrences, the state dtype's bytes, dK and dV in one kernel or two, dQ in the
    dK/dV kernel (where a chunk is one tile) or in its own."""
    assert _launch(FIG4, "xl_chunk", 128, "states").stages == Tiling.default(128, 128, 256).state_num_stages
    assert _launch(FIG4, "xl_chunk", 128, "states", "state-s1").stages == 1
    assert _launch(FIG4, "xl_chunk", 128, "states", {"state_num_stages": 1}).stages == 1
    bf16_states = _launch(FIG4, "xl_chunk", 128, "states").store_bytes
    assert _launch(FIG4, "xl_chunk", 128, "states", "fp32states").store_bytes == 2 * bf16_states
    assert _launch(FIG4, "xl_chunk", 128, "output", "out_block_v=64").programs == 2 * _launch(
        FIG4, "xl_chunk", 128, "output").programs
    small = structural.Problem(8, 8192, 32, 64, 64, mode="fwdbw")
    names = [launch.name for launch in structural.launches(small, "xl_chunk", 64)]
    assert {"states + dQ (inter)", "dQ+dK+dV"} <= set(names) and not {"dQ", "dK+dV"} & set(names)
    names = [launch.name for launch in structural.launches(small, "xl_chunk", 128)]
    assert {"dQ", "dK+dV"} <= set(names) and "dQ+dK+dV" not in names
    names = [launch.name for launch in structural.launches(small, "fused_chunk", 64, "bwd-dq-split")]
    assert {"states (recomputed)", "dQ", "dK+dV"} <= set(names) and "dQ+dK+dV" not in names
    names = [launch.name for launch in structural.launches(small, "xl_chunk", 64, "bwd-split")]
    assert "dK+dV" not in names and {"dQ", "dK", "dV"} <= set(names)
    with pytest.raises(InputError, match="not modelled"):
        structural.launches(FIG4, "fused_chunk", 64, "fused-backward")


def test_the_exp_output_kernel_with_the_prefix_max_has_no_row_reductions():
    exp = structural.Problem(8, 8192, 16, 128, 256, variant="exp")
    prefix = _launch(exp, "xl_chunk", 128, "output")
    online = _launch(exp, "xl_chunk", 128, "output", "out-online-max")
    assert prefix.reductions == 0 < online.reductions
    assert online.exp == 2 * prefix.exp
    assert _launch(exp, "reference", 128, "output").reductions > 0


def test_former_defaults_give_the_kernels_of_their_version():
    """v6's mLSTMexp kernels: the online max with key/value tiles of 32, split dK/dV, one state stage, the
    masked fused gates; today's version needs no override; v4 is not reproducible."""
    from dataclasses import replace

    from tflabench.kernels.mlstm import tilings

    assert tilings.former_default(tilings.KERNELS_VERSION, "exp") == tilings.former_default(None, "sig") == {}
    assert tilings.former_default("v4", "sig") is None
    v6 = tilings.former_default("v6", "exp")
    not_fields = ("lean_gate", "head_dim_blocks", "output_tiles", "value_blocks", "state_blocks")
    tiling = replace(Tiling.default(64, 64, 64, variant="exp"),
                     **{k: v for k, v in v6.items() if k not in not_fields and "." not in k})
    fields = (tiling.out_prefix_max, tiling.fused_dkdv, tiling.state_num_stages, tiling.out_block_kv)
    assert fields == (False, False, 1, 32)
    assert v6["lean_gate"] is False and "lean_gate" not in tilings.former_default("v6", "sig")
    assert v6["head_dim_blocks"] == "exact"


@pytest.mark.parametrize("version, blocks, fused_block_v", [
    (None, (128, 128, 64), 64), ("v14", (128, 128, 64), 64), ("v13", (128, 128, 64), 32),
    ("v12", (32, 32, 32), 32), ("v9", (32, 32, 32), 32)])
def test_head_dim_blocks_at_96_are_masked_since_v13(version, blocks, fused_block_v):
    """At 96/96 the TFLA kernels before v13 took the 32-wide blocks dividing 96, the fused forward before
    v14 its 32-wide value blocks; the model of a row takes its version's (block_qk, out_block_v,
    state_block_qk) and fused block_v, at 64/64 the same for every version."""
    from tflabench.analysis import model_check

    problem = structural.Problem(16, 4096, 24, 96, 96, variant="sig")
    fields = model_check.row_tiling(version, "sig", None, (96, 96))
    tiling = structural.modelled_tiling(problem, "xl_chunk", 128, fields)
    assert (tiling.block_qk, tiling.out_block_v, tiling.state_block_qk) == blocks
    fused = structural.modelled_tiling(problem, "fused_chunk", 64, fields)
    assert (fused.block_v, fused.dv_block_v) == (fused_block_v, 32)
    small = structural.Problem(16, 4096, 24, 64, 64, variant="sig")
    former = structural.modelled_tiling(small, "xl_chunk", 128, model_check.row_tiling(version, "sig", None))
    assert former.block_qk == structural.modelled_tiling(small, "xl_chunk", 128).block_qk == 64


@pytest.mark.parametrize("version, descriptors, query_tiles", [
    (None, (True, True), (1, 1)), ("v15", (True, True), (1, 1)), ("v14", (False, False), (2, 2)),
    ("v9", (False, False), (2, 2))])
def test_former_versions_ran_pointer_tiles_and_two_query_tiles(version, descriptors, query_tiles):
    """Before v15 the output and gradient kernels took pointer tiles and the output kernel two query tiles
    per program where a chunk had two; since, descriptors at 128/256 (mLSTMexp: one query tile) and one
    query tile at 64/64 (the model of a row takes its version's, mLSTMexp at L = 128)."""
    from tflabench.analysis import model_check

    wide, small = (structural.Problem(8, 8192, heads, dqk, dv, variant="exp")
                   for heads, dqk, dv in ((16, 128, 256), (32, 64, 64)))
    fields = model_check.row_tiling(version, "exp", None)
    at_wide = structural.modelled_tiling(wide, "xl_chunk", 128, fields)
    at_small = structural.modelled_tiling(small, "xl_chunk", 128, fields)
    assert (at_wide.out_tma, at_wide.bwd_tma) == descriptors
    assert (at_wide.out_q_tiles, at_small.out_q_tiles) == query_tiles
    assert not (at_small.out_tma or at_small.bwd_tma)


def test_kept_states_take_the_recomputed_recurrence_out_of_the_backward():
    """With the forward's states kept (`keep-states`) the backward launches no second state recurrence, and
    where dQ came from it (a chunk of one tile at 64/64) the dQ kernel and the dK+dV kernel instead."""
    wide = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    names = [launch.name for launch in structural.launches(wide, "xl_chunk", 128, "keep-states")]
    assert "states (recomputed)" not in names and names.count("states") == 1 and "dQ" in names
    assert "states (recomputed)" in [launch.name for launch in structural.launches(wide, "xl_chunk", 128)]
    small = structural.Problem(8, 8192, 32, 64, 64, mode="fwdbw")
    kept = [launch.name for launch in structural.launches(small, "xl_chunk", 64, "keep-states")]
    assert {"dQ", "dK+dV"} <= set(kept) and "states + dQ (inter)" not in kept
    rates = structural.load_rates("h100-sxm")
    recomputed, kept = (structural.predict(wide, "xl_chunk", 128, rates, tiling).seconds
                        for tiling in (None, "keep-states"))
    assert kept < recomputed


def test_a_table_entry_without_a_later_tiling_field_stands_for_its_default():
    """Entries of compiled_resources.json.gz compiled before a tiling field existed match tilings with that
    field at its dataclass default (the kernels as they were compiled: v15's gate gradients as PyTorch ops),
    and no other value of it (v16's default, the kernel)."""
    problem = structural.Problem(8, 8192, 16, 128, 256, mode="fwdbw")
    tiling = dataclasses.replace(structural.modelled_tiling(problem, "xl_chunk", 128), fused_gate_grads=False)
    recorded = dataclasses.asdict(tiling)
    del recorded["fused_gate_grads"]
    assert structural._compiled_with(recorded, tiling)
    assert not structural._compiled_with(recorded, dataclasses.replace(tiling, fused_gate_grads=True))
    assert not structural._compiled_with({**recorded, "block_q": 2 * tiling.block_q}, tiling)
    assert not structural._compiled_with({**recorded, "retired_field": 1}, tiling)


@pytest.mark.parametrize("head_dims, chunk, row_sum_blocks",
                         [((256, 512), 128, (2, 2)), ((64, 64), 64, (1, 1))])
def test_the_gate_gradient_kernel_replaces_the_pytorch_ops_in_the_backward(head_dims, chunk, row_sum_blocks):
    """v16's default (`fused_gate_grads`): one `gate_grads_kernel` launch that reads the row sums of every
    Dqk block of dQ and dK (two 128-wide blocks at Dqk 256; one where dQ and dK come whole from the fused
    kernels at 64/64) instead of the PyTorch ops' launches (v15's, and `fused_gate_grads=false`)."""
    problem = structural.Problem(8, 8192, 16, *head_dims, mode="fwdbw")
    def gate_launches(tiling):
        return [launch for launch in structural.launches(problem, "xl_chunk", chunk, tiling)
                if launch.name.startswith("gate grads")]

    ops, fused = gate_launches("fused_gate_grads=false"), gate_launches(None)
    for version in FORMER_DEFAULTS:
        gate_ops = version not in ("v16", "v17", "v18", "v19", "v20")
        assert former_default(version, "sig").get("fused_gate_grads") is (False if gate_ops else None)
    assert gate_launches(former_default("v15", "sig")) == ops
    assert len(ops) == structural.GATE_GRAD_LAUNCHES
    assert [launch.kernel for launch in fused] == ["gate_grads_kernel"]
    q_blocks, k_blocks = row_sum_blocks
    gate_bytes = 2 * problem.element_bytes
    assert fused[0].hbm_bytes == problem.rows * problem.seq_len * (4 * (q_blocks + k_blocks) + gate_bytes)
    rates = structural.load_rates("h100-sxm")
    with_ops, with_kernel = (structural.predict(problem, "xl_chunk", chunk, rates, tiling).seconds
                             for tiling in ("fused_gate_grads=false", None))
    assert with_kernel < with_ops


def test_the_gate_gradient_kernel_splits_long_rows_into_segments():
    """At T = 65,536 (B = 1) each row's 8 segments of 8192 tokens are programs of their own: the first sums
    the 57,344 tokens after it in 14 loads of 4096, then walks its 8 steps of 1024; at T = 8192 one program
    per row walks 8 steps."""
    def gate_launch(batch, seq_len):
        problem = structural.Problem(batch, seq_len, 32, 64, 64, mode="fwdbw")
        return next(launch for launch in structural.launches(problem, "xl_chunk", 128, "gate-grads-kernel")
                    if launch.kernel == "gate_grads_kernel")

    long_rows, short_rows = gate_launch(1, 65536), gate_launch(8, 8192)
    assert (long_rows.programs, long_rows.loop_trips) == (32 * 8, 14 + 8)
    assert (short_rows.programs, short_rows.loop_trips) == (8 * 32, 8)
    assert long_rows.hbm_bytes == short_rows.hbm_bytes


@pytest.mark.parametrize("version, fused_warps", [(None, 4), ("v9", 8), ("v6", 8), ("v11", 4)])
def test_former_versions_ran_the_exp_fused_forward_at_8_warps(version, fused_warps):
    """An ``ALGORITHM.FIELD`` override sets that algorithm's tiling only: v9's mLSTMexp fused forward at
    32 x 64/64, L = 64, ran 8 warps (today 4), its TFLA kernels the default warps of today."""
    from tflabench.kernels.mlstm import tilings

    problem = structural.Problem(8, 4096, 32, 64, 64, variant="exp")
    former = tilings.former_default(version, "exp")
    assert structural.modelled_tiling(problem, "fused_chunk", 64, former).num_warps == fused_warps
    today = structural.modelled_tiling(problem, "xl_chunk", 64)
    assert structural.modelled_tiling(problem, "xl_chunk", 64, former).num_warps == today.num_warps


@pytest.mark.parametrize("tiling, fused_warps", [(None, 8), ("fused-w4", 4), ("fused-w8", 8)])
def test_a_rows_own_tiling_replaces_its_versions_scoped_default(tiling, fused_warps):
    """A v9 row that ran `fused-w4` ran 4 warps (the tiling on top of v9's defaults), although v9's former
    default sets ``fused_chunk.num_warps`` = 8, which outranks a plain field in `structural`."""
    from tflabench.analysis import model_check

    problem = structural.Problem(8, 4096, 32, 64, 64, variant="exp")
    fields = model_check.row_tiling("v9", "exp", tiling)
    assert structural.modelled_tiling(problem, "fused_chunk", 64, fields).num_warps == fused_warps


@pytest.mark.parametrize("version, tilings_text", [("v6", "as run"), ("v4", "today's defaults")])
def test_model_check_models_the_kernels_version_of_the_run(tmp_path, version, tilings_text):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.csv").write_text((FIXTURES / "h200_small" / "results.csv").read_text())
    meta = json.loads((FIXTURES / "h200_small" / "meta.json").read_text())
    meta.setdefault("versions", {})["tflabench_kernels"] = version
    (run_dir / "meta.json").write_text(json.dumps(meta))
    result = model_check.check_run(load_run(run_dir), "h100")
    assert result["kernels_version"] == version and result["tilings"].startswith(tilings_text)
    today = model_check.check_run(load_run(FIXTURES / "h200_small"), "h100")
    assert today["kernels_version"] is None and today["tilings"] == "as run"
    changed = [mine["predicted_ms"] != theirs["predicted_ms"]
               for mine, theirs in zip(result["all"]["rows"], today["all"]["rows"], strict=True)]
    assert any(changed) == (version == "v6")


def test_model_check_of_a_run_of_two_gpus_uses_each_gpus_calibration(tmp_path, monkeypatch):
    """A merged run of an H100 and an H200: each GPU's rows with its own calibration (the H200's made
    twice as fast here), grouped apart."""
    calibration = json.loads((FIXTURES / "calibration" / "h100-sxm.json").read_text())
    (tmp_path / "cal").mkdir()
    (tmp_path / "cal" / "h100-sxm.json").write_text(json.dumps(calibration))
    fast = json.loads(json.dumps(calibration))
    fast["blocks"]["dot"] = [dict(dot, flops_per_s=2 * dot["flops_per_s"],
                                  one_per_sm_flops_per_s=2 * dot["one_per_sm_flops_per_s"])
                             for dot in fast["blocks"]["dot"]]
    for name in list(fast["blocks"]["memory"]):
        fast["blocks"]["memory"][name] *= 2
    (tmp_path / "cal" / "h200.json").write_text(json.dumps(fast))
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path / "cal"))
    lines = (FIXTURES / "h200_small" / "results.csv").read_text().splitlines()
    copied = [line.replace("NVIDIA H200", "NVIDIA H100 80GB HBM3") for line in lines[1:]]
    run_dir = tmp_path / "merged"
    run_dir.mkdir()
    (run_dir / "results.csv").write_text("\n".join([*lines, *copied]) + "\n")
    meta = json.loads((FIXTURES / "h200_small" / "meta.json").read_text())
    h100_ceilings = dict(meta["ceilings"], gpu_key="h100-sxm")
    meta["gpus"] = {"NVIDIA H200": {"info": meta["gpu"], "ceilings": meta["ceilings"]},
                    "NVIDIA H100 80GB HBM3": {"info": {"name": "NVIDIA H100 80GB HBM3"},
                                              "ceilings": h100_ceilings}}
    (run_dir / "meta.json").write_text(json.dumps(meta))
    result = model_check.check_run(load_run(run_dir))
    assert result["calibration"].count("calibration") == 2
    by_gpu = {}
    for row in result["all"]["rows"]:
        by_gpu.setdefault(row["gpu"], []).append(row["predicted_ms"])
    assert set(by_gpu) == {"NVIDIA H200", "NVIDIA H100 80GB HBM3"}
    assert sum(by_gpu["NVIDIA H200"]) < sum(by_gpu["NVIDIA H100 80GB HBM3"])
    assert {group["gpu"] for group in result["all"]["groups"]} == set(by_gpu)


def test_pointwise_work_of_a_launch_that_does_not_fill_the_gpu_runs_at_the_one_per_sm_rate(rates):
    """With ``<name>_one_per_sm_elements_per_s`` in the calibration, a launch with one program per SM gets
    that rate for its exp / multiply-add work, a full one the full-grid rate; without it, both the latter."""
    blocks = json.loads(json.dumps(rates.blocks))
    slower = structural.Rates(blocks)
    for name in ("exp", "fma"):
        full = blocks["pointwise"][f"{name}_elements_per_s"]
        blocks["pointwise"][f"{name}_one_per_sm_elements_per_s"] = full / 4
    assert slower.pointwise("exp", 1) == rates.pointwise("exp", 1) / 4
    assert slower.pointwise("exp", 4) == rates.pointwise("exp", 4) == rates.pointwise("exp", 1)
    few = structural.Launch("few", rates.sm_count, 4, 1, 64 * 64, 16 * 1024)
    few.exp = few.fma = 1e6
    assert structural.launch_time(few, slower).compute_s > structural.launch_time(few, rates).compute_s


def test_a_walks_step_grows_by_its_levels_with_the_programs_walking_side_by_side():
    """`walk_sharing`: the step at c programs per SM over the one-program level timed with it (not the
    walk's median step), linear between levels, the last fully resident level beyond them; levels whose
    programs were not all resident are left out; no levels, or one program, 1."""
    levels = [{"programs_per_sm": 1, "resident": 1, "step_s": 2e-6},
              {"programs_per_sm": 2, "resident": 2, "step_s": 3e-6},
              {"programs_per_sm": 3, "resident": 3, "step_s": 5e-6},
              {"programs_per_sm": 4, "resident": 3, "step_s": 9e-6}]
    walk = {"kind": "fused", "l": 16, "dqk": 64, "dv": 64, "num_warps": 4, "num_stages": 2, "step_s": 1e-6,
            "levels": levels}
    assert structural.walk_sharing(walk, 1) == 1.0
    assert structural.walk_sharing(walk, 2) == pytest.approx(1.5)
    assert structural.walk_sharing(walk, 3) == pytest.approx(2.5)
    assert structural.walk_sharing(walk, 4) == pytest.approx(2.5)  # four were never resident at once
    assert structural.walk_sharing({**walk, "levels": []}, 3) == 1.0
    without_one = {**walk, "levels": levels[1:]}
    assert structural.walk_sharing(without_one, 2) == pytest.approx(3.0)  # over the walk's own step
    rates = structural.Rates({"walk": [walk]})
    assert rates.walk_step(("fused", 16, 64, 64), 4, 2, concurrency=2) == pytest.approx(1.5e-6)
    assert rates.walk_step(("fused", 16, 64, 64), 4, 2) == pytest.approx(1e-6)


def test_a_fused_walk_timed_side_by_side_replaces_the_issue_floor(rates):
    """A fused forward whose nearest walk has levels takes its walk floor at its programs per SM
    (`walk_sharing`) in place of the issue floor: the walk runs the kernel's whole step, so it times the
    warps' issue; a state walk's levels scale its floor and leave the issue floor in place."""
    problem = structural.Problem(8, 8192, 32, 64, 64)
    fused = _launch(problem, "fused_chunk", 32, "fused forward")
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["issue"] = {"levels": [{"warps_per_scheduler": warps, "seconds_per_instruction": 1e-6}
                                  for warps in (1, 6)]}
    blocks["walk"] = [{"kind": "fused", "l": 32, "dqk": 64, "dv": 64, "num_warps": fused.warps,
                       "num_stages": fused.stages, "step_s": 1e-6}]
    before = structural.launch_time(fused, structural.Rates(blocks))
    assert before.issue_s > 0 and before.bound == "issue"  # a microsecond per instruction: the issue binds
    blocks["walk"][0]["levels"] = [{"programs_per_sm": c, "resident": c, "step_s": c * 1e-6} for c in (1, 2)]
    walking = structural.Rates(blocks)
    assert walking.walk_times_issue(fused.walk, fused.warps, fused.stages)
    after = structural.launch_time(fused, walking)
    rounds = math.ceil(math.ceil(fused.programs / walking.sm_count) / after.concurrency)
    assert after.issue_s == 0 and after.concurrency == 2
    assert after.compute_s >= rounds * fused.loop_trips * 2e-6
    blocks["walk"][0]["kind"] = "state"
    assert not structural.Rates(blocks).walk_times_issue(("state", 32, 64, 64), fused.warps, fused.stages)


def test_a_walk_of_few_programs_takes_the_latency_of_its_steps(rates):
    """With walks in the calibration, a launch whose programs walk the chunks in order takes at least the
    rounds of programs on an SM x its steps x the nearest calibrated step (same kind); a walk-free
    calibration (the fixture) keeps the throughput prediction, which stays where it is the larger."""
    few = structural.Problem(1, 65536, 32, 64, 64)
    fused = _launch(few, "fused_chunk", 64, "fused forward")
    assert fused.walk == ("fused", 64, 64, 64) and fused.loop_trips == 1024
    states = _launch(few, "xl_chunk", 64, "states")
    assert states.walk[0] == "state" and states.loop_trips == 65536 // states.walk[1]
    blocks = json.loads(json.dumps(rates.blocks))
    step = 5e-6
    blocks["walk"] = [{"kind": "fused", "l": 64, "dqk": 64, "dv": 64, "num_warps": 4, "num_stages": 2,
                       "step_s": step},
                      {"kind": "fused", "l": 128, "dqk": 128, "dv": 64, "num_warps": 4, "num_stages": 2,
                       "step_s": 4 * step},
                      {"kind": "state", "l": 64, "dqk": 64, "dv": 64, "num_warps": 4, "num_stages": 1,
                       "step_s": step / 10}]
    walking = structural.Rates(blocks)
    assert walking.walk_step(("fused", 64, 64, 64), 4, 2) == step
    assert walking.walk_step(("fused", 128, 128, 32), 4, 2) == 4 * step
    assert walking.walk_step(("state", 64, 64, 64), 4, 2) == step / 10
    assert walking.walk_step(("other", 64, 64, 64), 4, 2) == rates.walk_step(("fused", 64, 64, 64), 4, 2) == 0
    timed = structural.launch_time(fused, walking)
    assert timed.concurrency == 1 and timed.compute_s == pytest.approx(1024 * step)
    assert timed.walk_s == timed.compute_s and timed.bound == "walk"
    assert structural.launch_time(fused, rates).compute_s < 1024 * step
    full = _launch(structural.Problem(64, 1024, 32, 64, 64), "fused_chunk", 64, "fused forward")
    throughput, latency = structural.launch_time(full, rates), structural.launch_time(full, walking)
    rounds = math.ceil(math.ceil(full.programs / rates.sm_count) / throughput.concurrency)
    assert rounds > 1 and latency.compute_s == pytest.approx(max(throughput.compute_s, rounds * 16 * step))
    blocks["walk"][0]["step_s"] = step / 100
    assert structural.launch_time(full, structural.Rates(blocks)).compute_s == throughput.compute_s
    assert _launch(structural.Problem(1, 65536, 32, 64, 64, variant="exp"), "fused_chunk", 64,
                   "fused forward").walk[0] == "fused_exp"


def test_a_launch_takes_at_least_the_time_its_warps_issue_their_instructions(rates):
    """With the calibration's seconds per issued instruction (interpolated in the warps per scheduler, the
    end levels' figures outside them), a launch with compiled instruction counts takes at least its rounds
    x one warp's instructions (the loop body once more per trip beyond its compiled copies) / its chains x
    those seconds at its warps per scheduler x chains; without either, the throughput prediction alone."""
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["issue"] = {"levels": [{"warps_per_scheduler": 1.0, "seconds_per_instruction": 3e-8},
                                  {"warps_per_scheduler": 2.0, "seconds_per_instruction": 4e-8}]}
    issuing = structural.Rates(blocks)
    assert issuing.instruction_seconds(0.5) == issuing.instruction_seconds(1.0) == 3e-8
    assert issuing.instruction_seconds(1.5) == pytest.approx(3.5e-8)
    assert issuing.instruction_seconds(4.0) == 4e-8
    assert rates.instruction_seconds(1.0) == 0
    problem = structural.Problem(8, 8192, 16, 96, 160)
    output = _launch(problem, "xl_chunk", 128, "output")
    assert output.loop_copies == 2 and output.loop_trips == 3  # two query tiles: 1 and 2 key tiles
    output.compiled = {"registers": 128, "shared_bytes": 90_000, "stack_bytes": 0, "loop_local_bytes": 0,
                       "instructions": 4680, "loop_instructions": 681}
    assert structural.program_instructions(output) == 4680 + 681
    without = structural.launch_time(output, rates)
    timed = structural.launch_time(output, issuing)
    per_sm = math.ceil(output.programs / rates.sm_count)
    rounds = math.ceil(per_sm / timed.concurrency)
    warps = timed.concurrency * output.warps / structural.SCHEDULERS_PER_SM
    assert output.chains == 2
    assert timed.issue_s == pytest.approx(rounds * 5361 / 2 * issuing.instruction_seconds(2 * warps))
    assert timed.busy_s == pytest.approx(max(without.busy_s, timed.issue_s))
    assert timed.seconds > without.seconds and without.issue_s == 0
    output.compiled = {key: value for key, value in output.compiled.items() if "instructions" not in key}
    assert structural.launch_time(output, issuing).seconds == without.seconds


def test_a_gradient_loops_further_trips_issue_as_chains(rates):
    """The gradient launches' partner loop (trips that add into one tile, none waiting on another) issues its
    trips beyond the compiled copy as `trip_chains` (its pipeline stages) chains: those instructions at
    the calibrated seconds for that many times the warps, each chain 1/k of them; the rest as before. The
    recurrences' steps wait on each other: one chain."""
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["issue"] = {"levels": [{"warps_per_scheduler": 1.0, "seconds_per_instruction": 3e-9},
                                  {"warps_per_scheduler": 2.0, "seconds_per_instruction": 3.5e-9},
                                  {"warps_per_scheduler": 4.0, "seconds_per_instruction": 5e-9}]}
    issuing = structural.Rates(blocks)
    problem = structural.Problem(8, 8192, 28, 64, 128, variant="exp", mode="fwdbw")
    d_k = _launch(problem, "xl_chunk", 512, "dK")
    assert d_k.trip_chains == d_k.stages == 2 and d_k.loop_trips == 4.5 and d_k.chains == 1
    d_k.compiled = {"registers": 200, "shared_bytes": 90_000, "stack_bytes": 0, "loop_local_bytes": 0,
                    "instructions": 1624, "loop_instructions": 784}
    assert structural.further_trip_instructions(d_k) == 3.5 * 784
    timed = structural.launch_time(d_k, issuing)
    rounds = math.ceil(math.ceil(d_k.programs / rates.sm_count) / timed.concurrency)
    warps = timed.concurrency * d_k.warps / structural.SCHEDULERS_PER_SM
    rest, further = 1624, 3.5 * 784
    assert timed.issue_s == pytest.approx(rounds * (rest * issuing.instruction_seconds(warps)
                                                    + further / 2 * issuing.instruction_seconds(2 * warps)))
    one_chain = structural.launch_time(dataclasses.replace(d_k, trip_chains=1), issuing)
    assert one_chain.issue_s == pytest.approx(rounds * (rest + further) * issuing.instruction_seconds(warps))
    assert timed.issue_s < one_chain.issue_s
    assert _launch(problem, "xl_chunk", 512, "state gradients").trip_chains == 1


def test_a_recurrences_chunk_loop_issues_its_own_instructions_once_per_chunk():
    """The state recurrence walks T in sub-chunks of 128 inside a loop over the chunks: at L = 512 its
    outer body (900 instructions) holds the sub-chunk loop (500) once, so a program of 32 sub-chunks in 8
    chunks issues the outer body's own 400 eight times and the sub-chunk body 32 times, not the whole outer
    body 32 times; at L = 128 (one sub-chunk a chunk) and for counts without the inner loop's figure, the
    outer body per trip."""
    counts = {"instructions": 1500, "loop_instructions": 900, "inner_loop_instructions": 500}
    assert structural.issued_instructions(counts, 32, inner_trips=4) == 1500 + 7 * 400 + 31 * 500
    assert structural.issued_instructions(counts, 32) == 1500 + 31 * 900
    without = {"instructions": 1500, "loop_instructions": 900}
    assert structural.issued_instructions(without, 32, inner_trips=4) == 1500 + 31 * 900
    problem = structural.Problem(4, 4096, 8, 128, 128)
    for chunk, inner in ((128, 1), (512, 4)):
        for name in ("states", "state gradients"):
            launch = _launch(dataclasses.replace(problem, mode="fwdbw"), "xl_chunk", chunk, name)
            assert (launch.loop_trips, launch.inner_trips) == (4096 // 128, inner)


def test_head_dim_block_loops_issue_their_bodies_once_per_trip():
    """The output kernel at 96/96 in 32-wide blocks walks the Dqk blocks after the first in loops of two
    trips: the one before each query tile's key/value loop (116 instructions, once per program) and the one
    inside it (64, once per key/value tile); its compiled loops (`sass.top_loops`, widest first: the two
    query tiles' key/value loops, then the Qbar C loops beside them) count each body once, so a program of
    three key/value tiles issues 2 x 116 + 3 x 64 more. A block loop of one trip is folded away, and counts
    without the loops' structure count each body once."""
    problem = structural.Problem(16, 4096, 24, 96, 96)
    tiling = "block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32"
    output = _launch(problem, "xl_chunk", 128, "output", tiling)
    assert (output.loop_copies, output.loop_trips, output.block_trips) == (2, 3, 2)
    counts = {"instructions": 2640, "loop_instructions": 776,
              "top_loops": [[776, 64], [776, 64], [116, 0], [116, 0]]}
    assert structural.block_loop_bodies(counts, 2) == (232, 64)
    assert structural.issued_instructions(counts, 3, 2, block_trips=2) == 2640 + 776 + 232 + 3 * 64
    assert structural.issued_instructions(counts, 3, 2, block_trips=1) == 2640 + 776
    assert structural.issued_instructions({"instructions": 2640, "loop_instructions": 776}, 3, 2,
                                          block_trips=2) == 2640 + 776
    output.compiled = counts
    assert structural.further_trip_instructions(output) == 776 + 64
    d_q = _launch(dataclasses.replace(problem, mode="fwdbw"), "xl_chunk", 128, "dQ", tiling)
    assert d_q.block_trips == 3  # Dv / 32
    assert _launch(problem, "xl_chunk", 128, "output").block_trips == 0  # one masked 128-wide Dqk block


def test_a_block_loop_inside_the_tile_loop_leaves_one_chain_to_issue():
    """Our output kernel's score products and H += S V issue as two chains, except where a head-dim block loop
    of several trips sits inside its key/value loop (its trips wait for their products): then as one."""
    problem = structural.Problem(16, 4096, 24, 96, 96)
    tiling = "block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32"
    output = _launch(problem, "xl_chunk", 128, "output", tiling)
    output.compiled = {"instructions": 2640, "loop_instructions": 776,
                       "top_loops": [[776, 64], [776, 64], [116, 0], [116, 0]]}
    assert output.chains == 2 and structural.issue_chains(output) == 1
    output.compiled["top_loops"] = [[776, 0], [776, 0], [116, 0], [116, 0]]
    assert structural.issue_chains(output) == 2
    assert structural.issue_chains(dataclasses.replace(output, block_trips=1, compiled=None)) == 2


def test_an_output_kernel_that_waits_for_its_products_twice_per_trip_issues_one_chain():
    """The output kernel's two chains issue as one where its compiled key/value loop waits for all its
    products twice or more per trip (``tile_loop_waits``), whatever its block loops; with one wait they stay
    two, and the dK/dV kernel's two chains stay two at any count."""
    problem = structural.Problem(8, 8192, 16, 144, 192, mode="fwdbw")
    output = _launch(problem, "xl_chunk", 128, "output")
    output.compiled = {"instructions": 1500, "loop_instructions": 600, "tile_loop_waits": 3}
    assert output.chains == 2 and structural.issue_chains(output) == 1
    output.compiled["tile_loop_waits"] = 1
    assert structural.issue_chains(output) == 2
    output.compiled.update(top_loops=[[600, 64], [116, 0]], tile_loop_waits=1)
    assert structural.issue_chains(dataclasses.replace(output, block_trips=2)) == 2  # the count decides
    small = structural.Problem(8, 8192, 16, 64, 64, mode="fwdbw")
    dkdv = next(launch for launch in structural.launches(small, "xl_chunk", 128, "fused-dkdv")
                if launch.kernel == "chunk_dkdv_kernel")
    dkdv.compiled = {"instructions": 1500, "loop_instructions": 600, "tile_loop_waits": 4}
    assert dkdv.chains == 2 and structural.issue_chains(dkdv) == 2


def test_a_one_stage_output_kernel_takes_at_least_the_load_steps_its_waits_expose(rates):
    """A one-stage output kernel with its compiled waits for all its products takes at least its rounds x
    (Qbar C's Dqk blocks + its key/value trips x the waits per trip) x the calibrated load step; a
    two-stage one, another kernel and an entry without the count take none."""
    step = structural.READ_IN_FLIGHT_BYTES / (rates.memory("token_read_one_per_sm") / rates.sm_count)
    assert rates.load_step_seconds == pytest.approx(step)
    tiling = "block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32"
    problem = structural.Problem(8, 8192, 12, 192, 256, variant="exp")
    output = _launch(problem, "xl_chunk", 64, "output", tiling)
    assert output.stages == 1 and output.block_trips == 5  # six 32-wide Dqk blocks
    output.compiled = {"registers": 168, "shared_bytes": 40_000, "stack_bytes": 0, "loop_local_bytes": 0,
                       "tile_loop_waits": 7}
    timed = structural.launch_time(output, rates)
    rounds = math.ceil(math.ceil(output.programs / rates.sm_count) / timed.concurrency)
    assert timed.exposed_load_s == pytest.approx(rounds * (6 + output.loop_trips * 7) * step)
    assert timed.busy_s == pytest.approx(timed.exposed_load_s)
    assert timed.bound == "exposed loads"
    uncounted = {key: value for key, value in output.compiled.items() if key != "tile_loop_waits"}
    for changed in (dataclasses.replace(output, stages=2), dataclasses.replace(output, compiled=uncounted),
                    dataclasses.replace(output, kernel="chunk_dkdv_kernel")):
        assert structural.launch_time(changed, rates).exposed_load_s == 0


def test_a_launch_names_the_term_that_sets_its_time():
    """`LaunchTime.bound`: a floor above compute and memory combined names itself (the larger floor), else
    the larger of compute and memory, compute as "walk" where the walk floor set it."""
    base = structural.LaunchTime("x", 264, 2, 2, 1, compute_s=2e-3, memory_s=1e-3, overhead_s=1e-5)
    assert base.bound == "compute"
    assert dataclasses.replace(base, memory_s=3e-3).bound == "memory"
    assert dataclasses.replace(base, issue_s=3e-3, exposed_load_s=2e-3).bound == "issue"
    assert dataclasses.replace(base, issue_s=2e-3, exposed_load_s=4e-3).bound == "exposed loads"
    assert dataclasses.replace(base, issue_s=2.4e-3).bound == "compute"  # below 2 ms + 1 ms / 2
    assert dataclasses.replace(base, walk_s=base.compute_s).bound == "walk"  # the walk floor set compute
    assert dataclasses.replace(base, walk_s=base.compute_s / 2).bound == "compute"
    assert dataclasses.replace(base, dispatch_s=3e-3).bound == "dispatch"  # above 2 ms + 1 ms / 2


def test_the_programs_dispatch_overlaps_their_work(rates):
    """`LaunchTime.seconds`: the programs' dispatch (P x the calibrated seconds per program) and the busy
    time overlap as compute and memory do, the smaller divided by the programs at once (the gate cumsum at
    48 x 48/48, L = 64: 49,152 one-warp programs, 16 at once)."""
    base = structural.LaunchTime("x", 264, 2, 2, 1, compute_s=2e-3, memory_s=1e-3, overhead_s=1e-5,
                                 dispatch_s=4e-4)
    assert base.busy_s == pytest.approx(2.5e-3)
    assert base.seconds == pytest.approx(1e-5 + 2.5e-3 + 4e-4 / 2)
    heavy = dataclasses.replace(base, dispatch_s=5e-3)
    assert heavy.seconds == pytest.approx(1e-5 + 5e-3 + 2.5e-3 / 2)
    cumsum = _launch(structural.Problem(16, 4096, 48, 48, 48, variant="sig"), "xl_chunk", 64, "gate cumsum")
    timed = structural.launch_time(cumsum, rates)
    assert cumsum.programs == 16 * 48 * 64
    assert timed.dispatch_s == pytest.approx(cumsum.programs * rates.blocks["launch"]["program_s"])
    assert timed.overhead_s == rates.blocks["launch"]["launch_s"]
    larger, smaller = max(timed.busy_s, timed.dispatch_s), min(timed.busy_s, timed.dispatch_s)
    assert timed.seconds == pytest.approx(timed.overhead_s + larger + smaller / timed.concurrency)


def test_product_waits_count_the_waits_for_every_outstanding_product():
    """`sass.product_waits` counts ``WARPGROUP.DEPBAR.LE gsb0, 0x0`` (predicated or not), not the waits that
    leave products outstanding or other instructions."""
    body = [["WARPGROUP.DEPBAR.LE", "gsb0,", "0x0"], ["@P0", "WARPGROUP.DEPBAR.LE", "gsb0,", "0x0"],
            ["WARPGROUP.DEPBAR.LE", "gsb0,", "0x1"], ["WARPGROUP.ARRIVE"],
            ["HGMMA.64x64x16.F32.BF16", "R24,"]]
    assert sass.product_waits(body) == 2
    assert sass.product_waits([]) == 0


def test_walks_whose_own_kernel_spilled_are_left_out(rates):
    """A calibrated walk whose walk kernel spilled registers times its own spills: the nearest spill-free
    walk of the kind stands in for it, and a kind with spilling walks only has no step."""
    blocks = json.loads(json.dumps(rates.blocks))
    blocks["walk"] = [{"kind": "fused", "l": 64, "dqk": 64, "dv": 64, "num_warps": 4, "num_stages": 2,
                       "step_s": 3e-6, "spill_bytes_per_thread": 0},
                      {"kind": "fused", "l": 128, "dqk": 64, "dv": 64, "num_warps": 4, "num_stages": 2,
                       "step_s": 13e-6, "spill_bytes_per_thread": 936},
                      {"kind": "fused_exp", "l": 128, "dqk": 64, "dv": 64, "num_warps": 8, "num_stages": 2,
                       "step_s": 9e-6, "spill_bytes_per_thread": 232}]
    walking = structural.Rates(blocks)
    assert walking.walk_step(("fused", 128, 64, 64), 4, 2) == 3e-6
    assert walking.walk_step(("fused_exp", 128, 64, 64), 8, 2) == 0


def test_independent_product_chains_count_as_programs_for_the_product_rate():
    """The dK/dV kernel's two chains (scores and score gradients) get the product rate of twice its
    resident programs: less compute than the same launch as one chain, never more than at the full grid."""
    rates = structural.load_rates("h100-sxm")
    small = structural.Problem(8, 8192, 32, 64, 64, mode="fwdbw")
    launch = next(item for item in structural.launches(small, "xl_chunk", 128) if item.name == "dK+dV")
    assert launch.chains == 2
    two = structural.launch_time(launch, rates)
    one = structural.launch_time(dataclasses.replace(launch, chains=1), rates)
    assert two.compute_s < one.compute_s and two.memory_s == one.memory_s
    chained = {item.name for item in structural.launches(small, "xl_chunk", 128) if item.chains == 2}
    assert chained == {"dK+dV", "output"}  # our output kernel: the scores of each key tile, then H += S V
    reference = structural.launches(small, "reference", 128)
    assert all(item.chains == 1 for item in reference)


def _write_scaled_dot_rates(directory: Path, prefix: str, factor: float) -> None:
    """The fixture calibration as ``directory``/h100-sxm.json with each product's two rates also under
    ``prefix`` (``a_resident_``, ``one_stage_``), ``factor`` times the plain ones."""
    calibration = json.loads((FIXTURES / "calibration" / "h100-sxm.json").read_text())
    for dot in calibration["blocks"]["dot"]:
        for tag in ("", "one_per_sm_"):
            dot[f"{prefix}{tag}flops_per_s"] = factor * dot[f"{tag}flops_per_s"]
    (directory / "h100-sxm.json").write_text(json.dumps(calibration))


def test_products_with_the_left_operand_on_chip_take_that_rate(tmp_path, monkeypatch):
    """With a calibration that times products whose left operand stays on chip (``a_resident_*``, made 3x
    faster here), our output kernel's key-tile products (query block and score tile on chip) take it and
    the state recurrence's K^T V (both operands loaded every step) does not; without it (the fixture) both
    keep the rate with both operands loaded."""
    _write_scaled_dot_rates(tmp_path, "a_resident_", 3.0)
    launches = {launch.name: launch for launch in structural.launches(FIG4, "xl_chunk", 256)}
    assert {streamed for *_, streamed in launches["output"].dots} == {1, 2}
    assert {streamed for *_, streamed in launches["states"].dots} == {2}
    before = {name: structural.launch_time(launches[name], structural.load_rates("h100-sxm"))
              for name in ("output", "states")}
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    after = {name: structural.launch_time(launches[name], structural.load_rates("h100-sxm"))
             for name in ("output", "states")}
    assert after["output"].compute_s < before["output"].compute_s
    assert after["states"].compute_s == before["states"].compute_s


def test_launches_of_one_stage_take_the_one_stage_product_rates(tmp_path, monkeypatch):
    """With a calibration that times products in a loop of one stage (``one_stage_*``, made 2x slower
    here), the reference's launches (one stage) take those rates and our pipelined output launch keeps the
    two-stage ones; without them (the fixture) every launch takes the two-stage rates."""
    _write_scaled_dot_rates(tmp_path, "one_stage_", 0.5)
    ours, reference = (next(launch for launch in structural.launches(FIG4, algorithm, 256)
                            if launch.name == "output") for algorithm in ("xl_chunk", "reference"))
    assert ours.stages >= 2 and reference.stages == 1

    def times():
        rates = structural.load_rates("h100-sxm")
        return [structural.launch_time(launch, rates) for launch in (ours, reference)]

    before = times()
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    after = times()
    assert after[0].compute_s == before[0].compute_s
    assert after[1].compute_s > before[1].compute_s


@pytest.mark.parametrize("dims, padded", [((80, 80), (128, 128)), ((96, 96), (128, 128)),
                                          ((48, 96), (64, 128)), ((128, 128), (128, 128))])
def test_the_references_recurrences_move_their_padded_tiles(dims, padded):
    """The reference's recurrences are priced at the head dims rounded up to whole [64, 64] state tiles
    (loads of k and v, fp32 state stores); its output launch keeps the real head dims' bytes."""
    problem = structural.Problem(8, 4096, 16, *dims, mode="fwdbw")
    by_name = {launch.name: launch for launch in structural.launches(problem, "reference", 128)}
    for name in ("states", "states (recomputed)", "state gradients"):
        assert by_name[name].hbm_bytes == problem.rows * 4096 * sum(padded) * 2, name
    assert by_name["states"].store_bytes == problem.rows * (4096 // 128) * padded[0] * padded[1] * 4
    states = (4096 // 128) * dims[0] * dims[1] * 4
    assert by_name["output"].hbm_bytes == problem.rows * (4096 * (2 * dims[0] + dims[1]) * 2 + states)


def _with_programs(launch, programs: int):
    """``launch`` with ``programs`` programs of the same bytes each."""
    scale = programs / launch.programs
    return dataclasses.replace(launch, programs=programs, hbm_bytes=launch.hbm_bytes * scale,
                               store_bytes=launch.store_bytes * scale)


def test_the_sms_share_the_bandwidth_by_what_they_have_in_flight(rates):
    """A state recurrence of 32 programs (B = 1, 32 x 64/64) on 132 SMs: each of the 32 busy SMs reads at the
    rate its bytes in flight allow, faster than its 1/132 share of the bandwidth. With 160 programs (two on
    28 SMs, one on the others) the loads take less than with 264 (two on every SM) and more than with 132:
    the SMs of one program leave the bandwidth to the others once they are done. At one stage (no loads in
    flight while a program computes) they do not: 160 programs take as long as 264."""
    problem = structural.Problem(1, 32768, 32, 64, 64)
    launches = structural.launches(problem, "xl_chunk", 128)
    states = next(launch for launch in launches if launch.name == "states")
    assert structural.active_sms(states, rates) == 32 < rates.sm_count
    crowded = dataclasses.replace(states, programs=rates.sm_count)
    assert structural.hbm_read_rate(states, rates, 1) > structural.hbm_read_rate(crowded, rates, 1)
    assert structural.hbm_read_rate(states, rates, 1) <= rates.memory("token_read") / 32
    one_program_bytes = states.hbm_bytes / states.programs + states.store_bytes / states.programs
    assert structural.memory_seconds(states, rates, 1, 1) < one_program_bytes / (
        rates.memory("token_read") / rates.sm_count)
    sms = rates.sm_count
    memory = {programs: structural.memory_seconds(_with_programs(states, programs), rates,
                                                  -(-programs // sms), 1)
              for programs in (sms, sms + 28, 2 * sms)}
    assert states.stages >= 2 and memory[sms] < memory[sms + 28] < memory[2 * sms]
    one_stage = dataclasses.replace(states, stages=1)
    memory = {programs: structural.memory_seconds(_with_programs(one_stage, programs), rates,
                                                  -(-programs // sms), 1)
              for programs in (sms + 28, 2 * sms)}
    assert memory[sms + 28] == pytest.approx(memory[2 * sms])


@pytest.mark.parametrize("algorithm, reads", [
    ("xl_chunk", {"dQ": "q k v dh", "dK": "q k v dh", "dV": "q k dh"}),
    ("reference", {"dQ": "k v dh", "dK": "q v dh", "dV": "q k dh"})])
def test_each_gradient_kernel_reads_the_tensors_it_loads(algorithm, reads):
    """At 16 x 64/256 (head dims apart, so each tensor's bytes tell) the gradient launches read from HBM the
    token tensors their kernels load (ours: q in dQ and k in dK for the gate gradients' row sums, which only
    ours store; no dV kernel loads v) and their chunk's state or state gradient."""
    problem = structural.Problem(4, 2048, 16, 64, 256, mode="fwdbw")
    chunk = 128
    by_name = {launch.name: launch for launch in structural.launches(problem, algorithm, chunk)}
    widths = {"q": 64, "k": 64, "v": 256, "dh": 256}
    state_bytes = 4 if algorithm == "reference" else 2
    states = problem.rows * (problem.seq_len // chunk) * 64 * 256 * state_bytes
    for name, tensors in reads.items():
        tokens = problem.rows * problem.seq_len * sum(widths[tensor] for tensor in tensors.split()) * 2
        assert by_name[name].hbm_bytes == tokens + states, name
    written = problem.rows * problem.seq_len * 64 * 2
    assert (by_name["dQ"].store_bytes > written) == (algorithm == "xl_chunk")


def test_the_reference_covers_head_dims_its_blocks_do_not_divide():
    """At 96/96 the reference's launchers cover the head dims with masked power-of-two blocks (cdiv: two
    blocks of 64, one value block of 128), and the model counts those programs (no empty launch)."""
    problem = structural.Problem(16, 4096, 24, 96, 96, mode="fwdbw")
    by_name = {launch.name: launch for launch in structural.launches(problem, "reference", 128)}
    assert by_name["states"].programs == 2 * 2 * 16 * 24
    assert by_name["output"].programs == 1 * 2 * (4096 // 128) * 16 * 24
    rates = structural.load_rates("h100-sxm")
    assert structural.predict(problem, "reference", 128, rates).seconds > 0


@pytest.mark.parametrize("version, dims, fused_warps", [
    (None, (64, 128), 4), ("v11", (64, 128), 8), ("v10", (64, 128), 8), ("v11", (64, 64), 4),
    ("v11", (128, 256), 8), ("v9", (64, 64), 8)])
def test_the_exp_fused_forward_warps_of_each_version_at_each_head_dim(version, dims, fused_warps):
    """v12 runs mLSTMexp's fused forward at 4 warps where Dqk <= 64 (L = 64); v10 and v11 did only where
    both head dims were <= 64: their former default at Dqk <= 64 < Dv brings back 8 warps, and only there."""
    from tflabench.analysis import model_check

    problem = structural.Problem(8, 4096, 16, *dims, variant="exp")
    fields = model_check.row_tiling(version, "exp", None, dims)
    assert structural.modelled_tiling(problem, "fused_chunk", 64, fields).num_warps == fused_warps


def test_masked_tiles_move_their_tokens_at_the_masked_token_rates(rates):
    """At 96/96 our blocks (64 and 128 wide) do not divide the head dims: every launch that moves head-dim
    tiles is masked and its loads and stores take the calibration's slower masked-token rates; the gate
    launches and every launch at 128/128 are not. The reference's output and gradient launches are masked
    at 96/96, its recurrences (priced at their padded tiles) are not."""
    masked = structural.Problem(8, 4096, 16, 96, 96, mode="fwdbw")
    for launch in structural.launches(masked, "xl_chunk", 128):
        moves_tiles = launch.kernel not in structural.GATE_KERNELS and bool(launch.kernel)
        assert launch.masked == moves_tiles, launch.name
    whole = structural.Problem(8, 4096, 16, 128, 128, mode="fwdbw")
    assert not any(launch.masked for launch in structural.launches(whole, "xl_chunk", 128))
    reference = {launch.name: launch.masked for launch in structural.launches(masked, "reference", 128)}
    assert reference["output"] and reference["dQ"] and not reference["states"]
    assert rates.token_pattern(True) == "token"  # a calibration without the masked-token figures
    memory = dict(rates.blocks["memory"])
    for name in ("read", "write", "read_one_per_sm"):
        memory[f"token_masked_{name}_bytes_per_s"] = 0.85 * memory[f"token_{name}_bytes_per_s"]
    rates = dataclasses.replace(rates, blocks={**rates.blocks, "memory": memory})
    assert rates.token_pattern(True) == "token_masked" and rates.token_pattern(False) == "token"
    output = next(launch for launch in structural.launches(masked, "xl_chunk", 128)
                  if launch.name == "output")
    unmasked = dataclasses.replace(output, masked=False)
    per_sm = -(-output.programs // rates.sm_count)
    assert (structural.memory_seconds(output, rates, per_sm, 2)
            > structural.memory_seconds(unmasked, rates, per_sm, 2))
