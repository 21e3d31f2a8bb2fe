"""tflabench.analysis."""
