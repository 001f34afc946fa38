#!/bin/sh
# Session 15, call 5 (one H200), commit 7e57296: issue 13's 128-expert
# shape beside the PyTorch MoE peer, and issue 12's ratios (the 1.5B shape
# and 8 layers of the 8B shape, bf16 against FP8 delayed), in one call.
set -u
cd "$(dirname "$0")" && . ./gpu-lib.sh && begin "$1"
run src/tools/gridlm-train moeB 24 1 $moeB
peer peer-moeB --dim 2048 --layers 4 --heads 32 --kv-heads 4 --ffn 768 --vocab 128256 --seq 4096 --mbs 1 --experts 128 --topk 8 --moe-ffn 768
run src/tools/gridlm-train s15 14 2 $s15
run src/tools/gridlm-train s15-D 14 2 $s15 $D
run src/tools/gridlm-train s8b 12 1 $s8b
run src/tools/gridlm-train s8b-D 12 1 $s8b $D
