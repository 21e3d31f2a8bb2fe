"""Peer adapters on CPU: registration, availability reasons, FLOP-model hookup, unsupported points, input
layouts, and each adapter's layout and gate mapping checked against the float64 family references.

Peers are optional: tests that call a peer skip without it. Where a peer's Triton kernel runs under the
interpreter (lightning-attn, Mamba2 SSD, mlstm_kernels, retention's attention form) the real kernel is
checked; otherwise (FLA's kernels, the CUDA-only ones) the peer's own pure-PyTorch implementation, or a
stand-in module with the peer's interface, is called through the adapter's mapping. Deliberately wrong
mappings (no causal mask, a missing transpose, a flipped decay, swapped gates, no gate) must fail.
"""

import contextlib
import importlib
import os
import sys
import types
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from tflabench.bench.adapters import _common
from tflabench.bench.adapters._common import NO_CUDA, check_mapping, family_inputs, peer_availability
from tflabench.bench.adapters.flash_attention import sdpa_spec
from tflabench.bench.registry import Availability, all_kernels
from tflabench.core import FAMILIES, MODES, SweepPoint

EXPECTED_KERNELS = {
    "torch.sdpa.flash", "torch.sdpa.cudnn", "torch.sdpa.efficient",
    "flash_attn.fa2", "flash_attn_interface.fa3",
    "fla.chunk_gla", "fla.chunk_simple_gla", "fla.chunk_lightning_attn", "lightning_attn.lightning_attn2",
    "mamba_ssm.mamba2_ssd", "mamba_ssm.selective_scan",
    "retention.power_retention.deg2", "retention.power_retention.deg4",
    "power_attention.power_full.deg2", "power_attention.power_full.deg4",
    "mlstm_kernels.mlstm_exp.xl_chunk", "mlstm_kernels.mlstm_sig.xl_chunk",
    "mlstm_kernels.mlstm_exp.limit_chunk", "mlstm_kernels.mlstm_exp.parallel",
    "tflabench.mlstm_exp.xl_chunk", "tflabench.mlstm_exp.limit_chunk",
    "tflabench.mlstm_sig.xl_chunk", "tflabench.mlstm_sig.limit_chunk",
}
SMALL = SweepPoint(batch=2, seq_len=64, heads=2, head_dim_qk=32, head_dim_v=16, chunk_size=32,
                   dtype="float32")
CPU = torch.device("cpu")
INTERPRETER = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                 reason="runs a Triton kernel on CPU tensors under the interpreter")


def kernel(name):
    return all_kernels()[name]


def passes(result):
    return result.passed and result.rel_error < result.tolerance


@pytest.fixture
def single_config_autotune(monkeypatch):
    """Under the interpreter, @triton.autotune with several configs asks the GPU driver for a timer
    (cpu-and-gpu-environments.md): give every config the same time, so the first one runs."""
    from triton.runtime.autotuner import Autotuner

    monkeypatch.setattr(Autotuner, "do_bench", property(lambda self: lambda fn, quantiles: [1.0, 1.0, 1.0]))
    monkeypatch.setattr(torch.cuda, "device", lambda index: contextlib.nullcontext())


# ----------------------------------------------------------------------------------------------- registry
def test_every_adapter_registers_its_kernels_in_known_families():
    kernels = all_kernels()
    assert EXPECTED_KERNELS <= set(kernels)
    for name in EXPECTED_KERNELS:
        spec = kernels[name]
        assert spec.family in FAMILIES and set(spec.modes) <= set(MODES), name
        assert set(spec.mode_reasons).isdisjoint(spec.modes), name


@pytest.mark.parametrize("name", sorted(EXPECTED_KERNELS))
def test_availability_never_raises_and_says_why(name):
    availability = kernel(name).availability()
    assert isinstance(availability, Availability)
    assert availability.available or availability.reason
    if not torch.cuda.is_available() and not name.startswith("tflabench."):
        assert not availability.available
        assert availability.reason == NO_CUDA or "not installed" in availability.reason, availability.reason


