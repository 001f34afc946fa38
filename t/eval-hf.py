"""eval-hf.py: an independent numpy oracle for t/eval-hf.t.

  eval-hf.py make DIR VARIANT          a small random LlamaForCausalLM (or
                                       Qwen2ForCausalLM: variant q)
                                       directory (config.json, safetensors
                                       written by the safetensors library)
  eval-hf.py data PREFIX VOCAB         a Megatron dataset PREFIX.bin/.idx
                                       (uint16 tokens) with awkward documents
  eval-hf.py loss DIR PREFIX SEQ [MUTANT]
                                       print "LOSS TOKENS DOCUMENTS": the mean
                                       next-token loss of the model in DIR over
                                       the documents of PREFIX, each document
                                       its own sequence of at most SEQ + 1
                                       tokens (gridlm-eval's definition),
                                       computed in float64 the way transformers'
                                       modeling_llama computes it; MUTANT
                                       computes a deliberately wrong model
                                       instead, to show the comparison can
                                       fail: no-rope-scaling, factor-8,
                                       llama31-scaling-constants (1, 4, 8192),
                                       interleaved-rope (pairs 2i, 2i+1),
                                       v4-reader (ignores rope_parameters),
                                       kv-heads-cycled (head i uses i % Hkv),
                                       gate-up-swapped, no-qkv-bias (Qwen2),
                                       gelu-exact, qk-swapped, no-positions
                                       (GPT-2), not-renormalised,
                                       lowest-experts, w1-w3-swapped (Mixtral)
  eval-hf.py unprefix DIR OUT          DIR (a GPT-2) without "transformer." in
                                       its names, as fp32, in OUT
  eval-hf.py same ORIG EXPORTED        every tensor of EXPORTED has the dtype,
                                       shape and bytes of ORIG's (export-hf's
                                       round trip), and config.json agrees

Nothing here comes from gridlm: the safetensors files are read back by a
reader of this file's own (the format is an 8-byte header length, a JSON
header, raw little-endian data), the Megatron index is written from the
format's description, and the forward pass follows transformers'
LlamaForCausalLM:

  h = embed_tokens[ids]
  per layer:
    x = rmsnorm(h, input_layernorm)          w * x / sqrt(mean(x^2) + eps)
    q, k, v = x Wq^T, x Wk^T, x Wv^T         heads of head_dim channels
    q, k = q cos + rotate_half(q) sin, ...   rotate_half(x) = [-x2, x1]: pairs
                                             (i, i + d/2), cos/sin of
                                             position * inv_freq repeated twice
    head i of Hq uses key/value head i // (Hq / Hkv)       (repeat_kv)
    a = softmax(q k^T / sqrt(head_dim) + causal mask) v
    h = h + a Wo^T
    x = rmsnorm(h, post_attention_layernorm)
    h = h + (silu(x Wgate^T) * (x Wup^T)) Wdown^T
  logits = rmsnorm(h, norm) W^T, W = lm_head or (tied) embed_tokens
  Qwen2ForCausalLM (variant q) is the same with q, k, v = x W^T + b.
  GPT2LMHeadModel (variant g), Conv1D layers y = x W + b (W [in, out]):
    h = wte[ids] + wpe[positions]
    per layer:
      q | k | v = layernorm(h, ln_1) c_attn.W + c_attn.b   (column blocks)
      h = h + attention(q, k, v) c_proj.W + c_proj.b   (as above, no RoPE)
      h = h + gelu_tanh(layernorm(h, ln_2) c_fc.W + b) mlp.c_proj.W + b
    logits = layernorm(h, ln_f) wte^T    (tied)
  MixtralForCausalLM (variant m) is the Llama form with the MLP replaced
  by the sparse MoE block: p = softmax(x G^T) over all experts (G =
  block_sparse_moe.gate), the k largest kept and divided by their sum,
  h = h + sum over those k of p_e w2_e (silu(x w1_e^T) * (x w3_e^T)).
  Qwen3MoeForCausalLM (variants n, o) is the Qwen3 form with that block
  (mlp.gate, mlp.experts.E.gate_proj/up_proj/down_proj) in each layer
  not in mlp_only_layers, renormalising the k only with norm_topk_prob.
    layernorm(x) = (x - mean) / sqrt(var + eps) w + b;  gelu_tanh(x) =
    x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  ("gelu_new")
  inv_freq_i = 1 / theta^(2i / d); with rope_scaling llama3 (Llama 3.1):
    wavelen = 2 pi / inv_freq; wavelen > L / low: inv_freq / factor;
    wavelen < L / high: unchanged; between: (1 - s) inv_freq / factor +
    s inv_freq with s = (L / wavelen - low) / (high - low), L =
    original_max_position_embeddings.
"""
import json
import math
import os
import struct
import sys

