"""mLSTM (mLSTMexp, mLSTMsig) kernels: the public entry point `mlstm` and the plain-PyTorch references.

Import the references as ``from tflabench.kernels.mlstm import reference``: `tflabench.kernels.mlstm` is
also the name of the function exported by `tflabench.kernels`, so ``import tflabench.kernels.mlstm.x as y``
does not work.
"""

from tflabench.kernels.mlstm.api import mlstm

__all__ = ["mlstm"]
