"""Tiling variants of our kernels as a sweep axis, and the size of the correctness gate (``check_at``), on
the CPU (Triton interpreter, float32, tiny shapes)."""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from cli_capture import run_cli

from tflabench.bench.measure import ReferenceGate
from tflabench.bench.registry import CheckResult, get_kernel
from tflabench.bench.results import read_rows
from tflabench.bench.sweep import SweepSpec, apply_table
from tflabench.core import SweepPoint
from tflabench.errors import InputError
from tflabench.kernels.mlstm import tilings

XL_CHUNK = "tflabench.mlstm_sig.xl_chunk"
#: a tiny sweep of one kernel with two tilings: the default and the dV kernel's value block halved
TILED_SWEEP = ["sweep", "--kernels", XL_CHUNK, "--seq-len", "64", "--batch", "1", "--heads", "1",
               "--head-dim-qk", "16", "--head-dim-v", "32", "--chunk-size", "32", "--dtype", "float32",
               "--mode", "fwd", "--tiling", "default", "--tiling", "dv_block_v=16", "--warmup", "0",
               "--repeats", "1", "--run-name", "tiled"]
POINT = SweepPoint(batch=1, seq_len=64, heads=1, head_dim_qk=16, head_dim_v=32, chunk_size=32,
                   dtype="float32")


def test_tilings_give_distinct_rows_with_params_and_resume_skips_them(tmp_path):
    code, _, err = run_cli([*TILED_SWEEP, "--out", str(tmp_path)])
    assert code == 0, err
    rows = read_rows(tmp_path / "tiled" / "results.csv")
    params = [json.loads(row["params"]) for row in rows]
    assert [row["status"] for row in rows] == ["ok", "ok"]
    assert sorted(str(value.get("tiling")) for value in params) == ["None", "dv_block_v=16"]

    code, _, err = run_cli([*TILED_SWEEP, "--out", str(tmp_path), "--resume"])
    assert code == 0, err
    assert len(read_rows(tmp_path / "tiled" / "results.csv")) == 2


@pytest.mark.parametrize("tiling, message", [
    ("bogus", "unknown tiling 'bogus'"),
    ("no_such_field=16", "unknown field 'no_such_field'"),
    ("dv_block_v=wide", "dv_block_v must be an integer"),
])
def test_an_invalid_tiling_is_one_error_line_and_exit_2(tmp_path, tiling, message):
    arguments = [*TILED_SWEEP[:-6], "--tiling", tiling, "--out", str(tmp_path), "--dry-run"]
    code, out, err = run_cli(arguments)
    assert code == 2
    lines = (out + err).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]


def test_tilings_need_a_kernel_with_a_tiling_parameter(tmp_path):
    code, out, err = run_cli(["sweep", "--kernels", "tflabench.mlstm_sig.auto", "--tiling", "out-q2",
                              "--out", str(tmp_path), "--dry-run"])
    assert code == 2 and "no selected kernel has one" in out + err


def test_a_tiling_that_does_not_fit_the_point_or_the_algorithm_is_skipped_with_the_reason():
    assert "out_q_tiles (2) query tiles of 32" in get_kernel(XL_CHUNK).unsupported(
        SweepPoint(1, 64, 1, 16, 32, 32, tiling="out-q2"))
    fused = get_kernel("tflabench.mlstm_sig.fused_chunk")
    assert "not a field of fused_chunk's tiling" in fused.unsupported(SweepPoint(1, 64, 1, 16, 32, 32,
                                                                                 tiling="out-q2"))
    assert fused.unsupported(SweepPoint(1, 64, 1, 16, 32, 32, tiling="fused-backward")) is None


def test_toml_tilings_and_check_at():
    spec = apply_table(SweepSpec(), {"sweep": {"tilings": ["default", "out-q2", "dv_block_v = 256"]},
                                     "measure": {"check_at": "full"}}, "t.toml")
    assert spec.tilings == (None, "out-q2", "dv_block_v=256") and spec.check_at == "full"
    with pytest.raises(InputError, match=r"t.toml \[measure\] check_at must be one of small, full"):
        apply_table(SweepSpec(), {"measure": {"check_at": "large"}}, "t.toml")
    with pytest.raises(InputError, match="tilings must be a non-empty list"):
        apply_table(SweepSpec(), {"sweep": {"tilings": []}}, "t.toml")


def test_named_tilings_set_fields_of_the_kernels_tiling_classes():
    for name in tilings.NAMED:
        fields = set(tilings.overrides(name))
        assert any(fields <= set(tilings._field_types(algorithm)) for algorithm in tilings.TILED_ALGORITHMS)


def test_a_tiling_runs_through_the_launcher_and_agrees_with_the_default():
    spec = get_kernel(XL_CHUNK)
    tiled = SweepPoint(1, 64, 1, 16, 32, 32, "float32", "fwdbw",
                       "dv_block_v=16,state_dtype=float32,recompute_states=false")
    outputs = []
    for point in (POINT, tiled):
        inputs = spec.make_inputs(point, torch.device("cpu"))
        torch.manual_seed(0)
        inputs |= {name: torch.randn_like(inputs[name]) for name in ("q", "k", "v", "i", "f")}
        outputs.append(spec.run(inputs))
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)


