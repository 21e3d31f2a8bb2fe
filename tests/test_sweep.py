"""Sweep specification: presets, axis parsing, kernel selection, expansion and skip reasons."""

import time

import pytest

from tflabench.bench.commands import build_spec
from tflabench.bench.registry import Availability, KernelSpec
from tflabench.bench.sweep import (
    Shape,
    SweepSpec,
    expand,
    load_preset,
    parse_int_list,
    select_kernels,
)
from tflabench.core import SweepPoint
from tflabench.errors import InputError

POWERS_512_TO_64K = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]


def _never_called(*args, **kwargs):
    raise AssertionError("expansion must not run kernels")


def kernel(name, family="mlstm_sig", uses_chunk_size=True, **fields):
    defaults = dict(availability=lambda: Availability(True, version="1.0"), unsupported=lambda point: None,
                    make_inputs=_never_called, run=_never_called, reference_check=_never_called)
    return KernelSpec(name=name, family=family, package=None, uses_chunk_size=uses_chunk_size,
                      **(defaults | fields))


def registry(*specs):
    return {spec.name: spec for spec in specs}


def points_of(jobs, name):
    return [job.point for job in jobs if job.kernel.name == name]


FIG4_KERNELS = registry(
    kernel("ours.mlstm_sig.xl_chunk"),
    kernel("ours.mlstm_exp.limit_chunk", family="mlstm_exp"),
    kernel("sdpa.flash", family="softmax_attention", uses_chunk_size=False),
    kernel("mamba.ssd", family="mamba2_ssd", uses_chunk_size=False),
    kernel("fla.chunk_simple_gla", family="simple_gla", uses_chunk_size=False),
)


def test_fig4_preset_constant_tokens_and_per_family_heads():
    jobs = expand(load_preset("tfla-fig4"), FIG4_KERNELS)
    assert len(jobs) == 5 * 8 * 2 and all(job.status is None for job in jobs)
    # (heads, head_dim_qk, head_dim_v, chunk) per kernel, docs/reference/paper-numbers.md#fig-4-configuration
    expected = {
        "ours.mlstm_sig.xl_chunk": (16, 128, 256, 128),
        "ours.mlstm_exp.limit_chunk": (16, 128, 256, 64),
        "sdpa.flash": (32, 128, 128, None),
        "mamba.ssd": (64, 128, 64, None),
        "fla.chunk_simple_gla": (16, 128, 256, None),
    }
    for name, shape in expected.items():
        points = points_of(jobs, name)
        assert {(p.heads, p.head_dim_qk, p.head_dim_v, p.chunk_size) for p in points} == {shape}
        assert sorted({p.seq_len for p in points}) == POWERS_512_TO_64K
        assert all(p.batch * p.seq_len == 65536 and p.dtype == "bfloat16" for p in points)
        assert {p.mode for p in points} == {"fwd", "fwdbw"}


def test_fig5_preset_sweeps_chunk_sizes_of_chunkwise_mlstm_kernels_only():
    sram_limit = kernel("ours.mlstm_exp.limit_chunk", family="mlstm_exp",
                        unsupported=lambda p: "chunk too large for SRAM" if p.chunk_size > 128 else None)
    kernels = registry(kernel("ours.mlstm_sig.xl_chunk"), sram_limit, kernel("fla.chunk_gla", family="gla"))
    jobs = expand(load_preset("tfla-fig5"), kernels)
    assert {job.kernel.name for job in jobs} == {"ours.mlstm_sig.xl_chunk", "ours.mlstm_exp.limit_chunk"}
    xl = points_of(jobs, "ours.mlstm_sig.xl_chunk")
    assert sorted({p.chunk_size for p in xl}) == [64, 128, 256, 512, 1024, 2048, 4096]
    shapes = {(p.batch, p.seq_len, p.heads, p.head_dim_qk, p.head_dim_v) for p in xl}
    assert shapes == {(8, 8192, 8, 256, 512)}
    skipped = [job for job in jobs if job.status == "skipped"]
    assert len(skipped) == 5 * 2 and all(job.reason == "chunk too large for SRAM" for job in skipped)


