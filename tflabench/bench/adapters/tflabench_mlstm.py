"""tflabench's own mLSTM kernels (`tflabench.kernels.mlstm`): mLSTMexp and mLSTMsig, each with the TFLA
xl_chunk, the single-level limit_chunk and the fused_chunk algorithm at the sweep's chunk size, and "auto"
(the package default: algorithm and chunk size chosen for the shape and the GPU, recorded in each row's
params as "choice"). Each row records ``recompute_states_in_bw`` (True: the backward recomputes the
chunk states, as `mlstm` does by default; xl_chunk's `keep-states` tiling: False; fused_chunk's forward
keeps none). xl_chunk and fused_chunk take the sweep's tiling variants
(`tflabench.kernels.mlstm.tilings`; the tiling is resolved with the inputs, outside the timed call, and
the correctness gate checks each tiling).

The kernels take the suite's layout, [B, T, H, D] with gate pre-activations [B, T, H], and start from
m_0 = 0; they are checked against the recurrent reference. mLSTMsig runs without normalizer (the paper's
form). Unlike the peers, they are also available on a CPU when Triton runs in interpreter mode
(TRITON_INTERPRET=1, which `tflabench sweep` sets on a machine without CUDA).
"""

from __future__ import annotations

import functools
import importlib
import os

import torch

from tflabench.bench.adapters._common import PeerMapping, describe, family_inputs, peer_spec
from tflabench.bench.registry import Availability, register
from tflabench.core import STATE_BYTES_OF_OPERANDS, SweepPoint
from tflabench.errors import InputError
from tflabench.kernels.mlstm import tilings
from tflabench.kernels.mlstm.tilings import TILED_ALGORITHMS

_API = "tflabench.kernels.mlstm.api"
#: The Triton kernels (importing the fused ones imports TFLA's too).
_KERNELS = "tflabench.kernels.mlstm.fused_chunk"
VARIANTS = ("exp", "sig")
#: algorithms run at the sweep's chunk size
ALGORITHMS = ("xl_chunk", "limit_chunk", "fused_chunk")


def _import_failure() -> str | None:
    """Why the Triton kernels cannot be imported, or None."""
    try:
        importlib.import_module(_KERNELS)
    except Exception as exc:
        return f"importing {_KERNELS} failed: {describe(exc)}"
    return None


def _availability() -> Availability:
    from tflabench import __version__

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        return Availability(False, "no CUDA device, and TRITON_INTERPRET=1 is not set (needed to run the "
                            "Triton kernels on a CPU)", __version__)
    failure = _import_failure()
    return Availability(failure is None, failure or "", __version__)


def _unsupported(variant: str, algorithm: str):
    def unsupported(point: SweepPoint) -> str | None:
        api = importlib.import_module(_API)
        for name, dim in (("head_dim_qk", point.head_dim_qk), ("head_dim_v", point.head_dim_v)):
            if not api.MIN_HEAD_DIM <= dim <= api.MAX_HEAD_DIM or dim % api.HEAD_DIM_MULTIPLE:
                return (f"{name} must be a multiple of {api.HEAD_DIM_MULTIPLE} from {api.MIN_HEAD_DIM} to "
                        f"{api.MAX_HEAD_DIM}, got {dim}")
        chunk = point.chunk_size
        if chunk is None:
            return None
        if chunk < api.MIN_CHUNK_SIZE or chunk & (chunk - 1):
            return f"chunk_size must be a power of two >= {api.MIN_CHUNK_SIZE}, got {chunk}"
        largest = api.ONE_TILE_CHUNK_MAX.get(algorithm, chunk)
        if chunk > largest:
            return f"{algorithm} holds a chunk in one SRAM tile: chunk_size <= {largest}"
        return _tiling_misfit(variant, algorithm, point)

    return unsupported


