"""Tensor helpers of the families' float64 references and random inputs.

Layout-neutral form (the layout of tflabench's own kernels and of FLA): tokens before heads,
q, k [B, T, H, Dqk], v [B, T, H, Dv], outputs [B, T, H, Dv]; per-token gates [B, T, H] (or [B, T, H, Dqk] for
GLA); per-head constants [H].
"""

from __future__ import annotations

import torch
from torch import Tensor

from tflabench.core import SweepPoint


def f64(*tensors: Tensor) -> list[Tensor]:
    """The tensors widened to float64 (exact for every low-precision input), detached."""
    return [t.detach().to(torch.float64) for t in tensors]


def causal_mask(seq_len: int, device) -> Tensor:
    """[T, T] boolean, True where key position j <= query position i."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


class InputSampler:
    """Fresh random tensors at the sizes of one sweep point, from one generator on one device."""

    def __init__(self, point: SweepPoint, device: torch.device, seed: int | None = None) -> None:
        self.point = point
        self.device = device
        self.generator = torch.Generator(device=device)
        if seed is None:
            self.generator.seed()
        else:
            self.generator.manual_seed(seed)

    def normal(self, *shape: int, mean: float = 0.0, dtype: torch.dtype = torch.float32) -> Tensor:
        """Standard normal values plus ``mean``, drawn in float32 and cast to ``dtype``."""
        values = torch.randn(*shape, generator=self.generator, device=self.device, dtype=torch.float32)
        return (values + mean).to(dtype)

    def operand(self, *shape: int) -> Tensor:
        """A matmul operand: standard normal in the point's dtype."""
        return self.normal(*shape, dtype=getattr(torch, self.point.dtype))

    def qkv(self) -> dict[str, Tensor]:
        """q, k [B, T, H, Dqk] and v [B, T, H, Dv] in the point's dtype."""
        p = self.point
        return {"q": self.operand(p.batch, p.seq_len, p.heads, p.head_dim_qk),
                "k": self.operand(p.batch, p.seq_len, p.heads, p.head_dim_qk),
                "v": self.operand(p.batch, p.seq_len, p.heads, p.head_dim_v)}

    def per_token(self, *trailing: int, mean: float = 0.0) -> Tensor:
        """float32 [B, T, H, *trailing] standard normal plus ``mean`` (gate pre-activations)."""
        p = self.point
        return self.normal(p.batch, p.seq_len, p.heads, *trailing, mean=mean)
