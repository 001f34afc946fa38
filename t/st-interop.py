"""st-interop.py: the Python safetensors library's side of t/st-interop.t.

  st-interop.py write-py DIR   write DIR/py.safetensors and DIR/py-sharded/
                               with the library, and the dump gridlm must
                               print for each (DIR/expected*.txt)
  st-interop.py check FILE|DIR read what t/st-tool wrote with the library
                               and check every value; exit 1 on a mismatch

Expected values come from numpy (fp16 conversions) or from the bit
patterns themselves (bf16), never from gridlm's code.
"""
import json
import os
import sys

import numpy as np
import safetensors
from safetensors.numpy import save_file


def write_bf16(path, tensors, metadata):
    """Write a file with BF16 tensors given as uint16 bit patterns."""
    try:  # safetensors >= 0.8: raw pointers
        from safetensors import TensorSpec, serialize_file
        specs = {}
        for name, (dtype, arr) in tensors.items():
            specs[name] = TensorSpec(dtype=dtype, shape=list(arr.shape),
                                     data_ptr=arr.ctypes.data, data_len=arr.nbytes)
        serialize_file(specs, path, metadata=metadata)
    except ImportError:  # older: dicts with bytes
        from safetensors import serialize_file
        serialize_file({n: {"dtype": d, "shape": list(a.shape), "data": a.tobytes()}
                        for n, (d, a) in tensors.items()}, path, metadata=metadata)


def dump_line(name, dtype, arr, bits):
    shape = ",".join(str(s) for s in arr.shape)
    if bits is None:
        return f"{name} {dtype} {shape} -"
    return f"{name} {dtype} {shape} " + " ".join(f"{int(b):08x}" for b in bits.ravel())


def write_py(d):
    rng = np.random.default_rng(7)
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    f16 = np.concatenate([rng.standard_normal(8) * 1000,
                          [6e-8, -6e-5, 65504, np.inf, -0.0]]).astype(np.float16)
    f16_2 = rng.standard_normal((2, 5)).astype(np.float16)
    bf16_bits = rng.integers(0, 65536, size=(2, 3), dtype=np.uint16)
    nan = ((bf16_bits & 0x7F80) == 0x7F80) & ((bf16_bits & 0x7F) != 0)
    bf16_bits[nan] = 0x3F80
    i64 = np.array([1, -2], dtype=np.int64)

    # One file, written by the library with a BF16 tensor among others.
    write_bf16(os.path.join(d, "py.safetensors"),
               {"w.f32": ("float32", f32), "w.f16": ("float16", f16),
                "w.bf16": ("bfloat16", bf16_bits), "ids": ("int64", i64)},
               {"format": "pt"})
    lines = sorted([
        dump_line("w.f32", "F32", f32, f32.view(np.uint32)),
        dump_line("w.f16", "F16", f16, f16.astype(np.float32).view(np.uint32)),
        dump_line("w.bf16", "BF16", bf16_bits, bf16_bits.astype(np.uint32) << 16),
        dump_line("ids", "I64", i64, None),
    ]) + ["meta format=pt"]
    with open(os.path.join(d, "expected.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")

    # A sharded model directory, as Hugging Face lays it out.
    sd = os.path.join(d, "py-sharded")
    os.makedirs(sd)
    save_file({"a": f32}, os.path.join(sd, "model-00001-of-00002.safetensors"))
    save_file({"b": f16_2, "c": f32.T.copy()},
              os.path.join(sd, "model-00002-of-00002.safetensors"))
    index = {"metadata": {"total_size": int(f32.nbytes * 2 + f16_2.nbytes)},
             "weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors",
                            "c": "model-00002-of-00002.safetensors"}}
    with open(os.path.join(sd, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f)
    lines = sorted([
        dump_line("a", "F32", f32, f32.view(np.uint32)),
        dump_line("b", "F16", f16_2, f16_2.astype(np.float32).view(np.uint32)),
        dump_line("c", "F32", f32.T, f32.T.copy().view(np.uint32)),
    ])
    with open(os.path.join(d, "expected-sharded.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def bf16_nearest(x):
    """fp32 -> bf16 bits by choosing the nearer neighbour in float64."""
    out = np.empty(x.shape, dtype=np.uint16)
    for i, v in enumerate(x.ravel()):
        u = int(np.float32(v).view(np.uint32))
        sign, mag = u & 0x80000000, u & 0x7FFFFFFF
        lo = mag >> 16
        hi = lo + 1
        lov = float(np.uint32(lo << 16).view(np.float32))
        hiv = float(np.uint32(hi << 16).view(np.float32)) if hi < 0x7F80 else 2.0 ** 128
        a = abs(float(v))
        pick = lo if a - lov < hiv - a else hi if hiv - a < a - lov else (lo if lo % 2 == 0 else hi)
        out.ravel()[i] = (sign >> 16) | pick
    return out


def expected_values():
    i = np.arange(35, dtype=np.float32)
    x = (i / np.float32(7) - np.float32(3)).reshape(5, 7)
    big = np.arange(4096, dtype=np.float32) * np.float32(0.37) - np.float32(700)
    big[0], big[1], big[2] = np.float32(1e-7), np.float32(-3e-8), np.float32(70000)
    return x, big


def check_tensors(get, get_raw, names):
    x, big = expected_values()
    bad = []
    if not np.array_equal(get("f32").view(np.uint32), x.view(np.uint32)):
        bad.append("f32")
    with np.errstate(over="ignore"):
        if not np.array_equal(get("f16").view(np.uint16), x.astype(np.float16).view(np.uint16)):
            bad.append("f16")
        if not np.array_equal(get("big").view(np.uint16), big.astype(np.float16).view(np.uint16)):
            bad.append("big")
    dtype, shape, data = get_raw("bf16")
    got = np.frombuffer(bytes(data), dtype="<u2").reshape(shape)
    if dtype != "BF16" or not np.array_equal(got, bf16_nearest(x)):
        bad.append("bf16")
    if sorted(names) != ["bf16", "big", "f16", "f32"]:
        bad.append("names %s" % sorted(names))
    return bad


def check(path):
    if os.path.isdir(path):
        with open(os.path.join(path, "model.safetensors.index.json")) as f:
            wm = json.load(f)["weight_map"]
        files = {n: os.path.join(path, s) for n, s in wm.items()}
        if len(set(files.values())) < 2:
            print("expected several shards, got", set(files.values()))
            return 1
    else:
        files = {}
    def file_of(name):
        return files.get(name, path)
    def get(name):
        with safetensors.safe_open(file_of(name), framework="numpy") as f:
            return f.get_tensor(name)
    def get_raw(name):
        for n, t in safetensors.deserialize(open(file_of(name), "rb").read()):
            if n == name:
                return t["dtype"], t["shape"], t["data"]
    names = list(files) if files else [n for n, _ in safetensors.deserialize(open(path, "rb").read())]
    bad = check_tensors(get, get_raw, names)
    with safetensors.safe_open(file_of("f32"), framework="numpy") as f:
        if f.metadata() != {"format": "pt"}:
            bad.append("metadata %r" % f.metadata())
    if bad:
        print("mismatch:", ", ".join(bad))
        return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write-py":
        write_py(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2]))
    else:
        sys.exit("usage: st-interop.py write-py DIR | check FILE|DIR")