def test_keeping_the_states_is_a_launcher_option_of_xl_chunk_only():
    """``recompute_states`` (the named `keep-states`) goes to xl_chunk's launcher as
    ``recompute_states_in_bw``, not into its tiling; fused_chunk, whose forward keeps no states, refuses
    it."""
    shape = dict(chunk=32, head_dim_qk=16, head_dim_v=32, variant="sig")
    options = tilings.launch_options("xl_chunk", "keep-states", **shape)
    assert options["recompute_states_in_bw"] is False and "recompute_states" not in vars(options["tiling"])
    assert "recompute_states_in_bw" not in tilings.launch_options("xl_chunk", "dv_block_v=16", **shape)
    with pytest.raises(InputError, match="not a field of fused_chunk"):
        tilings.launch_options("fused_chunk", "recompute_states=false", **shape)


def test_every_mlstm_row_records_whether_the_backward_recomputes_the_states():
    """xl_chunk's rows say False with the `keep-states` tiling (or ``recompute_states=false``) and True
    otherwise; our other algorithms and the reference's chunkwise kernels recompute them (True)."""
    spec = get_kernel(XL_CHUNK)
    cpu = torch.device("cpu")

    def recorded(tiling):
        params = {**spec.params, **spec.point_params(replace(POINT, tiling=tiling), cpu)}
        return params["recompute_states_in_bw"]

    tiling_texts = (None, "dv_block_v=16", "keep-states", "recompute_states=false")
    assert [recorded(tiling) for tiling in tiling_texts] == [True, True, False, False]
    for name in ("tflabench.mlstm_sig.fused_chunk", "tflabench.mlstm_exp.limit_chunk",
                 "mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_kernels.mlstm_exp.limit_chunk"):
        assert get_kernel(name).params["recompute_states_in_bw"] is True, name


class CountingSpec:
    """A kernel spec whose reference check records the configurations and sizes it was asked for."""

    name = "counting"

    def __init__(self):
        self.calls = []

    def reference_check(self, device, dtype, configuration=None, full_size=False):
        self.calls.append((configuration, full_size))
        return CheckResult(True, 0.0, 1e-3)


def test_the_gate_checks_each_tiling_and_at_full_size_each_batch_and_length():
    small, full = CountingSpec(), CountingSpec()
    small_gate, full_gate = ReferenceGate("cpu-interpreter"), ReferenceGate("cpu-interpreter", "full")
    points = [POINT, SweepPoint(2, 64, 1, 16, 32, 32, "float32"), SweepPoint(1, 64, 1, 16, 32, 32, "float32",
                                                                                tiling="out-q1")]
    for point in points:
        small_gate.check(small, point)
        full_gate.check(full, point)
    assert [configuration.tiling for configuration, _ in small.calls] == [None, "out-q1"]
    assert [(configuration.batch, size) for configuration, size in full.calls] == [(1, True), (2, True),
                                                                                     (1, True)]


def test_the_full_size_check_runs_the_timed_point_and_the_small_one_keeps_the_tiling():
    spec = get_kernel(XL_CHUNK)
    point = SweepPoint(3, 64, 1, 16, 32, 32, "float32", tiling="dv_block_v=16")
    full = spec.reference_check(torch.device("cpu"), "float32", point, full_size=True)
    small = spec.reference_check(torch.device("cpu"), "float32", point)
    assert full.passed and full.detail.startswith(f"{replace(point, mode='fwd').key()} on cpu")
    assert small.passed and small.detail.startswith("B2-") and "tiling[dv_block_v=16]" in small.detail


def test_the_bench_script_is_a_sweep_and_a_report(tmp_path):
    script = Path(__file__).parents[1] / "scripts" / "bench_tfla_vs_reference.py"
    tiny = ["--kernels", XL_CHUNK, "--seq-len", "64", "--batch", "1", "--heads", "1", "--head-dim-qk",
            "16", "--head-dim-v", "32", "--chunk-size", "32", "--dtype", "float32", "--mode", "fwd",
            "--warmup", "0", "--repeats", "1"]
    result = subprocess.run([sys.executable, str(script), "--out", str(tmp_path), "--run-name", "bench",
                             "--tilings", "default,dv_block_v=16", *tiny], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    rows = read_rows(tmp_path / "bench" / "results.csv")
    assert [row["status"] for row in rows] == ["ok", "ok"] and (tmp_path / "bench" / "report.md").exists()
    meta = json.loads((tmp_path / "bench" / "meta.json").read_text())
    assert meta["sweep"]["check_at"] == "full"


def test_tilings_that_run_the_same_kernels_are_named_before_the_sweep(tmp_path):
    """At 16 x 128/176 today's default has 128-wide state value blocks and a 256-wide dV block: an override
    that sets them measures the default twice (a dry run says so, without a GPU); one that changes a block
    is not named."""
    same, other = "state_block_v=128,dv_block_v=256", "state_block_v=64"
    shape = ["--seq-len", "1024", "--batch", "1", "--heads", "16", "--head-dim-qk", "128",
             "--head-dim-v", "176"]
    tilings_given = ["--tiling", "default", "--tiling", same, "--tiling", other]
    chunks = ["--chunk-size", "64", "--chunk-size", "128"]
    code, _, err = run_cli(["sweep", "--kernels", XL_CHUNK, *shape, *chunks, *tilings_given,
                            "--out", str(tmp_path), "--dry-run"])
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, err
    assert f"'default' and '{same}'" in warnings[0] and "2 point(s)" in warnings[0]
    assert warnings[0].startswith(f"warning: {XL_CHUNK}:")
