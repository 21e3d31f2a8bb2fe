"""Derived columns of a results row: FLOPs and bytes from the family's cost model, achieved TFLOP/s and
GB/s, intensity, fraction of the roofline, and the runtime models' times.

They come from `tflabench.analysis` (FLOP/byte models, ceilings, roofline), imported when first needed;
they stay empty where the analysis layer cannot answer (unknown GPU, family parameters it does not model).
"""

from __future__ import annotations

from typing import Any

from tflabench.bench.registry import KernelSpec
from tflabench.core import DTYPE_BYTES, SweepPoint, resolved_state_bytes

_FORMULATION_OF_ALGORITHM = {"parallel": "parallel", "recurrent": "recurrent"}

#: the columns `Derivation.columns` fills
DERIVED_COLUMNS = ("flops", "bytes", "intensity", "tflops", "gbps", "roofline_frac_datasheet",
                   "roofline_frac_measured", "model_ms_additive", "model_ms_overlap")


class Derivation:
    """Derived columns: FLOPs and bytes from the family's cost model, achieved TFLOP/s and GB/s,
    intensity, fraction of the roofline under datasheet and measured ceilings, and the runtime models.

    Measured ceilings (a bf16 matmul and a copy) apply to bfloat16 points only. The runtime models use
    the measured ceilings where they apply, else the datasheet.
    """

    def __init__(self, gpu_name: str) -> None:
        self.gpu = self._lookup_gpu(gpu_name)
        self._ceilings: dict[str, tuple[Any, Any]] = {}

    @staticmethod
    def _lookup_gpu(gpu_name: str):
        if not gpu_name:
            return None
        try:
            from tflabench.analysis.hardware import gpu_from_device_name
        except ImportError:
            return None
        return gpu_from_device_name(gpu_name)

    def ceilings(self, dtype: str) -> tuple[Any, Any]:
        """(datasheet, measured) ceilings for dtype; None where unknown."""
        if self.gpu is None:
            return None, None
        if dtype not in self._ceilings:
            from tflabench.analysis.hardware import datasheet_ceilings, load_measured_ceilings

            measured = load_measured_ceilings(self.gpu.key) if dtype == "bfloat16" else None
            self._ceilings[dtype] = (datasheet_ceilings(self.gpu, dtype), measured)
        return self._ceilings[dtype]

    def columns(self, kernel: KernelSpec, point: SweepPoint, time_ms: float | None) -> dict[str, Any]:
        cost = _cost(kernel, point)
        if cost is None:
            return {}
        derived: dict[str, Any] = {"flops": cost.flops, "bytes": cost.bytes, "intensity": cost.intensity}
        if time_ms:
            seconds = time_ms * 1e-3
            derived |= {"tflops": cost.flops / seconds / 1e12, "gbps": cost.bytes / seconds / 1e9}
        derived |= self._roofline_columns(cost, point.dtype, time_ms)
        return derived

    def _roofline_columns(self, cost, dtype: str, time_ms: float | None) -> dict[str, Any]:
        try:
            from tflabench.analysis.roofline import attainable_flops, runtime_additive, runtime_overlap
        except ImportError:
            return {}
        datasheet, measured = self.ceilings(dtype)
        model = measured or datasheet
        if model is None:
            return {}
        columns = {"model_ms_additive": runtime_additive(cost, model) * 1e3,
                   "model_ms_overlap": runtime_overlap(cost, model) * 1e3}
        if time_ms:
            achieved = cost.flops / (time_ms * 1e-3)
            fractions = {"roofline_frac_datasheet": datasheet, "roofline_frac_measured": measured}
            for name, ceilings in fractions.items():
                if ceilings is not None:
                    columns[name] = achieved / attainable_flops(ceilings, cost.intensity)
        return columns


def cost_arguments(kernel: KernelSpec, dtype: str) -> dict[str, Any]:
    """Keyword arguments of `kernel_cost` beyond the point: ``params["cost_params"]``, plus the mLSTM
    formulation implied by ``params["algorithm"]`` and full attention for ``params["causal"] is False``.
    ``state_bytes: "operand"`` (a kernel that stores its chunk states in the input dtype) becomes the bytes
    of ``dtype``."""
    arguments = dict(kernel.params.get("cost_params", {}))
    if "state_bytes" in arguments:
        arguments["state_bytes"] = resolved_state_bytes(arguments["state_bytes"], dtype)
    algorithm = kernel.params.get("algorithm")
    if kernel.family.startswith("mlstm") and algorithm in _FORMULATION_OF_ALGORITHM:
        arguments.setdefault("formulation", _FORMULATION_OF_ALGORITHM[algorithm])
    if kernel.params.get("causal") is False:
        arguments.setdefault("causal_factor", 1.0)
    return arguments


def _cost(kernel: KernelSpec, point: SweepPoint):
    """The family's Cost of one call at this point, or None (analysis missing or model refuses)."""
    try:
        from tflabench.analysis.models import kernel_cost
    except ImportError:
        return None
    params = cost_arguments(kernel, point.dtype)
    try:
        return kernel_cost(kernel.family, batch=point.batch, seq_len=point.seq_len, heads=point.heads,
                           head_dim_qk=point.head_dim_qk, head_dim_v=point.head_dim_v,
                           chunk_size=point.chunk_size, mode=point.mode,
                           dtype_bytes=DTYPE_BYTES[point.dtype], **params)
    except (ValueError, TypeError):
        return None
