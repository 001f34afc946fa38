#!/bin/sh
# Session 15, call 4 (one H200): --deterministic-mode through cuDNN's
# deterministic backward graph: t/attn-cudnn.t whole with timings
# (GL_ATTN_CUDNN_BENCH=1), and training runs twice each under the flag
# (the same bits?) beside the usual runs: issue 13's 8-expert shape and
# the 1.5B shape.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
GL_ATTN_CUDNN_BENCH=1 timeout 300 t/attn-cudnn.t > "$out/attn-cudnn.log" 2>&1
echo "attn-cudnn: exit $? $(grep -c '^ok' "$out/attn-cudnn.log") ok, $(grep -c '^not ok' "$out/attn-cudnn.log") not ok $(el)"
grep -E '^not ok|plans built|bench|determin|workspace' "$out/attn-cudnn.log" | head -40
run src/tools/gridlm-train moeA-det1 16 1 $moeA --deterministic-mode
run src/tools/gridlm-train moeA-det2 16 1 $moeA --deterministic-mode
same moeA-det1 moeA-det2
run src/tools/gridlm-train moeA 16 1 $moeA
run src/tools/gridlm-train s15-det1 14 2 $s15 --deterministic-mode
run src/tools/gridlm-train s15-det2 14 2 $s15 --deterministic-mode
same s15-det1 s15-det2
grep -iE "determin|workspace" "$out/s15-det1.log" | head -5
