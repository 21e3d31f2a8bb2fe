#!/usr/bin/env bash
# Second GPU-machine session: finish the Fig. 4 sweep at S = 8192 (ours, attention and the reference kernels
# first, then the other peers, which autotune for minutes), then the GPU check that a deliberately wrong
# adapter (attention without the causal mask) is caught. Usage: bash scripts/gpu_run2.sh OUT_DIR
set -uo pipefail
out=${1:?out dir}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
sweep() {  # kernels budget timeout
    timeout $(($2 + $3 + 60)) python3 -m tflabench sweep --preset tfla-fig4 --seq-len 8192 --run-name fig4-s8192 \
        --out results/_scratch --resume --kernels "$1" --budget "$2" --timeout "$3" >> "$out/sweep.txt" 2>&1
}
sweep 'tflabench.*,torch.sdpa.*,mlstm_kernels.*' 200 90
sweep 'fla.*,lightning_attn.*,mamba_ssm.*,retention.*' 140 60
tail -60 "$out/sweep.txt"
cp results/_scratch/fig4-s8192/results.csv results/_scratch/fig4-s8192/meta.json "$out/"
for kernel in wrong.sdpa_flash_non_causal torch.sdpa.flash; do
    echo "== $kernel" >> "$out/wrong_adapter.txt"
    timeout 60 python3 -m tflabench.bench.adapters.isolated_checks "$kernel" bfloat16 cuda >> "$out/wrong_adapter.txt" 2>&1
done
cat "$out/wrong_adapter.txt"
