#!/usr/bin/env bash
# The tfla-grid preset as results/RUN, advanced by one device command (repeat until "complete"):
# our explicit algorithms and the peers first; once they are all measured, the default-choice table
# (tflabench/kernels/mlstm/choices.json) is rebuilt from the runs of TFLABENCH_CHOICE_RUNS (oldest first;
# default: those of the shipped table) and this run last, a later run's rows replacing an earlier one's
# (scripts/build_choice_table.py), and the "auto" kernels are measured with it. Then plot and report.
#
# Usage, on the GPU machine in the repository root (the run so far travels with the working tree):
#   TFLABENCH_GIT_COMMIT=<commit> bash scripts/gpu_grid.sh RUN [COMMAND_S]
#     RUN        run name, e.g. grid-h100 (results/RUN)
#     COMMAND_S  seconds this call may take (default 570: the device's 600 s less a margin)
# Carry ["wheels"] (fla-core and mlstm-kernels wheels, git-ignored; scripts/device_env.sh installs them).
# Files back under $OUT: RUN.tar.gz (the run; unpack it with `tar xzf RUN.tar.gz -C results/` before the next
# call), choices.json (when rebuilt), the logs' tails on stdout; the last line says "complete: results/RUN" or
# "incomplete: ...", with the seconds the call took.
#
# Environment:
#   TFLABENCH_GRID_GPUS     GPUs to spread the grid over (default: those `nvidia-smi -L` lists; 1 without it)
#   TFLABENCH_GRID_KERNELS  replaces the explicit kernel list (the first stage)
#   TFLABENCH_CHOICE_RUNS   the runs the choice table is built from before this one (see above)
#   TFLABENCH_SWEEP_ARGS    more `tflabench sweep` options for every sweep (scripts/grid_sweep.sh)
#
# Several GPUs (all of one model), e.g. on a machine of 4 H100s: the same command; the grid is split by head
# config, head config j of the preset on GPU j mod G, so that each (shape, mode) group, our kernels and the
# reference beside them, is measured on one card. Each head config is a run of its own,
# results/RUN/slices/<heads>x<Dqk>x<Dv>/ (its head config in heads.toml, a sweep file applied on top of the
# preset), and each GPU sweeps its slices in the background, one after the other, with CUDA_VISIBLE_DEVICES
# set to it. The choice table is built once, between the two stages, when every slice's explicit stage is
# complete (no sweep rewrites it while another measures "auto" with it); the "auto" stage runs in parallel
# the same way. A slice depends on the head config only, so a run may go on with another number of GPUs
# (but not with one: a run of one GPU and a run of slices each continue only as they began). When every
# slice is complete, `tflabench merge` writes them as the one run results/RUN (results.csv; meta.json with
# every slice's meta under "merged"), each slice's sweep log becomes results/RUN/sweep-log-<slice>.txt and
# its workers' logs results/RUN/logs/<slice>/, the slices are deleted, and the run is plotted and reported.
# Until then RUN.tar.gz holds the slices, so that the next call resumes each one. The merged rows all carry
# the GPU model's name in `gpu`, and meta.json keeps the first slice's GPU facts and ceilings under `gpus`
# (those of the model, the same for every card of it: why the cards must be of one model); the CUDA index
# of the GPU that measured each sweep is in the slice's sweep log.
set -uo pipefail

run=${1:?usage: bash scripts/gpu_grid.sh RUN [COMMAND_S]}
command_s=${2:-570}
out=${OUT:?OUT must name the folder whose files come back from the device}
run_dir=results/$run
log=$run_dir/sweep-log.txt
report_s=60
SECONDS=0
explicit=${TFLABENCH_GRID_KERNELS:-"tflabench.*.xl_chunk,tflabench.*.fused_chunk,mlstm_kernels.mlstm_sig.xl_chunk,fla.chunk_simple_gla"}
shipped="results/grid-h100 results/grid-h200 results/h100/grid-t8192-v7 results/h100/fig4-v8
    results/h100/grid-t65536-v8 results/h200/grid-t8192-v8 results/grid-h200-v9 results/h100/grid-v9-16x128x256
    results/h100/grid-v9-32x64x64 results/grid-h200-v10-32x64x64 results/grid-h100-v10-32x64x64
    results/grid-h100-v10-8x256x512 results/grid-h100-v10-32x128x128 results/grid-h100-v11-32x64x64
    results/grid-h200-v11-32x64x64 results/grid-h100-v11-16x128x256"