def test_headdim_preset_keeps_embedding_4096_with_equal_head_dims_and_the_papers_kernels():
    kernels = registry(kernel("ours.mlstm_sig.xl_chunk"), kernel("fla.chunk_gla", family="gla"),
                       kernel("fla.chunk_simple_gla", family="simple_gla"),
                       kernel("sdpa.flash", family="softmax_attention", uses_chunk_size=False))
    jobs = expand(load_preset("tfla-headdim"), kernels)
    assert {job.kernel.name for job in jobs} == {"ours.mlstm_sig.xl_chunk", "fla.chunk_gla",
                                                 "fla.chunk_simple_gla"}
    fla_dims = {job.point.head_dim_v for job in jobs if job.kernel.name.startswith("fla.")}
    assert fla_dims == {128, 256, 512, 1024}  # as in the paper
    points = [job.point for job in jobs if job.kernel.name.startswith("ours.")]
    assert sorted({p.head_dim_v for p in points}) == [32, 64, 128, 256, 512, 1024]
    assert all(p.heads * p.head_dim_v == 4096 and p.head_dim_qk == p.head_dim_v for p in points)
    assert all((p.batch, p.seq_len) == (4, 8192) for p in points)
    assert {p.chunk_size for p in points} == {128, 256}


def test_invalid_combinations_are_recorded_with_reasons_never_dropped():
    spec = SweepSpec(shape=Shape(seq_len=(64, 96), tokens=None, batch=(1,), embedding_dim=None, heads=(2,),
                                 qk_ratio=None, head_dim_qk=(16,), head_dim_v=(16,), chunk_size=(32, 128)))
    jobs = expand(spec, registry(kernel("k.chunked")))
    assert len(jobs) == 2 * 2 * 2
    reasons = {(j.point.seq_len, j.point.chunk_size): (j.status, j.reason)
               for j in jobs if j.point.mode == "fwd"}
    assert reasons[(64, 32)] == (None, "")
    assert reasons[(64, 128)] == ("skipped", "chunk size 128 is larger than seq_len 64")
    assert reasons[(96, 32)] == (None, "")
    assert reasons[(96, 128)][0] == "skipped"
    odd = expand(SweepSpec(shape=Shape(seq_len=(100,), tokens=None, batch=(1,), chunk_size=(32,))),
                 registry(kernel("k.chunked")))
    assert {job.reason for job in odd} == {"seq_len 100 is not a multiple of chunk size 32"}


def test_unavailable_refused_mode_and_raising_adapter_become_rows():
    kernels = registry(
        kernel("peer.missing", availability=lambda: Availability(False, "package fakepeer not installed")),
        kernel("peer.fwd_only", modes=("fwd",), mode_reasons={"fwdbw": "gated backward refused (FLA #640)"}),
        kernel("peer.broken", unsupported=lambda point: 1 / 0),
    )
    spec = SweepSpec(shape=Shape(seq_len=(256,), tokens=None, batch=(1,)))
    outcome = {(job.kernel.name, job.point.mode): (job.status, job.reason) for job in expand(spec, kernels)}
    assert outcome[("peer.missing", "fwd")] == ("unavailable", "package fakepeer not installed")
    assert outcome[("peer.fwd_only", "fwd")] == (None, "")
    assert outcome[("peer.fwd_only", "fwdbw")] == ("unavailable", "gated backward refused (FLA #640)")
    assert outcome[("peer.broken", "fwd")] == (
        "error", "unsupported() raised ZeroDivisionError: division by zero")


def test_kernels_without_chunk_parameter_get_one_point_per_shape():
    spec = SweepSpec(shape=Shape(seq_len=(512,), chunk_size=(64, 128, 256)), modes=("fwd",))
    jobs = expand(spec, registry(kernel("sdpa.flash", family="softmax_attention", uses_chunk_size=False)))
    assert [job.point.chunk_size for job in jobs] == [None]


@pytest.mark.parametrize(("text", "expected"), [
    ("512..4096", (512, 1024, 2048, 4096)),
    ("8, 16", (8, 16)),
    ("64", (64,)),
    ("32..32,100", (32, 100)),
])
def test_integer_axes_accept_lists_and_power_of_two_ranges(text, expected):
    assert parse_int_list(text, "seq_len") == expected


