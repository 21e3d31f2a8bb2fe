#!/bin/bash
# ncu of the output, dQ and dK kernels at 24 x 96/96 (32-wide blocks; default masked 128 blocks) and
# 24 x 128/128 (TMA default; pointer tiles), L = 64, fwd+bwd, with stall reasons and instruction counts;
# then per-launch times of the same configs. Everything tarred into $OUT/probe.tgz.
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
GPU=$1 TIMES=$2
D=/tmp/probe; mkdir -p $D/ncu $D/times
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
NARROW=block_qk=32,block_v=32,out_block_v=32,dv_block_v=32,state_block_qk=32,state_block_v=32
METRICS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__sass_inst_executed_op_global_ld.sum,sm__sass_inst_executed_op_ldgsts.sum,sm__sass_inst_executed_op_shared_ld.sum,sm__sass_inst_executed_op_shared_st.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg"
run() {  # name dims tiling
  local name=$1 dims=$2 tiling=$3
  timeout 200 ncu --clock-control none --kernel-name regex:"chunk_(outputs|dq|dk)_kernel" --launch-skip 3 \
    --launch-count 3 --section SpeedOfLight --section Occupancy --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --metrics "$METRICS" \
    --csv --page details --print-units base \
    python3 scripts/profile_forward.py --mode fwdbw --batch 16 --seq-len 4096 --heads 24 --head-dim-qk $dims \
    --head-dim-v $dims --chunk 64 --calls 2 --tiling $tiling > $D/ncu/$name.csv 2> $D/ncu/$name.err
  echo "$name rc $?"
}
run narrow96 96 $NARROW
run masked96 96 default
run tma128 128 default
run pointer128 128 out_tma=false,bwd_tma=false
if [[ $TIMES == times ]]; then
for cfg in "96 $NARROW narrow96" "96 default masked96" "128 default tma128" "128 out_tma=false,bwd_tma=false pointer128"; do
  set -- $cfg
  t=""; [[ $2 != default ]] && t="--tiling $2"
  timeout 120 python3 scripts/launch_times.py --gpu $GPU --batch 16 --seq-len 4096 --heads 24 --head-dim-qk $1 \
    --head-dim-v $1 --variant sig --mode fwdbw --chunk-sizes 64 $t --json $D/times/$3.json > $D/times/$3.txt 2>&1
  echo "times $3 rc $?"; grep -E "chunk_(outputs|dq|dk|dv)" $D/times/$3.txt
done
fi
tar czf $OUT/probe.tgz -C /tmp probe
