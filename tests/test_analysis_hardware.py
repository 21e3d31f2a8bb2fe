"""GPU database, aliases, device-name mapping and stored calibrations."""

import json

import pytest

from tflabench.analysis import hardware
from tflabench.analysis.hardware import Ceilings
from tflabench.errors import InputError

CONTRACT_KEYS = {"v100", "a100-paper", "a100-sxm", "a100-pcie", "h100-sxm", "h100-pcie", "h200", "b200"}


def test_database_has_every_contract_gpu_with_all_peaks_and_a_source():
    assert set(hardware.GPUS) == CONTRACT_KEYS
    for key, gpu in hardware.GPUS.items():
        assert gpu.key == key
        assert set(gpu.peak_flops) == set(hardware.PEAK_DTYPES)
        assert all(value > 0 for value in gpu.peak_flops.values())
        assert gpu.bandwidth > 0 and gpu.source
        assert gpu.peak_flops["bfloat16"] >= gpu.peak_flops["tfloat32"] >= gpu.peak_flops["float32"]


@pytest.mark.parametrize(
    ("name", "ridge"),
    # hardware table: I_acc = alpha / beta
    [
        ("v100", 133.33),
        ("a100", 161.24),
        ("h100", 295.22),
        ("b200", 292.21),
        ("h200", 206.04),
        ("a100-sxm", 153.02),
    ],
)
def test_datasheet_ridge_matches_the_spec_table(name, ridge):
    assert hardware.datasheet_ceilings(hardware.get_gpu(name)).ridge == pytest.approx(ridge, abs=0.005)


def test_aliases_and_case_insensitive_lookup():
    assert hardware.get_gpu("h100").key == "h100-sxm"
    assert hardware.get_gpu("A100").key == "a100-paper"
    assert hardware.get_gpu(" H200 ").key == "h200"
    assert hardware.get_gpu("a100").bandwidth == 1.935e12
    assert hardware.get_gpu("a100-sxm").bandwidth == 2.039e12


def test_unknown_gpu_lists_known_names():
    with pytest.raises(InputError, match="unknown GPU 'h300'.*h100-sxm.*a100"):
        hardware.get_gpu("h300")


def test_unknown_dtype_is_an_input_error():
    with pytest.raises(InputError, match="unknown dtype"):
        hardware.datasheet_ceilings(hardware.get_gpu("h100"), "int8")


@pytest.mark.parametrize(
    ("device_name", "key"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
        ("NVIDIA A100 80GB PCIe", "a100-pcie"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA H100 NVL", None),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA A100-SXM4-40GB", None),
        ("NVIDIA GeForce RTX 4090", None),
    ],
)
def test_gpu_from_device_name(device_name, key):
    gpu = hardware.gpu_from_device_name(device_name)
    assert (gpu.key if gpu else None) == key


def test_measured_ceilings_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    assert hardware.load_measured_ceilings("h200") is None
    measured = Ceilings(801.3e12, 4.31e12, "measured 2026-11-21 NVIDIA H200")
    path = hardware.save_measured_ceilings("h200", measured)
    assert path == tmp_path / "h200.json"
    assert hardware.load_measured_ceilings("H200") == measured
    assert hardware.load_measured_ceilings("h100") is None
    assert measured.ridge == pytest.approx(801.3 / 4.31)


def test_malformed_calibration_file_is_an_input_error(tmp_path, monkeypatch):
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    (tmp_path / "h100-sxm.json").write_text(json.dumps({"flops": "fast"}))
    with pytest.raises(InputError, match="malformed calibration file"):
        hardware.load_measured_ceilings("h100")
    (tmp_path / "h100-sxm.json").write_text(json.dumps({"flops": -1, "bandwidth": 1, "source": "x"}))
    with pytest.raises(InputError, match="positive"):
        hardware.load_measured_ceilings("h100")
