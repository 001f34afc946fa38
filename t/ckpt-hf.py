"""ckpt-hf.py: the Hugging Face side of t/ckpt-hf.t.

  ckpt-hf.py make DIR DTYPE TIED SHARDED [qwen2|qwen3]
                                           a tiny LlamaForCausalLM directory
                                           (config.json, safetensors written
                                           by the safetensors library); with
                                           qwen2 a Qwen2ForCausalLM (q, k, v
                                           biases), with qwen3 a
                                           Qwen3ForCausalLM (q_norm, k_norm)
  ckpt-hf.py compare ORIG EXPORTED DTYPE   every tensor and config field of an
                                           export equals the original
  ckpt-hf.py transformers EXPORTED ORIG    transformers loads the export with
                                           the original weights (exit 77 when
                                           transformers/torch are missing)

Values are k/8 with |k| < 128, exact in bf16, fp16 and fp32, from
crc32(name) and the element index (t/ckpt-hf-check.c computes the same).
"""
import json
import os
import sys
import zlib

import numpy as np
import safetensors
from safetensors.numpy import save_file

H, F, L, HQ, HKV, D, V = 8, 12, 2, 2, 1, 4, 10


def value(name, n):
    k = (zlib.crc32(name.encode()) + 7 * np.arange(n, dtype=np.int64)) % 255 - 127
    return (k / 8.0).astype(np.float32)


def weights(tied, qwen2=False, qwen3=False):
    shapes = {"model.embed_tokens.weight": (V, H), "model.norm.weight": (H,)}
    for l in range(L):
        p = f"model.layers.{l}."
        shapes[p + "input_layernorm.weight"] = (H,)
        shapes[p + "self_attn.q_proj.weight"] = (HQ * D, H)
        shapes[p + "self_attn.k_proj.weight"] = (HKV * D, H)
        shapes[p + "self_attn.v_proj.weight"] = (HKV * D, H)
        shapes[p + "self_attn.o_proj.weight"] = (H, HQ * D)
        shapes[p + "post_attention_layernorm.weight"] = (H,)
        shapes[p + "mlp.gate_proj.weight"] = (F, H)
        shapes[p + "mlp.up_proj.weight"] = (F, H)
        shapes[p + "mlp.down_proj.weight"] = (H, F)
        if qwen2:
            shapes[p + "self_attn.q_proj.bias"] = (HQ * D,)
            shapes[p + "self_attn.k_proj.bias"] = (HKV * D,)
            shapes[p + "self_attn.v_proj.bias"] = (HKV * D,)
        if qwen3:
            shapes[p + "self_attn.q_norm.weight"] = (D,)
            shapes[p + "self_attn.k_norm.weight"] = (D,)
    if not tied:
        shapes["lm_head.weight"] = (V, H)
    return {n: value(n, int(np.prod(s))).reshape(s) for n, s in shapes.items()}


def config(tied, dtype, qwen2=False, qwen3=False):
    if qwen3:   # Qwen3Config's keys (attention_bias, no mlp_bias; head_dim)
        return {
            "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L,
            "num_attention_heads": HQ, "num_key_value_heads": HKV, "head_dim": D,
            "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": None,
            "vocab_size": V, "max_position_embeddings": 64, "tie_word_embeddings": tied,
            "torch_dtype": dtype, "hidden_act": "silu", "attention_bias": False,
            "use_sliding_window": False, "sliding_window": None, "max_window_layers": 2,
            "layer_types": ["full_attention"] * L, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
        }
    if qwen2:   # Qwen2Config's keys (no attention_bias, mlp_bias)
        return {
            "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
            "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L,
            "num_attention_heads": HQ, "num_key_value_heads": HKV,
            "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "rope_scaling": None,
            "vocab_size": V, "max_position_embeddings": 64, "tie_word_embeddings": tied,
            "torch_dtype": dtype, "hidden_act": "silu", "use_sliding_window": False,
            "sliding_window": 64, "max_window_layers": 2, "attention_dropout": 0.0,
            "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
        }
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": H, "intermediate_size": F, "num_hidden_layers": L,
        "num_attention_heads": HQ, "num_key_value_heads": HKV, "head_dim": D,
        "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        "vocab_size": V, "max_position_embeddings": 64, "tie_word_embeddings": tied,
        "torch_dtype": dtype, "hidden_act": "silu", "attention_bias": False,
        "bos_token_id": 1, "eos_token_id": [2, 3], "initializer_range": 0.02,
    }


