"""scripts/launch_times.py: the structural model's time per kernel beside a profiler's (the profiling itself
needs a GPU; its grouping and the calls it profiles are checked here)."""

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from tflabench.analysis import structural

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "launch_times.py"
spec = importlib.util.spec_from_file_location("launch_times", SCRIPT)
launch_times = importlib.util.module_from_spec(spec)
spec.loader.exec_module(launch_times)

PROBLEM = structural.Problem(8, 8192, 16, 128, 256, variant="sig", mode="fwdbw")


@pytest.fixture(scope="module")
def rates():
    return structural.load_rates("h100-sxm")


@pytest.mark.parametrize("chunk", [128, 256])
def test_the_kernel_times_add_up_to_the_predicted_call(rates, chunk):
    per_kernel = launch_times.predicted_kernel_us(PROBLEM, "xl_chunk", chunk, rates)
    call_us = structural.predict(PROBLEM, "xl_chunk", chunk, rates).seconds * 1e6
    assert sum(per_kernel.values()) == pytest.approx(call_us, rel=1e-12)
    assert {"chunk_states_kernel", "chunk_outputs_kernel", "chunk_dq_kernel", "chunk_state_grads_kernel",
            "chunk_dk_kernel", "chunk_dv_kernel", "gate_grads_kernel"} <= set(per_kernel)
    assert launch_times.TORCH_OPS not in per_kernel
    with_ops = launch_times.predicted_kernel_us(PROBLEM, "xl_chunk", chunk, rates, "fused_gate_grads=false")
    assert launch_times.TORCH_OPS in with_ops and "gate_grads_kernel" not in with_ops


def test_measured_kernels_the_model_does_not_name_are_one_torch_ops_row():
    predicted = {"chunk_states_kernel": 300.0, launch_times.TORCH_OPS: 50.0, "chunk_dq_kernel": 100.0}
    measured = {"chunk_states_kernel": 400.0, "void at::native::elementwise_kernel<...>": 30.0,
                "void at::native::reduce_kernel<...>": 15.0, "triton_poi_fused_cast_0": 5.0}
    rows = {row["kernel"]: row for row in launch_times.compare(measured, predicted)}
    assert list(rows) == ["chunk_states_kernel", launch_times.TORCH_OPS, "chunk_dq_kernel"]
    assert rows["chunk_states_kernel"]["predicted_over_measured"] == pytest.approx(0.75)
    assert rows[launch_times.TORCH_OPS]["measured_us"] == pytest.approx(50.0)
    assert rows["chunk_dq_kernel"]["measured_us"] is None
    assert rows["chunk_dq_kernel"]["predicted_over_measured"] is None


@pytest.mark.parametrize("mode", ["fwd", "fwdbw"])
def test_the_profiled_call_runs_our_kernel(mode):
    """The call the script profiles, on small float32 CPU tensors (the interpreter): the forward, and with
    fwdbw the backward, whose gradients reach every input and are returned, not accumulated (the harness
    drops them between calls: accumulating them would time an extra read and write of each)."""
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 64, 2, 16, generator=generator) for _ in range(2))
    v = torch.randn(1, 64, 2, 32, generator=generator)
    i, f = torch.randn(1, 64, 2, generator=generator), torch.randn(1, 64, 2, generator=generator) + 3
    inputs = (q, k, v, i, f) if mode == "fwd" else tuple(x.requires_grad_() for x in (q, k, v, i, f))
    grads = launch_times._mlstm_call(inputs, "sig", 32, mode)()
    assert [x.grad for x in inputs] == [None] * 5
    if mode == "fwd":
        assert grads is None
    else:
        assert all(torch.isfinite(grad).all() and grad.abs().sum() > 0 for grad in grads)


def test_a_chunk_size_the_tiling_does_not_fit_is_skipped_not_fatal(monkeypatch, tmp_path, capsys):
    """Two query tiles of 64 rows per output program do not fit L = 64: that chunk size is reported as
    skipped (with the reason, also in the JSON) and the script goes on to the next one."""
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import profile_forward

    inputs = (*(torch.empty(1, 128, 1, 64) for _ in range(3)), torch.empty(1, 128, 1), torch.empty(1, 128, 1))
    monkeypatch.setattr(profile_forward, "make_inputs", lambda **shape: inputs)  # never run: refused first
    out = tmp_path / "times.json"
    shape = ["--batch", "1", "--seq-len", "128", "--heads", "1", "--head-dim-qk", "64", "--head-dim-v", "64"]
    monkeypatch.setattr("sys.argv", ["launch_times.py", "--gpu", "h100-sxm", *shape, "--mode", "fwd",
                                     "--chunk-sizes", "64", "--tiling", "out_q_tiles=2", "--json", str(out)])
    launch_times.main()
    assert "L = 64: skipped: tiling: out_q_tiles (2)" in capsys.readouterr().out
    (chunk,) = json.loads(out.read_text())["chunks"]
    assert chunk["chunk_size"] == 64 and "divide the chunk" in chunk["skipped"] and "rows" not in chunk
