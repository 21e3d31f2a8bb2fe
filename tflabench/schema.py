"""Columns of a results table (`results/<run>/results.csv`), one row per (kernel, sweep point).

The sweep engine writes these columns in this order; plots and reports read them. Extra columns may
be appended at the end by newer versions, never removed or renamed.
"""

#: status values of a row
STATUSES = (
    "ok",            # measured
    "skipped",       # invalid combination for this kernel (reason says why)
    "unavailable",   # package missing, no GPU, mode refused by the peer, ...
    "failed_check",  # computed the wrong function: never ranked
    "crash",         # the worker process died (compiler abort, illegal memory access)
    "timeout",       # the worker exceeded its time limit
    "oom",           # out of memory
    "error",         # any other exception (message in reason)
)

COLUMNS = (
    "run", "kernel", "family", "version", "device", "gpu",
    "batch", "seq_len", "heads", "head_dim_qk", "head_dim_v", "chunk_size", "dtype", "mode",
    "status", "reason",
    "check_rel_error", "warmup_s",
    "time_ms", "time_ms_q25", "time_ms_q75", "repeats",
    "peak_mem_mib",
    "flops", "bytes", "intensity", "tflops", "gbps",
    "roofline_frac_datasheet", "roofline_frac_measured",
    "model_ms_additive", "model_ms_overlap",
    "sm_clock_mhz", "mem_clock_mhz", "temp_c_max", "power_w",
    "params", "timestamp",
    "timing_rounds", "issue_cpu_ms",
)

#: columns appended after runs had been committed without them, in the order they were appended: a table
#: that lacks one reads with it empty
LATER_COLUMNS = ("timing_rounds", "issue_cpu_ms")


def known_header(header) -> bool:
    """Whether a results table's header is today's `COLUMNS` or an earlier version's: `COLUMNS` without the
    last one or more of `LATER_COLUMNS`."""
    return any(tuple(header) == COLUMNS[:len(COLUMNS) - dropped] for dropped in range(len(LATER_COLUMNS) + 1))


#: A round of timed calls whose interquartile range is above this fraction of its median is unsteady
#: (`bench.measure.steadiest_round` times it again; the sweep summary and the report list the rows still
#: unsteady). The committed GPU rows have a median range of 0.1-0.7 % per run; 48 of 8,507 rows of our
#: kernels exceed 3 %, 10 of them in the first minutes of one run; timed again, its six fwd+bwd rows had
#: 0.2-0.6 % and two of its forward rows stayed unsteady (results/h200/holdout-uneven-masked-9x128-again).
MAX_SPREAD = 0.03


def measured_on_gpu(row) -> bool:
    """Whether a results-table row (a `csv.DictReader` row or a table row) was measured (``ok``) on CUDA."""
    return row["status"] == "ok" and row["device"] == "cuda"


def gpu_row_spread(row) -> float | None:
    """Interquartile range over median of a measured GPU row of a results table (a `csv.DictReader` row of
    text or a table row of numbers), None for any other row (not ``ok``, not on CUDA: the CPU
    interpreter's times show that the pipeline works, not speed; no positive median). The row is unsteady
    where it is above `MAX_SPREAD`."""
    if not measured_on_gpu(row):
        return None
    median, q25, q75 = (float(row[column] or "nan") for column in ("time_ms", "time_ms_q25", "time_ms_q75"))
    return (q75 - q25) / median if median > 0 else None


#: A measured GPU row is near the launcher's pace where the CPU time of issuing one call (`issue_cpu_ms`:
#: the kernel's Python and its launches, no synchronization) is at least this fraction of the row's time:
#: a slower moment of the CPU then makes the GPU wait inside the timed region, and the row times the CPU,
#: not the kernels (the L2 flush queued before each call gives the CPU a head start of the flush's GPU
#: time, about a tenth of a 0.6 ms call on an H200). At 16 x 64/128, L = 64 and 128, issuing a call took
#: 260-650 us on different H200 machines against 505-610 us of GPU time; of the rows whose CPU time was at
#: least 90 % of their GPU time three of five had spreads of 1-6 %, the others 0.2-0.4 %
#: (results/h200/call-overhead).
LAUNCH_BOUND = 0.9


def launch_bound(row) -> bool:
    """Whether a measured GPU row (`measured_on_gpu`) took the CPU at least `LAUNCH_BOUND` of its time
    to issue a call; False for rows without the column (tables written before it)."""
    if not measured_on_gpu(row):
        return False
    issue, median = (float(row[column] or "nan") for column in ("issue_cpu_ms", "time_ms"))
    return issue >= LAUNCH_BOUND * median
