"""Results table and metadata: row-by-row writing, cut-off last lines, resume keys, derived columns."""

import csv
import json
import sys

import pytest

from tflabench.analysis import run_data
from tflabench.bench.derived import Derivation, cost_arguments
from tflabench.bench.registry import Availability, KernelSpec
from tflabench.bench.results import (
    ResultsWriter,
    finished_keys,
    launch_bound_rows,
    make_row,
    new_meta,
    rankings,
    read_rows,
    unsteady_rows,
)
from tflabench.core import SweepPoint
from tflabench.errors import InputError
from tflabench.kernels.mlstm.tilings import KERNELS_VERSION
from tflabench.schema import COLUMNS, LATER_COLUMNS

FIG4_POINT = SweepPoint(batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256, chunk_size=128)


def kernel(name="ours.mlstm_sig.xl_chunk", family="mlstm_sig", **params) -> KernelSpec:
    def unused(*args):
        raise AssertionError("not called")

    return KernelSpec(name=name, family=family, package=None, uses_chunk_size=True,
                      availability=lambda: Availability(True), unsupported=lambda point: None,
                      make_inputs=unused, run=unused, reference_check=unused, params=params)


def row(spec=None, point=FIG4_POINT, status="ok", time_ms=4.39):
    measured = {"status": status, "reason": "", "time_ms": time_ms if status == "ok" else None}
    return make_row(run="r", kernel=spec or kernel(), version="1.0", point=point, device="cuda",
                    gpu="NVIDIA H100 80GB HBM3", measured=measured, derived={})


def test_rows_are_appended_after_one_header_and_a_half_written_line_is_cut(tmp_path):
    path = tmp_path / "results.csv"
    with ResultsWriter(path) as writer:
        writer.write(row(point=FIG4_POINT))
        writer.write(row(point=SweepPoint(1, 64, 2, 16, 16, 16, mode="fwdbw")))
    with open(path, "a") as handle:
        handle.write("r,ours.mlstm_sig.xl_chunk,mlstm_sig,1.0,cuda,NVIDIA H1")
    assert len(read_rows(path)) == 2
    with ResultsWriter(path) as writer:
        writer.write(row(point=SweepPoint(1, 128, 2, 16, 16, None, dtype="float32")))
    lines = path.read_text().splitlines()
    assert lines[0] == ",".join(COLUMNS) and len(lines) == 4
    assert finished_keys(path) == {
        ("ours.mlstm_sig.xl_chunk", FIG4_POINT.key()),
        ("ours.mlstm_sig.xl_chunk", "B1-T64-H2-dqk16-dv16-L16-bfloat16-fwdbw"),
        ("ours.mlstm_sig.xl_chunk", "B1-T128-H2-dqk16-dv16-LNone-float32-fwd"),
    }


@pytest.mark.parametrize("header", [COLUMNS[:-len(LATER_COLUMNS)], COLUMNS[:-1]],
                         ids=["before-both", "before-issue-cpu"])
def test_a_table_written_before_the_later_columns_is_continued_with_them_appended(tmp_path, header):
    """A run resumed from a table of an earlier version's columns (without `LATER_COLUMNS`, or without the
    last of them) keeps its rows, the later columns empty in them."""
    path = tmp_path / "results.csv"
    earlier = {column: value for column, value in row().items() if column in header}
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=header, lineterminator="\n")
        writer.writeheader()
        writer.writerow(earlier)
    with ResultsWriter(path) as results:
        later = {"timing_rounds": 2, "issue_cpu_ms": 0.5}
        results.write({**row(point=SweepPoint(1, 64, 2, 16, 16, 16)), **later})
    first, second = read_rows(path)
    assert path.read_text().splitlines()[0] == ",".join(COLUMNS)
    assert list(first) == list(COLUMNS) and first["issue_cpu_ms"] == ""
    assert first["time_ms"] == second["time_ms"] == "4.39" and second["timing_rounds"] == "2"
    assert run_data.load_run(path).table["issue_cpu_ms"].isna().tolist() == [True, False]