def _tiling_misfit(variant: str, algorithm: str, point: SweepPoint) -> str | None:
    """Why the point's tiling does not fit its shape, or None; InputError for a tiling that is unknown
    whatever the shape."""
    if point.tiling is None:
        return None
    tilings.overrides(point.tiling)
    try:
        _launch_options(variant, algorithm, point)
    except InputError as exc:
        return str(exc)
    return None


def _launch_options(variant: str, algorithm: str, point: SweepPoint) -> dict:
    """The launcher's tiling arguments of the point's tiling, its default tiling's where the point has none
    (also the kernel's `KernelSpec.resolved_tiling`)."""
    return tilings.launch_options(algorithm, point.tiling, chunk=point.chunk_size,
                                  head_dim_qk=point.head_dim_qk, head_dim_v=point.head_dim_v,
                                  variant=variant)


def _mapping(variant: str, algorithm: str, normalize: bool | None) -> PeerMapping:
    def to_native(neutral: dict, point: SweepPoint) -> dict:
        arguments = {**{name: neutral[name] for name in ("q", "k", "v", "i", "f", "eps")},
                     "chunk_size": point.chunk_size}
        if point.tiling is not None:
            arguments |= _launch_options(variant, algorithm, point)
        return arguments

    def call(arguments: dict) -> torch.Tensor:
        from tflabench.kernels import mlstm
        from tflabench.kernels.mlstm.api import triton_launcher

        if "tiling" in arguments:  # a tiling variant: its launcher, which takes the tiling
            return triton_launcher(algorithm)(**arguments, variant=variant, normalize=normalize)
        return mlstm(**arguments, variant=variant, algorithm=algorithm, normalize=normalize)

    return PeerMapping(to_native, call, lambda output: output, grad_inputs=("q", "k", "v", "i", "f"))


def _kept_states(variant: str):
    """point_params of xl_chunk: whether the backward recomputes the chunk states, as its launcher is
    called for the point's tiling (`_launch_options`; `keep-states`: no)."""
    def point_params(point: SweepPoint, device: torch.device) -> dict:
        options = {} if point.tiling is None else _launch_options(variant, "xl_chunk", point)
        return {"recompute_states_in_bw": options.get("recompute_states_in_bw", True)}

    return point_params


def _auto_choice(variant: str):
    """point_params of the "auto" kernel: what `mlstm` picks for the point on the device, with the reason."""
    def point_params(point: SweepPoint, device: torch.device) -> dict:
        from tflabench.kernels.mlstm.choice import Shape, choose_on_device

        shape = Shape(point.batch, point.seq_len, point.heads, point.head_dim_qk, point.head_dim_v)
        picked = choose_on_device(shape, device, variant=variant, training=point.mode == "fwdbw")
        return {"choice": picked.as_params()}

    return point_params


def _point_params(variant: str, algorithm: str):
    """The parameters a kernel decides per point: "auto"'s choice, xl_chunk's kept states, else None."""
    if algorithm == "auto":
        return _auto_choice(variant)
    return _kept_states(variant) if algorithm == "xl_chunk" else None


def _register() -> None:
    for variant in VARIANTS:
        normalize = None if variant == "exp" else False
        family = f"mlstm_{variant}"
        for algorithm in (*ALGORITHMS, "auto"):
            chunked = algorithm != "auto"
            register(peer_spec(
                f"tflabench.{family}.{algorithm}", family, _mapping(variant, algorithm, normalize),
                _availability, package=None, uses_chunk_size=chunked,
                unsupported=_unsupported(variant, algorithm), uses_tiling=algorithm in TILED_ALGORITHMS,
                neutral_inputs=family_inputs(family, normalize=normalize),
                params={"variant": variant, "algorithm": algorithm, "normalize": normalize,
                        "recompute_states_in_bw": True,
                        "cost_params": {"state_bytes": STATE_BYTES_OF_OPERANDS}},
                point_params=_point_params(variant, algorithm),
                resolved_tiling=(functools.partial(_launch_options, variant, algorithm)
                                 if algorithm in TILED_ALGORITHMS else None),
            ))


_register()
