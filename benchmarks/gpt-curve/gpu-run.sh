#!/bin/sh
# One device call: the GPU checks of issue 16 (attention dropout in the
# flash kernels; the GPT form in training) and GPT-2 124M's throughput.
set -u
cd "$(dirname "$0")"
out=$1
. .gpukit/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for t in ops-cuda attn-cudnn train-cuda; do
    timeout 200 t/$t.t > "$out/$t.log" 2>&1
    echo "$t: exit $? $(grep -c '^ok' "$out/$t.log") ok $(grep -c '^not ok' "$out/$t.log") not ok"
    grep '^not ok' "$out/$t.log" | head -5
done
mean() { awk -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1); if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
  END {n = 0; for (k = 5; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; n++}
       if (n) printf "tokens/s/GPU=%.0f MFU=%.1f%% over %d iterations; loss at 1, %d: %s %s\n", n / s, 100 * u / n, n, NR, l[1], NR, l[NR]}' "$1"; }
g2="--model gpt2 --mock-data --seq-length 1024 --micro-batch-size 16 --global-batch-size 16
  --train-iters 30 --log-interval 1 --lr 6e-4 --seed 1234 --eval-iters 0"
for cfg in "gpt2-dropout:" "gpt2-attn0:--attention-dropout 0" "gpt2-nodrop:--attention-dropout 0 --hidden-dropout 0"; do
    name=${cfg%%:*} flags=${cfg#*:}
    timeout 150 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 $g2 $flags \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $? $(mean "$out/$name.jsonl")"; grep -m2 -E "^model|error|attention" "$out/$name.log"
done
d=/tmp/curve; mkdir -p $d
src/tools/gridlm-prep --synthetic-corpus 4000 --seed 3 --output $d/c.jsonl >/dev/null &&
src/tools/gridlm-prep --train-tokenizer --input $d/c.jsonl --vocab-size 512 --output $d/tok.json >/dev/null 2>&1 &&
src/tools/gridlm-prep --input $d/c.jsonl --output-prefix $d/c --tokenizer-model $d/tok.json --workers 8 >/dev/null 2>&1
gpt="--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 256 --max-position-embeddings 256
  --micro-batch-size 8 --global-batch-size 8 --train-iters 300 --log-interval 50 --eval-iters 0
  --lr 1e-3 --min-lr 1e-4 --lr-decay-style cosine --lr-warmup-iters 20 --seed 1234
  --data-path $d/c_text_document --tokenizer-type HuggingFaceTokenizer --tokenizer-model $d/tok.json"
timeout 120 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 $gpt --log-json "$out/curve-gpu.jsonl" > "$out/curve-gpu.log" 2>&1
echo "curve (GPT form, dropout 0.1, GPU bf16): exit $?"; grep -o "iteration *[0-9]*/ *300 .*lm loss: [0-9.E+-]*" "$out/curve-gpu.log" | sed 's/|.*lm loss/ lm loss/'
