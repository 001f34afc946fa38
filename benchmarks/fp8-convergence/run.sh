#!/bin/sh
# FP8 convergence (issue 12): a 300M Llama-style model on the built-in
# synthetic corpus, 2000 iterations, bf16 against FP8 delayed, tensorwise
# and blockwise; same data, seed and schedule.
#
#   run.sh OUT_DIR [RUN...]     RUN: bf16 fp8-delayed fp8-tensorwise
#                               fp8-blockwise (default: all four)
set -u
cd "$(dirname "$0")"
out=$1
shift
runs=${*:-bf16 fp8-delayed fp8-tensorwise fp8-blockwise}
. .gpukit/env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
d=/tmp/conv; mkdir -p $d
( time src/tools/gridlm-prep --synthetic-corpus 100000 --seed 7 --output $d/corpus.jsonl &&
  src/tools/gridlm-prep --train-tokenizer --input $d/corpus.jsonl --vocab-size 4096 --output $d/tokenizer.json &&
  src/tools/gridlm-prep --input $d/corpus.jsonl --output-prefix $d/corpus --tokenizer-model $d/tokenizer.json --workers 14 ) 2>&1 | tail -4
shape="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0
  --num-layers 20 --hidden-size 1024 --num-attention-heads 16 --num-query-groups 4
  --ffn-hidden-size 4096 --seq-length 1024 --rotary-base 500000 --untie-embeddings-and-output-weights"
opt="--lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine --lr-warmup-iters 100 --weight-decay 0.1
  --adam-beta2 0.95 --clip-grad 1.0 --seed 1234 --micro-batch-size 8 --global-batch-size 8
  --train-iters 2000 --log-interval 10 --eval-interval 500 --eval-iters 10 --split 98,2,0
  --data-path $d/corpus_text_document --tokenizer-type HuggingFaceTokenizer --tokenizer-model $d/tokenizer.json"
for cfg in "bf16:" "fp8-delayed:--fp8-format hybrid --fp8-recipe delayed --fp8-amax-history-len 1024 --fp8-amax-compute-algo max" \
           "fp8-tensorwise:--fp8-format hybrid --fp8-recipe tensorwise" \
           "fp8-blockwise:--fp8-format hybrid --fp8-recipe blockwise"; do
    name=${cfg%%:*} flags=${cfg#*:}
    case " $runs " in *" $name "*) ;; *) continue ;; esac
    timeout 300 mpiexec -n 1 src/tools/gridlm-train --device cuda --bf16 $shape $opt $flags \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    echo "$name: exit $?"; grep -E "validation loss|iteration +2000/|error" "$out/$name.log" | tail -6
done
