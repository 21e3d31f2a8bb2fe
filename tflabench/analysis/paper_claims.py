"""The TFLA paper's statements about its kernel benchmarks, checked against the measured rows of a run.

Source: docs/reference/paper-numbers.md#claims-checked-by-the-report (Figs. 4, 5 and 13), with the paper's own
numbers from its data (docs/reference/paper-numbers.md#published-numbers). Each `Claim` looks for the rows it
needs in the run (status ok, Fig. 4's 65,536-token configuration, or Fig. 5's chunk sweep) and says whether
the statement holds there, with the measured numbers; a run without those rows leaves the claim out. A claim
about our own mLSTM kernels is checked on the ``tflabench.*`` kernels (the paper's were mlstm_kernels'); one
about FlashAttention uses FA3 when the run has it, else causal cuDNN attention.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

#: Fig. 4: 65,536 tokens per batch, our mLSTM kernels at 16 heads x 128/256
FIG4_TOKENS = 65536
FIG4_SEQ_LEN = 8192
SIG_XL, EXP_XL, EXP_LIMIT = ("tflabench.mlstm_sig.xl_chunk", "tflabench.mlstm_exp.xl_chunk",
                             "tflabench.mlstm_exp.limit_chunk")
ATTENTION = ("flash_attn_interface.fa3", "torch.sdpa.cudnn")


@dataclass(frozen=True)
class Verdict:
    holds: bool
    measured: str


@dataclass(frozen=True)
class Claim:
    """statement: the paper's words; paper: what its own data shows; check: the verdict on a run's
    measured rows, or None when the run lacks them."""

    figure: str
    statement: str
    paper: str
    check: Callable[[pd.DataFrame], Verdict | None]


def fig4_times(measured: pd.DataFrame, kernel: str, mode: str) -> pd.Series:
    """Best median ms of ``kernel`` per sequence length over Fig. 4's constant-token rows (empty if none)."""
    rows = measured[(measured["kernel"] == kernel) & (measured["mode"] == mode)
                    & (measured["batch"] * measured["seq_len"] == FIG4_TOKENS)]
    if kernel.startswith("tflabench.mlstm"):
        rows = rows[(rows["heads"] == 16) & (rows["head_dim_qk"] == 128) & (rows["head_dim_v"] == 256)]
    return rows.groupby("seq_len")["time_ms"].min()


def _at(times: pd.Series, seq_len: int = FIG4_SEQ_LEN) -> float | None:
    return float(times[seq_len]) if seq_len in times.index else None


def _xl_vs_limit(measured: pd.DataFrame) -> Verdict | None:
    xl, limit = (_at(fig4_times(measured, kernel, "fwdbw")) for kernel in (EXP_XL, EXP_LIMIT))
    if xl is None or limit is None:
        return None
    speedup = limit / xl
    return Verdict(speedup >= 1.2, f"{limit:.2f} → {xl:.2f} ms, {speedup:.2f}× at T = 8192 (fwd+bwd)")


def _sig_vs_exp(measured: pd.DataFrame) -> Verdict | None:
    sig, exp = (_at(fig4_times(measured, kernel, "fwd")) for kernel in (SIG_XL, EXP_XL))
    if sig is None or exp is None:
        return None
    saved = 1 - sig / exp
    return Verdict(saved > 0.3, f"{exp:.2f} → {sig:.2f} ms, {saved:.0%} less time at T = 8192 (forward)")


def _mamba_and_simple_gla_forward(measured: pd.DataFrame) -> Verdict | None:
    sig = _at(fig4_times(measured, SIG_XL, "fwd"))
    peers = (("Mamba2", "mamba_ssm.mamba2_ssd"), ("Simple GLA", "fla.chunk_simple_gla"))
    others = {name: _at(fig4_times(measured, kernel, "fwd")) for name, kernel in peers}
    if sig is None or any(time is None for time in others.values()):
        return None
    holds = all(sig - 1.0 <= time < sig for time in others.values())
    parts = ", ".join(f"{name} {time:.2f} ms" for name, time in others.items())
    return Verdict(holds, f"mLSTMsig {sig:.2f} ms, {parts} at T = 8192 (forward)")


def _faster_than_attention(measured: pd.DataFrame) -> Verdict | None:
    sig = fig4_times(measured, SIG_XL, "fwdbw")
    for attention in ATTENTION:
        other = fig4_times(measured, attention, "fwdbw")
        common = sig.index.intersection(other.index)
        if len(common) >= 2:
            break
    else:
        return None
    faster = (sig[common] < other[common]).sort_index()
    shortest, longest = faster.index[0], faster.index[-1]
    if not faster.iloc[-1]:
        return Verdict(False, f"mLSTMsig is slower than {attention} at the longest T = {longest}")
    slower_at = faster.index[~faster.to_numpy()]
    start = faster.index[faster.index > slower_at[-1]][0] if len(slower_at) else shortest
    ratio = other[longest] / sig[longest]
    return Verdict(True, f"faster than {attention} (causal) from T = {start} on ({ratio:.1f}× at T = "
                         f"{longest}; measured T = {shortest} ... {longest})")


