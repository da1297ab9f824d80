#!/usr/bin/env python3
"""Stage 1: train the tokenizer and the Qwen3-Next-style hybrid target as a causal LM on Go source.

Example (accelerator machine):
  python3 tools/train/train_target.py --data tools/train/data --out tools/train/out/target --steps 2400
Seeded; --time-budget S picks the step count from measured step time instead (the count is printed, so the
run can be repeated with --steps).
"""
import argparse
import json
import math
import os
import random
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Target, TargetConfig, save_target  # noqa: E402
import tok as tokmod  # noqa: E402


def seed_all(s):
    random.seed(s)
    torch.manual_seed(s)
    torch.cuda.manual_seed_all(s)


def encode_stream(tok, docs, eot):
    out = []
    for i in range(0, len(docs), 512):
        for e in tok.encode_batch(docs[i:i + 512], add_special_tokens=False):
            out.extend(e.ids)
            out.append(eot)
    return torch.tensor(out, dtype=torch.int32)


def write_generation_config(path, ids):
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump({
            "bos_token_id": ids["<|endoftext|>"],
            "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
            "pad_token_id": ids["<|endoftext|>"],
            "do_sample": False,
        }, f, indent=2)


@torch.no_grad()
def heldout_ppl(model, stream, seq, device, max_tokens=400_000):
    """Perplexity over non-overlapping windows of the held-out stream, fp32 compute."""
    model.eval()
    n = min(len(stream), max_tokens) // (seq + 1)
    tot, cnt = 0.0, 0
    for i in range(0, n, 16):
        rows = [stream[j * (seq + 1):(j + 1) * (seq + 1)] for j in range(i, min(n, i + 16))]
        x = torch.stack(rows).long().to(device)
        logits, _ = model(x[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        tot += loss.item()
        cnt += x[:, 1:].numel()
    model.train()
    return math.exp(tot / cnt), cnt


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--out", default=os.path.join(here, "out", "target"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=0.0, help="seconds of training; sets --steps")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--min-lr", type=float, default=0.1, help="cosine floor as a share of --lr")
    ap.add_argument("--tokenizer", default="", help="reuse this directory's tokenizer instead of training one")
    ap.add_argument("--quantize", default="", help="also write an MLX-quantized copy here (mlxquant.py: "
                    "4-bit affine g64, 8-bit embedding) and report its held-out perplexity")
    # model shape (defaults: the 7.9M models/demo target)
    d = TargetConfig()
    ap.add_argument("--hidden", type=int, default=d.hidden_size)
    ap.add_argument("--layers", type=int, default=d.num_hidden_layers)
    ap.add_argument("--intermediate", type=int, default=d.intermediate_size)
    ap.add_argument("--heads", type=int, default=d.num_attention_heads)
    ap.add_argument("--kv-heads", type=int, default=d.num_key_value_heads)
    ap.add_argument("--head-dim", type=int, default=d.head_dim)
    ap.add_argument("--linear-key-heads", type=int, default=d.linear_num_key_heads)
    ap.add_argument("--linear-value-heads", type=int, default=d.linear_num_value_heads)
    ap.add_argument("--linear-head-dim", type=int, default=d.linear_key_head_dim)
    ap.add_argument("--tiny", action="store_true", help="smoke test: few docs, few steps")
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    seed_all(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    t0 = time.time()
    docs = tokmod.load_docs(os.path.join(args.data, "train.jsonl.gz"))
    held = tokmod.load_docs(os.path.join(args.data, "heldout.jsonl.gz"))
    if args.tiny:
        docs = docs[:300]
    tok = tokmod.reuse_tokenizer(args.tokenizer, args.out) if args.tokenizer else tokmod.train_tokenizer(docs, args.out)
    ids = tokmod.special_ids(tok)
    write_generation_config(args.out, ids)
    eot = ids["<|endoftext|>"]
    stream = encode_stream(tok, docs, eot)
    hstream = encode_stream(tok, held, eot)
    print(f"encoded: train {len(stream)} tokens ({sum(map(len, docs)) / len(stream):.2f} bytes/token), "
          f"heldout {len(hstream)} tokens; {time.time() - t0:.1f}s", flush=True)

    cfg = TargetConfig(vocab_size=tokmod.VOCAB_SIZE, bos_token_id=eot, eos_token_id=ids["<|im_end|>"],
                       hidden_size=args.hidden, num_hidden_layers=args.layers, intermediate_size=args.intermediate,
                       num_attention_heads=args.heads, num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                       linear_num_key_heads=args.linear_key_heads, linear_num_value_heads=args.linear_value_heads,
                       linear_key_head_dim=args.linear_head_dim, linear_value_head_dim=args.linear_head_dim)
    model = Target(cfg).to(dev)
    nparam = sum(p.numel() for p in model.parameters())
    print(f"target params {nparam / 1e6:.2f}M layer_types {cfg.layer_types}", flush=True)
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if p.ndim < 2 or "norm" in n or "A_log" in n or "dt_bias" in n else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, **({"fused": True} if dev == "cuda" else {}))
    fwd = torch.compile(model) if args.compile else model
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    stream_dev = stream.to(dev)
    L = args.seq + 1
    offs = torch.arange(L, device=dev)

    def batch():
        starts = torch.randint(0, len(stream) - L, (args.batch,), generator=gen).to(dev)
        x = stream_dev[starts[:, None] + offs].long()
        return x[:, :-1], x[:, 1:]

    def step(i, total):
        lr = args.lr * min(1.0, (i + 1) / args.warmup)
        if i >= args.warmup:
            pr = (i - args.warmup) / max(1, total - args.warmup)
            lr = args.lr * (args.min_lr + (1 - args.min_lr) * 0.5 * (1 + math.cos(math.pi * pr)))
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
            logits, _ = fwd(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss

    total = args.steps if args.steps else 10**9
    if args.tiny:
        total = 12
    t1 = time.time()
    i = 0
    losses = []
    while i < total:
        loss = step(i, total)
        if i == 9 and args.time_budget and not args.steps:
            torch.cuda.synchronize()
            t10 = time.time()
        if i == 39 and args.time_budget and not args.steps:
            # measured after warm-up: the first steps (allocator, cuBLAS/cudnn autotune) are several times slower
            torch.cuda.synchronize()
            per = (time.time() - t10) / 30
            total = int((args.time_budget - (t10 - t1)) / per) + 10
            print(f"step time {per * 1000:.1f} ms -> --steps {total}", flush=True)
        if i % 100 == 0 or i == total - 1:
            lv = loss.item()
            losses.append((i, lv))
            print(f"step {i} loss {lv:.4f} {time.time() - t1:.0f}s", flush=True)
        i += 1
    train_s = time.time() - t1
    tok_per_s = total * args.batch * args.seq / train_s
    print(f"trained {total} steps in {train_s:.0f}s ({tok_per_s / 1e3:.0f}k tok/s, "
          f"{total * args.batch * args.seq / 1e6:.0f}M tokens)", flush=True)

    # Round to the stored precision, then evaluate exactly what is shipped.
    save_target(model, args.out)
    from model import load_target
    shipped = load_target(args.out, dev)
    ppl, n = heldout_ppl(shipped, hstream, args.seq, dev)
    # final train loss over a few fresh batches, fp32 shipped weights
    with torch.no_grad():
        tl = []
        for _ in range(4):
            x, y = batch()
            lg, _ = shipped(x)
            tl.append(F.cross_entropy(lg.float().reshape(-1, lg.shape[-1]), y.reshape(-1)).item())
    print(f"heldout ppl {ppl:.3f} over {n} tokens; train loss (shipped weights) {sum(tl) / len(tl):.4f}", flush=True)
    qppl = None
    if args.quantize:
        import mlxquant
        done = mlxquant.quantize_dir(args.out, args.quantize)
        del shipped
        qm = load_target(args.quantize, dev)
        qppl, _ = heldout_ppl(qm, hstream, args.seq, dev)
        qbytes = os.path.getsize(os.path.join(args.quantize, "model.safetensors"))
        print(f"quantized ({len(done)} modules) {qbytes} bytes: heldout ppl {qppl:.3f}", flush=True)
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump({"steps": total, "batch": args.batch, "seq": args.seq, "lr": args.lr, "seed": args.seed,
                   "train_seconds": train_s, "losses": losses, "heldout_ppl": ppl, "heldout_tokens": n,
                   "final_train_loss": sum(tl) / len(tl), "params": nparam, "quantized_heldout_ppl": qppl,
                   "config": cfg.hf_dict(), "weight_decay": args.weight_decay, "min_lr": args.min_lr,
                   "train_tokens_in_corpus": len(stream), "special_ids": ids}, f, indent=1)


if __name__ == "__main__":
    main()
