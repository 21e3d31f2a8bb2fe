"""Shared vocabulary of tflabench: kernel families, modes, dtypes and their byte sizes, the sweep point.

Every other package (families, bench, analysis) imports from here; this module imports nothing of
tflabench.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Kernel families: each is one module `tflabench.families.<name>` (float64 reference, random inputs,
#: FLOP/byte model, default chunk size). A new family is one new module plus its name here.
FAMILIES = (
    "mlstm_exp",
    "mlstm_sig",
    "softmax_attention",
    "gla",
    "simple_gla",
    "lightning",
    "mamba2_ssd",
    "power_attention",
)

MODES = ("fwd", "fwdbw")

#: Bytes per element of the dtypes a sweep runs (torch dtype names).
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
DTYPES = tuple(DTYPE_BYTES)
#: Input dtypes of the analysis commands (roofline, optimal chunk): the sweep's plus tfloat32, float32
#: inputs on TF32 tensor cores (its own peak, 4 bytes per element).
PEAK_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "tfloat32": 4, "float32": 4}

#: ``cost_params["state_bytes"]`` of a kernel whose materialized chunk states have the inputs' dtype
STATE_BYTES_OF_OPERANDS = "operand"


def resolved_state_bytes(recorded: int | float | str, dtype: str) -> int | float:
    """A kernel's recorded ``cost_params["state_bytes"]`` in bytes: a number as it is, or
    `STATE_BYTES_OF_OPERANDS` as the bytes of ``dtype``, the inputs' dtype."""
    return DTYPE_BYTES[dtype] if recorded == STATE_BYTES_OF_OPERANDS else recorded


@dataclass(frozen=True)
class SweepPoint:
    """One measurement point. Layout-neutral: adapters map it to their peer's layout.

    chunk_size is None for kernels without a chunk parameter (softmax attention). tiling: the kernel's
    tiling variant for kernels with a tiling parameter (our xl_chunk and fused_chunk kernels,
    `tflabench.kernels.mlstm.tilings`), None for the kernel's own choice; results.csv records it in the
    row's params.
    """

    batch: int
    seq_len: int
    heads: int
    head_dim_qk: int
    head_dim_v: int
    chunk_size: int | None
    dtype: str = "bfloat16"
    mode: str = "fwd"
    tiling: str | None = None

    def key(self) -> str:
        """Stable string used for resume bookkeeping (the tiling appended when there is one)."""
        key = (
            f"B{self.batch}-T{self.seq_len}-H{self.heads}-dqk{self.head_dim_qk}-dv{self.head_dim_v}"
            f"-L{self.chunk_size}-{self.dtype}-{self.mode}"
        )
        return key if self.tiling is None else f"{key}-tiling[{self.tiling}]"
