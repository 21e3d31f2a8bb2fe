#!/usr/bin/env bash
# GPU checks and kernel measurements for device commands (steps chosen to fit 10 minutes), packed into
# $OUT/checks.tar.gz. Meant for one GPU of a two-GPU machine while scripts/gpu_reproduce.sh runs a preset on
# the other (CUDA_VISIBLE_DEVICES picks the GPU).
#
#   kernels     pytest -m gpu tests/test_mlstm_triton_gpu.py: our kernels against float64, bf16
#   diagnose    scripts/diagnose_mlstm_kernels.py --repeat: mlstm_kernels' mLSTMexp kernels at the check size
#   check-size, concurrent, memcheck, racecheck
#               our kernels at the harness's check size (B2 T128 H2 Dqk64 Dv32 L64), where a Triton 3.6
#               miscompile made them fail (results/gpu-tests/2026-11-22-grid-miscompile-and-fix): the check
#               three times per process, six isolated
#               checks at once, compute-sanitizer's memcheck and racecheck on the check
#   adapters    pytest -m gpu tests/test_adapters_gpu.py: every adapter's bf16 reference check, at its check
#               size and at its Fig. 4 configuration (two rounds of up to 4 minutes: a command of its own)
#   bench, bench-long
#               scripts/bench_tfla_vs_reference.py: tiling candidates at T = 8192 (the float64 gate at the
#               timed size) and 65,536 (our mLSTMsig kernel, the gate at its small size)
#   profile     Nsight Compute on our forward's state and output kernels at T = 8192 (sig and exp, default
#               tiling; sig with one query tile per output program): speed of light, memory, occupancy, stalls
#
# Usage, on the GPU machine in the repository root, with wheels/ carried:
#   TFLABENCH_GIT_COMMIT=<commit> OUT=<dir> bash scripts/gpu_checks.sh [STEPS]
# STEPS: a comma list of the step names above (default kernels,bench,bench-long, about 6 minutes). Each step
# has a time limit, and a step that fails does not stop the next.
set -uo pipefail

out=${OUT:?OUT must name the folder whose files come back from the device}
steps=${1:-kernels,bench,bench-long}
work=$(mktemp -d)/checks
mkdir -p "$work"
source scripts/device_env.sh  # the peer wheels on PYTHONPATH

step() {  # name seconds command...
    local name=$1 seconds=$2
    shift 2
    [[ ,$steps, == *,$name,* ]] || return 0
    echo "== $(date -u +%FT%TZ) $name (at most ${seconds}s)"
    timeout -k 10 "$seconds" "$@" > "$work/$name.txt" 2>&1
    echo "== $name: exit $?"
    tail -n 3 "$work/$name.txt"
}

TFLABENCH_GPU_REPORT=$work/kernels_gpu.json step kernels 230 python3 -m pytest -m gpu tests/test_mlstm_triton_gpu.py -q -p no:cacheprovider
step diagnose 180 python3 scripts/diagnose_mlstm_kernels.py --repeat --processes 2 --timeout 40 \
    --kernels mlstm_kernels.mlstm_exp.xl_chunk,mlstm_kernels.mlstm_exp.limit_chunk
step check-size 150 python3 scripts/diagnose_mlstm_kernels.py --repeat --timeout 40 \
    --kernels tflabench.mlstm_sig.xl_chunk,tflabench.mlstm_exp.limit_chunk
step concurrent 90 python3 scripts/diagnose_mlstm_kernels.py --concurrent 6 --timeout 100 \
    --kernels tflabench.mlstm_sig.xl_chunk
for tool in memcheck racecheck; do
    step "$tool" 120 compute-sanitizer --tool "$tool" --print-limit 20 \
        python3 scripts/diagnose_mlstm_kernels.py --child tflabench.mlstm_sig.xl_chunk spec-repeat
done
TFLABENCH_GPU_CHECK_DEADLINE_S=240 step adapters 560 \
    python3 -m pytest -m gpu tests/test_adapters_gpu.py -rA -q -p no:cacheprovider
step bench 240 python3 scripts/bench_tfla_vs_reference.py --out "$work" --run-name bench-s8192 \
    --chunk-size 128 --tilings default,out-q1
step bench-long 90 python3 scripts/bench_tfla_vs_reference.py --out "$work" --run-name bench-s65536 \
    --seq-len 65536 --chunk-size 128 --tilings default,state-v64,state-32x64,state-s2 --check-at small \
    --kernels tflabench.mlstm_sig.xl_chunk
ncu_forwards() {  # the second forward call's state and output kernels (the first call compiles)
    for profile in sig:default exp:default sig:out-q1; do
        ncu --clock-control none --kernel-name regex:chunk_ --launch-skip 2 --launch-count 2 \
            --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
            --section WarpStateStats --section SchedulerStats \
            python3 scripts/profile_forward.py --variant "${profile%%:*}" --tiling "${profile#*:}"
    done
}
export -f ncu_forwards
step profile 240 bash -c ncu_forwards
tar czf "$out/checks.tar.gz" -C "$(dirname "$work")" checks
echo "packed $out/checks.tar.gz"