def test_peer_availability_reasons(monkeypatch, tmp_path):
    assert peer_availability("surely_absent_peer", "surely-absent")().reason == (
        "surely-absent is not installed (no module surely_absent_peer)")
    pytest_version = _common.installed_version("pytest")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert peer_availability("json", "pytest")() == Availability(False, NO_CUDA, pytest_version)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    (tmp_path / "broken_peer_module.py").write_text("raise RuntimeError('boom\\nsecond line')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    broken = peer_availability("broken_peer_module", None)()
    assert not broken.available and broken.reason == "importing broken_peer_module failed: RuntimeError: boom"
    assert peer_availability("json", "pytest")() == Availability(True, "", pytest_version)


def test_our_kernels_need_cuda_or_the_interpreter(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    reason = kernel("tflabench.mlstm_sig.xl_chunk").availability().reason
    assert "TRITON_INTERPRET=1" in reason


# ------------------------------------------------------------------------------------- FLOP-model hookup
@pytest.mark.parametrize("name", sorted(EXPECTED_KERNELS))
def test_family_and_cost_params_select_a_flop_model(name):
    models = pytest.importorskip("tflabench.analysis.models")
    derived = pytest.importorskip("tflabench.bench.derived")
    spec = kernel(name)
    dims = dict(batch=2, seq_len=1024, heads=4, head_dim_qk=64, head_dim_v=64,
                chunk_size=64 if spec.uses_chunk_size else None, **derived.cost_arguments(spec, "bfloat16"))
    forward = models.kernel_cost(spec.family, mode="fwd", **dims)
    assert forward.flops > 0 and forward.bytes > 0
    assert models.kernel_cost(spec.family, mode="fwdbw", **dims).flops > forward.flops


# -------------------------------------------------------------------------------------- unsupported points
@pytest.mark.parametrize("name, changes, expected", [
    ("torch.sdpa.flash", {"dtype": "bfloat16"}, "head_dim_qk == head_dim_v"),
    ("torch.sdpa.flash", {"dtype": "float32", "head_dim_v": 64}, "float16 or bfloat16"),
    ("torch.sdpa.efficient", {"dtype": "bfloat16", "head_dim_v": 32}, None),
    ("flash_attn.fa2", {"dtype": "bfloat16", "head_dim_qk": 512, "head_dim_v": 512}, "at most 256"),
    ("fla.chunk_simple_gla", {"chunk_size": 48}, "power of two"),
    ("fla.chunk_gla", {"seq_len": 8}, "seq_len >= 16"),
    ("lightning_attn.lightning_attn2", {"head_dim_qk": 16}, "power of two >= 32"),
    ("lightning_attn.lightning_attn2", {}, "must not divide 16"),
    ("mamba_ssm.mamba2_ssd", {"chunk_size": 96, "seq_len": 192}, "mamba#449"),
    ("retention.power_retention.deg2", {}, "head_dim_qk == head_dim_v"),
    ("mlstm_kernels.mlstm_exp.xl_chunk", {"seq_len": 64, "chunk_size": 32}, "one chunk"),
    ("mlstm_kernels.mlstm_exp.xl_chunk", {"seq_len": 512, "chunk_size": 128}, None),
    ("mlstm_kernels.mlstm_exp.limit_chunk", {"seq_len": 512, "chunk_size": 256}, "[16, 128]"),
    ("mlstm_kernels.mlstm_exp.parallel", {}, "head_dim_qk == head_dim_v"),
    ("tflabench.mlstm_exp.xl_chunk", {"head_dim_qk": 24}, "multiple of 16"),
    ("tflabench.mlstm_sig.limit_chunk", {"seq_len": 512, "chunk_size": 256}, "chunk_size <= 128"),
    ("tflabench.mlstm_sig.limit_chunk", {"seq_len": 512, "chunk_size": 128}, None),
    ("tflabench.mlstm_sig.xl_chunk", {"seq_len": 512, "chunk_size": 256}, None),
])
def test_unsupported_points_are_named(name, changes, expected):
    reason = kernel(name).unsupported(replace(SMALL, **changes))
    assert reason is None if expected is None else expected in reason


def test_fla_refuses_the_gated_backward_only_on_hopper_with_triton_below_3_7_1(monkeypatch):
    from tflabench.bench.adapters import fla

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(fla, "is_installed", lambda module: False)
    cases = {((9, 0), "3.6.0"): True, ((8, 0), "3.6.0"): False, ((9, 0), "3.7.1"): False,
             ((9, 0), "3.3.1"): False}
    for (capability, version), refused in cases.items():
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda capability=capability: capability)
        monkeypatch.setattr(fla, "installed_version", lambda name, version=version: version)
        reason = fla.gated_backward_refusal()
        assert (reason is not None) == refused, (capability, version)
        assert reason is None or "FLA #640" in reason


def test_fla_simple_gla_keeps_both_modes_off_hopper():
    if torch.cuda.is_available():
        pytest.skip("depends on the GPU")
    spec = kernel("fla.chunk_simple_gla")
    assert spec.modes == MODES and not spec.mode_reasons


# ------------------------------------------------------------------------------------------------ inputs
def test_sdpa_inputs_are_heads_first_contiguous_leaves_with_gradients_only_in_fwdbw():
    spec = kernel("torch.sdpa.efficient")
    point = replace(SMALL, mode="fwdbw")
    inputs = spec.make_inputs(point, "cpu")
    assert inputs["q"].shape == (2, 2, 64, 32) and inputs["v"].shape == (2, 2, 64, 16)
    assert all(inputs[n].is_leaf and inputs[n].is_contiguous() and inputs[n].requires_grad for n in "qkv")
    again = spec.make_inputs(replace(point, mode="fwd"), "cpu")
    assert not any(again[n].requires_grad for n in "qkv")
    assert not torch.equal(inputs["q"], again["q"])


def test_mlstm_kernels_inputs_are_heads_first_with_float32_gates():
    inputs = kernel("mlstm_kernels.mlstm_exp.xl_chunk").make_inputs(SMALL, "cpu")
    assert inputs["q"].shape == (2, 2, 64, 32) and inputs["i"].shape == (2, 2, 64)
    assert inputs["f"].dtype == torch.float32 and inputs["chunk_size"] == 32


# ------------------------------------------------------------------ attention: SDPA and flash-attn stand-ins
def test_sdpa_math_passes_and_the_non_causal_adapter_is_caught():
    assert passes(sdpa_spec("math").reference_check(CPU, "float32"))
    assert passes(sdpa_spec("math").reference_check(CPU, "float64"))
    wrong = sdpa_spec("math", causal=False).reference_check(CPU, "float32")
    assert not wrong.passed and wrong.rel_error > 0.1


def stand_in_flash_attn_func(returns_tuple, causal_honoured=True):
    """flash_attn_func's interface ((B, T, H, D), softmax_scale, causal) implemented with SDPA math."""

    def flash_attn_func(q, k, v, softmax_scale=None, causal=False):
        out = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                             is_causal=causal and causal_honoured, scale=softmax_scale)
        out = out.transpose(1, 2)
        return (out, torch.zeros(q.shape[:3])) if returns_tuple else out

    return flash_attn_func


