"""Mamba (`mamba-ssm` 2.3.2.post1): the Mamba2 SSD Triton kernel `mamba_chunk_scan_combined`, and the Mamba-1
selective scan `selective_scan_fn` where its compiled CUDA extension exists (docs/reference/peers.md#mamba2,
docs/reference/peers.md#mamba-1-selective-scan).

`mamba_ssm/__init__.py` imports the compiled `selective_scan_cuda`, transformers and more, so the Triton
SSD ops are loaded without running it (`mamba_module`): the package object is created from its spec and
only the submodules are executed. In such a process `import mamba_ssm` gives that bare package object.

Mamba2 SSD: the point's head_dim_qk is the state size N, head_dim_v the head dim P; one group of B and C
(ngroups = 1, the Mamba2 modules' default); the step dt is passed already positive (``dt_softplus=False``)
and D is not used, so the kernel computes exactly the SSD of `tflabench.families.mamba2_ssd.reference`.
The output is the bare tensor the kernel returns without ``return_final_states`` (never ``[0]``,
docs/reference/peers.md#mamba2). Non-power-of-2 chunk sizes gave NaN upstream (mamba#449) and are skipped.

Mamba-1 selective scan is GLA with one head per channel (exact): channel d of state size N
has q = C_t, k = B_t, v = dt_t[d] u_t[d], per-state log decay g = dt_t[d] A[d, :] and scale 1. A point maps
to H * P channels of state size N = head_dim_qk; its reference check is the GLA reference of that view, and
it is registered in the "gla" family (its FLOP model is then nominal).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import torch
import torch.nn.functional as F

from tflabench.bench.adapters._common import (
    PeerMapping,
    family_inputs,
    installed_version,
    is_installed,
    is_power_of_two,
    peer_availability,
    peer_spec,
)
from tflabench.bench.registry import Availability, register
from tflabench.core import SweepPoint

DISTRIBUTION = "mamba-ssm"
SSD_MODULE = "ops.triton.ssd_combined"
SELECTIVE_SCAN_MODULE = "ops.selective_scan_interface"
NGROUPS = 1


def mamba_module(name: str):
    """Import ``mamba_ssm.<name>`` without executing ``mamba_ssm/__init__.py``."""
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        if spec is None:
            raise ModuleNotFoundError("No module named 'mamba_ssm'", name="mamba_ssm")
        sys.modules["mamba_ssm"] = importlib.util.module_from_spec(spec)
    return importlib.import_module(f"mamba_ssm.{name}")


# -------------------------------------------------------------------------------------------- Mamba2 SSD
def _ssd_to_native(neutral: dict, point: SweepPoint) -> dict:
    return {**{name: neutral[name] for name in ("x", "dt", "A", "B", "C")}, "chunk_size": point.chunk_size}


def _ssd_call(arguments: dict) -> torch.Tensor:
    scan = mamba_module(SSD_MODULE).mamba_chunk_scan_combined
    return scan(arguments["x"], arguments["dt"], arguments["A"], arguments["B"], arguments["C"],
                arguments["chunk_size"], D=None, dt_softplus=False)


def _ssd_unsupported(point: SweepPoint) -> str | None:
    if not is_power_of_two(point.chunk_size):
        return f"chunk_size must be a power of two (others gave NaN, mamba#449), got {point.chunk_size}"
    return None


SSD = PeerMapping(_ssd_to_native, _ssd_call, lambda output: output, grad_inputs=("x", "dt", "A", "B", "C"))


# ---------------------------------------------------------------------------------- Mamba-1 selective scan
def selective_scan_inputs(point: SweepPoint, device: torch.device) -> dict:
    """Random Mamba-1 inputs, tokens first: u, delta [B, T, D] with D = heads * head_dim_v channels;
    A [D, N] < 0 (float32); B, C [B, T, N] with N = head_dim_qk."""
    generator = torch.Generator(device=device)
    generator.seed()
    dtype = getattr(torch, point.dtype)
    batch, seq_len, state = point.batch, point.seq_len, point.head_dim_qk
    channels = point.heads * point.head_dim_v

    def normal(*shape: int, mean: float = 0.0) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, device=device) + mean

    return {"u": normal(batch, seq_len, channels).to(dtype),
            "delta": F.softplus(normal(batch, seq_len, channels, mean=-1.0)).to(dtype),
            "A": -torch.exp(normal(channels, state) * 0.5),
            "B": normal(batch, seq_len, state).to(dtype), "C": normal(batch, seq_len, state).to(dtype)}


def selective_scan_as_gla(inputs: dict) -> dict:
    """The GLA view of Mamba-1 inputs (float64, exact): q, k [B, T, D, N] (C and B for every channel),
    v [B, T, D, 1] = delta * u, g [B, T, D, N] = delta * A, scale 1."""
    delta, u, A, B, C = (inputs[name].to(torch.float64) for name in ("delta", "u", "A", "B", "C"))
    channels = u.shape[-1]

    def every_channel(x: torch.Tensor) -> torch.Tensor:
        return x[:, :, None, :].expand(-1, -1, channels, -1)

    return {"q": every_channel(C), "k": every_channel(B), "v": (delta * u)[..., None],
            "g": delta[..., None] * A, "scale": 1.0}


def _selective_scan_to_native(neutral: dict, point: SweepPoint) -> dict:
    channels_first = {name: neutral[name].transpose(1, 2) for name in ("u", "delta", "B", "C")}
    return {**channels_first, "A": neutral["A"]}


def _selective_scan_call(arguments: dict) -> torch.Tensor:
    scan = mamba_module(SELECTIVE_SCAN_MODULE).selective_scan_fn
    return scan(arguments["u"], arguments["delta"], arguments["A"], arguments["B"], arguments["C"])


def _channels_to_neutral(output: torch.Tensor) -> torch.Tensor:
    """(B, D, T) -> [B, T, D, 1]: one GLA head of value dim 1 per channel."""
    return output.transpose(1, 2)[..., None]


SELECTIVE_SCAN = PeerMapping(_selective_scan_to_native, _selective_scan_call, _channels_to_neutral,
                             grad_inputs=("u", "delta", "A", "B", "C"), family_view=selective_scan_as_gla)


def _selective_scan_availability() -> Availability:
    if is_installed("mamba_ssm") and not is_installed("selective_scan_cuda"):
        return Availability(False, "mamba-ssm's compiled CUDA extension selective_scan_cuda is not installed "
                            "(Mamba-1 needs it; the Triton SSD ops do not)", installed_version(DISTRIBUTION))
    return peer_availability(f"mamba_ssm.{SELECTIVE_SCAN_MODULE}", DISTRIBUTION,
                             lambda: mamba_module(SELECTIVE_SCAN_MODULE))()


register(peer_spec(
    "mamba_ssm.mamba2_ssd", "mamba2_ssd", SSD,
    peer_availability(f"mamba_ssm.{SSD_MODULE}", DISTRIBUTION, lambda: mamba_module(SSD_MODULE)),
    package=DISTRIBUTION, uses_chunk_size=True, unsupported=_ssd_unsupported,
    neutral_inputs=family_inputs("mamba2_ssd", ngroups=NGROUPS),
    params={"ngroups": NGROUPS, "dt_softplus": False, "cost_params": {"ngroups": NGROUPS}},
))
register(peer_spec(
    "mamba_ssm.selective_scan", "gla", SELECTIVE_SCAN, _selective_scan_availability,
    package=DISTRIBUTION, uses_chunk_size=False, neutral_inputs=selective_scan_inputs,
    params={"view": "GLA with heads * head_dim_v channels, key dim = state size, value dim 1"},
))
