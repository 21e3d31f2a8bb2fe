"""The reference TFLA kernels (`mlstm-kernels` 2.0.6; docs/reference/peers.md#reference-tfla-kernels).

Kernels: mLSTMexp and mLSTMsig xl_chunk (TFLA), mLSTMexp limit_chunk, and the quadratic mLSTMexp kernel
`mlstm_parallel__limit_headdim`. Layout (B, H, T, D) with gate pre-activations (B, H, T); the query scale is
fixed at Dqk^-1/2 inside. mLSTMsig is called with ``normalize=False`` (the paper's benchmark form; the
package defaults to True). The chunkwise kernels start from m_0 = 0, run with the package's
``recompute_states_in_bw=True`` (recorded in each row's params) and are checked against the recurrent
reference; the parallel kernel has no initial state (m_0 = -inf) and is checked against the parallel form.

Known failure: on Hopper with Triton 3.6, compiling the mLSTMexp xl_chunk kernel aborts the process (LLVM
SLPVectorizer assertion, docs/reference/peers.md#known-failures). The kernel stays available: the harness's
worker process isolation records the crash.
"""

from __future__ import annotations

import importlib
from dataclasses import replace

import torch

from tflabench.bench.adapters._common import (
    CHECK_POINT,
    PeerMapping,
    family_inputs,
    is_power_of_two,
    peer_availability,
    peer_spec,
    tokens_first,
)
from tflabench.bench.registry import register
from tflabench.core import SweepPoint

DISTRIBUTION = "mlstm-kernels"
_PACKAGE = "mlstm_kernels.torch"
#: entry points: kernel name suffix -> (module, function)
ENTRY_POINTS = {
    "mlstm_exp.xl_chunk": ("chunkwise.triton_xl_chunk", "mlstm_chunkwise__xl_chunk"),
    "mlstm_sig.xl_chunk": ("chunkwise.triton_xl_chunk_siging", "mlstm_siging_chunkwise__xl_chunk"),
    "mlstm_exp.limit_chunk": ("chunkwise.triton_limit_chunk", "mlstm_chunkwise__limit_chunk"),
    "mlstm_exp.parallel": ("parallel.triton_limit_headdim", "mlstm_parallel__limit_headdim"),
}
#: xl_chunk: below this sequence length the kernel ignores the chunk size and uses the whole sequence
_XL_MIN_CHUNKED_SEQ_LEN = 128
_XL_BLOCK = 64
_MIN_BLOCK = 16
_LIMIT_CHUNK_MAX = 128
_PARALLEL_HEAD_DIMS = (16, 32, 64, 128, 256)


def _entry(suffix: str):
    module, function = ENTRY_POINTS[suffix]
    return getattr(importlib.import_module(f"{_PACKAGE}.{module}"), function)


def _mapping(suffix: str, options: dict, chunked: bool) -> PeerMapping:
    def to_native(neutral: dict, point: SweepPoint) -> dict:
        arguments = {name: tokens_first(neutral[name]) for name in ("q", "k", "v", "i", "f")}
        arguments["eps"] = neutral["eps"]
        if chunked:
            arguments["chunk_size"] = point.chunk_size
        return arguments

    def call(arguments: dict) -> torch.Tensor:
        return _entry(suffix)(**arguments, **options)

    return PeerMapping(to_native, call, tokens_first, grad_inputs=("q", "k", "v", "i", "f"))


def _xl_chunk_unsupported(point: SweepPoint) -> str | None:
    T, L = point.seq_len, point.chunk_size
    if T % _MIN_BLOCK:
        return f"seq_len must be a multiple of {_MIN_BLOCK}"
    if T < _XL_MIN_CHUNKED_SEQ_LEN and (L != T or not is_power_of_two(T)):
        return f"below seq_len {_XL_MIN_CHUNKED_SEQ_LEN} the kernel runs one chunk: chunk_size must equal it"
    if not is_power_of_two(L) or L < _MIN_BLOCK or (L > _XL_BLOCK and L % _XL_BLOCK):
        return f"chunk_size must be a power of two >= {_MIN_BLOCK}, got {L}"
    return None


def _limit_chunk_unsupported(point: SweepPoint) -> str | None:
    L = point.chunk_size
    if not is_power_of_two(L) or not _MIN_BLOCK <= L <= _LIMIT_CHUNK_MAX:
        return f"chunk_size must be a power of two in [{_MIN_BLOCK}, {_LIMIT_CHUNK_MAX}], got {L}"
    return None


def _parallel_unsupported(point: SweepPoint) -> str | None:
    if point.head_dim_qk != point.head_dim_v or point.head_dim_qk not in _PARALLEL_HEAD_DIMS:
        return f"needs head_dim_qk == head_dim_v in {_PARALLEL_HEAD_DIMS}"
    return None


#: kernel name suffix -> mapping (mLSTMsig without normalizer; the parallel kernel has no chunk size)
MAPPINGS = {
    "mlstm_exp.xl_chunk": _mapping("mlstm_exp.xl_chunk", {}, chunked=True),
    "mlstm_sig.xl_chunk": _mapping("mlstm_sig.xl_chunk", {"normalize": False}, chunked=True),
    "mlstm_exp.limit_chunk": _mapping("mlstm_exp.limit_chunk", {}, chunked=True),
    "mlstm_exp.parallel": _mapping("mlstm_exp.parallel", {}, chunked=False),
}


def _register() -> None:
    availability = peer_availability(f"{_PACKAGE}.chunkwise", DISTRIBUTION)
    exp_inputs = family_inputs("mlstm_exp")
    chunkwise = {"package": DISTRIBUTION, "uses_chunk_size": True}
    register(peer_spec(
        "mlstm_kernels.mlstm_exp.xl_chunk", "mlstm_exp", MAPPINGS["mlstm_exp.xl_chunk"], availability,
        **chunkwise, unsupported=_xl_chunk_unsupported, neutral_inputs=exp_inputs,
        params={"algorithm": "xl_chunk", "recompute_states_in_bw": True},
    ))
    register(peer_spec(
        "mlstm_kernels.mlstm_sig.xl_chunk", "mlstm_sig", MAPPINGS["mlstm_sig.xl_chunk"], availability,
        **chunkwise, unsupported=_xl_chunk_unsupported,
        neutral_inputs=family_inputs("mlstm_sig", normalize=False),
        params={"algorithm": "xl_chunk", "normalize": False, "recompute_states_in_bw": True},
    ))
    register(peer_spec(
        "mlstm_kernels.mlstm_exp.limit_chunk", "mlstm_exp", MAPPINGS["mlstm_exp.limit_chunk"], availability,
        **chunkwise, unsupported=_limit_chunk_unsupported, neutral_inputs=exp_inputs,
        params={"algorithm": "limit_chunk", "recompute_states_in_bw": True},
    ))
    register(peer_spec(
        "mlstm_kernels.mlstm_exp.parallel", "mlstm_exp", MAPPINGS["mlstm_exp.parallel"], availability,
        package=DISTRIBUTION, uses_chunk_size=False, unsupported=_parallel_unsupported,
        neutral_inputs=family_inputs("mlstm_exp", formulation="parallel"),
        check_point=replace(CHECK_POINT, head_dim_v=CHECK_POINT.head_dim_qk),
        params={"algorithm": "parallel"},
    ))


_register()
