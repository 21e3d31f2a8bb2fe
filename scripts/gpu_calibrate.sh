#!/usr/bin/env bash
# Calibrate the GPU of a device command: `tflabench calibrate` (bf16 matmul, device copy, and the building
# blocks of the mLSTM kernels: tl.dot tiles, exp, token- and state-tile loads/stores, launch and per-program
# overheads; about a minute on an H100 or H200 with a cold Triton cache, the kernels compiled in parallel).
#
# Usage, on the GPU machine in the repository root:
#   OUT=<dir> bash scripts/gpu_calibrate.sh [calibrate options, e.g. --gpu h200 --repeats 30]
# Writes $OUT/calibration/<gpu key>.json (the file to commit as results/calibration/<gpu key>.json) and
# $OUT/calibration/calibrate-log.txt (the printed tables). The GPU is detected unless --gpu names it.
set -euo pipefail

out=${OUT:?OUT must name the folder whose files come back from the device}
mkdir -p "$out/calibration"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 TFLABENCH_CALIBRATION_DIR=$out/calibration
SECONDS=0
python3 -m tflabench calibrate "$@" 2>&1 | tee "$out/calibration/calibrate-log.txt"
echo "calibrated in ${SECONDS}s" | tee -a "$out/calibration/calibrate-log.txt"
