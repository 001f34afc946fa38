llama="--swiglu --normalization RMSNorm --position-embedding-type rope --disable-bias-linear --attention-dropout 0 --hidden-dropout 0"
shape15="$llama --num-layers 16 --hidden-size 2048 --num-attention-heads 32 --num-query-groups 8
  --ffn-hidden-size 8192 --vocab-size 128256 --seq-length 4096 --rotary-base 500000
  --untie-embeddings-and-output-weights"
shape8b="$llama --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8
  --ffn-hidden-size 14336 --vocab-size 128256 --seq-length 4096 --rotary-base 500000
  --untie-embeddings-and-output-weights"
opt="--lr 3e-4 --weight-decay 0.1 --adam-beta2 0.95 --clip-grad 1.0 --mock-data --seed 1234 --eval-iters 0"
# run NPROC NAME ARGS...: mean tokens/s/GPU and MFU after the first 2 iterations
run() {
    n=$1 name=$2; shift 2
    timeout 200 mpiexec -n "$n" src/tools/gridlm-train --device cuda --bf16 "$@" \
        --log-json "$out/$name.jsonl" > "$out/$name.log" 2>&1
    rc=$?
    awk -v name="$name" -v n="$n" -F'[,:}]' '{for (i = 1; i < NF; i++) { if ($i ~ /"tokens_per_sec_per_gpu"/) t[NR] = $(i+1);
            if ($i ~ /"mfu"/) m[NR] = $(i+1); if ($i ~ /"mem_gib"/) g[NR] = $(i+1); if ($i ~ /"loss"/) l[NR] = $(i+1) }}
        END {c = 0; for (k = 3; k <= NR; k++) if (k in t) {s += 1 / t[k]; u += m[k]; c++}
             if (c) printf "%s world=%d tokens/s/GPU=%.0f MFU=%.1f%% mem=%.1fGiB (%d timed) loss %s..%s\n",
                name, n, c / s, 100 * u / c, g[NR], c, l[1], l[NR];
             else print name ": no timed iterations"}' "$out/$name.jsonl" 2>/dev/null
    [ $rc -eq 0 ] || { echo "$name exited $rc:"; tail -4 "$out/$name.log"; }
}
peer() {
    n=$1; shift
    env -u LD_LIBRARY_PATH timeout 300 torchrun --standalone --nproc_per_node "$n" \
        .gpukit/torch_peer.py "$@" 2>&1 | grep -E '^torch|Error|error' | tail -3
}
