#!/usr/bin/env bash
# Advance the held-out runs whose predictions are committed but not yet measured on this GPU by one 10-minute
# device command: every results/GPU_DIR/<run>/ with predictions.json.gz and no finished meta.json, in name
# order, swept from the config its predictions name (`tflabench sweep --resume`, our kernels only, no peer
# wheels), until the command's budget is spent. Repeat the same call until it prints "complete".
#
# Usage, on the GPU machine in the repository root:
#   TFLABENCH_GIT_COMMIT=<commit of the checkout> bash scripts/gpu_holdouts.sh GPU_DIR [RUN ...]
#     GPU_DIR  the results folder of the GPU the runs were predicted for (h100, h200)
#     RUN      only these runs (folder names), e.g. holdout-trip-chains
# Every run touched is packed into $OUT/holdouts.tar.gz (paths under results/GPU_DIR/), one file because the
# device returns only a few; unpack it with `tar xzf <files_at>/holdouts.tar.gz -C results/GPU_DIR` before the
# next call, which continues a run cut off by the budget. The device's copy of the tree has no git history,
# so meta.json records the commit given in TFLABENCH_GIT_COMMIT.
set -uo pipefail

usage="usage: bash scripts/gpu_holdouts.sh GPU_DIR [RUN ...]"
gpu_dir=${1:?$usage}
shift
out=${OUT:?OUT must name the folder whose files come back from the device}
command_s=${TFLABENCH_COMMAND_S:-570}  # the device's 600 s per command, less a margin
point_s=120                            # the sweep's timeout per point
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
SECONDS=0

[[ -z ${TFLABENCH_GIT_COMMIT:-} ]] && echo "warning: TFLABENCH_GIT_COMMIT is not set" >&2
finished() {  # whether the run's meta.json says the sweep finished
    [[ -f $1/meta.json ]] && python3 -c 'import json, sys
sys.exit(json.load(open(sys.argv[1]))["finished"] is None)' "$1/meta.json"
}
config_of() {  # the sweep config the run's predictions were made from
    python3 -c 'import gzip, json, sys
print(json.load(gzip.open(sys.argv[1]))["config"])' "$1/predictions.json.gz"
}

runs=("$@")
if ((${#runs[@]} == 0)); then
    for dir in results/"$gpu_dir"/*/; do
        [[ -f $dir/predictions.json.gz ]] && ! finished "$dir" && runs+=("$(basename "$dir")")
    done
fi
touched=()
for run in "${runs[@]}"; do
    dir=results/$gpu_dir/$run
    finished "$dir" && continue
    left=$((command_s - SECONDS - 30))
    ((left < point_s + 60)) && break
    touched+=("$run")
    resume=()  # a run the budget cut off continues; --resume refuses a folder that holds predictions only
    [[ -f $dir/meta.json || -f $dir/results.csv ]] && resume=(--resume)
    echo "== $(date -u +%FT%TZ) $run: budget $((left - point_s))s" | tee -a "$dir/sweep.txt"
    timeout -s INT -k 30 "$left" python3 -m tflabench sweep --config "$(config_of "$dir")" --run-name "$run" \
        --out "results/$gpu_dir" "${resume[@]}" --budget $((left - point_s)) --timeout $point_s \
        >> "$dir/sweep.txt" 2>&1
    tail -n 3 "$dir/sweep.txt"
done
((${#touched[@]})) && tar czf "$out/holdouts.tar.gz" -C "results/$gpu_dir" "${touched[@]}"

pending=()
for run in "${runs[@]}"; do finished "results/$gpu_dir/$run" || pending+=("$run"); done
if ((${#pending[@]} == 0)); then
    echo "complete: ${runs[*]} (${SECONDS}s)"
else
    echo "not complete: ${pending[*]}; unpack holdouts.tar.gz and call again (${SECONDS}s)"
fi
