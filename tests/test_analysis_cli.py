"""`tflabench gpus | optimal-chunk | roofline | calibrate`: output, JSON, and one-line errors on bad input."""

import json
import string

import pytest
from cli_capture import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from tflabench.analysis import hardware
from tflabench.core import FAMILIES

OPTIMAL_CHUNK = [
    "optimal-chunk",
    "--gpu",
    "h100",
    "--head-dim-v",
    "512",
    "--qk-ratio",
    "0.5",
    "--state-bytes",
    "4",
]
ROOFLINE = [
    "roofline",
    "--gpu",
    "h100",
    "--family",
    "mlstm_sig",
    "--head-dim-qk",
    "256",
    "--head-dim-v",
    "512",
    "--seq-len",
    "8192",
]


def assert_one_line_error(args):
    code, _, err = run_cli(args)
    assert code == 2, (args, err)
    assert err.startswith("error: ") and err.count("\n") == 1, (args, err)
    assert "Traceback" not in err


@pytest.fixture(autouse=True)
def empty_calibration_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    return tmp_path


def test_optimal_chunk_prints_optimum_runnable_choice_and_runtimes():
    code, out, err = run_cli(OPTIMAL_CHUNK)
    assert code == 0 and err == ""
    for text in ("633.5", "18.4", "runnable choice (sig, exp)", "11.27", "1.53", "2.72", "h100-sxm"):
        assert text in out


def test_optimal_chunk_json():
    code, out, _ = run_cli([*OPTIMAL_CHUNK, "--json"])
    payload = json.loads(out)
    assert code == 0 and payload["gpu"] == "h100-sxm"
    sig = payload["variants"]["sig"]
    assert sig["runtime_optimal"] == pytest.approx(633.5, abs=0.05)
    assert sig["flop_optimal"] == pytest.approx(18.4, abs=0.05)
    assert sig["runnable"] == 512 and sig["runnable_ms"] == pytest.approx(1.53, abs=0.005)
    assert payload["variants"]["exp"]["runtime_optimal"] == pytest.approx(633.7, abs=0.05)
    assert [row["chunk_size"] for row in payload["runtime_ms"]] == [
        16,
        32,
        64,
        128,
        256,
        512,
        1024,
        2048,
        4096,
    ]
    a100 = json.loads(run_cli([*OPTIMAL_CHUNK, "--gpu", "a100", "--json"])[1])
    assert a100["variants"]["sig"]["runtime_optimal"] == pytest.approx(468.3, abs=0.05)


def test_measured_ceilings_are_used_when_stored(empty_calibration_dir):
    payload = json.loads(run_cli([*OPTIMAL_CHUNK, "--measured", "--json"])[1])
    assert payload["ceilings"]["source"] == "datasheet"
    measured = hardware.Ceilings(798e12, 3.0e12, "measured 2026-11-20 NVIDIA H100 80GB HBM3")
    hardware.save_measured_ceilings("h100-sxm", measured)
    payload = json.loads(run_cli([*OPTIMAL_CHUNK, "--measured", "--json"])[1])
    assert payload["ceilings"]["source"] == measured.source
    assert payload["ceilings"]["ridge"] == pytest.approx(266, abs=0.5)
    code, out, _ = run_cli(["gpus"])
    assert code == 0 and "798 / 3.00" in out and measured.source in out


def test_roofline_table_and_json():
    code, out, _ = run_cli(ROOFLINE)
    assert code == 0
    for text in ("756.9", "7.9", "memory", "compute", "11.273"):
        assert text in out
    payload = json.loads(run_cli([*ROOFLINE, "--json"])[1])
    points = payload["points"]
    assert [p["chunk_size"] for p in points] == [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    assert points[0]["bound"] == "memory" and points[-1]["bound"] == "compute"
    assert points[5]["runtime_additive_s"] == pytest.approx(1.53e-3, abs=5e-6)


def test_roofline_peer_family_with_parameters_and_chunkless_family():
    args = [
        "roofline",
        "--family",
        "power_attention",
        "--head-dim-qk",
        "64",
        "--head-dim-v",
        "64",
        "--chunk-sizes",
        "128,1024",
        "--param",
        "degree=2",
        "--param",
        "expansion=tspow",
        "--json",
    ]
    code, out, _ = run_cli(args)
    assert code == 0 and len(json.loads(out)["points"]) == 2
    code, out, _ = run_cli(["roofline", "--family", "softmax_attention", "--json"])
    assert code == 0 and [p["chunk_size"] for p in json.loads(out)["points"]] == [None]


def test_gpus_lists_database_aliases_and_sources():
    code, out, _ = run_cli(["gpus"])
    assert code == 0
    for key in hardware.GPUS:
        assert key in out
    assert "h100 -> h100-sxm" in out and "a100 -> a100-paper" in out and "TFLA paper Table 18" in out
    payload = json.loads(run_cli(["gpus", "--json"])[1])
    assert [gpu["key"] for gpu in payload["gpus"]] == list(hardware.GPUS)
    assert payload["aliases"] == hardware.ALIASES


def test_calibrate_without_gpu_is_a_one_line_error():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present")
    code, _, err = run_cli(["calibrate"])
    assert code == 2 and err.startswith("error: no CUDA GPU") and err.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["optimal-chunk", "--gpu", "h300"],
        ["roofline", "--family", "retnet"],
        ["optimal-chunk", "--seq-len", "100"],
        ["roofline", "--chunk-sizes", "64,abc"],
        ["roofline", "--seq-len", "8", "--chunk-sizes", "64"],
        ["roofline", "--param", "degree"],
        ["roofline", "--family", "power_attention", "--head-dim-qk", "24"],
        ["roofline", "--dtype", "int8"],
        ["roofline", "--dtype", "float32", "--measured"],
        ["roofline", "--mode", "bwd"],
        ["optimal-chunk", "--causal-factor", "0.2"],
        ["optimal-chunk", "--bogus"],
    ],
)
def test_bad_input_gives_one_line_error(args):
    assert_one_line_error(args)