@pytest.mark.parametrize("name, module, returns_tuple", [
    ("flash_attn.fa2", "flash_attn", False), ("flash_attn_interface.fa3", "flash_attn_interface", True)])
def test_flash_attn_adapters_keep_the_layout_and_select_the_output_by_type(monkeypatch, name, module,
                                                                           returns_tuple):
    fake = types.ModuleType(module)
    fake.flash_attn_func = stand_in_flash_attn_func(returns_tuple)
    monkeypatch.setitem(sys.modules, module, fake)
    assert passes(kernel(name).reference_check(CPU, "float32"))
    fake.flash_attn_func = stand_in_flash_attn_func(returns_tuple, causal_honoured=False)
    assert not kernel(name).reference_check(CPU, "float32").passed


# --------------------------------------------------------------------------------------------------- FLA
def test_fla_mappings_match_fla_naive_references(monkeypatch):
    pytest.importorskip("fla")
    from fla.ops.gla.naive import naive_recurrent_gla
    from fla.ops.lightning_attn import chunk as lightning_chunk
    from fla.ops.simple_gla.naive import naive_recurrent_simple_gla

    from tflabench.bench.adapters import fla

    def naive_gla(a):
        return naive_recurrent_gla(a["q"], a["k"], a["v"], a["g"])[0]

    def naive_simple_gla(a):
        return naive_recurrent_simple_gla(a["q"], a["k"], a["v"], a["g"], scale=a["scale"])[0]

    def naive_with_g_gamma(q, k, v, scale, g_gamma, **unused):
        return naive_recurrent_simple_gla(q, k, v, g_gamma.expand(q.shape[:3]), scale=scale)

    assert passes(check_mapping("gla", replace(fla.GLA, call=naive_gla), family_inputs("gla"), SMALL, CPU))
    assert passes(check_mapping("simple_gla", replace(fla.SIMPLE_GLA, call=naive_simple_gla),
                                family_inputs("simple_gla"), SMALL, CPU))
    monkeypatch.setattr(lightning_chunk, "chunk_simple_gla", naive_with_g_gamma)
    assert passes(check_mapping("lightning", fla.LIGHTNING, fla.lightning_inputs, SMALL, CPU))


