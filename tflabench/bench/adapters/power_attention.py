"""Power attention: `retention.power_retention` (retention 1.0.7) of degrees 2 and 4, and the deprecated
`power_attention.power_full` (power-attention 1.4.4) as a fallback (docs/reference/peers.md#power-attention).

Degree 2 runs the chunked (state) form at the point's chunk size. Degree 4 runs the quadratic attention
form (chunk_size None): retention 1.0.7's state update raises NotImplementedError for any degree but 2.

Layout [B, T, H, D] with the log gate `log_G` [B, T, H] in float32; q, k and v share one head dim (the state
update requires it), one of 16, 32, 64, 128, 256. The scale is passed explicitly (1.0.7's docstring says it
defaults to 1, its code uses D^-1/2). The output is the gated power attention normalized by the sum of its
weights (`tflabench.families.power_attention.reference`; the layer norm the docstring mentions is not applied
by the code). A chunk size below the sequence length selects the chunked (state) form that is benchmarked.

retention 1.0.7 also installs a `power_attention` module, a shim re-exporting `power_retention`: the
fallback needs the power-attention distribution itself. power-attention imports `vidrial` at import, and
vidrial git-clones a CUTLASS fork on import unless a checkout already sits next to it: the fallback is
unavailable without such a checkout, so that an import never reaches the network. It is also unavailable
whenever `retention` works, its maintained successor.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import replace
from pathlib import Path

import torch

from tflabench.bench.adapters._common import (
    CHECK_POINT,
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

HEAD_DIMS = (16, 32, 64, 128, 256)
_MIN_CHUNK = 16
#: entry points: distribution -> (module, function)
ENTRY_POINTS = {
    "retention": ("retention", "power_retention"),
    "power-attention": ("power_attention", "power_full"),
}
#: degree -> whether it runs the chunked form (else the quadratic attention form)
CHUNKED = {2: True, 4: False}
DEGREES = tuple(CHUNKED)
_CHECK_POINT = replace(CHECK_POINT, head_dim_v=CHECK_POINT.head_dim_qk)


def _mapping(distribution: str) -> PeerMapping:
    module, function = ENTRY_POINTS[distribution]

    def to_native(neutral: dict, point: SweepPoint) -> dict:
        names = ("q", "k", "v", "log_g", "degree", "scale")
        return {**{name: neutral[name] for name in names}, "chunk_size": point.chunk_size}

    def call(arguments: dict) -> torch.Tensor:
        power = getattr(importlib.import_module(module), function)
        return power(arguments["q"], arguments["k"], arguments["v"], arguments["log_g"],
                     deg=arguments["degree"], scale=arguments["scale"], chunk_size=arguments["chunk_size"])

    return PeerMapping(to_native, call, lambda output: output, grad_inputs=("q", "k", "v", "log_g"))


#: distribution -> mapping
MAPPINGS = {distribution: _mapping(distribution) for distribution in ENTRY_POINTS}


def _unsupported(point: SweepPoint) -> str | None:
    if point.head_dim_qk != point.head_dim_v or point.head_dim_qk not in HEAD_DIMS:
        return f"needs head_dim_qk == head_dim_v in {HEAD_DIMS}"
    chunk = point.chunk_size
    if chunk is not None and (not is_power_of_two(chunk) or chunk < _MIN_CHUNK):
        return f"chunk_size must be a power of two >= {_MIN_CHUNK}, got {chunk}"
    return None


_retention_availability = peer_availability("retention", "retention")


def vidrial_would_clone() -> bool:
    """Whether importing vidrial (as power-attention does) would git-clone CUTLASS: it looks for a checkout
    in ``<site-packages>/cutlass`` or ``<site-packages>/vidrial/cutlass`` and clones into the latter."""
    try:
        spec = importlib.util.find_spec("vidrial")
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.submodule_search_locations:
        return False
    package = Path(next(iter(spec.submodule_search_locations)))
    return not ((package / "cutlass").exists() or (package.parent / "cutlass").exists())


def _power_attention_availability() -> Availability:
    version = installed_version("power-attention")
    if version is None:
        shim = is_installed("power_attention")
        note = " (the power_attention module here is retention's shim, without power_full)" if shim else ""
        return Availability(False, f"power-attention is not installed{note}")
    if _retention_availability().available:
        return Availability(False, "retention (the maintained successor) is available; power-attention is "
                            "only its fallback", version)
    if vidrial_would_clone():
        return Availability(False, "importing power-attention would git-clone CUTLASS (vidrial, no checkout "
                            "next to it): not attempted", version)
    return peer_availability("power_attention", "power-attention")()


#: Compile time of the first call on an H200 with Triton 3.6: > 200 s for degree 2
#: (docs/reference/peers.md#known-failures).
FIRST_CALL_S = 300.0


def _register() -> None:
    availabilities = {"retention": _retention_availability, "power-attention": _power_attention_availability}
    for distribution, availability in availabilities.items():
        module, function = ENTRY_POINTS[distribution]
        for degree in DEGREES:
            form = "chunked" if CHUNKED[degree] else "attention"
            register(peer_spec(
                f"{module}.{function}.deg{degree}", "power_attention", MAPPINGS[distribution], availability,
                package=distribution, uses_chunk_size=CHUNKED[degree], unsupported=_unsupported,
                neutral_inputs=family_inputs("power_attention", degree=degree), check_point=_CHECK_POINT,
                params={"degree": degree, "form": form, "cost_params": {"degree": degree, "form": form}},
                first_call_s=FIRST_CALL_S,
            ))


_register()
