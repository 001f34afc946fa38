#!/usr/bin/env python3
# compare.py: the comparison run.sh meant to make.  Its grep pattern
# ("loss":[^,]*) missed the space that --log-json writes after each colon,
# so it matched nothing and printed DIFFER for every pair; this reads the
# logs back and compares each iteration's loss and gradient norm exactly.
#   python3 compare.py      (in this directory)
import json

for name in ["d15-bf16", "d15-delayed", "d15-tensorwise", "d15-blockwise", "moeA-delayed"]:
    runs = []
    for k in (1, 2):
        with open(f"{name}-{k}.jsonl") as f:
            recs = [json.loads(line) for line in f]
        runs.append([(r["loss"], r["grad_norm"]) for r in recs if "loss" in r])
    same = runs[0] == runs[1] and len(runs[0]) > 0
    print(f"{name}: {len(runs[0])} iterations, {'identical' if same else 'DIFFER'}")
