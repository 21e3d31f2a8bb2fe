"""The TFLA paper's published kernel benchmarks (H100 80GB) as data, and their comparison with a run.

Source: docs/reference/paper-numbers.md#published-numbers (the paper's result tables, shipped by the
reference repository): Fig. 4 runtimes per sequence length (forward and forward+backward) and peak memory at
T = 8192, Fig. 5 chunk sizes, Fig. 12 FLA kernels, the LightningAttention2 rows of Fig. 13 (the mLSTM rows
there do not state d_qk) and Fig. 14 head dims. All of them: H100 80GB, PyTorch 2.5.1, Triton 3.1.0,
bfloat16; runtimes are medians in ms, memory absolute peaks in GB (1e9 bytes).

`paper_comparison` matches the measured rows of a run to these numbers on kernel, mode, dtype, batch,
sequence length, heads and head dims, and the chunk size of the kernels the paper publishes per chunk size
(the mLSTM kernels); everything else that differs is written into a ``difference`` note.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pandas as pd

PAPER_GPU = "NVIDIA H100 80GB"
#: hardware-DB entry of the paper's GPU (its Table 18 figures)
PAPER_GPU_KEY = "h100-sxm"
PAPER_TRITON = "3.1.0"
PAPER_DTYPE = "bfloat16"
DOCUMENT = "docs/reference/paper-numbers.md"
#: joins the parts of a ``difference`` note (no part contains it)
NOTE_SEPARATOR = "; "

#: Differences between the paper's method and tflabench's that hold for every compared row.
METHOD_NOTES = (
    "Timing: the paper's harness called `torch.cuda.empty_cache()` after every timed iteration, so each "
    "timed call re-allocated its workspaces (docs/reference/paper-numbers.md#measurement-method); tflabench "
    "keeps the allocator warm. Both flush the L2 with a 256 MB buffer and report the median.",
    "Memory: the published peaks are absolute (inputs, outputs and the 256 MB flush buffer included); "
    "tflabench's `peak_mem_mib` is the increase over the memory allocated before the call (inputs "
    "excluded), so it is smaller by about the input size plus 0.27 GB.",
    "The `tflabench.*` mLSTM kernels are this project's Triton implementation of the TFLA spec, not the "
    "paper's code (`mlstm_kernels.*` is the reference package).",
)


@dataclass(frozen=True)
class PaperKernel:
    """A kernel of the paper's benchmark figures and the tflabench kernels that compute the same thing.

    label: the paper's name (docs/reference/paper-numbers.md#benchmark-configurations).
    kernels: tflabench registry names compared with it; () where no comparison is meaningful (note says why).
    causal: whether the paper's runs were causal (its Torch FA2 and cuDNN rows were not).
    triton: the kernel is written in Triton, so the Triton version matters.
    library: what the paper timed, as the difference note names it.
    library_version: its version where the document states one (compared with the run row's version).
    chunk_is_key: the paper publishes one row per chunk size, so a run row must have the same chunk size;
        for the other kernels a different chunk size is a difference note.
    note: a difference between the paper's kernel and the tflabench kernels that holds for every row.
    """

    label: str
    kernels: tuple[str, ...]
    causal: bool
    triton: bool
    library: str
    library_version: str | None = None
    chunk_is_key: bool = False
    note: str = ""


_TFLA_CODE = "mlstm_kernels TFLA kernels (version not recorded)"

TORCH_FA2 = PaperKernel("Torch FlashAttention", ("torch.sdpa.flash",), causal=False, triton=False,
                        library="PyTorch 2.5.1", library_version="2.5.1")
CUDNN_FA2 = PaperKernel("cuDNN FlashAttention", ("torch.sdpa.cudnn",), causal=False, triton=False,
                        library="PyTorch 2.5.1", library_version="2.5.1")
FA3 = PaperKernel("FlashAttention 3", ("flash_attn_interface.fa3",), causal=True, triton=False,
                  library="flash-attention 3 (version not recorded)")
GLA = PaperKernel("GLA (FLA)", ("fla.chunk_gla",), causal=True, triton=True, library="FLA v0.1",
                  library_version="0.1")
SIMPLE_GLA = PaperKernel("Simple GLA (FLA)", ("fla.chunk_simple_gla",), causal=True, triton=True,
                         library="FLA v0.1", library_version="0.1")
FUSED_GLA = PaperKernel("GLA fused (FLA)", (), causal=True, triton=True, library="FLA v0.1",
                        library_version="0.1", note="not compared: tflabench has no fused_chunk_gla adapter")
MAMBA = PaperKernel(
    "Mamba", (), causal=True, triton=False, library="mamba 2.2.4", library_version="2.2.4",
    note="not compared: the document does not say which Mamba-1 function the paper timed at embedding "
    "4096 and state 16; tflabench's mamba_ssm.selective_scan times selective_scan_fn alone",
)
MAMBA2 = PaperKernel(
    "Mamba 2", ("mamba_ssm.mamba2_ssd",), causal=True, triton=True, library="mamba 2.2.4",
    library_version="2.2.4",
    note="the paper timed the whole Mamba2 mixer kernel with its depthwise conv "
    "(mamba_split_conv1d_scan_combined), tflabench the bare SSD scan (mamba_chunk_scan_combined), less work",
)
MLSTM_EXP_LIMIT = PaperKernel(
    "mLSTMexp (FLA limit_chunk)",
    ("tflabench.mlstm_exp.limit_chunk", "mlstm_kernels.mlstm_exp.limit_chunk"),
    causal=True, triton=True, library=_TFLA_CODE, chunk_is_key=True,
)
MLSTM_EXP_XL = PaperKernel(
    "mLSTMexp (TFLA xl_chunk)", ("tflabench.mlstm_exp.xl_chunk", "mlstm_kernels.mlstm_exp.xl_chunk"),
    causal=True, triton=True, library=_TFLA_CODE, chunk_is_key=True,
)
MLSTM_SIG_XL = PaperKernel(
    "mLSTMsig (TFLA xl_chunk)", ("tflabench.mlstm_sig.xl_chunk", "mlstm_kernels.mlstm_sig.xl_chunk"),
    causal=True, triton=True, library=_TFLA_CODE, chunk_is_key=True,
)
LIGHTNING2 = PaperKernel("LightningAttention2", ("lightning_attn.lightning_attn2",), causal=True, triton=True,
                         library="LightningAttention-2 (version not recorded)")

PAPER_KERNELS = (TORCH_FA2, CUDNN_FA2, FA3, GLA, SIMPLE_GLA, FUSED_GLA, MAMBA, MAMBA2, MLSTM_EXP_LIMIT,
                 MLSTM_EXP_XL, MLSTM_SIG_XL, LIGHTNING2)
#: paper kernel label -> tflabench registry kernel names, where the comparison is meaningful
REGISTRY_KERNELS = {kernel.label: kernel.kernels for kernel in PAPER_KERNELS if kernel.kernels}


@dataclass(frozen=True)
class Figure:
    """A figure of the paper: its configuration in words and the axis its data varies along."""

    title: str
    axis: str  # the results-table column: seq_len, chunk_size or head_dim_v


FIGURES = {
    "Fig. 4": Figure("runtime vs sequence length, 65,536 tokens per batch (B = 65536 / T), embedding 4096",
                     "seq_len"),
    "Fig. 5": Figure("mLSTMsig xl_chunk chunk sizes, 8 heads × 256/512, T = 8192, B = 8", "chunk_size"),
    "Fig. 12": Figure("FLA kernels against the mLSTM kernels, 8 heads × 256/512, T = 8192, B = 8, "
                      "forward+backward", "chunk_size"),
    "Fig. 13": Figure("LightningAttention2, T = 8192, B = 8, forward+backward", "head_dim_v"),
    "Fig. 14": Figure("head dims, heads = 4096 / d, d_qk = d_v, T = 8192, B = 4, forward+backward",
                      "head_dim_v"),
}


@dataclass(frozen=True)
class PaperNumber:
    """One published value: a median runtime (quantity ``time_ms``) or an absolute peak memory in GB
    (``peak_gb``) of one kernel at one configuration, measured on the paper's H100 80GB in bfloat16.

    heads, head_dim_qk, head_dim_v: None where the paper does not state them (Mamba 2's state size is
    head_dim_qk; Mamba-1 has embedding 4096 and state 16). chunk_size: None for kernels without one or with
    the library's default.
    """

    figure: str
    section: str  # anchor of the figure's table in DOCUMENT
    kernel: PaperKernel
    mode: str
    quantity: str
    value: float
    batch: int
    seq_len: int
    heads: int | None
    head_dim_qk: int | None
    head_dim_v: int | None
    chunk_size: int | None = None
    gpu: str = PAPER_GPU

    @property
    def causal(self) -> bool:
        return self.kernel.causal

    @property
    def source(self) -> str:
        return f"TFLA paper {self.figure}, {DOCUMENT}{self.section}"

    def matches(self, row) -> bool:
        """Whether a results-table row (with attributes of schema.COLUMNS) ran this configuration."""
        point = (row.mode, row.dtype, row.batch, row.seq_len)
        stated = (
            (self.heads, row.heads),
            (self.head_dim_qk, row.head_dim_qk),
            (self.head_dim_v, row.head_dim_v),
            (self.chunk_size if self.kernel.chunk_is_key else None, row.chunk_size),
        )
        return (
            row.kernel in self.kernel.kernels
            and point == (self.mode, PAPER_DTYPE, self.batch, self.seq_len)
            and all(paper is None or paper == measured for paper, measured in stated)
        )


# ----------------------------------------------------------------------------------------- the numbers

FIG4_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
FIG4_TOKENS = 65536
FIG4_MEMORY_SEQ_LEN = 8192

#: kernel, (heads, d_qk, d_v, L), forward ms and forward+backward ms per FIG4_SEQ_LENS,
#: peak GB forward / forward+backward at T = 8192
_FIG4 = (
    (TORCH_FA2, (32, 128, 128, None),
     (2.46, 3.95, 6.88, 12.80, 24.62, 48.28, 103.23, 206.59),
     (15.57, 19.60, 28.28, 50.53, 96.54, 190.42, 376.80, 749.45), (2.41, 7.79)),
    (CUDNN_FA2, (32, 128, 128, None),
     (2.00, 2.79, 4.39, 7.59, 13.99, 26.94, 55.85, 120.48),
     (12.50, 14.58, 19.17, 30.83, 56.30, 112.73, 222.13, 447.15), (2.40, 7.25)),
    (FA3, (32, 128, 128, None),
     (1.69, 2.03, 2.80, 4.36, 7.48, 13.71, 26.28, 55.61),
     (12.69, 13.43, 15.70, 20.34, 32.29, 58.33, 115.28, 227.00), (2.41, 7.27)),
    (GLA, (16, 128, 256, None),
     (5.84, 5.84, 5.84, 5.85, 5.89, 5.92, 6.42, 7.61),
     (24.03, 23.32, 23.39, 23.34, 23.39, 23.40, 23.91, 25.91), (4.08, 12.67)),
    (SIMPLE_GLA, (16, 128, 256, None),
     (3.49, 3.49, 3.49, 3.49, 3.54, 3.52, 3.98, 4.99),
     (11.93, 13.03, 13.05, 13.23, 13.19, 13.40, 13.26, 14.63), (3.01, 8.93)),
    (MAMBA, (None, 16, None, None),
     (4.72, 4.82, 5.01, 5.00, 5.88, 6.15, 6.38, 6.57),
     (27.65, 29.26, 31.06, 30.85, 32.01, 32.49, 33.24, 34.43), (2.96, 11.58)),
    (MAMBA2, (64, None, 64, 256),
     (3.65, 3.63, 3.63, 3.62, 3.63, 3.60, 3.61, 3.52),
     (28.10, 28.13, 28.04, 28.01, 26.95, 27.32, 26.78, 26.86), (3.23, 11.03)),
    (MLSTM_EXP_LIMIT, (16, 128, 256, 64),
     (6.50, 6.49, 6.50, 6.56, 6.58, 6.92, 6.86, 7.98),
     (20.08, 20.05, 19.59, 19.87, 20.02, 21.86, 21.66, 25.89), (4.06, 9.99)),
    (MLSTM_EXP_XL, (16, 128, 256, 128),
     (6.38, 6.36, 6.37, 6.36, 6.37, 6.36, 6.39, 7.15),
     (15.33, 15.29, 15.25, 15.23, 15.23, 15.27, 15.44, 17.50), (2.97, 6.77)),
    (MLSTM_SIG_XL, (16, 128, 256, 128),
     (4.41, 4.38, 4.37, 4.36, 4.39, 4.40, 4.43, 5.21),
     (12.70, 12.84, 12.86, 12.77, 12.84, 12.90, 12.95, 15.02), (2.97, 6.77)),
)

#: Fig. 5, mLSTMsig xl_chunk at 8 × 256/512, T = 8192, B = 8:
#: L, forward+backward ms and GB, forward ms and GB
_FIG5 = (
    (64, 21.74, 13.23, 7.41, 6.21),
    (128, 18.96, 8.93, 6.38, 4.06),
    (256, 18.89, 6.78, 6.30, 2.98),
    (512, 22.61, 5.71, 7.30, 2.44),
    (1024, 31.08, 5.17, 9.55, 2.17),
    (2048, 46.03, 4.90, 12.90, 2.04),
    (4096, 76.88, 4.77, 21.66, 1.97),
)

#: Fig. 12, 8 × 256/512, T = 8192, B = 8, forward+backward: kernel, L, ms, GB
_FIG12 = (
    (GLA, None, 30.78, 16.70),
    (FUSED_GLA, None, 34.79, 11.88),
    (SIMPLE_GLA, None, 17.53, 13.21),
    (MLSTM_EXP_LIMIT, 64, 29.67, 15.38),
    (MLSTM_EXP_XL, 128, 21.06, 8.93),
    (MLSTM_EXP_XL, 256, 21.37, 6.78),
    (MLSTM_SIG_XL, 128, 18.96, 8.93),
    (MLSTM_SIG_XL, 256, 18.89, 6.78),
)

#: Fig. 13, LightningAttention2, T = 8192, B = 8, forward+backward: heads, head dim, ms, GB
_FIG13 = ((32, 128, 55.79, 6.16), (64, 64, 20.71, 6.16))

FIG14_HEAD_DIMS = (32, 64, 128, 256, 512, 1024)
#: Fig. 14, heads = 4096 / d, d_qk = d_v = d, T = 8192, B = 4, forward+backward ms per
#: FIG14_HEAD_DIMS (None: the FLA kernels did not compile at head dims 32 and 64)
_FIG14 = (
    (MLSTM_EXP_LIMIT, 64, (10.14, 9.13, 12.78, 16.22, 26.15, 88.34)),
    (MLSTM_EXP_XL, 128, (11.15, 9.23, 9.53, 13.18, 19.14, 33.65)),
    (MLSTM_SIG_XL, 128, (9.15, 8.18, 8.38, 12.16, 16.65, 29.37)),
    (MLSTM_SIG_XL, 256, (10.18, 8.73, 8.59, 11.55, 17.13, 29.41)),
    (GLA, None, (None, None, 18.89, 24.91, 29.79, 48.49)),
    (SIMPLE_GLA, None, (None, None, 8.78, 10.85, 15.66, 28.89)),
)


def _fig4() -> list[PaperNumber]:
    numbers = []
    for kernel, (heads, head_dim_qk, head_dim_v, chunk), forward, training, memory in _FIG4:
        shape = {"heads": heads, "head_dim_qk": head_dim_qk, "head_dim_v": head_dim_v, "chunk_size": chunk}
        for mode, times, peak_gb in (("fwd", forward, memory[0]), ("fwdbw", training, memory[1])):
            section = "#fig-4-forward-runtimes" if mode == "fwd" else "#fig-4-training-runtimes"
            for seq_len, time_ms in zip(FIG4_SEQ_LENS, times, strict=True):
                numbers.append(PaperNumber("Fig. 4", section, kernel, mode, "time_ms", time_ms,
                                           FIG4_TOKENS // seq_len, seq_len, **shape))
            numbers.append(PaperNumber("Fig. 4", "#fig-4-peak-memory", kernel, mode, "peak_gb", peak_gb,
                                       FIG4_TOKENS // FIG4_MEMORY_SEQ_LEN, FIG4_MEMORY_SEQ_LEN, **shape))
    return numbers


def _fig5() -> list[PaperNumber]:
    shape = {"batch": 8, "seq_len": 8192, "heads": 8, "head_dim_qk": 256, "head_dim_v": 512}
    numbers = []
    for chunk, training_ms, training_gb, forward_ms, forward_gb in _FIG5:
        for mode, quantity, value in (("fwdbw", "time_ms", training_ms), ("fwdbw", "peak_gb", training_gb),
                                      ("fwd", "time_ms", forward_ms), ("fwd", "peak_gb", forward_gb)):
            numbers.append(PaperNumber("Fig. 5", "#fig-5-chunk-sizes", MLSTM_SIG_XL, mode, quantity, value,
                                       **shape, chunk_size=chunk))
    return numbers


def _fig12() -> list[PaperNumber]:
    shape = {"batch": 8, "seq_len": 8192, "heads": 8, "head_dim_qk": 256, "head_dim_v": 512}
    return [
        PaperNumber("Fig. 12", "#fig-12-fla-kernels", kernel, "fwdbw", quantity, value, **shape,
                    chunk_size=chunk)
        for kernel, chunk, time_ms, peak_gb in _FIG12
        for quantity, value in (("time_ms", time_ms), ("peak_gb", peak_gb))
    ]


def _fig13() -> list[PaperNumber]:
    return [
        PaperNumber("Fig. 13", "#fig-13-lightningattention-2", LIGHTNING2, "fwdbw", quantity, value, batch=8,
                    seq_len=8192, heads=heads, head_dim_qk=head_dim, head_dim_v=head_dim)
        for heads, head_dim, time_ms, peak_gb in _FIG13
        for quantity, value in (("time_ms", time_ms), ("peak_gb", peak_gb))
    ]


def _fig14() -> list[PaperNumber]:
    return [
        PaperNumber("Fig. 14", "#fig-14-head-dimensions", kernel, "fwdbw", "time_ms", time_ms, batch=4,
                    seq_len=8192, heads=4096 // head_dim, head_dim_qk=head_dim, head_dim_v=head_dim,
                    chunk_size=chunk)
        for kernel, chunk, times in _FIG14
        for head_dim, time_ms in zip(FIG14_HEAD_DIMS, times, strict=True)
        if time_ms is not None
    ]


#: Every published number, in figure order. Figs. 5 and 12 share the 8 × 256/512 data, so the mLSTMsig
#: forward+backward points at L = 128 and 256 appear in both.
PUBLISHED: tuple[PaperNumber, ...] = (*_fig4(), *_fig5(), *_fig12(), *_fig13(), *_fig14())


# ----------------------------------------------------------------------------------------- comparison

COMPARISON_COLUMNS = (
    "figure", "paper_kernel", "kernel", "mode", "batch", "seq_len", "heads", "head_dim_qk", "head_dim_v",
    "chunk_size", "paper_chunk_size", "paper_causal", "measured_ms", "published_ms", "ratio",
    "measured_peak_gb", "published_peak_gb", "difference", "source",
)
_NUMERIC_KEYS = ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v", "chunk_size", "time_ms",
                 "peak_mem_mib")
_TEXT_KEYS = ("kernel", "family", "version", "device", "gpu", "dtype", "mode", "status", "params")


def _runtimes_by_kernel() -> dict[str, list[PaperNumber]]:
    """The published runtimes of each tflabench kernel name, in PUBLISHED order."""
    runtimes: dict[str, list[PaperNumber]] = {}
    for number in PUBLISHED:
        for name in number.kernel.kernels if number.quantity == "time_ms" else ():
            runtimes.setdefault(name, []).append(number)
    return runtimes


_RUNTIMES = _runtimes_by_kernel()
_FIGURE_RANK = {figure: rank for rank, figure in enumerate(FIGURES)}
_KERNEL_RANK = {kernel.label: rank for rank, kernel in enumerate(PAPER_KERNELS)}


def paper_comparison(run_rows: pd.DataFrame, triton_version: str | None = None) -> pd.DataFrame:
    """Measured rows of a run next to the paper's published runtimes for the same configuration.

    run_rows: a results table (schema.COLUMNS); only status ``ok`` rows with a positive time are compared.
    triton_version: the run's Triton version (meta.json ``versions.triton``), for the difference note.
    Returns one row per matched measured row, columns COMPARISON_COLUMNS, in figure order: ``ratio`` is
    measured / published (< 1: the run is faster than the paper), ``measured_peak_gb`` the run's incremental
    peak in GB next to the paper's absolute ``published_peak_gb`` where the paper gives one, ``difference``
    the notes joined by NOTE_SEPARATOR ("" when none). A point published in two figures is compared with
    the first.
    """
    records = []
    for row in _measured(run_rows).itertuples(index=False):
        number = next((number for number in _RUNTIMES.get(row.kernel, ()) if number.matches(row)), None)
        if number is not None:
            records.append(_comparison_record(row, number, triton_version))
    return pd.DataFrame(sorted(records, key=_figure_order), columns=list(COMPARISON_COLUMNS))


def _measured(run_rows: pd.DataFrame) -> pd.DataFrame:
    """The status-ok rows with a positive time, text columns as str and the keys numeric."""
    rows = run_rows.copy()
    for column in _TEXT_KEYS:
        rows[column] = rows[column].fillna("").astype(str)
    for column in _NUMERIC_KEYS:
        rows[column] = pd.to_numeric(rows[column], errors="coerce")
    return rows[(rows["status"] == "ok") & (rows["time_ms"] > 0)]


def _figure_order(record: dict) -> tuple:
    chunk = record["chunk_size"]
    return (_FIGURE_RANK[record["figure"]], _KERNEL_RANK[record["paper_kernel"]], record["kernel"],
            record["mode"], record["seq_len"], record["head_dim_v"], -1 if pd.isna(chunk) else chunk)


def _published_peak_gb(number: PaperNumber) -> float | None:
    """The paper's peak memory at the configuration of a published runtime, if it gives one."""
    return next(
        (
            other.value
            for other in PUBLISHED
            if other.quantity == "peak_gb"
            and (other.figure, other.kernel, other.mode, other.batch, other.seq_len, other.heads,
                 other.head_dim_v, other.chunk_size)
            == (number.figure, number.kernel, number.mode, number.batch, number.seq_len, number.heads,
                number.head_dim_v, number.chunk_size)
        ),
        None,
    )


def _comparison_record(row, number: PaperNumber, triton_version: str | None) -> dict:
    published_gb = _published_peak_gb(number)
    return {
        "figure": number.figure,
        "paper_kernel": number.kernel.label,
        "kernel": row.kernel,
        "mode": row.mode,
        **{name: getattr(row, name) for name in ("batch", "seq_len", "heads", "head_dim_qk", "head_dim_v")},
        "chunk_size": row.chunk_size,
        "paper_chunk_size": number.chunk_size,
        "paper_causal": number.causal,
        "measured_ms": row.time_ms,
        "published_ms": number.value,
        "ratio": row.time_ms / number.value,
        "measured_peak_gb": row.peak_mem_mib * 2**20 / 1e9 if published_gb is not None else None,
        "published_peak_gb": published_gb,
        "difference": NOTE_SEPARATOR.join(_differences(row, number, triton_version)),
        "source": number.source,
    }


def _differences(row, number: PaperNumber, triton_version: str | None) -> list[str]:
    """What differs between a measured row and the paper's measurement of the same configuration."""
    kernel = number.kernel
    notes = [_gpu_difference(row.gpu or row.device)]
    if kernel.triton:
        notes.append(_triton_difference(triton_version))
    notes.append(_version_difference(row, kernel))
    params = _params(row.params)
    if not kernel.causal and params.get("causal", True):
        notes.append("causal attention here, non-causal in the paper (about 2× the work)")
    if row.family == "mlstm_sig" and params.get("normalize"):
        notes.append("normalize=True here, False in the paper")
    if not kernel.chunk_is_key and number.chunk_size is not None and row.chunk_size != number.chunk_size:
        notes.append(f"chunk size {_integer(row.chunk_size)} here, {number.chunk_size} in the paper")
    if kernel.note:
        notes.append(kernel.note)
    return [note for note in notes if note]


def _gpu_difference(gpu_name: str) -> str:
    """"" for the paper's GPU model, else the run's GPU with its datasheet peak and bandwidth."""
    from tflabench.analysis.hardware import get_gpu, gpu_from_device_name

    paper = get_gpu(PAPER_GPU_KEY)
    gpu = gpu_from_device_name(gpu_name) if gpu_name else None
    if gpu is None:
        return f"{gpu_name or 'unknown device'} here, {PAPER_GPU} in the paper"
    if gpu.key == paper.key:
        return ""
    return f"{gpu_name} ({_gpu_figures(gpu)}) here, {PAPER_GPU} ({_gpu_figures(paper)}) in the paper"


def _gpu_figures(gpu) -> str:
    return f"{gpu.peak_flops[PAPER_DTYPE] / 1e12:.0f} TFLOP/s bf16, {gpu.bandwidth / 1e12:.2f} TB/s"


def _triton_difference(triton_version: str | None) -> str:
    if not triton_version:
        return f"Triton version of the run not recorded (paper: {PAPER_TRITON})"
    if _same_version(triton_version, PAPER_TRITON):
        return ""
    return f"Triton {triton_version} here, {PAPER_TRITON} in the paper"


def _version_difference(row, kernel: PaperKernel) -> str:
    package = row.kernel.split(".")[0]
    version = row.version or "version unknown"
    if kernel.library_version is not None and _same_version(version, kernel.library_version):
        return ""
    return f"{package} {version} here, {kernel.library} in the paper"


def _same_version(run: str, paper: str) -> bool:
    """'2.5.1+cu124' is 2.5.1; '0.1.0' is 0.1 (the paper's version is a prefix of the run's)."""
    run_parts = run.split("+")[0].lstrip("v").split(".")
    paper_parts = paper.lstrip("v").split(".")
    padded = paper_parts + ["0"] * (len(run_parts) - len(paper_parts))
    return run_parts == padded


def _params(text: str) -> dict:
    try:
        params = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    return params if isinstance(params, dict) else {}


def _integer(value: float) -> str:
    return "none" if pd.isna(value) else str(int(value))