import numpy as np
from safetensors.numpy import save_file

# ---------------------------------------------------------------------------
# The model variants.  Dimensions are small but not degenerate: GQA, a
# head_dim that differs from hidden_size / heads (variant a), a vocabulary
# that is not a multiple of 128 (padded on import), both embeddings ties.

VARIANTS = {
    # fp32, untied, one file, llama3 RoPE scaling with Llama 3.2's factor,
    # head_dim 32 != 64 / 4
    "a": dict(dtype="float32", tied=False, shards=1, hidden=64, inter=96, layers=2,
              heads=4, kv=2, head_dim=32, vocab=1100, eps=1e-5, theta=500000.0,
              scaling=dict(rope_type="llama3", factor=32.0, low_freq_factor=1.0,
                           high_freq_factor=4.0, original_max_position_embeddings=8192)),
    # bf16, tied, three shards and an index, no scaling, head_dim implied
    # (hidden_size / num_attention_heads = 8), RMSNorm epsilon 1e-6
    "b": dict(dtype="bfloat16", tied=True, shards=3, hidden=64, inter=160, layers=3,
              heads=8, kv=2, head_dim=None, vocab=1000, eps=1e-6, theta=10000.0,
              scaling=None),
    # llama3 scaling with parameters other than Llama 3.1's 1 / 4 / 8192
    "c": dict(dtype="float32", tied=False, shards=1, hidden=64, inter=96, layers=2,
              heads=4, kv=2, head_dim=16, vocab=1000, eps=1e-5, theta=10000.0,
              scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=2.0,
                           high_freq_factor=8.0, original_max_position_embeddings=256)),
    # c as transformers v5 writes it: one rope_parameters object with
    # rope_theta (here 500000) inside, no rope_scaling or rope_theta
    "d": dict(dtype="float32", tied=False, shards=1, hidden=64, inter=96, layers=2,
              heads=4, kv=2, head_dim=16, vocab=1000, eps=1e-5, theta=500000.0, v5=True,
              scaling=dict(rope_type="llama3", factor=4.0, low_freq_factor=2.0,
                           high_freq_factor=8.0, original_max_position_embeddings=256)),
    # Qwen2ForCausalLM: the Llama form with biases on q, k and v; fp32,
    # tied, GQA 4:2, RoPE theta 1e6, RMSNorm epsilon 1e-6
    "q": dict(dtype="float32", tied=True, shards=1, hidden=64, inter=96, layers=2,
              heads=4, kv=2, head_dim=None, vocab=1000, eps=1e-6, theta=1000000.0,
              scaling=None, qwen2=True),
    # Qwen3ForCausalLM: the Llama form with an RMSNorm over each head of q
    # and k before RoPE (q_norm, k_norm [head_dim]); fp32, untied, GQA 4:2,
    # head_dim 32 != 64 / 4, RoPE theta 1e6, RMSNorm epsilon 1e-6
    "w": dict(dtype="float32", tied=False, shards=1, hidden=64, inter=96, layers=2,
              heads=4, kv=2, head_dim=32, vocab=1000, eps=1e-6, theta=1000000.0,
              scaling=None, qwen3=True),
    # GPT2LMHeadModel: LayerNorm with biases, GeLU (tanh) MLP of 4h,
    # learned positions, biases everywhere, Conv1D weights ([in, out]),
    # q, k, v packed in attn.c_attn, tied head; bf16, two shards
    "g": dict(dtype="bfloat16", tied=True, shards=2, hidden=64, inter=256, layers=2,
              heads=4, kv=4, head_dim=None, vocab=1000, eps=1e-5, theta=None,
              scaling=None, gpt2=True),
    # MixtralForCausalLM: the Llama form with a sparse MoE block in every
    # layer (4 experts of 48, top 2, router softmax renormalised over the
    # two); fp32, untied, two shards, GQA 4:2, theta 1e6
    "m": dict(dtype="float32", tied=False, shards=2, hidden=64, inter=48, layers=2,
              heads=4, kv=2, head_dim=None, vocab=1000, eps=1e-5, theta=1000000.0,
              scaling=None, experts=4, topk=2),
    # Qwen3MoeForCausalLM: the Qwen3 form (q_norm, k_norm) with a sparse MoE
    # block (4 experts of moe_intermediate_size 32, top 2, norm_topk_prob)
    # in layers 0, 2 and 3 and a dense SwiGLU MLP of 96 in layer 1
    # (mlp_only_layers); fp32, untied, two shards, GQA 4:2, head_dim 32
    "n": dict(dtype="float32", tied=False, shards=2, hidden=64, inter=96, layers=4,
              heads=4, kv=2, head_dim=32, vocab=1000, eps=1e-6, theta=1000000.0,
              scaling=None, qwen3=True, qwen3_moe=True, experts=4, topk=2, moe_inter=32,
              dense_layers=[1], norm_topk=True),
    # n with norm_topk_prob false: the top k's softmax weights over all
    # experts kept as they are (gridlm's --moe-router-pre-softmax)
    "o": dict(dtype="float32", tied=False, shards=1, hidden=64, inter=96, layers=3,
              heads=4, kv=2, head_dim=32, vocab=1000, eps=1e-6, theta=1000000.0,
              scaling=None, qwen3=True, qwen3_moe=True, experts=4, topk=2, moe_inter=32,
              dense_layers=[1], norm_topk=False),
}