@pytest.mark.parametrize("value", ["abc", "0", "-4", "8..4", "", "1.5", True, 0, [], [8, "x"], 2.5])
def test_integer_axes_reject_bad_values(value):
    with pytest.raises(InputError, match="seq_len"):
        parse_int_list(value, "seq_len")


def test_selectors_match_globs_and_family_names():
    kernels = registry(kernel("tflabench.mlstm_sig.xl_chunk"), kernel("mlstm_kernels.mlstm_sig.xl_chunk"),
                       kernel("sdpa.flash", family="softmax_attention", uses_chunk_size=False))
    assert [k.name for k in select_kernels(("tflabench.*",), kernels)] == ["tflabench.mlstm_sig.xl_chunk"]
    assert [k.name for k in select_kernels(("softmax_attention",), kernels)] == ["sdpa.flash"]
    assert len(select_kernels(("*xl_chunk", "sdpa.*"), kernels)) == 3
    with pytest.raises(InputError, match="no kernel matches 'fla.*'"):
        select_kernels(("fla.*",), kernels)


def test_kernels_that_autotune_for_minutes_run_last_and_our_own_run_first():
    kernels = registry(kernel("a.slow", first_call_s=300.0), kernel("b.fast"), kernel("c.fast"),
                       kernel("tflabench.mlstm_sig.xl_chunk"))
    assert [k.name for k in select_kernels(("*",), kernels)] == [
        "tflabench.mlstm_sig.xl_chunk", "b.fast", "c.fast", "a.slow"]


def test_flags_override_preset_and_partner_axes_exclude_each_other():
    spec = build_spec("tfla-fig4", None, {"seq_len": "8192", "kernels": "tflabench.*"}, {"timeout": 60})
    assert spec.shape.seq_len == (8192,) and spec.shape.tokens == 65536
    assert spec.kernels == ("tflabench.*",) and spec.timeout_s == 60.0 and spec.repeats == 30
    with_batch = build_spec("tfla-fig4", None, {"batch": "2,4"}, {})
    assert with_batch.shape.batch == (2, 4) and with_batch.shape.tokens is None
    with pytest.raises(InputError, match="either --batch or --tokens"):
        build_spec(None, None, {"batch": "8", "tokens": 65536}, {})


def test_later_overrides_win_and_clear_the_partner_axis():
    spec = SweepSpec(overrides=(("softmax_attention", {"head_dim_v": (128,)}),
                                ("sdpa.*", {"heads": (8,)})))
    shape = spec.shape_for(kernel("sdpa.flash", family="softmax_attention"))
    assert shape.head_dim_v == (128,) and shape.heads == (8,) and shape.embedding_dim is None
    assert spec.shape_for(kernel("other")).head_dim_v == (256,)


@pytest.mark.parametrize(("shape", "message"), [
    (Shape(seq_len=(3000,)), "tokens 65536 is not a multiple of seq_len 3000"),
    (Shape(head_dim_v=(384,)), "embedding_dim 4096 is not a multiple of head_dim_v 384"),
    (Shape(head_dim_v=(4,), qk_ratio=0.3), "is not a positive integer"),
])
def test_impossible_derived_axes_are_input_errors(shape, message):
    with pytest.raises(InputError, match=message):
        expand(SweepSpec(shape=shape), registry(kernel("k")))


def test_a_kernel_whose_first_call_does_not_fit_the_budget_waits_for_the_next_resume(tmp_path):
    from tflabench.bench.groups import GroupSettings, measure_group

    settings = GroupSettings(warmup=1, repeats=1, timeout_s=10.0, deadline=time.time() + 60)
    log = tmp_path / "fla.autotunes.log"
    points = [SweepPoint(1, 64, 2, 8, 8, 16)]
    assert list(measure_group("fla.autotunes", 300.0, points, settings, "cuda", log)) == []
    assert "not started: its first call takes about 300 s" in log.read_text()
    assert settings.time_left_for(30.0) and not settings.time_left_for(300.0)
