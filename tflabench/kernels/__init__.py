"""tflabench.kernels."""