# ---------------------------------------------------------------------------------------- lightning-attn
@INTERPRETER
def test_lightning_attn2_kernel_and_its_mapping_mistakes():
    pytest.importorskip("lightning_attn")
    from tflabench.bench.adapters import lightning_attn

    assert passes(kernel("lightning_attn.lightning_attn2").reference_check(CPU, "float32"))
    mapping = lightning_attn.LIGHTNING_ATTN2
    good = mapping.to_native

    def no_transpose(neutral, point):
        return {**good(neutral, point), **{name: neutral[name] for name in "qkv"}}

    def flipped_decay(neutral, point):
        return {**good(neutral, point), "s": -good(neutral, point)["s"]}

    inputs, point = family_inputs("lightning"), replace(SMALL, head_dim_v=32)
    for wrong in (no_transpose, flipped_decay):
        assert not check_mapping("lightning", replace(mapping, to_native=wrong), inputs, point, CPU).passed


# ------------------------------------------------------------------------------------------------- Mamba
@INTERPRETER
def test_mamba2_ssd_kernel_runs_without_the_compiled_extension(single_config_autotune):
    pytest.importorskip("einops")
    if not _common.is_installed("mamba_ssm"):
        pytest.skip("mamba-ssm is not installed")
    assert passes(kernel("mamba_ssm.mamba2_ssd").reference_check(CPU, "float32"))
    assert "selective_scan_cuda" not in sys.modules


def test_mamba1_selective_scan_mapping_with_the_reference_scan(monkeypatch):
    pytest.importorskip("einops")
    if not _common.is_installed("mamba_ssm"):
        pytest.skip("mamba-ssm is not installed")
    from tflabench.bench.adapters import mamba

    monkeypatch.setitem(sys.modules, "selective_scan_cuda", types.ModuleType("selective_scan_cuda"))
    module_name = f"mamba_ssm.{mamba.SELECTIVE_SCAN_MODULE}"
    try:
        reference_scan = mamba.mamba_module(mamba.SELECTIVE_SCAN_MODULE).selective_scan_ref
    finally:
        sys.modules.pop(module_name, None)

    def call(a):
        return reference_scan(a["u"], a["delta"], a["A"], a["B"], a["C"])

    point = replace(SMALL, seq_len=32, head_dim_qk=8, head_dim_v=4)
    mapping = replace(mamba.SELECTIVE_SCAN, call=call)
    assert passes(check_mapping("gla", mapping, mamba.selective_scan_inputs, point, CPU))

    def delta_not_applied_to_u(a):
        return reference_scan(a["u"] / a["delta"], a["delta"], a["A"], a["B"], a["C"])

    wrong = replace(mapping, call=delta_not_applied_to_u)
    assert not check_mapping("gla", wrong, mamba.selective_scan_inputs, point, CPU).passed


