#!/bin/sh
# Session 16, call 3 (one H200): the deterministic backward in tiles.
# t/attn-cudnn.t whole (its new test_det_tiles: tiles under a lowered
# limit against the CPU and the kernels, the kernels' fallback, and B=2
# S=8192 with 32 heads, 8 GiB of dS at once); the 1.5B shape at seq 8192
# under --deterministic-mode twice (the same bits?) beside the usual run
# (its cost; before the tiles such shapes ran gridlm's kernels).
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
timeout 300 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn: exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok|tiles|smallest tile|workspace' "$out/attn-cudnn.log" | head -20
b=src/tools/gridlm-train
l8k="$s15 --seq-length 8192 --max-position-embeddings 8192"
run $b s15-8k 14 1 $l8k
run $b s15-8k-det1 14 1 $l8k --deterministic-mode
run $b s15-8k-det2 14 1 $l8k --deterministic-mode
same s15-8k-det1 s15-8k-det2
grep -iE "determin|workspace|tile" "$out/s15-8k-det1.log" | head -5
GRIDLM_PROFILE=1 run $b s15-8k-det-prof 4 1 $l8k --deterministic-mode
grep -iE "attention calls|tiles" "$out/s15-8k-det-prof.log" | head -5
cd "$out" && tar czf "$OUTD/logs.tgz" *