def _twice_mamba(measured: pd.DataFrame) -> Verdict | None:
    sig, mamba = fig4_times(measured, SIG_XL, "fwdbw"), fig4_times(measured, "mamba_ssm.mamba2_ssd", "fwdbw")
    common = sig.index.intersection(mamba.index)
    if not len(common):
        return None
    ratios = mamba[common] / sig[common]
    worst = ratios.idxmin()
    return Verdict(bool((ratios > 2).all()), f"{ratios.min():.2f}× (T = {worst}) to {ratios.max():.2f}× "
                                             f"(T = {ratios.idxmax()}), against the bare SSD scan")


def _chunk_optimum(measured: pd.DataFrame) -> Verdict | None:
    rows = measured[(measured["kernel"] == SIG_XL) & (measured["mode"] == "fwdbw")
                    & (measured["heads"] == 8) & (measured["head_dim_v"] == 512)
                    & (measured["seq_len"] == 8192) & (measured["batch"] == 8)]
    if rows["chunk_size"].nunique() < 2:
        return None
    best = rows.loc[rows["time_ms"].idxmin()]
    chunk = int(best["chunk_size"])
    swept = ", ".join(str(int(size)) for size in sorted(rows["chunk_size"].unique()))
    return Verdict(128 <= chunk <= 256, f"L = {chunk} ({best['time_ms']:.2f} ms) of {swept}")


def _lightning_three_times_slower(measured: pd.DataFrame) -> Verdict | None:
    sig = _at(fig4_times(measured, SIG_XL, "fwdbw"))
    lightning = _at(fig4_times(measured, "lightning_attn.lightning_attn2", "fwdbw"))
    if sig is None or lightning is None:
        return None
    return Verdict(lightning > 3 * sig, f"LightningAttention-2 (32 × 128) {lightning:.2f} ms vs mLSTMsig "
                                        f"{sig:.2f} ms: {lightning / sig:.1f}× at T = 8192 (fwd+bwd)")


CLAIMS = (
    Claim("Fig. 4", "mLSTMexp TFLA xl_chunk is about 25% faster than limit_chunk",
          "20.02 → 15.23 ms, 1.31× (fwd+bwd, T = 8192); held here if ≥ 1.2×", _xl_vs_limit),
    Claim("Fig. 4", "the mLSTMsig TFLA forward is over 30% faster than the mLSTMexp TFLA forward",
          "6.37 → 4.39 ms, 31% less time (T = 8192)", _sig_vs_exp),
    Claim("Fig. 4", "forward only: Mamba 2 and Simple GLA are slightly faster than mLSTMsig, within 1 ms",
          "Mamba 2 3.63, Simple GLA 3.54, mLSTMsig 4.39 ms (T = 8192)", _mamba_and_simple_gla_forward),
    Claim("Fig. 4", "forward+backward: TFLA is faster than FlashAttention 3 for longer sequences",
          "mLSTMsig faster than FA3 from T = 1024 on", _faster_than_attention),
    Claim("Fig. 4", "forward+backward: TFLA is more than 2× faster than Mamba 2 for all sequence lengths",
          "2.2× at T = 512 down to 1.8× at T = 65,536 (the whole Mamba2 mixer)", _twice_mamba),
    Claim("Fig. 5", "the empirical runtime-optimal chunk size lies between 128 and 256",
          "mLSTMsig fwd+bwd, 8 × 256/512, T = 8192, B = 8: 18.96 ms at L = 128, 18.89 at 256",
          _chunk_optimum),
    Claim("Fig. 13", "LightningAttention2 is more than 3× slower than mLSTMsig TFLA",
          "55.79 ms vs mLSTMsig at L = 256 (fwd+bwd, T = 8192)", _lightning_three_times_slower),
)


def check_claims(measured: pd.DataFrame) -> list[tuple[Claim, Verdict]]:
    """The claims the run can check (its measured rows: status ok; bfloat16 ones, as in the paper), with
    their verdicts."""
    measured = measured[measured["dtype"] == "bfloat16"]
    checked = ((claim, claim.check(measured)) for claim in CLAIMS)
    return [(claim, verdict) for claim, verdict in checked if verdict is not None]
