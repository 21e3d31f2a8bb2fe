"""LightningAttention-2 (`lightning-attn` 0.0.5, `lightning_attn_func`;
docs/reference/peers.md#lightningattention-2).

Layout (B, H, T, D); the decay is given as slopes s (H, 1, 1) in float32, each step multiplying the state
by exp(-s_h); there is no query scale. The benchmark uses the package's ALiBi slopes (the neutral lightning
inputs' default log decay is minus those slopes). The slopes are always passed: in 0.0.5 the no-decay path
(``s=None``) raises UnboundLocalError for head dims up to 128. The chunk (block) size is fixed at 64.
"""

from __future__ import annotations

import torch

from tflabench.bench.adapters._common import (
    PeerMapping,
    is_power_of_two,
    peer_availability,
    peer_spec,
    tokens_first,
)
from tflabench.bench.registry import register
from tflabench.core import SweepPoint

DISTRIBUTION = "lightning-attn"
#: `is_support(d)` rejects head dims dividing 16 (for q/k and v); d=192 fails upstream (TransnormerLLM#9)
_REJECTED_DIM = 16
_MIN_HEAD_DIM_QK = 32


def _to_native(neutral: dict, point: SweepPoint) -> dict:
    q, k, v = (tokens_first(neutral[name]) for name in ("q", "k", "v"))
    slopes = (-neutral["log_decay"]).to(torch.float32).reshape(-1, 1, 1)
    return {"q": q, "k": k, "v": v, "s": slopes}


def _call(arguments: dict) -> torch.Tensor:
    from lightning_attn.ops import lightning_attn_func

    return lightning_attn_func(arguments["q"], arguments["k"], arguments["v"], arguments["s"])


def _unsupported(point: SweepPoint) -> str | None:
    if not is_power_of_two(point.head_dim_qk) or point.head_dim_qk < _MIN_HEAD_DIM_QK:
        return f"head_dim_qk must be a power of two >= {_MIN_HEAD_DIM_QK}, got {point.head_dim_qk}"
    if _REJECTED_DIM % point.head_dim_v == 0:
        return f"head_dim_v must not divide {_REJECTED_DIM} (is_support), got {point.head_dim_v}"
    return None


LIGHTNING_ATTN2 = PeerMapping(_to_native, _call, tokens_first, grad_inputs=("q", "k", "v"))

register(peer_spec(
    "lightning_attn.lightning_attn2", "lightning", LIGHTNING_ATTN2,
    peer_availability("lightning_attn.ops", DISTRIBUTION), package=DISTRIBUTION, uses_chunk_size=False,
    unsupported=_unsupported,
    params={"slopes": "ALiBi", "chunk_size": "64 (fixed)", "cost_params": {"implementation": "lightning2"}},
))
