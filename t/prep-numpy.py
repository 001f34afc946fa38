#!/usr/bin/env python3
"""prep-numpy.py: Megatron-format interop checked with numpy (t/prep-numpy.t).

write-megatron DIR: write DIR/meg.{bin,idx} exactly as Megatron-LM's
  _IndexWriter does (struct-packed header, then numpy arrays' bytes) with
  known tokens, and DIR/meg.expected with the tokens of each document.
check EXPECTED INSPECT PREFIX CORPUS TOKENIZER: compare gridlm-prep
  --inspect's output for meg with EXPECTED; then read a dataset gridlm-prep wrote the
  way Megatron's _IndexReader does (np.memmap/np.frombuffer at the same
  offsets) and compare every document with Hugging Face's encoding of the
  corpus plus the end-of-document token.
"""
import json
import struct
import sys

import numpy as np

n = 0
bad = 0


def ok(c, name):
    global n, bad
    n += 1
    print(("ok %d - %s" if c else "not ok %d - %s") % (n, name))
    bad += not c


def write_megatron(d):
    rng = np.random.RandomState(5)
    docs = [rng.randint(0, 65000, size=rng.randint(0, 40)).astype(np.uint16) for _ in range(30)]
    lengths = np.array([len(x) for x in docs if len(x) > 0], dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    if len(lengths) > 1:
        pointers[1:] = np.cumsum(lengths[:-1]) * 2
    bounds, k = [0], 0
    for x in docs:
        if len(x) > 0:
            k += 1
        bounds.append(k)  # an empty document adds a boundary only
    with open(d + "/meg.bin", "wb") as f:
        for x in docs:
            f.write(x.tobytes(order="C"))
    with open(d + "/meg.idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))  # uint16
        f.write(struct.pack("<Q", len(lengths)))
        f.write(struct.pack("<Q", len(bounds)))
        f.write(lengths.tobytes(order="C"))
        f.write(pointers.tobytes(order="C"))
        f.write(np.array(bounds, dtype=np.int64).tobytes(order="C"))
    with open(d + "/meg.expected", "w") as f:
        for x in docs:
            f.write(" ".join("%d" % t for t in x) + "\n")


def check_inspect(expected, inspect_out):
    """gridlm-prep --inspect's "  tokens:" lines against the expected ones."""
    want = [l.split() for l in open(expected)]
    got = [l.split()[1:] for l in open(inspect_out) if l.startswith("  tokens:")]
    ok(got == want, "gridlm reads every document of a dataset written as Megatron writes it (%d)" % len(want))


def read_gridlm(prefix, corpus, tokpath):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokpath + "/tokenizer.json")
    eod = tok.token_to_id("<|endoftext|>")
    idx = open(prefix + ".idx", "rb").read()
    ok(idx[:9] == b"MMIDIDX\x00\x00", "magic")
    version, = struct.unpack("<Q", idx[9:17])
    code, = struct.unpack("<B", idx[17:18])
    seqs, = struct.unpack("<Q", idx[18:26])
    docs, = struct.unpack("<Q", idx[26:34])
    ok(version == 1, "version 1")
    dtype = {8: np.uint16, 4: np.int32}[code]
    ok(code == (8 if tok.get_vocab_size() < 65500 else 4), "dtype code %d as Megatron chooses" % code)
    off = 34
    lengths = np.frombuffer(idx, dtype=np.int32, count=seqs, offset=off)
    off += lengths.nbytes
    pointers = np.frombuffer(idx, dtype=np.int64, count=seqs, offset=off)
    off += pointers.nbytes
    bounds = np.frombuffer(idx, dtype=np.int64, count=docs, offset=off)
    off += bounds.nbytes
    ok(off == len(idx), "index size is exactly 34 + 12N + 8D")
    ok(bounds[0] == 0 and bounds[-1] == seqs, "document boundaries 0 ... N")
    binf = np.memmap(prefix + ".bin", mode="r", order="C")
    texts = [json.loads(l)["text"] for l in open(corpus) if l.strip()]
    ok(docs - 1 == len(texts), "one document per JSONL line (%d)" % len(texts))
    good = 0
    for i, t in enumerate(texts):
        want = tok.encode(t).ids
        if want:
            want.append(eod)
        got = []
        for s in range(bounds[i], bounds[i + 1]):
            got += np.frombuffer(binf, dtype=dtype, count=lengths[s], offset=pointers[s]).tolist()
        good += got == want
    ok(good == len(texts), "every document holds Hugging Face's tokens + eod (%d/%d)" % (good, len(texts)))
    ok(int(pointers[-1]) + int(lengths[-1]) * np.dtype(dtype).itemsize == binf.size, ".bin size matches")


if sys.argv[1] == "write-megatron":
    write_megatron(sys.argv[2])
    sys.exit(0)
if sys.argv[1] == "check":
    check_inspect(sys.argv[2], sys.argv[3])
    read_gridlm(sys.argv[4], sys.argv[5], sys.argv[6])
print("1..%d" % n)
sys.exit(1 if bad else 0)
