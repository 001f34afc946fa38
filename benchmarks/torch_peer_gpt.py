"""PyTorch peer of gridlm's GPT form, for side-by-side throughput on the GPU
machine.  The model is Megatron's default GPT (as gridlm-train builds it
without --swiglu etc., and as --model gpt2 shapes it): learned absolute
positions, pre-LayerNorm with bias (eps 1e-5), fused QKV with bias, causal
SDPA attention with attention dropout, output projection with bias, hidden
dropout before each residual add and after the embeddings, MLP of fc1 (4h)
with bias, GeLU in its tanh approximation, fc2 with bias; a final LayerNorm
and the head tied to the word embeddings.

Trained as ../shared/gpu/torch_peer.py trains its Llama model: torch.compile,
bf16 autocast over fp32 master weights, fused AdamW, clip 1.0; DDP (or
--fsdp) under torchrun.  Random tokens: this measures throughput only.
Prints one line in torch_peer.py's format ("torch-gpt world=... tokens/s/GPU=
... MFU=...%"), with the FLOP count gridlm uses (gl_arch_flops_per_token:
two MLP matrices, causal attention, the head over the padded vocabulary).

Defaults are GPT-2 124M at seq 1024 with the vocabulary padded as gridlm
pads 50257 (to a multiple of 128: 50304) and Megatron's dropout of 0.1.
Needs torch only."""
import argparse, os, time
import torch, torch.nn as nn, torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--dim", type=int, default=768)
p.add_argument("--layers", type=int, default=12)
p.add_argument("--heads", type=int, default=12)
p.add_argument("--ffn", type=int, default=3072)
p.add_argument("--vocab", type=int, default=50304, help="padded vocabulary (gridlm pads 50257 to 50304)")
p.add_argument("--seq", type=int, default=1024)
p.add_argument("--mbs", type=int, default=16)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--peak", type=float, default=989.4e12)
p.add_argument("--attention-dropout", type=float, default=0.1)
p.add_argument("--hidden-dropout", type=float, default=0.1)
p.add_argument("--no-compile", action="store_true")
p.add_argument("--fsdp", action="store_true")
a = p.parse_args()

dist = "RANK" in os.environ
if dist:
    torch.distributed.init_process_group("nccl")
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
else:
    rank, world = 0, 1
dev = torch.device("cuda")
torch.manual_seed(1234 + rank)


class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.hd = a.dim // a.heads
        s.ln1, s.ln2 = nn.LayerNorm(a.dim, eps=1e-5), nn.LayerNorm(a.dim, eps=1e-5)
        s.qkv = nn.Linear(a.dim, 3 * a.dim)
        s.proj = nn.Linear(a.dim, a.dim)
        s.fc1 = nn.Linear(a.dim, a.ffn)
        s.fc2 = nn.Linear(a.ffn, a.dim)

    def forward(s, x):
        B, T, _ = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(a.dim, -1)
        q, k, v = (t.view(B, T, a.heads, s.hd).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=a.attention_dropout if s.training else 0.0)
        y = s.proj(y.transpose(1, 2).reshape(B, T, a.dim))
        x = x + F.dropout(y, a.hidden_dropout, s.training)
        y = s.fc2(F.gelu(s.fc1(s.ln2(x)), approximate="tanh"))
        return x + F.dropout(y, a.hidden_dropout, s.training)


class Model(nn.Module):
    def __init__(s):
        super().__init__()
        s.emb = nn.Embedding(a.vocab, a.dim)
        s.pos = nn.Embedding(a.seq, a.dim)
        s.blocks = nn.ModuleList(Block() for _ in range(a.layers))
        s.norm = nn.LayerNorm(a.dim, eps=1e-5)
        for m in s.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(s, idx, tgt):
        x = s.emb(idx) + s.pos(torch.arange(idx.shape[1], device=idx.device))
        x = F.dropout(x, a.hidden_dropout, s.training)
        for b in s.blocks:
            x = b(x)
        logits = F.linear(s.norm(x), s.emb.weight)   # head tied to the embeddings
        return F.cross_entropy(logits.float().view(-1, a.vocab), tgt.view(-1))


def flops_per_token():
    """gridlm's gl_arch_flops_per_token for this shape: forward + backward
    (3x the forward's 2 FLOPs per multiply-add) of QKV, projection, the two
    MLP matrices, causal attention (half of QK^T and AV) and the head."""
    h, s = a.dim, a.seq
    layer = 6 * h * 2 * a.ffn + 6 * (h * 3 * h + h * h) + 6 * s * h
    return a.layers * layer + 6 * h * a.vocab


model = Model().to(dev)
model.train()
nparams = sum(p.numel() for p in model.parameters())
if dist and a.fsdp:
    from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for b in model.blocks:
        fully_shard(b, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    net = model
elif dist:
    net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index], gradient_as_bucket_view=True)
else:
    net = model
if not a.no_compile:
    net = torch.compile(net)
opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)


def step():
    idx = torch.randint(0, a.vocab, (a.mbs, a.seq), device=dev)
    tgt = torch.randint(0, a.vocab, (a.mbs, a.seq), device=dev)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=not a.fsdp):
        loss = net(idx, tgt)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); opt.zero_grad(set_to_none=True)
    return loss


for _ in range(a.warmup):
    step()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(a.steps):
    loss = step()
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / a.steps
tok = a.mbs * a.seq / dt
mfu = tok * flops_per_token() / a.peak
if rank == 0:
    mem = torch.cuda.max_memory_allocated() / 2**30
    drop = "" if a.attention_dropout or a.hidden_dropout else "-nodrop"
    print(f"torch-gpt{drop}{'-fsdp' if a.fsdp else ''} world={world} params={nparams/1e9:.3f}B seq={a.seq} mbs={a.mbs} "
          f"step={dt*1e3:.1f}ms tokens/s/GPU={tok:.0f} MFU={mfu*100:.1f}% mem={mem:.1f}GiB loss={loss.item():.3f}")
if dist:
    torch.distributed.destroy_process_group()