def head_dim_of(v):
    return v["head_dim"] or v["hidden"] // v["heads"]


def gpt2_config_json(v):
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_embd": v["hidden"], "n_layer": v["layers"], "n_head": v["heads"],
        "n_positions": 128, "n_ctx": 128, "n_inner": None, "vocab_size": v["vocab"],
        "layer_norm_epsilon": v["eps"], "activation_function": "gelu_new",
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1,
        "scale_attn_weights": True, "tie_word_embeddings": True,
        "torch_dtype": v["dtype"], "bos_token_id": 1, "eos_token_id": 2,
        "initializer_range": 0.02, "use_cache": True,
    }


def config_json(v):
    if v.get("gpt2"):
        return gpt2_config_json(v)
    c = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": v["hidden"], "intermediate_size": v["inter"],
        "num_hidden_layers": v["layers"], "num_attention_heads": v["heads"],
        "num_key_value_heads": v["kv"], "rms_norm_eps": v["eps"],
        "rope_theta": v["theta"], "rope_scaling": v["scaling"],
        "vocab_size": v["vocab"], "max_position_embeddings": 128,
        "tie_word_embeddings": v["tied"], "torch_dtype": v["dtype"],
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 1, "eos_token_id": 2, "initializer_range": 0.02,
    }
    if v["head_dim"]:
        c["head_dim"] = v["head_dim"]
    if v.get("qwen2"):
        # Qwen2Config's keys: no attention_bias / mlp_bias / rope_scaling
        del c["attention_bias"], c["mlp_bias"], c["rope_scaling"]
        c.update(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                 use_sliding_window=False, sliding_window=4096, max_window_layers=28)
    if v.get("qwen3"):
        # Qwen3Config's keys: attention_bias, no mlp_bias; head_dim given
        del c["mlp_bias"]
        c.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                 use_sliding_window=False, sliding_window=None, max_window_layers=2,
                 attention_dropout=0.0)
    if v.get("qwen3_moe"):
        # Qwen3MoeConfig's keys: Qwen3's, and the experts'
        c.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
                 num_experts=v["experts"], num_experts_per_tok=v["topk"],
                 moe_intermediate_size=v["moe_inter"], norm_topk_prob=v["norm_topk"],
                 decoder_sparse_step=1, mlp_only_layers=v["dense_layers"],
                 router_aux_loss_coef=0.001, output_router_logits=False)
    elif v.get("experts"):
        # MixtralConfig's keys: no attention_bias / mlp_bias; the router's
        # aux-loss settings are training's, carried through
        del c["attention_bias"], c["mlp_bias"], c["rope_scaling"]
        c.update(architectures=["MixtralForCausalLM"], model_type="mixtral",
                 num_local_experts=v["experts"], num_experts_per_tok=v["topk"],
                 router_aux_loss_coef=0.02, output_router_logits=False,
                 router_jitter_noise=0.0, sliding_window=None, attention_dropout=0.0)
    if v.get("v5"):
        del c["rope_theta"], c["rope_scaling"]
        c["rope_parameters"] = dict(v["scaling"] or {"rope_type": "default"},
                                    rope_theta=v["theta"])
    return c


