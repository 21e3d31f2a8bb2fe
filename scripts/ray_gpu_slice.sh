#!/usr/bin/env bash
# `tflabench sweep --ray` on the real kernels of one GPU machine that has no network and no Ray: installs
# Ray from a carried folder into /tmp/ray-site (on PYTHONPATH, no virtual environment), then sweeps a slice
# of preset tfla-grid (our two mLSTMsig chunkwise kernels, T = 2048 and 8192, chunk size 128, the preset's
# four head configurations, fwd and fwdbw) through a local Ray instance into results/RUN, and reports it.
#
# Usage, on the GPU machine in the repository root:
#   TFLABENCH_GIT_COMMIT=<commit of the checkout> bash scripts/ray_gpu_slice.sh [CARRY] [RUN]
#     CARRY  folder with ray-slim.tar.xz (scripts/slim_ray_wheel.sh) and the wheels of Ray's dependencies
#            the machine lacks (jsonschema, jsonschema-specifications, referencing, rpds-py); default .whl
#     RUN    run name (default ray-tfla-grid-slice); a run that exists is continued (--resume)
#   With $OUT set (the device tool), the run (results.csv, meta.json, logs/, plots/, report.md) is packed
#   into $OUT/RUN.tar.gz.
set -euo pipefail
carry=${1:-.whl}
run=${2:-ray-tfla-grid-slice}
site=/tmp/ray-site

if [[ ! -d $site/ray ]]; then
    mkdir -p "$site"
    tar -xJf "$carry/ray-slim.tar.xz" -C "$site"
    python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$carry"/*.whl
fi
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1
python3 -c 'import ray; print("ray", ray.__version__, "from", ray.__file__)'

python3 -m tflabench sweep --preset tfla-grid --kernels tflabench.mlstm_sig.xl_chunk,tflabench.mlstm_sig.fused_chunk \
    --seq-len 2048,8192 --chunk-size 128 --ray --out results --run-name "$run" --resume
python3 -m tflabench report "results/$run"
if [[ -n ${OUT:-} ]]; then
    tar czf "$OUT/$run.tar.gz" -C results "$run"
fi
