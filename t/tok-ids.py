#!/usr/bin/env python3
"""tok-ids.py: gridlm loads a tokenizer.json only where Hugging Face
`tokenizers` would give every token the same id.  Run by t/tok-ids.t;
prints TAP.

Each case below changes the ids of a small tokenizer.json (added tokens
beyond 32 bits, at 2^31, after a gap, on a vocabulary token's id, listed
twice; vocabulary ids at 2^31, repeated, negative; an empty vocabulary;
post-processor ids).  For each: where Hugging Face refuses the file,
gridlm refuses it too; where gridlm loads it, Hugging Face loads it and
both encode a text to the same ids, with and without special tokens;
and gridlm refuses exactly the cases listed as refused, which are those
where the file's ids are not the ones Hugging Face uses (it ignores an
added token's id and numbers it itself), or would make gridlm's tables
as large as an id rather than the file.
"""
import copy
import json
import os
import subprocess
import sys

from tokenizers import Tokenizer

WORK, ENCODE = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)
n_test = 0
failed = 0


def ok(cond, name, diag=None):
    global n_test, failed
    n_test += 1
    print(("ok %d - %s" if cond else "not ok %d - %s") % (n_test, name))
    if not cond:
        failed += 1
        for line in str(diag or "").splitlines():
            print("# " + line)
    sys.stdout.flush()


BASE = {
    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                      "use_regex": True},
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
              "ignore_merges": False, "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3},
              "merges": ["a b"]},
}
TEXT = "ab a b <x> <y>a"


def tok(i, content="<x>", lstrip=False):
    return {"id": i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": False,
            "normalized": False, "special": True}


def template(i):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [], "special_tokens": {"<x>": {"id": "<x>", "ids": [i], "tokens": ["<x>"]}}}


def added(*toks):
    return lambda d: d["added_tokens"].extend(toks)


def vocab(**kv):
    return lambda d: d["model"]["vocab"].update(kv)


def both(*fs):
    def f(d):
        for g in fs:
            g(d)
    return f


# name, change, gridlm refuses it
CASES = [
    ("intact", lambda d: None, False),
    ("added tokens 4 and 5", added(tok(4), tok(5, "<y>")), False),
    ("added id 2^32", added(tok(2**32)), True),
    ("added id 2^31", added(tok(2**31)), True),
    ("added id 2^31-1", added(tok(2**31 - 1)), True),
    ("added id after a gap", added(tok(7)), True),
    ("added id of a vocabulary token", added(tok(1)), True),
    ("added id negative", added(tok(-1)), True),
    ("added id not an integer", added(tok(4.0)), True),
    ("vocabulary token added with its id", added(tok(2, "ab")), False),
    ("vocabulary token added with another id", added(tok(9, "ab")), True),
    ("added twice, one id", added(tok(4), tok(4, lstrip=True)), False),
    ("added twice, lstrip first", added(tok(4, lstrip=True), tok(4)), False),
    ("added twice, two ids", added(tok(4), tok(5)), True),
    ("two added tokens, one id", added(tok(4), tok(4, "<y>")), True),
    ("added token with empty content", added(tok(4, "")), False),
    ("vocabulary id 2^32", vocab(c=2**32), True),
    ("vocabulary id 2^31", vocab(c=2**31), True),
    ("vocabulary id 2^31-1", vocab(c=2**31 - 1), True),
    ("vocabulary id repeated", vocab(c=1), True),
    ("vocabulary id negative", vocab(c=-1), True),
    ("empty vocabulary", lambda d: d["model"].update({"vocab": {}, "merges": []}), True),
    ("post-processor id of a token", both(added(tok(4)), lambda d: d.update(post_processor=template(4))), False),
    ("post-processor id beyond the tokens", both(added(tok(4)), lambda d: d.update(post_processor=template(99))), True),
]

rec = os.path.join(WORK, "text.rec")
with open(rec, "wb") as f:
    b = TEXT.encode()
    f.write(b"%d\n" % len(b) + b)

print("1..%d" % len(CASES))
for k, (name, change, refuse) in enumerate(CASES):
    d = copy.deepcopy(BASE)
    change(d)
    text = json.dumps(d)
    try:
        hf = Tokenizer.from_str(text)
        hf_ids = [hf.encode(TEXT, add_special_tokens=False).ids, hf.encode(TEXT).ids]
    except Exception as e:
        hf, hf_ids = None, str(e)
    path = os.path.join(WORK, "case%d" % k)
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        f.write(text)
    runs = [subprocess.run([ENCODE, os.path.join(path, "tokenizer.json"), rec] + extra,
                           capture_output=True, text=True) for extra in ([], ["--special"])]
    loaded = all(r.returncode == 0 for r in runs)
    gl_ids = [[int(x) for x in r.stdout.split()] for r in runs] if loaded else runs[0].stderr
    if refuse:
        ok(not loaded and "error" in runs[0].stderr, "%s: gridlm refuses it" % name,
           "gridlm %s; Hugging Face %s" % (gl_ids, hf_ids))
    elif hf is None:
        ok(False, "%s: Hugging Face refuses it, gridlm must too" % name, hf_ids)
    else:
        ok(loaded and gl_ids == hf_ids, "%s: same ids as Hugging Face %s" % (name, hf_ids),
           "gridlm %s" % gl_ids)
sys.exit(1 if failed else 0)
