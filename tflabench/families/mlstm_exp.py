"""mLSTM with the exponential input gate (mLSTMexp): see `tflabench.families.mlstm`.

docs/reference/mlstm-math.md#exponential-and-sigmoid-forms
"""

from tflabench.families.mlstm import mlstm_family

FAMILY = mlstm_family("mlstm_exp")
