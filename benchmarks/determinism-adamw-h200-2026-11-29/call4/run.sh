#!/bin/sh
# Device call 4 of session 14 (2026-11-29): t/train-cuda.t in full on
# call 3's staging folder (its plan-21 lanes cases had not run on a GPU).
#   cd build-run && . .gpukit/env.sh && timeout 570 t/train-cuda.t > $OUT/train-cuda.txt 2>&1
cd "$(dirname "$0")"
. .gpukit/env.sh
timeout 570 t/train-cuda.t > "$1/train-cuda.txt" 2>&1
echo "train-cuda: exit $?, $(grep -c '^ok' "$1/train-cuda.txt") ok, $(grep -c '^not ok' "$1/train-cuda.txt") not ok"
gzip "$1/train-cuda.txt"
