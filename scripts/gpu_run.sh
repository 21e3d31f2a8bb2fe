#!/usr/bin/env bash
# One GPU-machine session (10-minute command): install the offline peer bundle, record `tflabench kernels`,
# calibrate the ceilings, run the GPU tests of our kernels, then advance the Fig. 4 sweep at S = 8192.
# Usage (on the device, repo root, with wheels/ carried): bash scripts/gpu_run.sh OUT_DIR SWEEP_BUDGET_S [steps]
# steps: comma list of kernels,calibrate,pytest,sweep (default: all). The sweep's run directory is
# results/_scratch/fig4-s8192 (resumable); it is copied to OUT_DIR at the end.
set -uo pipefail
out=${1:?out dir}; budget=${2:-240}; steps=${3:-kernels,calibrate,pytest,sweep}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
has() { [[ ",$steps," == *",$1,"* ]]; }
if has kernels; then python3 -m tflabench kernels > "$out/kernels.txt" 2>&1; fi
if has calibrate; then python3 -m tflabench calibrate > "$out/calibrate.txt" 2>&1; cp results/calibration/*.json "$out/"; fi
if has pytest; then
    TFLABENCH_GPU_REPORT="$out/kernels_gpu.json" timeout 200 python3 -m pytest -m gpu -q -p no:warnings \
        tests/test_mlstm_triton_gpu.py > "$out/pytest_gpu.txt" 2>&1
    tail -3 "$out/pytest_gpu.txt"
fi
if has sweep; then
    timeout $((budget + 150)) python3 -m tflabench sweep --preset tfla-fig4 --seq-len 8192 --run-name fig4-s8192 \
        --out results/_scratch --resume --budget "$budget" --timeout 120 > "$out/sweep.txt" 2>&1
    tail -40 "$out/sweep.txt"
    cp results/_scratch/fig4-s8192/results.csv results/_scratch/fig4-s8192/meta.json "$out/"
fi