gpus=${TFLABENCH_GRID_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')}
[[ $gpus =~ ^[0-9]+$ ]] || { echo "TFLABENCH_GRID_GPUS must be a number of GPUs, got '$gpus'" >&2; exit 2; }
((gpus < 1)) && gpus=1

source scripts/device_env.sh  # the peer wheels on PYTHONPATH
source scripts/grid_sweep.sh  # grid_sweep: one sweep stage, bounded by the call's time
export TRITON_CACHE_AUTOTUNING=1
mkdir -p "$out"

choice_table() {  # choice_table RUN_DIR...: rebuild choices.json from the shipped runs, then RUN_DIR...
    local dir choice_runs=()
    for dir in ${TFLABENCH_CHOICE_RUNS:-$shipped}; do
        [[ -f $dir/results.csv && $dir != "$run_dir" && $dir != "$run_dir"/* ]] && choice_runs+=("$dir")
    done
    python3 scripts/build_choice_table.py "${choice_runs[@]}" "$@" >> "$log" 2>&1 \
        && cp tflabench/kernels/mlstm/choices.json "$out/"
}

if ((gpus == 1)); then
    if [[ -d $run_dir/slices ]]; then
        echo "$run_dir holds the slices of a run on several GPUs: continue it with TFLABENCH_GRID_GPUS=N" >&2
        exit 2
    fi
    if grid_sweep "$explicit" "$run_dir"; then
        choice_table "$run_dir"
        grid_sweep "tflabench.*.auto" "$run_dir" && echo "complete: $run_dir"
    fi
    python3 -m tflabench plot "$run_dir" >> "$log" 2>&1
    python3 -m tflabench report "$run_dir" >> "$log" 2>&1
    tar czf "$out/$run.tar.gz" -C results "$run"
    tail -n 25 "$log"
    echo "(${SECONDS}s)"
    exit 0
fi

# ---------------------------------------------------------------- several GPUs: one slice per head config
report_s=90  # merge + plot + report of the slices
slices_dir=$run_dir/slices
state=$(mktemp -d)  # <stage>-<slice> marks a slice whose stage this call completed
mapfile -t head_configs < <(python3 -c 'from tflabench.bench.sweep import load_preset
for config in load_preset("tfla-grid").shape.head_configs: print(*config)')
((${#head_configs[@]} > 0)) || { echo "preset tfla-grid has no head_configs" >&2; exit 2; }
slices=()
for config in "${head_configs[@]}"; do
    read -r heads dqk dv <<< "$config"
    slices+=("${heads}x${dqk}x${dv}")
done
mkdir -p "$run_dir"

gpu_stage() {  # gpu_stage GPU STAGE KERNELS: the slices of GPU (head configs j = GPU mod G), one after the other
    local gpu=$1 j dir
    for ((j = gpu; j < ${#slices[@]}; j += gpus)); do
        dir=$slices_dir/${slices[j]}
        mkdir -p "$dir"
        [[ -f $dir/heads.toml ]] || printf '[sweep]\nhead_configs = [[%s]]\n' "${head_configs[j]// /, }" \
            > "$dir/heads.toml"
        CUDA_VISIBLE_DEVICES=$gpu grid_sweep "$3" "$dir" "$dir/heads.toml" && touch "$state/$2-${slices[j]}"
    done
}

stage() {  # stage NAME KERNELS: every GPU's slices in parallel; 0 when every slice's stage is complete
    local gpu name missing=()
    echo "== $(date -u +%FT%TZ) $1 stage: ${#slices[@]} slices on $gpus GPUs" >> "$log"
    for ((gpu = 0; gpu < gpus && gpu < ${#slices[@]}; gpu++)); do
        gpu_stage "$gpu" "$1" "$2" &
    done
    wait
    for name in "${slices[@]}"; do
        [[ -f $state/$1-$name ]] || missing+=("$name")
    done
    ((${#missing[@]} == 0)) && return 0
    result="incomplete: $1 stage of ${missing[*]}; unpack $run.tar.gz into results/ and call again"
    return 1
}

merge_slices() {  # the complete slices as the one run results/RUN; the slices' logs beside it
    local name sources=()
    for name in "${slices[@]}"; do
        sources+=("$slices_dir/$name")
    done
    echo "== $(date -u +%FT%TZ) merge" >> "$log"
    rm -f "$run_dir/results.csv" "$run_dir/meta.json"  # of a merge cut short: merge refuses an existing run
    python3 -m tflabench merge "${sources[@]}" --out "$run_dir" >> "$log" 2>&1 || return 1
    for name in "${slices[@]}"; do
        mv "$slices_dir/$name/sweep-log.txt" "$run_dir/sweep-log-$name.txt"
        if [[ -d $slices_dir/$name/logs ]]; then
            mkdir -p "$run_dir/logs"
            mv "$slices_dir/$name/logs" "$run_dir/logs/$name"
        fi
    done
    rm -rf "$slices_dir"
}

result="incomplete: merge failed (see $log); unpack $run.tar.gz into results/ and call again"
if [[ -f $run_dir/results.csv && ! -d $slices_dir ]]; then
    if ! grep -q '"merged"' "$run_dir/meta.json"; then
        echo "$run_dir is a run of one GPU: continue it with TFLABENCH_GRID_GPUS=1" >&2
        exit 2
    fi
    result="complete: $run_dir"  # merged by an earlier call: plot and report again
elif stage explicit "$explicit"; then
    choice_sources=()
    for name in "${slices[@]}"; do
        choice_sources+=("$slices_dir/$name")
    done
    echo "== $(date -u +%FT%TZ) choice table" >> "$log"
    choice_table "${choice_sources[@]}"
    stage auto "tflabench.*.auto" && merge_slices && result="complete: $run_dir"
fi
for gpu in $(seq 0 $((gpus - 1))); do
    for ((j = gpu; j < ${#slices[@]}; j += gpus)); do
        slice_log=$slices_dir/${slices[j]}/sweep-log.txt
        [[ -f $slice_log ]] || slice_log=$run_dir/sweep-log-${slices[j]}.txt
        echo "-- ${slices[j]} (GPU $gpu)"
        [[ -f $slice_log ]] && tail -n 8 "$slice_log"
    done
done
if [[ $result == complete* ]]; then
    python3 -m tflabench plot "$run_dir" >> "$log" 2>&1
    python3 -m tflabench report "$run_dir" >> "$log" 2>&1
fi
rm -rf "$state"
tar czf "$out/$run.tar.gz" -C results "$run"
echo "-- $log"
tail -n 12 "$log"
echo "$result (${SECONDS}s)"
