"""tflabench.kernels: our TFLA Triton kernels and their plain-PyTorch references.

`mlstm` is the public, autograd-capable mLSTM entry point (`tflabench.kernels.mlstm.api`).
"""

from tflabench.kernels.mlstm import mlstm

__all__ = ["mlstm"]
