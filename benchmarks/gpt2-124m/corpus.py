"""corpus.py OUT.jsonl: a learnable corpus from what any machine with Python
has -- the Python standard library's own sources (about 11 MB, PSF licence),
one JSON line {"text": ...} per .py file, in the order of their paths, test
suites and vendored or generated directories left out.  The content is that
of the Python running this (its version is printed); the same Python gives
the same file.  Standard library only."""
import hashlib, json, os, sys, sysconfig

root = sysconfig.get_paths()["stdlib"]
skip = {"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages",
        "__pycache__", "ensurepip", "turtledemo"}
files = []
for d, subs, names in os.walk(root):
    subs[:] = sorted(s for s in subs if s not in skip and not s.startswith("config-"))
    files += [os.path.join(d, n) for n in names if n.endswith(".py")]
files.sort(key=lambda f: os.path.relpath(f, root))
n = size = 0
h = hashlib.sha256()
with open(sys.argv[1], "w", encoding="utf-8") as out:
    for f in files:
        try:
            with open(f, encoding="utf-8") as src:
                text = src.read()
        except (UnicodeDecodeError, OSError):
            continue
        line = json.dumps({"text": text}) + "\n"
        out.write(line)
        h.update(line.encode())
        n += 1
        size += len(text.encode())
print(f"corpus: {n} files, {size} bytes of Python {sys.version.split()[0]}'s standard library "
      f"({root}); sha256 {h.hexdigest()[:16]}")
