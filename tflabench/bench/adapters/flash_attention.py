"""Causal softmax attention: PyTorch SDPA with the FLASH, CUDNN and EFFICIENT backends, and flash-attn
FA2 (`flash_attn`) / FA3 (`flash_attn_interface`) where installed (docs/reference/peers.md#softmax-attention).

Every kernel here is called causal, with the scale passed explicitly (the reference benchmark's SDPA rows
forgot ``is_causal=True``, docs/reference/peers.md#pitfalls-of-the-reference-harness). SDPA takes
(B, H, T, D); flash-attn takes the suite's (B, T, H, D). FA3 returns ``out`` or ``(out, lse)`` depending on
its version: the output is taken by type, never by ``[0]`` (which would be batch element 0 of a bare
tensor).
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import torch
import torch.nn.functional as F

from tflabench.bench.adapters._common import (
    CHECK_POINT,
    NO_CUDA,
    PeerMapping,
    peer_availability,
    peer_spec,
    tokens_first,
)
from tflabench.bench.registry import Availability, KernelSpec, register
from tflabench.core import SweepPoint

FAMILY = "softmax_attention"

#: registered SDPA backends: kernel-name suffix -> torch.nn.attention.SDPBackend member
SDPA_BACKENDS = {"flash": "FLASH_ATTENTION", "cudnn": "CUDNN_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
#: the MATH backend (a reference only) is accepted by `sdpa_spec` but not registered
_ALL_SDPA_BACKENDS = {**SDPA_BACKENDS, "math": "MATH"}
#: backends that need equal q/k and v head dims (flash: PyTorch's FlashAttention-2 kernel; cuDNN: not
#: assumed to support Dqk != Dv across PyTorch versions), and those that take 16-bit inputs only
_EQUAL_HEAD_DIMS = ("flash", "cudnn")
_HALF_PRECISION_ONLY = ("flash", "cudnn")
_MAX_HEAD_DIM = 256
_EQUAL_DIMS_CHECK = replace(CHECK_POINT, head_dim_v=CHECK_POINT.head_dim_qk)


def _half_precision_reason(point: SweepPoint) -> str | None:
    if point.dtype not in ("float16", "bfloat16"):
        return f"needs float16 or bfloat16, not {point.dtype}"
    return None


def _head_dim_reason(point: SweepPoint, equal_dims: bool) -> str | None:
    if equal_dims and point.head_dim_qk != point.head_dim_v:
        return f"needs head_dim_qk == head_dim_v (got {point.head_dim_qk} and {point.head_dim_v})"
    dims = (point.head_dim_qk, point.head_dim_v)
    if max(dims) > _MAX_HEAD_DIM or any(dim % 8 for dim in dims):
        return f"head dims must be multiples of 8 and at most {_MAX_HEAD_DIM}"
    return None


# ------------------------------------------------------------------------------------------------ SDPA
def _sdpa_availability(backend: str):
    def availability() -> Availability:
        version = torch.__version__
        if not torch.cuda.is_available():
            return Availability(False, NO_CUDA, version)
        if backend == "flash" and not torch.backends.cuda.is_flash_attention_available():
            return Availability(False, "this PyTorch build has no FlashAttention kernel", version)
        if backend == "cudnn" and not torch.backends.cudnn.is_available():
            return Availability(False, "cuDNN is not available to this PyTorch build", version)
        return Availability(True, "", version)

    return availability


def _sdpa_mapping(backend: str, causal: bool) -> PeerMapping:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    member = getattr(SDPBackend, _ALL_SDPA_BACKENDS[backend])

    def to_native(neutral: dict, point: SweepPoint) -> dict:
        q, k, v = (tokens_first(neutral[name]) for name in ("q", "k", "v"))
        return {"q": q, "k": k, "v": v, "scale": neutral["scale"]}

    def call(arguments: dict) -> torch.Tensor:
        with sdpa_kernel(member):
            return F.scaled_dot_product_attention(
                arguments["q"], arguments["k"], arguments["v"], is_causal=causal, scale=arguments["scale"]
            )

    return PeerMapping(to_native, call, tokens_first, grad_inputs=("q", "k", "v"))


def sdpa_spec(backend: str, *, causal: bool = True, name: str | None = None) -> KernelSpec:
    """SDPA pinned to one backend ("flash", "cudnn", "efficient", or "math" for tests), not registered.

    ``causal=False`` builds the deliberately wrong adapter of the tests (full attention), which the
    reference check must reject.
    """
    if backend not in _ALL_SDPA_BACKENDS:
        raise ValueError(f"unknown SDPA backend {backend!r} (known: {', '.join(_ALL_SDPA_BACKENDS)})")
    equal_dims = backend in _EQUAL_HEAD_DIMS

    def unsupported(point: SweepPoint) -> str | None:
        half = _half_precision_reason(point) if backend in _HALF_PRECISION_ONLY else None
        return half or _head_dim_reason(point, equal_dims)

    return peer_spec(
        name or f"torch.sdpa.{backend}",
        FAMILY,
        _sdpa_mapping(backend, causal),
        _sdpa_availability(backend),
        package=None,
        uses_chunk_size=False,
        unsupported=unsupported,
        check_point=_EQUAL_DIMS_CHECK if equal_dims else CHECK_POINT,
        params={"backend": _ALL_SDPA_BACKENDS[backend], "causal": causal},
    )


# ------------------------------------------------------------------------------------------ flash-attn
def _flash_attn_mapping(module: str) -> PeerMapping:
    def to_native(neutral: dict, point: SweepPoint) -> dict:
        return {name: neutral[name] for name in ("q", "k", "v", "scale")}

    def call(arguments: dict) -> torch.Tensor:
        flash_attn_func = importlib.import_module(module).flash_attn_func
        result = flash_attn_func(
            arguments["q"], arguments["k"], arguments["v"], softmax_scale=arguments["scale"], causal=True
        )
        return result[0] if isinstance(result, tuple) else result

    return PeerMapping(to_native, call, lambda output: output, grad_inputs=("q", "k", "v"))


def _flash_attn_spec(name: str, module: str, availability, package: str | None) -> KernelSpec:
    def unsupported(point: SweepPoint) -> str | None:
        return _half_precision_reason(point) or _head_dim_reason(point, equal_dims=True)

    return peer_spec(
        name,
        FAMILY,
        _flash_attn_mapping(module),
        availability,
        package=package,
        uses_chunk_size=False,
        unsupported=unsupported,
        check_point=_EQUAL_DIMS_CHECK,
        params={"causal": True},
    )


for _backend in SDPA_BACKENDS:
    register(sdpa_spec(_backend))
register(_flash_attn_spec("flash_attn.fa2", "flash_attn", peer_availability("flash_attn", "flash-attn"),
                          "flash-attn"))
#: FA3 is built from flash-attention's hopper/ directory as the distribution `flash_attn_3` (no index release)
register(_flash_attn_spec("flash_attn_interface.fa3", "flash_attn_interface",
                          peer_availability("flash_attn_interface", "flash_attn_3"), "flash_attn_3"))
