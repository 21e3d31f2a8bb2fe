"""`tflabench.analysis.calibrate`: importable and refusing without a GPU; plausible ceilings on one."""

import pytest
import torch

from tflabench.analysis import calibrate, hardware
from tflabench.errors import InputError

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is present")


@needs_no_gpu
def test_measuring_without_a_gpu_is_an_input_error():
    with pytest.raises(InputError, match="^no CUDA GPU"):
        calibrate.measure_ceilings()
    with pytest.raises(InputError, match="^no CUDA GPU"):
        calibrate.measure_matmul_flops(256, 1)


@pytest.mark.parametrize("kwargs", [{"matmul_size": 0}, {"copy_bytes": -1}, {"repeats": 2.5}])
def test_bad_sizes_are_input_errors(kwargs):
    with pytest.raises(InputError, match="must be a positive integer"):
        calibrate.measure_ceilings(**kwargs)


@pytest.mark.gpu
def test_measured_ceilings_are_below_and_near_the_datasheet():
    measured = calibrate.measure_ceilings(matmul_size=4096, copy_bytes=2**28, repeats=5)
    device = torch.cuda.get_device_name(0)
    assert measured.source.startswith("measured ") and measured.source.endswith(device)
    gpu = hardware.gpu_from_device_name(device)
    if gpu is None:
        pytest.skip(f"{device} is not in the database")
    datasheet = hardware.datasheet_ceilings(gpu)
    assert 0.3 * datasheet.flops < measured.flops < 1.05 * datasheet.flops
    assert 0.3 * datasheet.bandwidth < measured.bandwidth < 1.05 * datasheet.bandwidth