def save(path, tensors, dtype):
    if dtype == "float32":
        save_file(tensors, path, metadata={"format": "pt"})
    elif dtype == "float16":
        save_file({n: t.astype(np.float16) for n, t in tensors.items()}, path,
                  metadata={"format": "pt"})
    else:  # bfloat16: the upper halves of the (exact) fp32 patterns
        bits = {n: (t.view(np.uint32) >> 16).astype(np.uint16) for n, t in tensors.items()}
        try:
            from safetensors import TensorSpec, serialize_file
            serialize_file({n: TensorSpec(dtype="bfloat16", shape=list(b.shape),
                                          data_ptr=b.ctypes.data, data_len=b.nbytes)
                            for n, b in bits.items()}, path, metadata={"format": "pt"})
        except ImportError:
            from safetensors import serialize_file
            serialize_file({n: {"dtype": "bfloat16", "shape": list(b.shape),
                                "data": b.tobytes()} for n, b in bits.items()},
                           path, metadata={"format": "pt"})


def make(d, dtype, tied, sharded, qwen2=False, qwen3=False):
    os.makedirs(d, exist_ok=True)
    w = weights(tied, qwen2, qwen3)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config(tied, dtype, qwen2, qwen3), f, indent=2)
    if not sharded:
        save(os.path.join(d, "model.safetensors"), w, dtype)
        return
    names = list(w)
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    wm = {}
    for i, part in enumerate(parts):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        save(os.path.join(d, fn), {n: w[n] for n in part}, dtype)
        wm.update({n: fn for n in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": wm}, f)


def read_dir(d):
    """name -> (dtype, raw little-endian bytes, shape), through the index."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        for n, t in safetensors.deserialize(open(os.path.join(d, fn), "rb").read()):
            out[n] = (t["dtype"], bytes(t["data"]), t["shape"])
    return out


def as_f32(dtype, data, shape):
    if dtype == "F32":
        return np.frombuffer(data, "<f4").reshape(shape)
    if dtype == "F16":
        return np.frombuffer(data, "<f2").astype(np.float32).reshape(shape)
    if dtype == "BF16":
        return (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32).reshape(shape)
    raise ValueError(dtype)


def compare(orig, exported, dtype):
    bad = []
    a, b = read_dir(orig), read_dir(exported)
    if sorted(a) != sorted(b):
        bad.append("names differ: only in original %s, only in export %s"
                   % (sorted(set(a) - set(b)), sorted(set(b) - set(a))))
    want_dt = {"fp32": "F32", "bf16": "BF16", "fp16": "F16"}[dtype]
    for n in sorted(set(a) & set(b)):
        if b[n][0] != want_dt:
            bad.append(f"{n}: dtype {b[n][0]}, want {want_dt}")
        if list(a[n][2]) != list(b[n][2]):
            bad.append(f"{n}: shape {b[n][2]}, want {a[n][2]}")
            continue
        x, y = as_f32(*a[n]), as_f32(*b[n])
        if not np.array_equal(x.view(np.uint32), y.view(np.uint32)):
            bad.append(f"{n}: values differ")
    ca = json.load(open(os.path.join(orig, "config.json")))
    cb = json.load(open(os.path.join(exported, "config.json")))
    tname = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype]
    for k, v in ca.items():
        want = tname if k == "torch_dtype" else v
        if cb.get(k) != want:
            bad.append(f"config {k}: {cb.get(k)!r}, want {want!r}")
    if bad:
        print("\n".join(bad))
        return 1
    return 0


def load_transformers(exported, orig):
    try:
        import torch
        from transformers import LlamaForCausalLM
    except ImportError:
        return 77
    m = LlamaForCausalLM.from_pretrained(exported, torch_dtype=torch.float32)
    sd = m.state_dict()
    a = read_dir(orig)
    bad = [n for n, t in a.items()
           if not np.array_equal(sd[n].numpy(), as_f32(*t))]
    if bad:
        print("transformers loaded different values for", bad)
        return 1
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        logits = m(ids).logits
    if not torch.isfinite(logits).all():
        print("non-finite logits")
        return 1
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) in (5, 6) and a[0] == "make":
        make(a[1], a[2], a[3] == "tied", a[4] == "sharded", a[5:] == ["qwen2"],
             a[5:] == ["qwen3"])
    elif len(a) == 4 and a[0] == "compare":
        sys.exit(compare(a[1], a[2], a[3]))
    elif len(a) == 3 and a[0] == "transformers":
        sys.exit(load_transformers(a[1], a[2]))
    else:
        sys.exit(__doc__)