def test_a_results_file_with_other_columns_is_refused(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("kernel,time\nx,1\n")
    with pytest.raises(InputError, match="other columns"):
        ResultsWriter(path)


def test_rows_use_schema_columns_and_one_line_params():
    values = row(kernel(variant="sig", normalize=False))
    assert set(values) <= set(COLUMNS)
    assert values["params"] == '{"normalize": false, "variant": "sig"}'
    assert (values["batch"], values["chunk_size"], values["mode"]) == (8, 128, "fwd")
    measured = {"status": "skipped", "reason": "head dim 2048:\n  illegal address"}
    skipped = make_row(run="r", kernel=kernel(), version=None, point=FIG4_POINT, device="cuda", gpu="",
                       measured=measured, derived={})
    assert skipped["reason"] == "head dim 2048: illegal address"


def test_derived_columns_follow_the_roofline(tmp_path, monkeypatch):
    hardware = pytest.importorskip("tflabench.analysis.hardware")
    models = pytest.importorskip("tflabench.analysis.models")
    monkeypatch.setenv(hardware.CALIBRATION_DIR_ENV, str(tmp_path))
    cost = models.kernel_cost("mlstm_sig", batch=8, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256,
                              chunk_size=128)
    h100 = hardware.get_gpu("h100-sxm")
    peak, bandwidth = h100.peak_flops["bfloat16"], h100.bandwidth
    derived = Derivation("NVIDIA H100 80GB HBM3").columns(kernel(), FIG4_POINT, time_ms=4.0)
    achieved = cost.flops / 4e-3
    assert derived["tflops"] == pytest.approx(achieved / 1e12)
    assert derived["gbps"] == pytest.approx(cost.bytes / 4e-3 / 1e9)
    assert derived["intensity"] == pytest.approx(cost.flops / cost.bytes)
    attainable = min(peak, bandwidth * cost.intensity)
    assert derived["roofline_frac_datasheet"] == pytest.approx(achieved / attainable)
    assert derived["model_ms_additive"] == pytest.approx((cost.flops / peak + cost.bytes / bandwidth) * 1e3)
    assert derived["model_ms_overlap"] == pytest.approx(max(cost.flops / peak, cost.bytes / bandwidth) * 1e3)
    assert "roofline_frac_measured" not in derived

    hardware.save_measured_ceilings("h100-sxm", hardware.Ceilings(700e12, 3.0e12, "measured test"))
    measured = Derivation("NVIDIA H100 80GB HBM3").columns(kernel(), FIG4_POINT, time_ms=4.0)
    attainable = min(700e12, 3.0e12 * cost.intensity)
    assert measured["roofline_frac_measured"] == pytest.approx(achieved / attainable)
    assert measured["model_ms_additive"] == pytest.approx((cost.flops / 700e12 + cost.bytes / 3.0e12) * 1e3)


def test_cost_arguments_come_from_the_kernel_params():
    assert cost_arguments(kernel(algorithm="parallel", cost_params={"gate_bytes": 4}), "bfloat16") == {
        "gate_bytes": 4, "formulation": "parallel"}
    assert cost_arguments(kernel(algorithm="xl_chunk"), "bfloat16") == {}
    assert cost_arguments(kernel("sdpa.math", "softmax_attention", causal=False), "bfloat16") == {
        "causal_factor": 1.0}


def test_non_causal_attention_is_costed_as_full_attention():
    pytest.importorskip("tflabench.analysis.models")
    point = SweepPoint(batch=2, seq_len=4096, heads=32, head_dim_qk=128, head_dim_v=128, chunk_size=None)
    derivation = Derivation("")
    causal = derivation.columns(kernel("sdpa.flash", "softmax_attention"), point, None)
    full = derivation.columns(kernel("sdpa.flash_noncausal", "softmax_attention", causal=False), point, None)
    assert full["flops"] / causal["flops"] == pytest.approx(2.0, rel=0.02)


def test_derived_columns_stay_empty_where_the_analysis_cannot_answer(monkeypatch):
    pytest.importorskip("tflabench.analysis.models")
    on_cpu = Derivation("").columns(kernel(), FIG4_POINT, time_ms=4.0)
    assert {"flops", "tflops"} <= set(on_cpu) and "roofline_frac_datasheet" not in on_cpu
    refused = Derivation("").columns(kernel(cost_params={"flop_table": "none"}), FIG4_POINT, time_ms=4.0)
    assert refused == {}
    monkeypatch.setitem(sys.modules, "tflabench.analysis.models", None)
    assert Derivation("NVIDIA H100 80GB HBM3").columns(kernel(), FIG4_POINT, time_ms=4.0) == {}


def test_rankings_list_only_measured_rows_fastest_first(tmp_path):
    path = tmp_path / "results.csv"
    with ResultsWriter(path) as writer:
        writer.write(row(kernel("slow.kernel"), time_ms=9.0))
        writer.write(row(kernel("wrong.kernel"), status="failed_check"))
        writer.write(row(kernel("fast.kernel"), time_ms=2.0))
        writer.write(row(kernel("crashed.kernel"), status="crash"))
    ranked = rankings(read_rows(path))
    assert list(ranked) == [("fwd", "bfloat16", 8, 8192, 4096)]
    assert [(ms, name) for ms, name, _ in ranked[("fwd", "bfloat16", 8, 8192, 4096)]] == [
        (2.0, "fast.kernel"), (9.0, "slow.kernel")]


def test_rows_whose_interquartile_range_is_above_the_limit_are_unsteady(tmp_path):
    path = tmp_path / "results.csv"
    quartiles = {"steady.kernel": (1.99, 2.01), "unsteady.kernel": (1.9, 2.1)}  # 1 % and 10 % of 2 ms
    with ResultsWriter(path) as writer:
        for name, (q25, q75) in quartiles.items():
            writer.write({**row(kernel(name), time_ms=2.0), "time_ms_q25": q25, "time_ms_q75": q75})
        writer.write(row(kernel("crashed.kernel"), status="crash"))
    assert unsteady_rows(read_rows(path)) == [f"unsteady.kernel {FIG4_POINT.key()}"]


def test_rows_whose_cpu_time_of_issuing_a_call_reaches_their_time_are_launch_bound(tmp_path):
    """A GPU row whose median CPU time of issuing a call is at least 90 % of its time is named; one at 80 %,
    one without the column (written before it) and one not measured are not."""
    path = tmp_path / "results.csv"
    with ResultsWriter(path) as writer:
        for name, issue in (("bound.kernel", 1.9), ("free.kernel", 1.6), ("older.kernel", None)):
            writer.write({**row(kernel(name), time_ms=2.0), "issue_cpu_ms": issue})
        writer.write({**row(kernel("crashed.kernel"), status="crash"), "issue_cpu_ms": 5.0})
    assert launch_bound_rows(read_rows(path)) == [f"bound.kernel {FIG4_POINT.key()}"]


def test_meta_commit_from_the_environment_wins_over_the_checkout(monkeypatch):
    monkeypatch.setenv("TFLABENCH_GIT_COMMIT", "0123abc")
    meta = new_meta(run="r", device="cpu-interpreter", gpu_info={}, kernels=[kernel()],
                    derivation=Derivation(""), sweep={"kernels": ["*"]}, dtypes=("bfloat16",))
    assert meta["git"] == {"commit": "0123abc", "dirty": None, "source": "TFLABENCH_GIT_COMMIT"}


def test_meta_records_provenance(monkeypatch):
    monkeypatch.delenv("TFLABENCH_GIT_COMMIT", raising=False)
    meta = new_meta(run="r", device="cpu-interpreter", gpu_info={}, kernels=[kernel()],
                    derivation=Derivation(""), sweep={"kernels": ["*"]}, dtypes=("bfloat16",))
    assert meta["command"].startswith("tflabench")
    assert meta["versions"]["torch"] and meta["versions"]["triton"]
    assert meta["versions"]["tflabench_kernels"] == KERNELS_VERSION
    assert set(meta["git"]) == {"commit", "dirty"}
    assert meta["ceilings"]["bfloat16"] == {"datasheet": None, "measured": None, "runtime_model_uses": None}
    assert meta["finished"] is None and meta["resumed"] == []


def test_rederive_recomputes_the_derived_columns_of_measured_rows_and_keeps_the_old_table(tmp_path):
    import json

    from tflabench.bench.results import META_FILE, RESULTS_FILE, rederive, write_meta

    spec = kernel()
    gpu = "NVIDIA H100 80GB HBM3"
    stale = {**row(spec), "flops": 1.0, "tflops": 1.0}
    failed = {**row(spec, point=SweepPoint(1, 64, 2, 16, 16, 16), status="failed_check"), "flops": 7.0}
    with ResultsWriter(tmp_path / RESULTS_FILE) as writer:
        writer.write(stale)
        writer.write(failed)
    write_meta(tmp_path / META_FILE, {"run": "r", "gpu": {"name": gpu}})
    assert rederive(tmp_path, {spec.name: spec}) == 1
    measured, untouched = read_rows(tmp_path / RESULTS_FILE)
    expected = Derivation(gpu).columns(spec, FIG4_POINT, 4.39)
    assert float(measured["flops"]) == pytest.approx(expected["flops"], rel=1e-5)
    assert float(measured["tflops"]) == pytest.approx(expected["tflops"], rel=1e-5)
    assert measured["time_ms"] == "4.39" and untouched["flops"] == "7"
    backups = list(tmp_path.glob("results.*.before-rederive.csv"))
    assert len(backups) == 1 and read_rows(backups[0])[0]["flops"] == "1"
    record = json.loads((tmp_path / META_FILE).read_text())["rederived"][0]
    assert record["changed_rows"] == 1 and record["previous_table"] == backups[0].name
    assert rederive(tmp_path, {spec.name: spec}) == 0  # idempotent: no second backup
    assert len(list(tmp_path.glob("results.*.before-rederive.csv"))) == 1


def test_rederive_refuses_a_directory_that_is_not_a_run(tmp_path):
    from tflabench.bench.results import rederive

    with pytest.raises(InputError, match="not a run directory"):
        rederive(tmp_path, {})


def test_a_kernel_storing_states_in_the_operand_dtype_is_costed_with_those_bytes():
    from tflabench.core import STATE_BYTES_OF_OPERANDS

    ours = kernel(algorithm="xl_chunk", cost_params={"state_bytes": STATE_BYTES_OF_OPERANDS})
    assert cost_arguments(ours, "bfloat16")["state_bytes"] == 2
    assert cost_arguments(ours, "float32")["state_bytes"] == 4
    derivation = Derivation("")
    fp32_states = derivation.columns(kernel(algorithm="xl_chunk"), FIG4_POINT, 1.0)
    bf16_states = derivation.columns(ours, FIG4_POINT, 1.0)
    assert bf16_states["flops"] == fp32_states["flops"] and bf16_states["bytes"] < fp32_states["bytes"]


def test_parameters_decided_per_point_join_the_row_params():
    """A kernel that chooses by itself (algorithm "auto") reports its choice with the measurement."""
    measured = {"status": "ok", "reason": "", "time_ms": 1.0,
                "point_params": {"choice": {"algorithm": "fused_chunk", "chunk_size": 64, "reason": "rule"}}}
    values = make_row(run="r", kernel=kernel(variant="sig"), version=None, point=FIG4_POINT, device="cuda",
                      gpu="NVIDIA H100", measured=measured, derived={})
    assert set(values) <= set(COLUMNS)
    assert json.loads(values["params"]) == {
        "variant": "sig", "choice": {"algorithm": "fused_chunk", "chunk_size": 64, "reason": "rule"}}