def gpt2_weights(v, rng):
    """GPT-2's tensors, Conv1D matrices stored [in, out]."""
    h, f, V = v["hidden"], v["inter"], v["vocab"]

    def conv(n_in, n_out, gain):
        return (rng.standard_normal((n_in, n_out)) * gain / math.sqrt(n_in)).astype(np.float32)

    def vec(n, mean, sd):
        return (mean + sd * rng.standard_normal(n)).astype(np.float32)

    w = {"transformer.wte.weight": (0.4 * rng.standard_normal((V, h))).astype(np.float32),
         "transformer.wpe.weight": (0.4 * rng.standard_normal((128, h))).astype(np.float32)}
    for l in range(v["layers"]):
        p = f"transformer.h.{l}."
        w[p + "ln_1.weight"], w[p + "ln_1.bias"] = vec(h, 1, 0.2), vec(h, 0, 0.2)
        w[p + "attn.c_attn.weight"] = conv(h, 3 * h, 2.0)
        w[p + "attn.c_attn.bias"] = vec(3 * h, 0, 0.5)
        w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"] = conv(h, h, 0.5), vec(h, 0, 0.2)
        w[p + "ln_2.weight"], w[p + "ln_2.bias"] = vec(h, 1, 0.2), vec(h, 0, 0.2)
        w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"] = conv(h, f, 2.0), vec(f, 0, 0.5)
        w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"] = conv(f, h, 0.5), vec(h, 0, 0.2)
        # the causal-mask buffer older checkpoints carry (not a weight)
        w[p + "attn.bias"] = np.tril(np.ones((128, 128), np.float32)).reshape(1, 1, 128, 128)
    w["transformer.ln_f.weight"], w["transformer.ln_f.bias"] = vec(h, 1, 0.2), vec(h, 0, 0.2)
    return w


def random_weights(v, seed):
    """Weights large enough that attention is far from uniform and the
    logits spread over several nats, so that a wrong RoPE convention, head
    grouping or scaling moves the loss by far more than rounding does."""
    rng = np.random.default_rng(seed)
    if v.get("gpt2"):
        return gpt2_weights(v, rng)
    h, f, d = v["hidden"], v["inter"], head_dim_of(v)
    q, kv, V = v["heads"] * d, v["kv"] * d, v["vocab"]

    def mat(rows, cols, gain):
        return (rng.standard_normal((rows, cols)) * gain / math.sqrt(cols)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)

    w = {"model.embed_tokens.weight": (0.4 * rng.standard_normal((V, h))).astype(np.float32)}
    for l in range(v["layers"]):
        p = f"model.layers.{l}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = mat(q, h, 2.0)
        w[p + "self_attn.k_proj.weight"] = mat(kv, h, 2.0)
        w[p + "self_attn.v_proj.weight"] = mat(kv, h, 1.0)
        w[p + "self_attn.o_proj.weight"] = mat(h, q, 0.5)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        if v.get("qwen3_moe") and l not in v["dense_layers"]:
            # Qwen3MoeSparseMoeBlock's names; spread router logits as below
            m, fe = p + "mlp.", v["moe_inter"]
            w[m + "gate.weight"] = mat(v["experts"], h, 3.0)
            for e in range(v["experts"]):
                w[m + f"experts.{e}.gate_proj.weight"] = mat(fe, h, 1.0)
                w[m + f"experts.{e}.up_proj.weight"] = mat(fe, h, 1.0)
                w[m + f"experts.{e}.down_proj.weight"] = mat(h, fe, 0.5)
        elif v.get("experts") and not v.get("qwen3_moe"):
            # a router with spread logits, so that the choice of experts
            # and their weights both matter
            m = p + "block_sparse_moe."
            w[m + "gate.weight"] = mat(v["experts"], h, 3.0)
            for e in range(v["experts"]):
                w[m + f"experts.{e}.w1.weight"] = mat(f, h, 1.0)
                w[m + f"experts.{e}.w2.weight"] = mat(h, f, 0.5)
                w[m + f"experts.{e}.w3.weight"] = mat(f, h, 1.0)
        else:
            w[p + "mlp.gate_proj.weight"] = mat(f, h, 1.0)
            w[p + "mlp.up_proj.weight"] = mat(f, h, 1.0)
            w[p + "mlp.down_proj.weight"] = mat(h, f, 0.5)
        if v.get("qwen2"):
            for k, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
                w[p + f"self_attn.{k}.bias"] = (0.5 * rng.standard_normal(n)).astype(np.float32)
        if v.get("qwen3"):
            # weights far from 1, so that a norm put elsewhere (after
            # RoPE, or k's weight on q) shows in the loss
            for k in ("q_norm", "k_norm"):
                w[p + f"self_attn.{k}.weight"] = \
                    (1.0 + 0.8 * rng.standard_normal(d)).astype(np.float32)
    if v["scaling"]:
        # llama3 scaling changes only the slow channels, which hardly turn
        # over a short sequence: give them more weight in q and k so that
        # scaling them wrongly shows in the loss
        sc = v["scaling"]
        inv = 1.0 / v["theta"] ** (np.arange(0, d, 2) / d)
        turns = 2 * math.pi / inv >= sc["original_max_position_embeddings"] / sc["high_freq_factor"]
        slow = np.concatenate([turns, turns])
        for l in range(v["layers"]):
            for k in ("q_proj", "k_proj"):
                t = w[f"model.layers.{l}.self_attn.{k}.weight"]
                t.reshape(-1, d, h)[:, slow, :] *= 4.0
    w["model.norm.weight"] = norm(h)
    if not v["tied"]:
        w["lm_head.weight"] = mat(V, h, 3.0)
    return w


