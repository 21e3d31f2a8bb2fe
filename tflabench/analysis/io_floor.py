"""The IO floor of an mLSTM call and the per-group comparison of our kernels with the reference.

The floor is the least time any implementation can take when every input is read from HBM once and every
output written once, at the GPU's measured copy bandwidth β (docs/reference/io-floor.md). Per
call, with N = B·T·H and e bytes per element of the input dtype (the gates i, f in the input dtype):
forward e·N·(2·Dqk + 2·Dv + 2) bytes (q, k, v, i, f read, h written); forward + backward adds
e·N·(4·Dqk + 3·Dv + 4) (q, k, v, i, f read again, dh read, dq, dk, dv, di, df written).

`mlstm_groups` compares, per (shape, mode) group of a run, the best row of each of our kernels (over chunk
sizes and algorithms) with the best row of the reference TFLA kernel, the other variant, the default
choice ("auto") and FLA's chunk_simple_gla: the ratios the kernel targets are stated in.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd

from tflabench.core import DTYPE_BYTES

MLSTM_FAMILIES = ("mlstm_sig", "mlstm_exp")
OURS, REFERENCE, FLA = "tflabench.", "mlstm_kernels.mlstm_sig.xl_chunk", "fla.chunk_simple_gla"
GROUP_KEYS = ("seq_len", "batch", "heads", "head_dim_qk", "head_dim_v", "dtype", "mode")


def io_floor_bytes(batch: int, seq_len: int, heads: int, head_dim_qk: int, head_dim_v: int, mode: str,
                   dtype_bytes: float) -> float:
    """Bytes any implementation must move for one call (module docstring)."""
    tokens = batch * seq_len * heads
    forward = dtype_bytes * tokens * (2 * head_dim_qk + 2 * head_dim_v + 2)
    if mode == "fwd":
        return forward
    return forward + dtype_bytes * tokens * (4 * head_dim_qk + 3 * head_dim_v + 4)


def io_floor_ms(row: Mapping, bandwidth: float) -> float:
    """The floor of a results row (a Series or dict with the point's columns) at β bytes/s, in ms."""
    dims = (int(row[name]) for name in ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v"))
    nbytes = io_floor_bytes(*dims, row["mode"], DTYPE_BYTES[row["dtype"]])
    return nbytes / bandwidth * 1e3


def with_io_floor(measured: pd.DataFrame, bandwidth: float) -> pd.DataFrame:
    """The mLSTM rows of ``measured`` with columns floor_ms and x_io_floor (time / floor)."""
    rows = measured[measured["family"].isin(MLSTM_FAMILIES)].copy()
    rows["floor_ms"] = [io_floor_ms(row, bandwidth) for _, row in rows.iterrows()]
    rows["x_io_floor"] = rows["time_ms"] / rows["floor_ms"]
    return rows


def row_configuration(row) -> str:
    """What ran: the chunk size, or for a kernel that chooses by itself its choice (row params)."""
    params = json.loads(row.params) if isinstance(row.params, str) and row.params else {}
    picked = params.get("choice")
    if picked:
        return f"{picked['algorithm']} L={picked['chunk_size']}"
    return f"L={int(row.chunk_size)}" if pd.notna(row.chunk_size) else ""


def _best(group: pd.DataFrame, mask) -> pd.Series | None:
    rows = group[mask]
    return None if rows.empty else rows.loc[rows["time_ms"].idxmin()]


def _ratio(numerator: pd.Series | None, denominator: pd.Series | None, column: str = "time_ms") -> float:
    if numerator is None or denominator is None:
        return float("nan")
    value, base = numerator[column], denominator[column]
    return float(value / base) if pd.notna(value) and pd.notna(base) and base > 0 else float("nan")


def mlstm_groups(measured: pd.DataFrame, bandwidth: float | None) -> pd.DataFrame:
    """One row per (shape, mode) group with our mLSTMsig kernels: the best rows and the target ratios.

    Columns: the GROUP_KEYS; ours (kernel and configuration of our fastest mLSTMsig row), ours_ms,
    ours_x_floor (NaN without a bandwidth); ours_over_reference, exp_over_sig (our best of each variant),
    auto_over_best_sig / auto_over_best_exp (the "auto" row over our best explicit row of that variant),
    over_fla (forward only), memory_over_reference (peak memory of the two best rows).
    """
    records = []
    for keys, group in measured.groupby(list(GROUP_KEYS), sort=True):
        kernel = group["kernel"]
        ours = kernel.str.startswith(OURS)
        sig, exp = ours & (group["family"] == "mlstm_sig"), ours & (group["family"] == "mlstm_exp")
        auto = kernel.str.endswith(".auto")
        best_sig = _best(group, sig)
        if best_sig is None:
            continue
        reference = _best(group, kernel == REFERENCE)
        record = dict(zip(GROUP_KEYS, keys, strict=True))
        record |= {
            "ours": f"{best_sig['kernel'].removeprefix(OURS)} {row_configuration(best_sig)}",
            "ours_ms": best_sig["time_ms"],
            "ours_x_floor": (best_sig["time_ms"] / io_floor_ms(best_sig, bandwidth)) if bandwidth else
            float("nan"),
            "reference_ms": reference["time_ms"] if reference is not None else float("nan"),
            "ours_over_reference": _ratio(best_sig, reference),
            "exp_over_sig": _ratio(_best(group, exp), best_sig),
            "auto_over_best_sig": _ratio(_best(group, sig & auto), _best(group, sig & ~auto)),
            "auto_over_best_exp": _ratio(_best(group, exp & auto), _best(group, exp & ~auto)),
            "over_fla": _ratio(best_sig, _best(group, kernel == FLA)),
            "memory_over_reference": _ratio(best_sig, reference, "peak_mem_mib"),
        }
        records.append(record)
    return pd.DataFrame.from_records(records)
