"""tflabench: benchmarking and roofline analysis for linear-attention / linear-RNN kernels.

Modules and subpackages:
    core      shared vocabulary: families, modes, dtypes and their byte sizes, the sweep point
    schema    the columns and statuses of a results table
    families  one module per kernel family: float64 reference, random inputs, FLOP/byte model
    kernels   our TFLA Triton kernels for the mLSTM and their plain-PyTorch references
    bench     kernel registry, peer adapters, sweep engine, measurement, results (imports analysis)
    analysis  hardware database, cost models, roofline, optimal chunk size, plots (imports no bench)
"""

__version__ = "0.1.0"
