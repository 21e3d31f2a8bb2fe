"""tflabench: benchmarking and roofline analysis for linear-attention / linear-RNN kernels.

Subpackages:
    kernels   our TFLA Triton kernels for the mLSTM and their plain-PyTorch references
    bench     kernel registry, peer adapters, sweep engine, measurement, results
    analysis  hardware database, FLOP/byte models, roofline, optimal chunk size, plots
"""

__version__ = "0.1.0"
