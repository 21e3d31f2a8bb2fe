#!/usr/bin/env bash
# The tfla-grid preset on one GPU as results/RUN, advanced by one device command (repeat until "complete"):
# our explicit algorithms and the peers first; once they are all measured, the default-choice table
# (tflabench/kernels/mlstm/choices.json) is rebuilt from the runs of TFLABENCH_CHOICE_RUNS (oldest first;
# default: those of the shipped table) and this run last, a later run's rows replacing an earlier one's
# (scripts/build_choice_table.py), and the "auto" kernels are measured with it. Then plot and report.
#
# Usage, on the GPU machine in the repository root (the run so far travels with the working tree):
#   TFLABENCH_GIT_COMMIT=<commit> bash scripts/gpu_grid.sh RUN [COMMAND_S]
#     RUN        run name, e.g. grid-h100 (results/RUN)
#     COMMAND_S  seconds this call may take (default 570: the device's 600 s less a margin)
# TFLABENCH_GRID_KERNELS replaces the explicit kernel list (the first stage). Carry ["wheels"] (fla-core and mlstm-kernels wheels, git-ignored). Files back under $OUT: RUN.tar.gz (the
# run), choices.json (when rebuilt), the sweep log's tail on stdout.
set -uo pipefail

run=${1:?usage: bash scripts/gpu_grid.sh RUN [COMMAND_S]}
command_s=${2:-570}
out=${OUT:?OUT must name the folder whose files come back from the device}
run_dir=results/$run
log=$run_dir/sweep-log.txt
report_s=60
SECONDS=0
explicit=${TFLABENCH_GRID_KERNELS:-"tflabench.*.xl_chunk,tflabench.*.fused_chunk,mlstm_kernels.mlstm_sig.xl_chunk,fla.chunk_simple_gla"}

[[ -d /tmp/site/fla ]] || python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site \
    wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TRITON_CACHE_AUTOTUNING=1
mkdir -p "$out"

sweep() {  # sweep KERNELS: measure until the call's time is up; 0 when every point of KERNELS is done
    local left=$((command_s - SECONDS - report_s))
    ((left < 60)) && return 1
    mkdir -p "$run_dir"
    echo "== $(date -u +%FT%TZ) $run: $1, ${left}s left" >> "$log"
    local resume=()
    [[ -f $run_dir/meta.json ]] && resume=(--resume)  # the first call starts the run
    timeout -s INT -k 30 "$left" python3 -m tflabench sweep --preset tfla-grid --run-name "$run" --out results \
        "${resume[@]}" --budget $((left - 150)) --timeout 120 --kernels "$1" > "$run_dir/last-sweep.txt" 2>&1
    local status=$?
    cat "$run_dir/last-sweep.txt" >> "$log"
    ((status == 0)) && ! grep -q "budget reached" "$run_dir/last-sweep.txt"
}

if sweep "$explicit"; then
    shipped="results/grid-h100 results/grid-h200 results/h100/grid-t8192-v7 results/h100/fig4-v8
        results/h100/grid-t65536-v8 results/h200/grid-t8192-v8"
    choice_runs=$(for dir in ${TFLABENCH_CHOICE_RUNS:-$shipped}; do
        [[ -f $dir/results.csv && $dir != "$run_dir" ]] && echo "$dir"; done; echo "$run_dir")
    python3 scripts/build_choice_table.py $choice_runs >> "$log" 2>&1 \
        && cp tflabench/kernels/mlstm/choices.json "$out/"
    sweep "tflabench.*.auto" && echo "complete: $run_dir"
fi
python3 -m tflabench plot "$run_dir" >> "$log" 2>&1
python3 -m tflabench report "$run_dir" >> "$log" 2>&1
rm -f "$run_dir/last-sweep.txt"
tar czf "$out/$run.tar.gz" -C results "$run"
tail -n 25 "$log"
echo "(${SECONDS}s)"
