#!/bin/bash
# Nsight Compute on the output, dQ and dK kernels (the second fwd+bwd call's) at 24 x 96/96 (32-wide blocks;
# the default masked 128-wide blocks) and 24 x 128/128 (the default TMA tiles; pointer tiles), B 16, T 4096,
# L = 64, with stall reasons, instruction counts and DRAM / L2 bytes; with a second argument "times", also the
# per-launch times of the same configurations beside the model (scripts/launch_times.py). On the device:
#   bash scripts/profile_masked_tiles.sh h200 times     (everything tarred into $OUT/probe.tgz)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
GPU=$1 TIMES=$2
D=/tmp/probe; mkdir -p $D/ncu $D/times
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
NARROW=block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32
METRICS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__sass_inst_executed_op_global_ld.sum,sm__sass_inst_executed_op_ldgsts.sum,sm__sass_inst_executed_op_shared_ld.sum,sm__sass_inst_executed_op_shared_st.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg"
SHAPE="--batch 16 --seq-len 4096 --heads 24 --variant sig --mode fwdbw"
# name, head dim (Dqk = Dv), tiling
CONFIGS=("narrow96 96 $NARROW" "masked96 96 default" "tma128 128 default"
         "pointer128 128 out_tma=false,bwd_tma=false")
for config in "${CONFIGS[@]}"; do
  read -r name dim tiling <<< "$config"
  timeout 200 ncu --clock-control none --kernel-name regex:"chunk_(outputs|dq|dk)_kernel" --launch-skip 3 \
    --launch-count 3 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --metrics "$METRICS" \
    --csv --page details --print-units base \
    python3 scripts/profile_forward.py $SHAPE --head-dim-qk $dim --head-dim-v $dim --chunk 64 --calls 2 \
    --tiling $tiling > $D/ncu/$name.csv 2> $D/ncu/$name.err
  echo "$name rc $?"
done
if [[ $TIMES == times ]]; then
  for config in "${CONFIGS[@]}"; do
    read -r name dim tiling <<< "$config"
    option=""; [[ $tiling != default ]] && option="--tiling $tiling"
    timeout 120 python3 scripts/launch_times.py --gpu $GPU $SHAPE --head-dim-qk $dim --head-dim-v $dim \
      --chunk-sizes 64 $option --json $D/times/$name.json > $D/times/$name.txt 2>&1
    echo "times $name rc $?"; grep -E "chunk_(outputs|dq|dk|dv)" $D/times/$name.txt
  done
fi
tar czf $OUT/probe.tgz -C /tmp probe
