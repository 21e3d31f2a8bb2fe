"""tflabench.bench.adapters."""
