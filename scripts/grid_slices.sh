#!/usr/bin/env bash
# tfla-grid one head config at a time, each as its own run results/PREFIX-<heads>x<Dqk>x<Dv>, advanced by one
# device command: our explicit algorithms and mlstm_kernels' sig xl_chunk first, then our "auto" kernels with
# the shipped choice table (unlike scripts/gpu_grid.sh, which rebuilds it from the run first). A run that
# exists is resumed, so repeating the command finishes what a call's time cut off.
#
# Usage, on the GPU machine in the repository root (runs so far travel with the working tree):
#   TFLABENCH_GIT_COMMIT=<commit> bash scripts/grid_slices.sh PREFIX HEADSxDQKxDV... [--seconds S]
#     e.g. bash scripts/grid_slices.sh grid-h100-v16 32x64x64 32x128x128
# Carry ["wheels"] (scripts/device_env.sh installs them). Back under $OUT: RUN.tar.gz per run touched (unpack
# with `tar xzf RUN.tar.gz -C results/`); the last line per run says "complete" or "incomplete".
set -uo pipefail

prefix=${1:?usage: bash scripts/grid_slices.sh PREFIX HEADSxDQKxDV... [--seconds S]}
shift
command_s=570
configs=()
while (($#)); do
    case $1 in
        --seconds) command_s=${2:?--seconds needs a number}; shift 2 ;;
        *) [[ $1 =~ ^[0-9]+x[0-9]+x[0-9]+$ ]] || { echo "head config must read HEADSxDQKxDV, got '$1'" >&2; exit 2; }
           configs+=("$1"); shift ;;
    esac
done
((${#configs[@]})) || { echo "name at least one head config" >&2; exit 2; }
out=${OUT:?OUT must name the folder whose files come back from the device}
explicit="tflabench.*.xl_chunk,tflabench.*.fused_chunk,mlstm_kernels.mlstm_sig.xl_chunk"
report_s=40  # plot + report + archive of one run
SECONDS=0

source scripts/device_env.sh  # the peer wheels on PYTHONPATH
source scripts/grid_sweep.sh  # grid_sweep: one sweep stage, bounded by the call's time
mkdir -p "$out"

for config in "${configs[@]}"; do
    dir=results/$prefix-$config
    mkdir -p "$dir"
    [[ -f $dir/heads.toml ]] || printf '[sweep]\nhead_configs = [[%s]]\n' "${config//x/, }" > "$dir/heads.toml"
    state=incomplete
    grid_sweep "$explicit" "$dir" "$dir/heads.toml" && grid_sweep "tflabench.*.auto" "$dir" "$dir/heads.toml" \
        && state=complete
    rm -rf "$dir/logs"
    python3 -m tflabench plot "$dir" > /dev/null 2>&1
    python3 -m tflabench report "$dir" > /dev/null 2>&1
    tar czf "$out/$(basename "$dir").tar.gz" -C results "$(basename "$dir")"
    echo "$dir: $state (${SECONDS}s into the call)"
done
