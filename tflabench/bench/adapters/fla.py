"""FLA (`fla-core` 0.6.0): chunk_gla, chunk_simple_gla and chunk_lightning_attn (docs/reference/peers.md#fla).

FLA takes the suite's layout, [B, T, H, D], and log-space gates in float32: `g` [B, T, H, K] per key
channel for GLA, [B, T, H] for simple GLA. Its default scale is K^-1/2; the scale is passed explicitly.
chunk_gla fixes its chunk size internally (min(64, max(16, next_pow2(T)))), so the chunk axis does not
apply to it. chunk_lightning_attn is simple GLA with the fixed decay -(8/H)(1 - layer_idx/num_layers) h of
head h (head 0 does not decay), not LightningAttention-2's ALiBi decay; it is called as layer 0 of 24, as
measured on the H200.

FLA refuses the backward of kernels with a per-token gate (`chunk_bwd_dqkwg`) on Hopper with
3.4.0 <= Triton < 3.7.1 (FLA #640) unless its TileLang backend is installed: chunk_simple_gla's fwdbw mode
is then unavailable with that reason. chunk_gla has its own backward and chunk_lightning_attn has no
per-token gate; neither is affected.
"""

from __future__ import annotations

import re

import torch

from tflabench.bench import references
from tflabench.bench.adapters._common import (
    PeerMapping,
    installed_version,
    is_installed,
    is_power_of_two,
    peer_availability,
    peer_spec,
)
from tflabench.bench.registry import register
from tflabench.core import STATE_BYTES_OF_OPERANDS, SweepPoint

DISTRIBUTION = "fla-core"
LIGHTNING_LAYER = {"layer_idx": 0, "num_layers": 24}
#: FLA's chunk kernels need at least one 16-token block (FLA #88)
_MIN_SEQ_LEN = 16
_MIN_CHUNK = 16
#: Triton versions [low, high) for which FLA 0.6.0 refuses chunk_bwd_dqkwg with a gate on Hopper
_REFUSING_TRITON = ((3, 4, 0), (3, 7, 1))
_HOPPER_MAJOR = 9


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def gated_backward_refusal() -> str | None:
    """Why FLA will refuse the gated backward on this machine (FLA #640), or None if it will run it."""
    triton_version = installed_version("triton")
    if triton_version is None or is_installed("tilelang") or not torch.cuda.is_available():
        return None
    low, high = _REFUSING_TRITON
    if not low <= _version_tuple(triton_version) < high:
        return None
    if torch.cuda.get_device_capability()[0] != _HOPPER_MAJOR:
        return None
    return (f"FLA refuses the gated backward (chunk_bwd_dqkwg) on Hopper with Triton {triton_version} "
            "(>= 3.4.0, < 3.7.1; FLA #640): needs Triton >= 3.7.1 or tilelang")


def _seq_len_reason(point: SweepPoint) -> str | None:
    if point.seq_len < _MIN_SEQ_LEN:
        return f"FLA chunk kernels need seq_len >= {_MIN_SEQ_LEN}"
    return None


def _chunk_reason(point: SweepPoint) -> str | None:
    if not is_power_of_two(point.chunk_size) or point.chunk_size < _MIN_CHUNK:
        return f"chunk_size must be a power of two >= {_MIN_CHUNK}, got {point.chunk_size}"
    return _seq_len_reason(point)


def _same_layout(names: tuple[str, ...], chunked: bool):
    """FLA's layout is the neutral one: pick the arguments (and the point's chunk size)."""

    def to_native(neutral: dict, point: SweepPoint) -> dict:
        arguments = {name: neutral[name] for name in names}
        if chunked:
            arguments["chunk_size"] = point.chunk_size
        return arguments

    return to_native


def _chunk_gla(arguments: dict) -> torch.Tensor:
    from fla.ops.gla import chunk_gla

    output, _ = chunk_gla(arguments["q"], arguments["k"], arguments["v"], arguments["g"],
                          scale=arguments["scale"])
    return output


def _chunk_simple_gla(arguments: dict) -> torch.Tensor:
    from fla.ops.simple_gla import chunk_simple_gla

    output, _ = chunk_simple_gla(arguments["q"], arguments["k"], arguments["v"], g=arguments["g"],
                                 scale=arguments["scale"], chunk_size=arguments["chunk_size"])
    return output