# ----------------------------------------------------------------------------------------- mlstm_kernels
@INTERPRETER
@pytest.mark.parametrize("name", ["mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_kernels.mlstm_exp.limit_chunk",
                                  "mlstm_kernels.mlstm_exp.parallel"])
def test_mlstm_kernels_under_the_interpreter(name, single_config_autotune):
    pytest.importorskip("mlstm_kernels")
    assert passes(kernel(name).reference_check(CPU, "float32"))


@INTERPRETER
def test_mlstm_kernels_with_swapped_gates_fail():
    pytest.importorskip("mlstm_kernels")
    from tflabench.bench.adapters import mlstm_kernels

    mapping = mlstm_kernels.MAPPINGS["mlstm_exp.limit_chunk"]

    def swapped(neutral, point):
        native = mapping.to_native(neutral, point)
        return {**native, "i": native["f"], "f": native["i"]}

    wrong = replace(mapping, to_native=swapped)
    assert not check_mapping("mlstm_exp", wrong, family_inputs("mlstm_exp"), SMALL, CPU).passed


# ----------------------------------------------------------------------------------------- power attention
@INTERPRETER
def test_retention_degree4_attention_form_under_the_interpreter(single_config_autotune):
    pytest.importorskip("retention")
    assert passes(kernel("retention.power_retention.deg4").reference_check(CPU, "float32"))


def test_retention_chunked_mapping_with_its_reference_implementation():
    pytest.importorskip("retention")
    from retention.reference import power_retention

    from tflabench.bench.adapters import power_attention

    def call(a):
        return power_retention(a["q"], a["k"], a["v"], a["log_g"], deg=a["degree"], scale=a["scale"],
                               chunk_size=a["chunk_size"])

    def ungated(a):
        return call({**a, "log_g": None})

    point = replace(SMALL, head_dim_qk=16, head_dim_v=16, chunk_size=16)
    mapping = replace(power_attention.MAPPINGS["retention"], call=call)
    assert passes(check_mapping("power_attention", mapping, family_inputs("power_attention"), point, CPU))
    wrong = replace(mapping, call=ungated)
    assert not check_mapping("power_attention", wrong, family_inputs("power_attention"), point, CPU).passed


