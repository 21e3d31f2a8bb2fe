export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
D=/tmp/ab; mkdir -p $D
FIG4="--batch 8 --seq-len 8192 --heads 16 --head-dim-qk 128 --head-dim-v 256 --mode fwdbw --chunk-sizes 64,128"
WIDE="--batch 8 --seq-len 8192 --heads 8 --head-dim-qk 256 --head-dim-v 512 --mode fwdbw --chunk-sizes 64,128 --variant sig"
run() {  # name, args
  timeout 150 python3 scripts/launch_times.py --gpu $GPU "${@:2}" > $D/$1.txt 2>&1; echo "$1 rc $?"
}
for code in range static; do
  if [[ $code == static ]]; then
    cp ab_tmp/triton_bwd_static.py tflabench/kernels/mlstm/triton_bwd.py
    cp ab_tmp/triton_fwd_static.py tflabench/kernels/mlstm/triton_fwd.py
  fi
  run ${code}_fig4_sig $FIG4 --variant sig
  run ${code}_fig4_sig_s1 $FIG4 --variant sig --tiling num_stages=1
  run ${code}_fig4_exp $FIG4 --variant exp
  run ${code}_fig4_exp_s1 $FIG4 --variant exp --tiling num_stages=1
  run ${code}_wide_sig $WIDE
  run ${code}_wide_sig_s1 $WIDE --tiling num_stages=1
done
tar czf $OUT/ab.tgz -C /tmp ab