def _chunk_lightning_attn(arguments: dict) -> torch.Tensor:
    from fla.ops.lightning_attn import chunk_lightning_attn

    output, _ = chunk_lightning_attn(arguments["q"], arguments["k"], arguments["v"], scale=arguments["scale"],
                                     chunk_size=arguments["chunk_size"], **LIGHTNING_LAYER)
    return output


def _identity(output: torch.Tensor) -> torch.Tensor:
    return output


GLA = PeerMapping(_same_layout(("q", "k", "v", "g", "scale"), chunked=False), _chunk_gla, _identity,
                  grad_inputs=("q", "k", "v", "g"))
SIMPLE_GLA = PeerMapping(_same_layout(("q", "k", "v", "g", "scale"), chunked=True), _chunk_simple_gla,
                         _identity, grad_inputs=("q", "k", "v", "g"))
LIGHTNING = PeerMapping(_same_layout(("q", "k", "v", "scale"), chunked=True), _chunk_lightning_attn,
                        _identity, grad_inputs=("q", "k", "v"))


def lightning_log_decay(heads: int) -> torch.Tensor:
    """chunk_lightning_attn's per-head log decay [H] at `LIGHTNING_LAYER` (docs/reference/peers.md#fla)."""
    layer_fraction = LIGHTNING_LAYER["layer_idx"] / LIGHTNING_LAYER["num_layers"]
    return -(8 / heads) * (1 - layer_fraction) * torch.arange(heads, dtype=torch.float32)


def lightning_inputs(point: SweepPoint, device: torch.device) -> dict:
    """Neutral lightning inputs with FLA's decay and its default scale K^-1/2."""
    log_decay = lightning_log_decay(point.heads).to(device)
    scale = point.head_dim_qk**-0.5
    return references.random_inputs("lightning", point, device, log_decay=log_decay, scale=scale)


#: Compile + autotune time of the first call on an H200 with Triton 3.6: chunk_gla fwd+bwd 316 s in
#: results/h200/tfla-fig4 (warmup_s; other first calls 30-47 s there, part of their compilation cached by a
#: call cut off earlier); an earlier partial T = 8192 run had no result within 120 s / 60 s;
#: docs/reference/peers.md#known-failures: > 200 s.
FIRST_CALL_S = 300.0


#: FLA's forward stores the chunk states h in the inputs' dtype (fla-core 0.6.0: ``chunk_fwd_h(...,
#: states_in_fp32=False)`` in chunk_gla and chunk_simple_gla, which chunk_lightning_attn calls); its
#: backward recomputes them in fp32, which the cost model's fwd+bwd convention (3x the forward bytes) does
#: not separate.
STATES_IN_OPERAND_DTYPE = {"state_bytes": STATE_BYTES_OF_OPERANDS}


def _register() -> None:
    availability = peer_availability("fla.ops", DISTRIBUTION)
    refusal = gated_backward_refusal()
    register(peer_spec("fla.chunk_gla", "gla", GLA, availability, package=DISTRIBUTION, uses_chunk_size=False,
                       unsupported=_seq_len_reason,
                       params={"chunk_size": "64 (fixed inside FLA)", "cost_params": STATES_IN_OPERAND_DTYPE},
                       first_call_s=FIRST_CALL_S))
    register(peer_spec("fla.chunk_simple_gla", "simple_gla", SIMPLE_GLA, availability, package=DISTRIBUTION,
                       uses_chunk_size=True, unsupported=_chunk_reason,
                       params={"cost_params": STATES_IN_OPERAND_DTYPE},
                       mode_reasons={"fwdbw": refusal} if refusal else None, first_call_s=FIRST_CALL_S))
    register(peer_spec("fla.chunk_lightning_attn", "lightning", LIGHTNING, availability, package=DISTRIBUTION,
                       uses_chunk_size=True, unsupported=_chunk_reason, neutral_inputs=lightning_inputs,
                       params={**LIGHTNING_LAYER,
                               "cost_params": {"implementation": "fla", **STATES_IN_OPERAND_DTYPE}},
                       first_call_s=FIRST_CALL_S))


_register()
