#!/bin/sh
# quickstart.sh: from a fresh Debian 12 or Ubuntu 22.04+ machine to a
# first gridlm run, in one command.
#
#   1. installs the Debian packages gridlm needs that are missing
#      (apt-get; through sudo when not root);
#   2. ./autogen.sh, then configures and builds in build/ (Open MPI;
#      CUDA too when nvcc is in /usr/local/cuda or on PATH);
#   3. makes a small corpus and its tokenizer with gridlm-prep (synthetic
#      text: stories, counting, tiny programs), writes it as a Megatron
#      .bin/.idx dataset, and trains the built-in "tiny" model on it with
#      two ranks on the CPU for 300 iterations (about a minute): the loss
#      falls below 1, and checkpoints land in build/quickstart/ckpt (the
#      previous quick start's are removed first).
#
# Then run ./ci-test.sh for the tests.  Set GL_CONFIGURE_FLAGS for
# configure, GL_RUN_ARGS to give gridlm-train other options instead
# (e.g. GL_RUN_ARGS="--dry-run --model tiny --device cpu").

set -e
cd "$(dirname "$0")"

# The packages: the build and test tiers of debian-packages.txt, so that
# ./ci-test.sh has what it needs afterwards too.
PACKAGES=$(awk '$1 == "build" || $1 == "test" { print $2 }' debian-packages.txt)

missing=
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "quickstart: installing$missing"
    sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends $missing
fi

[ -x configure ] || ./autogen.sh
mkdir -p build
if [ ! -f build/config.status ]; then
    (cd build && ../configure ${GL_CONFIGURE_FLAGS:-})
fi
make -C build -j"$(nproc)"

# The data: a synthetic corpus, a 512-token byte-level BPE tokenizer
# trained on it, and the corpus tokenized into corpus_text_document.{bin,idx}.
bin=build/src/tools
q=build/quickstart
mkdir -p "$q"
if [ ! -f "$q/corpus_text_document.idx" ]; then
    $bin/gridlm-prep --synthetic-corpus 2000 --seed 1 --output "$q/corpus.jsonl"
    $bin/gridlm-prep --train-tokenizer --input "$q/corpus.jsonl" --vocab-size 512 \
        --output "$q/tokenizer.json"
    $bin/gridlm-prep --input "$q/corpus.jsonl" --output-prefix "$q/corpus" \
        --tokenizer-model "$q/tokenizer.json"
fi
if [ -z "${GL_RUN_ARGS:-}" ] && [ -d "$q/ckpt" ]; then
    # The default run trains from the start and saves there: the previous
    # default run's checkpoints go first (a run with GL_RUN_ARGS keeps them).
    echo "quickstart: removing the previous quick start's checkpoints in $q/ckpt"
    rm -rf "$q/ckpt"
fi
GL_RUN_ARGS=${GL_RUN_ARGS:---model tiny --device cpu
    --data-path $q/corpus_text_document
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model $q/tokenizer.json
    --micro-batch-size 8 --global-batch-size 16 --train-iters 300
    --lr 3e-3 --min-lr 3e-4 --lr-decay-style cosine --lr-warmup-iters 20
    --log-interval 50 --eval-interval 150 --eval-iters 5
    --save $q/ckpt --save-interval 150}

# t/env.sh names the build's launcher and the settings Open MPI needs to
# run as root or with more ranks than cores.
. build/t/env.sh
echo "quickstart:" $MPIEXEC $MPIEXEC_FLAGS -n 2 $bin/gridlm-train $GL_RUN_ARGS
$MPIEXEC $MPIEXEC_FLAGS -n 2 $bin/gridlm-train $GL_RUN_ARGS