def bf16_bits(t):
    """fp32 -> bf16 bit patterns, rounding to nearest even."""
    u = t.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_file(path, tensors, dtype):
    if dtype == "float32":
        save_file(tensors, path, metadata={"format": "pt"})
        return
    # numpy has no bfloat16: hand the library the bit patterns
    bits = {n: bf16_bits(t) for n, t in tensors.items()}
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


def make(out, name):
    v = VARIANTS[name]
    os.makedirs(out, exist_ok=True)
    w = random_weights(v, seed=ord(name))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config_json(v), f, indent=2)
    names = list(w)
    if v["shards"] == 1:
        write_file(os.path.join(out, "model.safetensors"), w, v["dtype"])
        return
    n = v["shards"]
    chunks = [names[i::n] for i in range(n)]      # interleaved: no shard is "the layer"
    weight_map, total = {}, 0
    for i, chunk in enumerate(chunks):
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        write_file(os.path.join(out, fname), {k: w[k] for k in chunk}, v["dtype"])
        for k in chunk:
            weight_map[k] = fname
            total += w[k].size * (4 if v["dtype"] == "float32" else 2)
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ---------------------------------------------------------------------------
# Reading safetensors back, without the library.

ST_DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}


def read_st(path):
    """{name: (dtype string, shape, raw bytes)} of one safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = (e["dtype"], tuple(e["shape"]), blob[base + b:base + end])
    return out


def read_dir(d):
    files = [f for f in os.listdir(d) if f.endswith(".safetensors")]
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wanted = set(json.load(f)["weight_map"].values())
        files = [f for f in files if f in wanted]
    raw = {}
    for f in sorted(files):
        raw.update(read_st(os.path.join(d, f)))
    return raw


def as_f64(dtype, shape, data):
    np_t, _ = ST_DTYPES[dtype]
    a = np.frombuffer(data, dtype=np.dtype(np_t).newbyteorder("<"))
    if dtype == "BF16":
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a.astype(np.float64).reshape(shape)


# ---------------------------------------------------------------------------
# The Megatron dataset (the format of /work/shared/reference/megatron-data.md).

def write_indexed(prefix, docs):
    """docs: a list of documents, each a list of sequences (token lists)."""
    seqs = [np.asarray(s, dtype=np.uint16) for doc in docs for s in doc]
    lengths = np.array([len(s) for s in seqs], dtype="<i4")
    offsets = np.zeros(len(seqs), dtype="<i8")
    if len(seqs) > 1:
        offsets[1:] = np.cumsum(lengths[:-1].astype(np.int64)) * 2
    bounds = [0]
    for doc in docs:
        bounds.append(bounds[-1] + len(doc))
    with open(prefix + ".bin", "wb") as f:
        for s in seqs:
            f.write(s.astype("<u2").tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write(struct.pack("<Q", 1))
        f.write(struct.pack("<B", 8))                 # uint16
        f.write(struct.pack("<Q", len(seqs)))
        f.write(struct.pack("<Q", len(bounds)))
        f.write(lengths.tobytes())
        f.write(offsets.tobytes())
        f.write(np.asarray(bounds, dtype="<i8").tobytes())


def read_indexed(prefix):
    """The documents of PREFIX as token arrays (sequences concatenated)."""
    with open(prefix + ".idx", "rb") as f:
        blob = f.read()
    assert blob[:9] == b"MMIDIDX\x00\x00"
    code = blob[17]
    n, nd = struct.unpack("<QQ", blob[18:34])
    lengths = np.frombuffer(blob, "<i4", n, 34)
    offsets = np.frombuffer(blob, "<i8", n, 34 + 4 * n)
    bounds = np.frombuffer(blob, "<i8", nd, 34 + 12 * n)
    dt = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}[code]
    tokens = np.fromfile(prefix + ".bin", dtype=dt)
    size = np.dtype(dt).itemsize
    docs = []
    for j in range(nd - 1):
        parts = [tokens[offsets[i] // size:offsets[i] // size + lengths[i]]
                 for i in range(bounds[j], bounds[j + 1])]
        docs.append(np.concatenate(parts) if parts else np.zeros(0, dtype=dt))
    return docs


def data(prefix, vocab):
    rng = np.random.default_rng(7)

    def toks(n):
        t = rng.integers(0, vocab, n)
        t[rng.random(n) < 0.1] = vocab - 1           # the last real id, next to the padding
        return t.tolist()

    docs = [
        [toks(300)],                      # longer than seq_length + 1: truncated
        [toks(1)],                        # nothing to predict: skipped
        [toks(2)],                        # one prediction
        [toks(129)],                      # exactly seq_length + 1 (128)
        [toks(12), toks(9), toks(20)],    # one document of three sequences
        [],                               # an empty document
        [toks(17)],
        [toks(31)],
        [toks(5), toks(1)],
        [toks(64)],
        [toks(3)],
        [toks(90), toks(110)],            # two sequences, truncated inside the second
    ]
    write_indexed(prefix, docs)


# ---------------------------------------------------------------------------
# The forward pass, float64.

def rms_norm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def inv_freq_of(cfg, d, mutant):
    # transformers v5 reads rope_scaling, else rope_parameters, taking
    # rope_theta from inside it first; the v4-reader mutant sees neither
    # (a converter that knows only rope_scaling and rope_theta)
    rs = cfg.get("rope_scaling") or (None if mutant == "v4-reader"
                                     else cfg.get("rope_parameters"))
    theta = (rs or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    if rs and rs.get("rope_type", rs.get("type", "default")) == "default":
        rs = None
    if rs and mutant != "no-rope-scaling":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        if mutant == "factor-8":                       # Llama 3.1's factor, not the model's
            factor = 8.0
        if mutant == "llama31-scaling-constants":      # what a converter that
            low, high, old = 1.0, 4.0, 8192             # hard-codes Llama 3.1 does
        wavelen = 2 * math.pi / inv
        scaled = np.where(wavelen > old / low, inv / factor, inv)
        s = (old / wavelen - low) / (high - low)
        smooth = (1 - s) * scaled / factor + s * scaled
        medium = ~(wavelen < old / high) & ~(wavelen > old / low)
        inv = np.where(medium, smooth, scaled)
    return inv


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rope(x, cos, sin, mutant):
    """x: [heads, n, d]; cos, sin: [n, d/2]."""
    if mutant == "interleaved-rope":                   # pairs (2i, 2i + 1), GPT-J style
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out
    c2 = np.concatenate([cos, cos], axis=-1)
    s2 = np.concatenate([sin, sin], axis=-1)
    return x * c2 + rotate_half(x) * s2


def silu(x):
    return x / (1.0 + np.exp(-x))


def log_softmax(z):
    m = z.max(axis=-1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=-1, keepdims=True))


def layer_norm(x, w, b, eps):
    m = x.mean(axis=-1, keepdims=True)
    var = ((x - m) ** 2).mean(axis=-1, keepdims=True)
    return (x - m) / np.sqrt(var + eps) * w + b


def gelu(x, mutant):
    if mutant == "gelu-exact":     # the erf form, which GPT-2 does not use
        return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_forward(cfg, W, ids, mutant=None):
    """transformers' GPT2LMHeadModel; Conv1D: y = x W + b with W [in, out]."""
    h, H = cfg["n_embd"], cfg["n_head"]
    d, eps, n = h // H, cfg["layer_norm_epsilon"], len(ids)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    x = W["transformer.wte.weight"][ids]
    if mutant != "no-positions":
        x = x + W["transformer.wpe.weight"][:n]
    for l in range(cfg["n_layer"]):
        p = f"transformer.h.{l}."
        a = layer_norm(x, W[p + "ln_1.weight"], W[p + "ln_1.bias"], eps)
        qkv = a @ W[p + "attn.c_attn.weight"] + W[p + "attn.c_attn.bias"]
        q, k, v = qkv[:, :h], qkv[:, h:2 * h], qkv[:, 2 * h:]
        if mutant == "qk-swapped":
            q, k = k, q
        q, k, v = (t.reshape(n, H, d).transpose(1, 0, 2) for t in (q, k, v))
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d) + causal
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(n, h)
        x = x + o @ W[p + "attn.c_proj.weight"] + W[p + "attn.c_proj.bias"]
        a = layer_norm(x, W[p + "ln_2.weight"], W[p + "ln_2.bias"], eps)
        u = gelu(a @ W[p + "mlp.c_fc.weight"] + W[p + "mlp.c_fc.bias"], mutant)
        x = x + u @ W[p + "mlp.c_proj.weight"] + W[p + "mlp.c_proj.bias"]
    x = layer_norm(x, W["transformer.ln_f.weight"], W["transformer.ln_f.bias"], eps)
    return x @ W["transformer.wte.weight"].T


