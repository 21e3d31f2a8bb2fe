"""The problem shape of the mLSTM kernel tests, shared by the CPU suite (`test_mlstm_triton.py`, tiny
float32 shapes under the interpreter) and the GPU suite (`test_mlstm_triton_gpu.py`, bf16 at real sizes)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """q, k [batch, seq_len, heads, head_dim_qk]; v [batch, seq_len, heads, head_dim_v]."""

    batch: int
    seq_len: int
    heads: int
    head_dim_qk: int
    head_dim_v: int
