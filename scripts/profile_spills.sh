#!/bin/bash
# Nsight Compute on the fused forward (`fused_forward_kernel`, the second call's) at the configurations whose
# registers spill, and one that does not: the local-memory bytes and instructions the spills move, where they
# hit (L1, L2), DRAM bytes and the stall reasons, to set against the compiled per-trip spill bytes the
# structural model charges (`structural.spilled_bytes`). On the device:
#   bash scripts/profile_spills.sh       (everything tarred into $OUT/spills.tgz)
# With a file of configuration lines (name variant Dqk Dv chunk tiling batch seq-len heads) instead of
# scripts/spill_profile_table.py's, the same profile of other fused forwards (into $OUT/<file stem>.tgz):
#   bash scripts/profile_spills.sh scripts/profile-configs/fused-small-heads.txt
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
NAME=$(basename "${1:-spills}" .txt)
D=/tmp/$NAME; mkdir -p $D/ncu
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $D/gpu.txt
METRICS="regex:l1tex__t_(bytes|sectors)_pipe_lsu_mem_local_op_(ld|st)(_lookup_(hit|miss))?\.sum,regex:sm__sass_inst_executed_op_local_(ld|st)\.sum,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum,gpu__time_duration.sum"
# name, variant, Dqk, Dv, chunk, tiling, batch, seq len, heads (scripts/spill_profile_table.py's CONFIGS)
if [[ -n "${1:-}" ]]; then mapfile -t CONFIGS < "$1"; else
  mapfile -t CONFIGS < <(python3 scripts/spill_profile_table.py --configs); fi
for config in "${CONFIGS[@]}"; do
  read -r name variant dqk dv chunk tiling batch seq heads <<< "$config"
  timeout 150 ncu --clock-control none --kernel-name fused_forward_kernel --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --metrics "$METRICS" --csv --page details --print-units base \
    python3 scripts/profile_forward.py --algorithm fused_chunk --variant $variant --head-dim-qk $dqk \
    --head-dim-v $dv --chunk $chunk --tiling $tiling --batch $batch --seq-len $seq --heads $heads --calls 2 \
    > $D/ncu/$name.csv 2> $D/ncu/$name.err
  echo "$name rc $?"
  gzip -9 $D/ncu/$name.csv  # read gzipped by scripts/spill_profile_table.py
done
tar czf $OUT/$NAME.tgz -C /tmp $NAME
