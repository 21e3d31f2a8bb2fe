#!/bin/bash
# Nsight Compute on the TFLA forward's state recurrence (`chunk_states_kernel`, the second call's) at masked
# (48/48, 96/96) and power-of-two (64/64) head dims, L = 64 / 128 / 256, mLSTMsig, B 16, T 4096, 65,536 tokens
# of 3072 head columns: why a masked recurrence takes the same time at every chunk size while the model
# lowers it with L (results/h200/launch-times-masked-forward). Stall reasons, instructions, occupancy, DRAM
# and L2 bytes (`--csv --page details`). On the device:
#   bash scripts/profile_recurrence.sh       (everything tarred into $OUT/recurrence.tgz)
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
D=/tmp/recurrence; mkdir -p $D/ncu
nvidia-smi --query-gpu=name,serial,clocks.max.sm --format=csv > $D/gpu.txt
METRICS="regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__sass_inst_executed_op_global_ld.sum,sm__sass_inst_executed_op_global_st.sum,sm__sass_inst_executed_op_ldgsts.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,sm__cycles_elapsed.avg,smsp__cycles_active.avg,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active"
# name, heads, head dim (Dqk = Dv), chunk size
CONFIGS=("masked48-64 48 48 64" "masked48-128 48 48 128" "masked48-256 48 48 256"
         "pow64-64 32 64 64" "pow64-128 32 64 128" "pow64-256 32 64 256"
         "masked96-64 24 96 64" "masked96-128 24 96 128")
for config in "${CONFIGS[@]}"; do
  read -r name heads dim chunk <<< "$config"
  timeout 150 ncu --clock-control none --kernel-name chunk_states_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --metrics "$METRICS" --csv --page details \
    --print-units base python3 scripts/profile_forward.py --variant sig --mode fwd --batch 16 \
    --seq-len 4096 --heads $heads --head-dim-qk $dim --head-dim-v $dim --chunk $chunk --calls 2 \
    > $D/ncu/$name.csv 2> $D/ncu/$name.err
  echo "$name rc $?"
done
tar czf $OUT/recurrence.tgz -C /tmp recurrence