def test_vidrial_clone_detection(monkeypatch, tmp_path):
    from tflabench.bench.adapters import power_attention

    (tmp_path / "vidrial").mkdir()
    (tmp_path / "vidrial" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert power_attention.vidrial_would_clone()
    (tmp_path / "cutlass").mkdir()
    assert not power_attention.vidrial_would_clone()


def test_power_attention_fallback_reasons(monkeypatch):
    from tflabench.bench.adapters import power_attention

    availability = kernel("power_attention.power_full.deg2").availability
    monkeypatch.setattr(power_attention, "installed_version", lambda name: None)
    assert "power-attention is not installed" in availability().reason
    monkeypatch.setattr(power_attention, "installed_version", lambda name: "1.4.4")
    monkeypatch.setattr(power_attention, "_retention_availability", lambda: Availability(True))
    assert "only its fallback" in availability().reason
    monkeypatch.setattr(power_attention, "_retention_availability", lambda: Availability(False, "x"))
    monkeypatch.setattr(power_attention, "vidrial_would_clone", lambda: True)
    assert "git-clone CUTLASS" in availability().reason


# ------------------------------------------------------------------------------------------- our kernels
@INTERPRETER
@pytest.mark.parametrize("name", sorted(n for n in EXPECTED_KERNELS if n.startswith("tflabench.")))
def test_our_kernels_pass_their_check_under_the_interpreter(name):
    spec = kernel(name)
    if not spec.availability().available:
        pytest.skip(spec.availability().reason)
    assert passes(spec.reference_check(CPU, "float32"))


# ------------------------------------------------------------------------------------- the gate's check
def _stand_in_spec(call_on_chunk, unsupported=lambda point: None):
    """A chunked simple-GLA 'peer' computed by the float64 reference and then ``call_on_chunk(output,
    chunk_size)``: right wherever that returns the output unchanged."""
    from tflabench.bench import references

    def call(arguments):
        output = references.reference_output("simple_gla", arguments).to(arguments["q"].dtype)
        return call_on_chunk(output, arguments["chunk_size"])

    mapping = _common.PeerMapping(
        to_native=lambda neutral, point: {**neutral, "chunk_size": point.chunk_size}, call=call,
        to_neutral=lambda output: output, grad_inputs=())
    return _common.peer_spec("local.simple_gla", "simple_gla", mapping, lambda: Availability(True),
                             package=None, uses_chunk_size=True, unsupported=unsupported)


def test_the_check_takes_the_heads_head_dims_and_chunk_size_of_the_timed_point():
    point = replace(SMALL, head_dim_qk=128, head_dim_v=256, chunk_size=256, seq_len=8192, batch=8, heads=16)
    check = _common.configuration_check_point(_common.CHECK_POINT, point)
    assert (check.heads, check.head_dim_qk, check.head_dim_v, check.chunk_size) == (16, 128, 256, 256)
    assert (check.batch, check.seq_len) == (2, 512)  # small, and two chunks long
    no_chunk = replace(_common.CHECK_POINT, chunk_size=None)
    assert _common.configuration_check_point(no_chunk, point).chunk_size is None
    assert _common.configuration_check_point(no_chunk, point).seq_len == no_chunk.seq_len


def test_a_peer_wrong_at_one_chunk_size_fails_only_there():
    """mlstm_kernels' mLSTMsig xl_chunk on Triton 3.6 is wrong at L 64 with Dv 32 and right at L 128 with
    Dv 256 (results/gpu-tests/2026-11-22-mlstm-kernels-probes): the gate checks the configuration that is
    timed."""
    from tflabench.bench.measure import ReferenceGate

    spec = _stand_in_spec(lambda output, chunk: output * 1.5 if chunk == 32 else output)
    gate = ReferenceGate("cpu-interpreter")
    at_16, at_32 = (gate.check(spec, replace(SMALL, chunk_size=chunk)) for chunk in (16, 32))
    assert passes(at_16)
    assert not at_32.passed and "-L32-" in at_32.detail
    assert not spec.reference_check(CPU, "float32", replace(SMALL, chunk_size=32)).passed
    assert passes(spec.reference_check(CPU, "float32"))  # the default check point's L 64


def test_a_configuration_the_kernel_cannot_run_falls_back_to_the_check_point():
    spec = _stand_in_spec(lambda output, chunk: output,
                          unsupported=lambda point: "too long" if point.seq_len > 128 else None)
    result = spec.reference_check(CPU, "float32", replace(SMALL, chunk_size=256))
    assert passes(result) and "-L64-" in result.detail


def test_a_kernel_whose_two_calls_differ_is_not_deterministic():
    noisy = _stand_in_spec(lambda output, chunk: output + 0.5 * torch.randn_like(output))
    result = noisy.reference_check(CPU, "float32")
    assert not result.passed and "not deterministic" in result.detail
    wrong = _stand_in_spec(lambda output, chunk: output * 1.5).reference_check(CPU, "float32")
    assert not wrong.passed and "not deterministic" not in wrong.detail
