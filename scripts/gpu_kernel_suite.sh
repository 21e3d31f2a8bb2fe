#!/usr/bin/env bash
# The kernel GPU suite (pytest -m gpu tests/test_mlstm_triton_gpu.py: our kernels against float64 in bf16,
# every gradient, initial and final states, T = 65,536) spread over every GPU of the machine: its tests are
# dealt round-robin to one pytest process per GPU (CUDA_VISIBLE_DEVICES), which run side by side.
#
# Usage, on the GPU machine in the repository root:
#   OUT=<dir> bash scripts/gpu_kernel_suite.sh [SECONDS]
# SECONDS bounds the whole suite (default 300). Writes $OUT/kernel-suite.tar.gz (per GPU: the pytest log and
# the error report JSON) and prints each GPU's summary line; exits non-zero when a shard failed.
set -uo pipefail

out=${OUT:?OUT must name the folder whose files come back from the device}
seconds=${1:-300}
suite=tests/test_mlstm_triton_gpu.py
gpus=$(nvidia-smi -L | grep -c '^GPU ')  # as scripts/gpu_grid.sh counts them (no MIG lines)
work=$(mktemp -d)/kernel-suite
mkdir -p "$work" "$out"

python3 -m pytest -q -m gpu "$suite" --collect-only 2>/dev/null | grep '::' > "$work/tests.txt"
echo "$(wc -l < "$work/tests.txt") tests on $gpus GPUs"
for ((gpu = 0; gpu < gpus; gpu++)); do
    mapfile -t shard < <(awk -v n="$gpus" -v g="$gpu" '(NR - 1) % n == g' "$work/tests.txt")
    ((${#shard[@]})) || continue
    CUDA_VISIBLE_DEVICES=$gpu TFLABENCH_GPU_REPORT=$work/report-gpu$gpu.json \
        timeout -k 10 "$seconds" python3 -m pytest -q -m gpu -p no:cacheprovider "${shard[@]}" \
        > "$work/pytest-gpu$gpu.txt" 2>&1 &
done
status=0
for job in $(jobs -p); do wait "$job" || status=1; done
for log in "$work"/pytest-gpu*.txt; do echo "$(basename "$log"): $(tail -n 1 "$log")"; done
tar czf "$out/kernel-suite.tar.gz" -C "$(dirname "$work")" kernel-suite
exit $status
