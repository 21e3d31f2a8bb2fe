#!/bin/bash
# Nsight Compute on chosen Triton kernels of our mLSTM kernels' second call (`scripts/profile_forward.py`),
# one configuration per line of a file: name variant Dqk Dv chunk tiling batch seq-len heads mode kernel-regex
# (mode fwd or fwdbw; the kernel regex as ncu --kernel-name takes it, e.g. "chunk_outputs_kernel").
# Speed of light, occupancy, warp states and stall reasons, scheduler, memory workload and launch sections,
# and DRAM / L2 bytes; then, with a second argument (the GPU key of the calibration), the per-launch times of
# the same configurations beside the structural model (scripts/launch_times.py). On the device:
#   bash scripts/profile_kernels.sh scripts/profile-configs/output-value-blocks.txt h100-sxm
# (everything tarred into $OUT/<file stem>.tgz)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NAME=$(basename "$1" .txt) GPU=$2
D=/tmp/$NAME; mkdir -p $D/ncu $D/times
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
METRICS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg,gpu__time_duration.sum"
mapfile -t CONFIGS < "$1"
for config in "${CONFIGS[@]}"; do
  read -r name variant dqk dv chunk tiling batch seq heads mode kernel <<< "$config"
  timeout 150 ncu --clock-control none --kernel-name regex:"$kernel" --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section LaunchStats --metrics "$METRICS" --csv --page details \
    --print-units base \
    python3 scripts/profile_forward.py --variant $variant --head-dim-qk $dqk --head-dim-v $dv --chunk $chunk \
    --tiling $tiling --batch $batch --seq-len $seq --heads $heads --mode $mode --calls 2 \
    > $D/ncu/$name.csv 2> $D/ncu/$name.err
  echo "$name rc $?"
  gzip -9 $D/ncu/$name.csv
  if [[ -n $GPU ]]; then
    option=""; [[ $tiling != default ]] && option="--tiling $tiling"
    timeout 120 python3 scripts/launch_times.py --gpu $GPU --variant $variant --head-dim-qk $dqk \
      --head-dim-v $dv --chunk-sizes $chunk --batch $batch --seq-len $seq --heads $heads --mode $mode \
      $option --json $D/times/$name.json > $D/times/$name.txt 2>&1
    echo "times $name rc $?"
  fi
done
tar czf $OUT/$NAME.tgz -C /tmp $NAME
