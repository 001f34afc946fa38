#!/usr/bin/env python3
"""data-megatron.py: gridlm's sample indices against Megatron-LM's
definition, with numpy's RandomState as the independent generator
(t/data-megatron.t).

For each case the dataset's sequence lengths are read from its .idx with
numpy, Megatron's GPTDataset steps are redone here (its _get_num_epochs,
the 80% rule for a separate last epoch, _build_document_index with
RandomState.shuffle, helpers.build_sample_idx, _build_shuffle_index), and
the result must equal the .npy files gridlm wrote to its cache.
"""
import glob
import os
import struct
import subprocess
import sys

import numpy as np

BUILD, PREFIX, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
n = 0
bad = 0


def ok(c, name):
    global n, bad
    n += 1
    print(("ok %d - %s" if c else "not ok %d - %s") % (n, name))
    bad += not c
    sys.stdout.flush()


def lengths_of(prefix):
    idx = open(prefix + ".idx", "rb").read()
    seqs, = struct.unpack("<Q", idx[18:26])
    return np.frombuffer(idx, dtype=np.int32, count=seqs, offset=34)


def split_bounds(split, num):
    w = [float(x) for x in split.split(",")]
    w += [0.0] * (3 - len(w))
    w = [x / sum(w) for x in w]
    b = [0]
    for x in w:
        b.append(b[-1] + int(round(x * float(num))))
    d = b[-1] - num
    return [b[0]] + [x - d for x in b[1:]]


def doc_index(docs, epochs, rs, separate):
    if not separate or epochs == 1:
        di = np.mgrid[0:epochs, 0:len(docs)][1]
        di[:] = docs
        di = di.reshape(-1).astype(np.int32)
        rs.shuffle(di)
        return di
    return np.concatenate((doc_index(docs, epochs - 1, rs, False), doc_index(docs, 1, rs, False)))


def sample_index(sizes, di, s, epochs, tpe):
    num = (epochs * tpe - 1) // s
    out = np.zeros((num + 1, 2), dtype=np.int64)
    i, off = 0, 0
    for k in range(1, num + 1):
        rem = s + 1
        while rem != 0:
            length = sizes[di[i]] - off
            rem -= length
            if rem <= 0:
                off += rem + length - 1
                rem = 0
            else:
                i += 1
                off = 0
        out[k] = (i, off)
    return out


def shuffle_index(num, total, rs):
    first = np.arange(0, num, dtype=np.uint32)
    rs.shuffle(first)
    if num == total:
        return first
    last = np.arange(num, total, dtype=np.uint32)
    rs.shuffle(last)
    return np.concatenate((first, last))


def megatron(sizes, begin, end, s, num_samples, seed):
    docs = np.arange(begin, end, dtype=np.int32)
    tpe = int(np.sum(sizes[docs]))
    epochs, tokens = 1, tpe
    while tokens < num_samples * s + 1:
        epochs += 1
        tokens += tpe
    separate = False
    if epochs > 1:
        sans = ((epochs - 1) * tpe - 1) // s
        per = (tpe - 1) // s
        separate = (num_samples - sans) < int(0.80 * per)
    rs = np.random.RandomState(seed)
    di = doc_index(docs, epochs, rs, separate)
    si = sample_index(sizes, di, s, epochs, tpe)
    sh = shuffle_index(sans if separate else si.shape[0] - 1, si.shape[0] - 1, rs)
    return epochs, separate, di, si, sh


sizes = lengths_of(PREFIX)
b0 = split_bounds("969,30,1", len(sizes))
per_epoch = (int(np.sum(sizes[b0[0]:b0[1]])) - 1) // 48
cases = [
    ("969,30,1", "train", 48, 3 * per_epoch - per_epoch // 20, 42),  # 3 epochs, the last one mixed in
    ("969,30,1", "train", 64, 10, 1234),       # one epoch
    ("969,30,1", "train", 64, 2000, 1234),     # several epochs
    ("969,30,1", "train", 32, 0, 5),           # num_samples 0: one epoch
    ("90,10,0", "train", 50, 900, 7),          # a separate last epoch (or not: both are checked)
    ("90,10,0", "valid", 16, 300, 7),
    ("50,50", "valid", 128, 40, 31337),
]
seen_separate = set()
for i, (split, name, s, num, seed) in enumerate(cases):
    cache = os.path.join(WORK, "cache%d" % i)
    r = subprocess.run([os.path.join(BUILD, "t/data-index-build"), PREFIX, cache, split, name, str(s),
                        str(num), str(seed)], capture_output=True, text=True)
    if r.returncode != 0:
        ok(False, "case %d builds: %s" % (i, r.stderr.strip()))
        continue
    b = split_bounds(split, len(sizes))
    which = {"train": 0, "valid": 1, "test": 2}[name]
    epochs, separate, di, si, sh = megatron(sizes, b[which], b[which + 1], s, num, seed)
    seen_separate.add(separate)
    got = {}
    for what in ("document_index", "sample_index", "shuffle_index"):
        f = glob.glob(os.path.join(cache, "*-GPTDataset-%s-%s.npy" % (name, what)))
        got[what] = np.load(f[0]) if len(f) == 1 else None
    desc = "split %s %s, seq %d, %d samples, seed %d (%d epoch%s%s)" % (
        split, name, s, num, seed, epochs, "s" if epochs > 1 else "", ", separate last" if separate else "")
    ok(got["document_index"] is not None and np.array_equal(got["document_index"], di),
       "document index as Megatron's: " + desc)
    ok(got["sample_index"] is not None and np.array_equal(got["sample_index"], si),
       "sample index as Megatron's: " + desc)
    ok(got["shuffle_index"] is not None and np.array_equal(got["shuffle_index"], sh.astype(np.int64)),
       "shuffle index as Megatron's: " + desc)
ok(seen_separate == {True, False}, "the cases cover a separate last epoch and a mixed-in one")
print("1..%d" % n)
sys.exit(1 if bad else 0)
