"""The model's known weak points: the classes a prediction falls into (read from its launches, the kernels'
tilings and the compiled resources table), the committed runs' ratios per class (model_limits.json, which
must be what scripts/model_limits.py computes from the committed runs now), and `predict` naming them."""

import importlib.util
import json
from pathlib import Path

import pytest
from cli_capture import run_cli

from tflabench.analysis import model_check, model_limits, structural

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "model_limits.py"
NARROW_96 = ("block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32")


def _problem(dqk, dv, variant="sig", mode="fwd"):
    return structural.Problem(8, 8192, 16, dqk, dv, variant=variant, mode=mode)


def test_a_power_of_two_shape_with_compiled_kernels_is_in_no_class():
    assert model_limits.weak_points(_problem(128, 256), "xl_chunk", 128) == ()
    assert model_limits.weak_points(_problem(128, 128, mode="fwdbw"), "reference", 128) == ()


def test_masked_and_narrow_head_dim_blocks():
    assert "masked" in model_limits.weak_points(_problem(96, 96), "xl_chunk", 64)
    narrow = model_limits.weak_points(_problem(96, 96), "xl_chunk", 64, NARROW_96)
    assert "narrow" in narrow and "masked" not in narrow


def test_spilling_launches_by_warps_and_tilings_without_compiled_resources():
    v6 = model_check.row_tiling("v6", "exp", None, (128, 128))
    assert "spills_8w" in model_limits.weak_points(_problem(128, 128, "exp"), "fused_chunk", 128, v6)
    assert "spills_8w" not in model_limits.weak_points(_problem(128, 128, "exp"), "fused_chunk", 16)
    assert "no_compiled" in model_limits.weak_points(_problem(224, 224), "xl_chunk", 128)
    assert "no_compiled" not in model_limits.weak_points(_problem(128, 128), "xl_chunk", 128)


def test_ratio_summary_percentiles():
    summary = model_limits.ratio_summary([1.0, 0.5, 0.9, 1.1, 0.8])
    assert summary["rows"] == 5 and summary["min"] == 0.5 and summary["max"] == 1.1
    assert summary["median"] == 0.9 and 0.5 <= summary["p10"] < summary["median"] < summary["p90"] <= 1.1


def test_the_limits_file_is_what_the_committed_runs_give_now():
    spec = importlib.util.spec_from_file_location("model_limits_script", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    stored = json.loads(Path(model_limits.__file__).with_name(model_limits.LIMITS_FILE).read_text())["gpus"]
    computed = script.summaries(script.collect())
    assert set(stored) == set(computed) == {"h100-sxm", "h200"}
    for gpu, classes in computed.items():
        assert set(classes) <= {model_limits.COVERED, *model_limits.WEAK_POINTS}
        assert set(stored[gpu]) == set(classes), gpu
        for name, summary in classes.items():
            assert stored[gpu][name] == pytest.approx(summary), (gpu, name)


def test_predict_names_the_weak_points_and_their_measured_ratios():
    args = ["predict", "--gpu", "h200", "--batch", "8", "--seq-len", "8192", "--heads", "16",
            "--head-dim-qk", "96", "--head-dim-v", "96"]
    payload = json.loads(run_cli([*args, "--json"])[1])
    assert all("masked" in p["weak_points"] for p in payload["predictions"] if p["algorithm"] == "xl_chunk")
    masked = payload["weak_points"]["masked"]
    assert masked["description"] == model_limits.WEAK_POINTS["masked"]
    assert masked["measured_ratios"]["rows"] > 0
    assert payload["weak_points"][model_limits.COVERED]["measured_ratios"]["rows"] > 0
    code, out, _ = run_cli(args)
    assert code == 0 and "masked:" in out and "committed rows on h200" in out


def test_optimal_chunk_names_the_weak_points_of_its_best_chunk_size():
    args = ["optimal-chunk", "--gpu", "h200", "--head-dim-v", "96", "--qk-ratio", "1"]
    payload = json.loads(run_cli([*args, "--json"])[1])
    assert all("masked" in result["weak_points"] for result in payload["structural"]["variants"].values())
    code, out, _ = run_cli(args)
    assert code == 0 and "known weak point at L*: masked" in out
    powers_of_two = json.loads(run_cli(["optimal-chunk", "--gpu", "h200", "--head-dim-v", "128",
                                        "--qk-ratio", "1", "--json"])[1])
    assert all(result["weak_points"] == [] for result in powers_of_two["structural"]["variants"].values())