INT_OPTIONS = [
    ("optimal-chunk", "--head-dim-v"),
    ("optimal-chunk", "--seq-len"),
    ("optimal-chunk", "--batch"),
    ("optimal-chunk", "--heads"),
    ("optimal-chunk", "--state-bytes"),
    ("roofline", "--head-dim-qk"),
    ("roofline", "--head-dim-v"),
    ("roofline", "--seq-len"),
    ("roofline", "--batch"),
    ("roofline", "--heads"),
    ("roofline", "--state-bytes"),
]
non_positive_ints = st.integers(max_value=0).map(str)
fractional_numbers = (
    st.floats(allow_nan=True, allow_infinity=True)
    .filter(lambda x: x != int(x) if abs(x) < 1e300 else True)
    .map(repr)
)
words = st.text(alphabet=string.ascii_letters + string.punctuation + " ", min_size=0, max_size=12).filter(
    lambda text: not text.strip().lstrip("+").isdigit()
)
malformed_ints = non_positive_ints | fractional_numbers | words


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(INT_OPTIONS), malformed_ints)
def test_malformed_dimensions_give_one_line_error(command_and_option, value):
    command, option = command_and_option
    assert_one_line_error([command, f"{option}={value}"])


out_of_range_ratios = (
    st.floats(max_value=0.0)
    | st.floats(min_value=4.0, exclude_min=True)
    | st.sampled_from([float("nan"), float("inf"), float("-inf")])
).map(repr)


@settings(max_examples=40, deadline=None)
@given(out_of_range_ratios | words)
def test_qk_ratio_outside_range_gives_one_line_error(value):
    assert_one_line_error(["optimal-chunk", f"--qk-ratio={value}"])


known_gpu_names = set(hardware.GPUS) | set(hardware.ALIASES)


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=16).filter(lambda name: name.strip().lower() not in known_gpu_names))
def test_unknown_gpu_gives_one_line_error(name):
    assert_one_line_error(["roofline", f"--gpu={name}"])


@settings(max_examples=40, deadline=None)
@given(st.text(max_size=16).filter(lambda name: name not in FAMILIES))
def test_unknown_family_gives_one_line_error(name):
    assert_one_line_error(["roofline", f"--family={name}"])


def test_calibrate_stores_the_building_blocks_beside_the_ceilings(tmp_path, monkeypatch):
    """The command's path with a GPU, its measurements replaced: the interpreter's tiny block figures."""
    from tflabench.analysis import calibrate, calibrate_blocks, commands

    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(calibrate, "cuda_device_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(calibrate, "measure_ceilings",
                        lambda *args: hardware.Ceilings(7.5e14, 2.9e12, "measured 2026-01-01 test"))
    tiny = calibrate_blocks.measure_blocks(calibrate_blocks.BlockSizes.tiny())
    monkeypatch.setattr(commands, "_measure_blocks", lambda: tiny)
    code, out, _ = run_cli(["calibrate"])
    assert code == 0 and "tl.dot tiles" in out and "per program" in out
    record = json.loads((tmp_path / "h100-sxm.json").read_text())
    assert record["flops"] == 7.5e14 and record["blocks"] == tiny
    # which GPU and its clocks during the calibration: NVML's figures where it answers, None without it
    gpu = record["provenance"]["gpu"]
    assert {"sm_clock_mhz", "mem_clock_mhz", "temp_c_max", "power_w"} <= set(gpu)
    assert (gpu["sm_clock_mhz"] is None) == ("name" not in gpu) == (commands.device_info() == {})
    payload = json.loads(run_cli(["calibrate", "--no-blocks", "--no-save", "--json"])[1])
    assert payload["blocks"] is None and payload["stored"] is None
