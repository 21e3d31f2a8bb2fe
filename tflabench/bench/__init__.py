"""tflabench.bench."""