def sparse_moe(cfg, W, p, a, mutant):
    """transformers' MixtralSparseMoeBlock: router logits a G^T, softmax
    over all experts (in float), the top k kept and renormalised to sum
    1, each token the weighted sum of its k experts'
    w2 (silu(a w1^T) * (a w3^T))."""
    E, k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    m = p + "block_sparse_moe."
    z = a @ W[m + "gate.weight"].T
    probs = np.exp(z - z.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    out = np.zeros_like(a)
    for t in range(a.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        if mutant == "lowest-experts":
            top = np.argsort(probs[t], kind="stable")[:k]
        wt = probs[t, top]
        if mutant != "not-renormalised":
            wt = wt / wt.sum()
        for e, g in zip(top, wt):
            x = a[t]
            w1, w3 = W[m + f"experts.{e}.w1.weight"], W[m + f"experts.{e}.w3.weight"]
            if mutant == "w1-w3-swapped":
                w1, w3 = w3, w1
            out[t] += g * ((silu(x @ w1.T) * (x @ w3.T)) @ W[m + f"experts.{e}.w2.weight"].T)
    assert E == W[m + "gate.weight"].shape[0]
    return out


def qwen3_moe_block(cfg, W, p, a, mutant):
    """transformers' Qwen3MoeSparseMoeBlock: router logits a G^T (G =
    mlp.gate), softmax over all experts, the top k kept and, with
    norm_topk_prob, renormalised to sum 1; each token the weighted sum of
    its k experts' down (silu(a gate^T) * (a up^T))."""
    k = cfg["num_experts_per_tok"]
    m = p + "mlp."
    z = a @ W[m + "gate.weight"].T
    probs = np.exp(z - z.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    norm = cfg.get("norm_topk_prob", False)
    if mutant == "norm-topk-flipped":
        norm = not norm
    out = np.zeros_like(a)
    for t in range(a.shape[0]):
        top = np.argsort(-probs[t], kind="stable")[:k]
        if mutant == "lowest-experts":
            top = np.argsort(probs[t], kind="stable")[:k]
        wt = probs[t, top]
        if norm:
            wt = wt / wt.sum()
        for e, g in zip(top, wt):
            x = a[t]
            wg = W[m + f"experts.{e}.gate_proj.weight"]
            wu = W[m + f"experts.{e}.up_proj.weight"]
            if mutant == "gate-up-swapped":
                wg, wu = wu, wg
            out[t] += g * ((silu(x @ wg.T) * (x @ wu.T)) @ W[m + f"experts.{e}.down_proj.weight"].T)
    return out


def qwen3_moe_layer(cfg, l):
    """Is layer l a sparse MoE block in Qwen3MoeForCausalLM: not in
    mlp_only_layers, and (l + 1) a multiple of decoder_sparse_step?"""
    dense = cfg.get("mlp_only_layers") or []
    return l not in dense and (l + 1) % cfg.get("decoder_sparse_step", 1) == 0


def forward(cfg, W, ids, mutant=None):
    if cfg.get("model_type") == "gpt2":
        return gpt2_forward(cfg, W, ids, mutant)
    h = cfg["hidden_size"]
    Hq = cfg["num_attention_heads"]
    Hkv = cfg.get("num_key_value_heads", Hq)
    d = cfg.get("head_dim") or h // Hq
    eps = cfg.get("rms_norm_eps", 1e-6)
    n = len(ids)
    pos = np.arange(n, dtype=np.float64)
    ang = np.outer(pos, inv_freq_of(cfg, d, mutant))
    cos, sin = np.cos(ang), np.sin(ang)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q, k, v = (a @ W[p + f"self_attn.{m}_proj.weight"].T for m in "qkv")
        if p + "self_attn.q_proj.bias" in W and mutant != "no-qkv-bias":   # Qwen2
            q, k, v = (t + W[p + f"self_attn.{m}_proj.bias"] for t, m in zip((q, k, v), "qkv"))
        q = q.reshape(n, Hq, d).transpose(1, 0, 2)
        k = k.reshape(n, Hkv, d).transpose(1, 0, 2)
        v = v.reshape(n, Hkv, d).transpose(1, 0, 2)
        # Qwen3: RMSNorm over each head (its last axis, head_dim) of q and
        # k, with the model's epsilon, before RoPE
        qk_norm = p + "self_attn.q_norm.weight" in W and mutant != "no-qk-norm"
        wq = W.get(p + "self_attn.q_norm.weight")
        wk = W.get(p + "self_attn.k_norm.weight")
        if mutant == "qk-norm-weights-swapped":
            wq, wk = wk, wq
        if qk_norm and mutant != "qk-norm-after-rope":
            q, k = rms_norm(q, wq, eps), rms_norm(k, wk, eps)
        q, k = rope(q, cos, sin, mutant), rope(k, cos, sin, mutant)
        if qk_norm and mutant == "qk-norm-after-rope":
            q, k = rms_norm(q, wq, eps), rms_norm(k, wk, eps)
        rep = Hq // Hkv
        group = [i % Hkv if mutant == "kv-heads-cycled" else i // rep for i in range(Hq)]
        k, v = k[group], v[group]                      # repeat_kv
        s = q @ k.transpose(0, 2, 1) / math.sqrt(d) + causal
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s @ v).transpose(1, 0, 2).reshape(n, Hq * d)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        a = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        if cfg.get("model_type") == "mixtral":
            x = x + sparse_moe(cfg, W, p, a, mutant)
            continue
        if cfg.get("model_type") == "qwen3_moe" and qwen3_moe_layer(cfg, l):
            x = x + qwen3_moe_block(cfg, W, p, a, mutant)
            continue
        gate = a @ W[p + "mlp.gate_proj.weight"].T
        up = a @ W[p + "mlp.up_proj.weight"].T
        if mutant == "gate-up-swapped":
            gate, up = up, gate
        x = x + (silu(gate) * up) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") \
        else W["lm_head.weight"]
    return x @ head.T


def loss(d, prefix, seq, mutant=None):
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    W = {n: as_f64(*t) for n, t in read_dir(d).items()}
    total, tokens, ndocs = 0.0, 0, 0
    for doc in read_indexed(prefix):
        t = doc[:seq + 1].astype(np.int64)
        if len(t) < 2:
            continue
        lp = log_softmax(forward(cfg, W, t[:-1], mutant))
        total -= lp[np.arange(len(t) - 1), t[1:]].sum()
        tokens += len(t) - 1
        ndocs += 1
    print(f"{total / tokens:.17g} {tokens} {ndocs}")


# ---------------------------------------------------------------------------

def same(orig, exported):
    a, b = read_dir(orig), read_dir(exported)
    # GPT-2's causal-mask buffers are not weights: import-hf skips them
    a = {n: t for n, t in a.items() if not n.endswith(".attn.bias")}
    bad = 0
    if set(a) != set(b):
        print(f"tensor names differ: only in the original {sorted(set(a) - set(b))}, "
              f"only in the export {sorted(set(b) - set(a))}")
        bad += 1
    for n in sorted(set(a) & set(b)):
        if a[n][:2] != b[n][:2]:
            print(f"{n}: dtype/shape {a[n][:2]} became {b[n][:2]}")
            bad += 1
        elif a[n][2] != b[n][2]:
            print(f"{n}: the bytes differ")
            bad += 1
    with open(os.path.join(orig, "config.json")) as f:
        ca = json.load(f)
    with open(os.path.join(exported, "config.json")) as f:
        cb = json.load(f)
    for k, want in ca.items():
        got = cb.get(k)
        if k == "head_dim" or want is None and got is None:
            pass
        elif isinstance(want, float) or isinstance(got, float):
            if not isinstance(got, (int, float)) or abs(got - want) > 1e-12 * abs(want):
                print(f"config.json {k}: {want!r} became {got!r}")
                bad += 1
        elif got != want:
            print(f"config.json {k}: {want!r} became {got!r}")
            bad += 1
    if "n_embd" in ca:          # GPT-2: no head_dim
        print(f"{len(a)} tensors compared, {bad} differences")
        return 1 if bad else 0
    # head_dim: absent means hidden_size / heads, so the export may spell it out
    hd = ca.get("head_dim") or ca["hidden_size"] // ca["num_attention_heads"]
    if (cb.get("head_dim") or cb["hidden_size"] // cb["num_attention_heads"]) != hd:
        print(f"config.json head_dim: {hd} became {cb.get('head_dim')!r}")
        bad += 1
    print(f"{len(a)} tensors compared, {bad} differences")
    return 1 if bad else 0


def unprefix(d, out):
    """d's GPT-2 as GPT2Model names it (no "transformer."), as the hub's
    original GPT-2 files do: one fp32 file and the same config.json."""
    os.makedirs(out, exist_ok=True)
    w = {n.removeprefix("transformer."): as_f64(*t).astype(np.float32)
         for n, t in read_dir(d).items()}
    write_file(os.path.join(out, "model.safetensors"), w, "float32")
    with open(os.path.join(d, "config.json")) as f, \
            open(os.path.join(out, "config.json"), "w") as g:
        g.write(f.read())


def main(argv):
    if len(argv) >= 3 and argv[0] == "make":
        make(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "data":
        data(argv[1], int(argv[2]))
    elif len(argv) in (4, 5) and argv[0] == "loss":
        loss(argv[1], argv[2], int(argv[3]), argv[4] if len(argv) == 5 else None)
    elif len(argv) == 3 and argv[0] == "unprefix":
        unprefix(argv[1], argv[2])
    elif len(argv) == 3 and argv[0] == "same":
        return same(argv[1], argv[2])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
