#!/usr/bin/env bash
# Advance one TFLA-paper reproduction sweep (issue 7) by one 10-minute device command, then plot and report
# the run so far. Repeat the same call until it prints "complete".
#
# Usage, on the GPU machine in the repository root:
#   TFLABENCH_GIT_COMMIT=<commit of the checkout> bash scripts/gpu_reproduce.sh PRESET [BUDGET_S] [TIMEOUT_S]
#     PRESET     tfla-fig4 (Fig. 4: S = 512 ... 65536, fwd and fwdbw, every kernel), tfla-fig5 (chunk sizes
#                64 ... 4096 of the mLSTM chunkwise kernels) or tfla-headdim (Fig. 14: head dims 32 ... 1024).
#     BUDGET_S   start no new point after this many seconds (default: what the command limit leaves after one
#                more point and the report).
#     TIMEOUT_S  seconds per point, warm-up and compilation included (default 120). Kernels that autotune for
#                minutes (FLA, power attention) run last and get their KernelSpec.first_call_s on top, and
#                are not started when less than that is left of the budget; a point cut off by the command
#                limit is not recorded and comes first in the next call, which starts with the whole window.
#   TFLABENCH_GPUS=0,1 spreads the kernels over those GPUs (`tflabench sweep --gpus`, a local Ray instance:
#   Ray on PYTHONPATH first, as scripts/ray_gpu_slice.sh installs it).
#   TFLABENCH_SWEEP_ARGS adds sweep options, e.g. "--retry failed_check" (measure the points whose gate
#   failed again, after a gate or adapter fix; the old rows are kept beside the table).
#   The run is results/PRESET (run name = preset name); at the end it is packed, with plots/, logs/ and
#   report.md, into $OUT/PRESET.tar.gz (one file: the device returns a limited number of files), and a
#   calibration made in this call is copied to $OUT/calibration/.
#
# With the device tool: carry ["wheels"] (the offline peer wheels, ignored by git); the run so far travels
# with the working tree when results/PRESET is unpacked there before the next call, which --resume continues:
#   tar xzf <files_at>/PRESET.tar.gz -C results/
# The working-tree copy on the device has no git history, so meta.json records the commit given in
# TFLABENCH_GIT_COMMIT.
#
# Autotuning results survive between calls: the call packs the Triton autotuner's results (FLA tunes with
# cache_results, TRITON_CACHE_AUTOTUNING=1 makes every autotuner keep them; small JSON files) into
# $OUT/PRESET-autotune.tar.gz; copied to .triton-autotune/PRESET.tar.gz (git-ignored) and carried, they are
# restored into the Triton cache of the next call, so a point cut off by the command limit or re-run with
# --retry does not tune again what an earlier call tuned.
set -uo pipefail

usage="usage: bash scripts/gpu_reproduce.sh tfla-fig4|tfla-fig5|tfla-headdim|tfla-grid [BUDGET_S] [TIMEOUT_S]"
preset=${1:?$usage}
case $preset in tfla-fig4 | tfla-fig5 | tfla-headdim | tfla-grid) ;; *) echo "$usage" >&2; exit 2 ;; esac
timeout_s=${3:-120}
out=${OUT:?OUT must name the folder whose files come back from the device}
command_s=${TFLABENCH_COMMAND_S:-570}  # the device's 600 s per command, less a margin
report_s=90                            # plot + report + copy at the end
run_dir=results/$preset
log=$run_dir/sweep-log.txt
SECONDS=0

if [[ -z ${TFLABENCH_GIT_COMMIT:-} && ! -d .git ]]; then
    echo "warning: TFLABENCH_GIT_COMMIT is not set; meta.json of a new run records no commit" >&2
fi
# Several calls may share one machine (one per GPU): the first installs the wheels.
source scripts/device_env.sh  # the peer wheels on PYTHONPATH
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache} TRITON_CACHE_AUTOTUNING=1
tflabench() { python3 -m tflabench "$@"; }
mkdir -p "$run_dir" "$out" "$TRITON_CACHE_DIR"
autotune=.triton-autotune/$preset.tar.gz
[[ -f $autotune ]] && tar xzf "$autotune" -C "$TRITON_CACHE_DIR"

# Measured ceilings feed the runtime model and the optimal chunk size; take them once per GPU model.
gpu_key=$(python3 -c 'import torch
from tflabench.analysis.hardware import gpu_from_device_name
gpu = gpu_from_device_name(torch.cuda.get_device_name(0))
print(gpu.key if gpu else "")' 2>/dev/null)
if [[ -n $gpu_key && ! -f results/calibration/$gpu_key.json ]]; then
    tflabench calibrate >> "$log" 2>&1 && mkdir -p "$out/calibration" \
        && cp "results/calibration/$gpu_key.json" "$out/calibration/"
fi

left=$((command_s - SECONDS - report_s))
budget=${2:-$((left - timeout_s - 60))}
((budget < 10)) && budget=10
echo "== $(date -u +%FT%TZ) $preset: budget ${budget}s, point timeout ${timeout_s}s, hard stop ${left}s" >> "$log"
gpus=()
[[ -n ${TFLABENCH_GPUS:-} ]] && gpus=(--gpus "$TFLABENCH_GPUS")
# shellcheck disable=SC2086  # TFLABENCH_SWEEP_ARGS: options split at spaces
timeout -s INT -k 30 "$left" python3 -m tflabench sweep --preset "$preset" --run-name "$preset" --out results \
    --resume --budget "$budget" --timeout "$timeout_s" "${gpus[@]}" ${TFLABENCH_SWEEP_ARGS:-} >> "$log" 2>&1
sweep_status=$?
((sweep_status == 124)) && echo "== stopped at the hard limit; the running point is retried next call" >> "$log"

tflabench plot "$run_dir" >> "$log" 2>&1
# Fig. 4 compares with causal cuDNN attention (the other presets have no attention kernel); an early call may
# have no measured cuDNN row yet: the default baseline then.
baseline=()
[[ $preset == tfla-fig4 ]] && baseline=(--baseline torch.sdpa.cudnn)
tflabench report "$run_dir" "${baseline[@]}" >> "$log" 2>&1 || tflabench report "$run_dir" >> "$log" 2>&1
tar czf "$out/$preset.tar.gz" -C results "$preset"
(cd "$TRITON_CACHE_DIR" && find . -name '*.autotune.json' | tar czf "$out/$preset-autotune.tar.gz" -T -)

tail -n 40 "$log"
if python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["finished"] is None)' "$run_dir/meta.json"
then
    echo "complete: $run_dir (${SECONDS}s)"
else
    echo "not complete: call again with results/$preset carried (${SECONDS}s)"
fi
