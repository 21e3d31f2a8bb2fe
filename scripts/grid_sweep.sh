# shellcheck shell=bash
# grid_sweep, sourced by scripts/gpu_grid.sh and scripts/grid_slices.sh: one `tflabench sweep --preset
# tfla-grid` stage of a run, bounded by the device command's time.
#
#   grid_sweep KERNELS DIR [CONFIG]
#
# Measures the run DIR (results/<name> or a slice of one) with the kernels KERNELS and the sweep file CONFIG
# on top of the preset, until the call's time is up: the caller sets command_s (seconds the command may take)
# and report_s (seconds kept for what follows the sweeps); SECONDS counts from the command's start. The run is
# resumed when DIR/meta.json exists. A header line and the sweep's output are appended to DIR/sweep-log.txt.
# Returns 0 when every point of KERNELS is done, 1 when time ran out before it or the sweep failed.
# TFLABENCH_SWEEP_ARGS adds options to every sweep (split at spaces), e.g. "--retry failed_check".

#: seconds a sweep is started with at least, and what its --budget leaves for the points in flight
GRID_SWEEP_MARGIN_S=150

grid_sweep() {
    local kernels=$1 dir=$2 config=() resume=()
    # shellcheck disable=SC2154  # command_s, report_s: set by the sourcing script
    local left=$((command_s - SECONDS - report_s))
    ((left < GRID_SWEEP_MARGIN_S)) && return 1  # no time for a point: --budget below would be negative
    mkdir -p "$dir"
    [[ -n ${3:-} ]] && config=(--config "$3")
    [[ -f $dir/meta.json ]] && resume=(--resume)  # the first call starts the run
    local gpu=${CUDA_VISIBLE_DEVICES:+, GPU $CUDA_VISIBLE_DEVICES}
    echo "== $(date -u +%FT%TZ) $(basename "$dir"): $kernels, ${left}s left$gpu" >> "$dir/sweep-log.txt"
    # shellcheck disable=SC2086  # TFLABENCH_SWEEP_ARGS: options split at spaces
    timeout -s INT -k 30 "$left" python3 -m tflabench sweep --preset tfla-grid --run-name "$(basename "$dir")" \
        --out "$(dirname "$dir")" "${config[@]}" "${resume[@]}" --budget $((left - GRID_SWEEP_MARGIN_S)) \
        --timeout 120 --kernels "$kernels" ${TFLABENCH_SWEEP_ARGS:-} > "$dir/last-sweep.txt" 2>&1
    local status=$? cut_off=0
    grep -q "budget reached" "$dir/last-sweep.txt" && cut_off=1
    cat "$dir/last-sweep.txt" >> "$dir/sweep-log.txt"
    rm -f "$dir/last-sweep.txt"
    ((status == 0 && cut_off == 0))
}
