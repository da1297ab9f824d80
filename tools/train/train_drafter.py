#!/usr/bin/env python3
"""Stage 2: train the DFlash drafter against the frozen target, on the target's own greedy generations.

1. Greedy continuations (fp32, KV/GDN caches) of random corpus windows: prompt P tokens + G generated.
2. DFlash objective (MODEL-REFERENCE §5): per sequence K anchors a in [P-1, P+G-16]; block [tok[a], mask x15]
   at positions a..a+15; context rows = target layer outputs (taps) of positions < a, projected by fc +
   hidden_norm; block rows attend to their context rows and their own block bidirectionally; slot i predicts
   tok[a+i] with the target's (frozen, tied) LM head; loss weight exp(-(i-1)/gamma).
3. tau: the DFlash greedy loop (§6.2, batch 1) on held-out prompts (tools/train/eval_prompts.json).

Example:
  python3 tools/train/train_drafter.py --target tools/train/out/target --out tools/train/out/drafter \
      --gen-seqs 16384 --steps 3000
"""
import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Drafter, DrafterConfig, load_target, save_drafter, load_drafter  # noqa: E402
import tok as tokmod  # noqa: E402


def seed_all(s):
    random.seed(s)
    torch.manual_seed(s)
    torch.cuda.manual_seed_all(s)


def load_tokenizer(path):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(path, "tokenizer.json"))


@torch.no_grad()
def greedy_generate(target, prompts, n_new):
    """prompts [B,P] long; returns [B,P+n_new] (greedy, fp32, cached)."""
    L = len(target.model.layers)
    caches = [{} for _ in range(L)]
    logits, _ = target(prompts, 0, caches)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    out = [prompts, nxt]
    P = prompts.shape[1]
    for t in range(n_new - 1):
        logits, _ = target(nxt, P + t, caches)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
    return torch.cat(out, 1)


def make_generations(target, stream, n_seqs, P, G, bs, seed, dev, unseen=None, unseen_share=0.0):
    """Greedy continuations of random P-token windows. A share `unseen_share` of the prompts comes from the
    `unseen` stream (text the target never trained on), the rest from the training stream."""
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(stream) - P, (n_seqs,), generator=g)
    src = [stream] * n_seqs
    if unseen is not None and unseen_share > 0:
        ustarts = torch.randint(0, len(unseen) - P, (n_seqs,), generator=g)
        pick = torch.rand(n_seqs, generator=g) < unseen_share
        starts = torch.where(pick, ustarts, starts)
        src = [unseen if p else stream for p in pick.tolist()]
    seqs = []
    t0 = time.time()
    for i in range(0, n_seqs, bs):
        s = starts[i:i + bs]
        prompts = torch.stack([src[i + k][j:j + P] for k, j in enumerate(s.tolist())]).long().to(dev)
        seqs.append(greedy_generate(target, prompts, G).to(torch.int32))
    out = torch.cat(seqs)
    print(f"generated {n_seqs} x {G} tokens in {time.time() - t0:.0f}s", flush=True)
    return out


def block_mask(anchors, Lc, bsz):
    """anchors [B,K]; returns bool [B,1,K*bsz, Lc+K*bsz]: block rows see context rows < anchor and their block."""
    B, K = anchors.shape
    dev = anchors.device
    ctx = torch.arange(Lc, device=dev)[None, None, :] < anchors[:, :, None]          # [B,K,Lc]
    ctx = ctx[:, :, None, :].expand(B, K, bsz, Lc).reshape(B, K * bsz, Lc)
    blk = torch.arange(K, device=dev)
    blk = (blk[:, None] == blk[None, :])[:, None, :, None].expand(K, bsz, K, bsz).reshape(K * bsz, K * bsz)
    return torch.cat([ctx, blk[None].expand(B, -1, -1)], -1)[:, None]


def drafter_logits(drafter, target, block_ids, taps, pos_q, pos_c, mask):
    x = target.model.embed_tokens(block_ids)
    y = drafter(x, taps, pos_q, pos_c, mask)
    return target.lm_head(y)


@torch.no_grad()
def dflash_generate(target, drafter, prompt, max_new, stops, bsz):
    """Greedy DFlash loop (MODEL-REFERENCE §6.2) at batch 1; the target is re-run on the whole prefix each
    round (no cache), which equals the cached verify. Returns (new tokens, list of per-round a+1)."""
    dev = prompt.device
    taps_ids = drafter.config.target_layer_ids
    mask_id = drafter.config.mask_token_id
    logits, taps = target(prompt[None], taps=taps_ids)
    tokens = prompt.tolist() + [int(logits[0, -1].argmax())]
    ctx = taps[0]                       # taps of committed positions 0..L_t-1
    emitted = 1
    rounds = []
    if tokens[-1] in stops:
        return tokens[len(prompt):], rounds
    while True:
        remaining = max_new - emitted
        bs = min(bsz, remaining + 1)
        if bs <= 1:
            break
        Lt = len(tokens) - 1
        block = torch.tensor([tokens[-1]] + [mask_id] * (bs - 1), device=dev)[None]
        pos_q = torch.arange(Lt, Lt + bs, device=dev)[None]
        pos_c = torch.arange(Lt, device=dev)[None]
        dl = drafter_logits(drafter, target, block, ctx[None], pos_q, pos_c, None)
        d = dl[0, 1:].argmax(-1).tolist()
        v = torch.tensor(tokens + d, device=dev)[None]
        zl, vt = target(v, taps=taps_ids)
        y = zl[0, Lt:].argmax(-1).tolist()         # y[i] = target prediction after block slot i
        a = 0
        while a < bs - 1 and d[a] == y[a]:
            a += 1
        new = d[:a] + [y[a]]
        cut = len(new)
        for j, t in enumerate(new):
            if t in stops:
                cut = j + 1
                break
        new = new[:min(cut, remaining)]
        rounds.append(a + 1)
        ctx = vt[0, :Lt + a + 1]
        tokens += new
        emitted += len(new)
        if any(t in stops for t in new) or emitted >= max_new:
            break
    return tokens[len(prompt):], rounds


@torch.no_grad()
def greedy_reference(target, prompt, n, stops):
    caches = [{} for _ in range(len(target.model.layers))]
    logits, _ = target(prompt[None], 0, caches)
    out = [int(logits[0, -1].argmax())]
    pos = len(prompt)
    while len(out) < n and out[-1] not in stops:
        logits, _ = target(torch.tensor([[out[-1]]], device=prompt.device), pos, caches)
        pos += 1
        out.append(int(logits[0, -1].argmax()))
    return out


def evaluate_tau(target, drafter, tok, prompts, max_new, stops, bsz, dev):
    torch.backends.cuda.matmul.allow_tf32 = False
    allr, per, match = [], [], 0
    for p in prompts:
        ids = torch.tensor(tok.encode(p["prompt"], add_special_tokens=False).ids, device=dev)
        out, rounds = dflash_generate(target, drafter, ids, max_new, stops, bsz)
        ref = greedy_reference(target, ids, max_new, stops)
        match += int(ref[:len(out)] == out)
        allr += rounds
        per.append(sum(rounds) / max(1, len(rounds)))
    torch.backends.cuda.matmul.allow_tf32 = True
    tau = sum(allr) / max(1, len(allr))
    return tau, per, match


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--target", default=os.path.join(here, "out", "target"))
    ap.add_argument("--out", default=os.path.join(here, "out", "drafter"))
    ap.add_argument("--prompts", default=os.path.join(here, "eval_prompts.json"))
    ap.add_argument("--seed", type=int, default=4321)
    ap.add_argument("--gen-seqs", type=int, default=16384)
    ap.add_argument("--gen-batch", type=int, default=1024)
    ap.add_argument("--prompt-len", type=int, default=256)
    ap.add_argument("--gen-len", type=int, default=256)
    ap.add_argument("--unseen-share", type=float, default=0.0,
                    help="share of generation prompts from data/unseen.jsonl.gz (*_test.go, not in target training)")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--time-budget", type=float, default=0.0)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--intermediate", type=int, default=0, help="MLP width (0: 3 x the target's hidden size)")
    ap.add_argument("--quantize-bits", type=int, default=0,
                    help="ship the drafter MLX-quantized at this width (group 64; mlxquant.py); the BF16 weights "
                         "go to OUT/bf16 and tau is measured with the quantized ones")
    ap.add_argument("--taps", default="1,3,5,7")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--gamma", type=float, default=7.0)
    ap.add_argument("--eval-new", type=int, default=256)
    ap.add_argument("--eval-n", type=int, default=24)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--init", default="", help="continue from a saved drafter directory (same shape)")
    ap.add_argument("--refresh-every", type=int, default=0,
                    help="replace the generations with fresh ones (next seed) every N steps, so long runs do not "
                         "repeat epochs over one set; with --time-budget the budget then covers generation too")
    ap.add_argument("--val-seqs", type=int, default=0,
                    help="generations from the last 10%% of the unseen documents (never used for training prompts) "
                         "on which the teacher-forced block run is reported every 500 steps")
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    seed_all(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    target = load_target(args.target, dev).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    tok = load_tokenizer(args.target)
    ids = tokmod.special_ids(tok)
    stops = {ids["<|im_end|>"], ids["<|endoftext|>"]}
    tc = target.config
    if args.tiny:
        args.gen_seqs, args.gen_batch, args.gen_len, args.prompt_len = 64, 32, 48, 32
        args.eval_new, args.eval_n, args.batch, args.anchors = 40, 2, 8, 4

    docs = tokmod.load_docs(os.path.join(args.data, "train.jsonl.gz"))
    if args.tiny:
        docs = docs[:300]
    from train_target import encode_stream
    stream = encode_stream(tok, docs, ids["<|endoftext|>"])
    torch.backends.cuda.matmul.allow_tf32 = False
    unseen = None
    if args.unseen_share > 0:
        udocs = tokmod.load_docs(os.path.join(args.data, "unseen.jsonl.gz"))
        if args.tiny:
            udocs = udocs[:40]
        if args.val_seqs:
            cut = len(udocs) - max(1, len(udocs) // 10)
            val_stream = encode_stream(tok, udocs[cut:], ids["<|endoftext|>"])
            udocs = udocs[:cut]
        unseen = encode_stream(tok, udocs, ids["<|endoftext|>"])
    val = None
    if args.val_seqs:
        if unseen is None:
            raise SystemExit("--val-seqs needs --unseen-share > 0 (validation prompts come from unseen documents)")
        val = make_generations(target, val_stream, args.val_seqs, args.prompt_len, args.gen_len, args.gen_batch,
                               args.seed + 7777, dev, None, 0.0).to(dev)
    seqs = make_generations(target, stream, args.gen_seqs, args.prompt_len, args.gen_len, args.gen_batch,
                            args.seed, dev, unseen, args.unseen_share)
    torch.backends.cuda.matmul.allow_tf32 = True
    # a peek at what the target writes
    print("sample generation:\n" + tok.decode(seqs[0, args.prompt_len:args.prompt_len + 120].tolist(),
                                               skip_special_tokens=False)[:600], flush=True)

    taps = [int(t) for t in args.taps.split(",")]
    dc = DrafterConfig(hidden_size=tc.hidden_size, num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                       intermediate_size=args.intermediate or 3 * tc.hidden_size,
                       rms_norm_eps=tc.rms_norm_eps, rope_theta=tc.rope_theta, vocab_size=tc.vocab_size,
                       block_size=16, num_target_layers=tc.num_hidden_layers, target_layer_ids=taps,
                       mask_token_id=ids["<|mask|>"])
    drafter = Drafter(dc).to(dev)
    if args.init:
        drafter = load_drafter(args.init, dev)
        dc = drafter.config
        print(f"continuing from {args.init}", flush=True)
    print(f"drafter params {sum(p.numel() for p in drafter.parameters()) / 1e6:.2f}M taps {taps} "
          f"mask {dc.mask_token_id}", flush=True)
    decay, no_decay = [], []
    for n, p in drafter.named_parameters():
        (no_decay if p.ndim < 2 else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    bsz = dc.block_size
    P, G = args.prompt_len, args.gen_len
    Ltot = P + G
    lo, hi = P - 1, Ltot - bsz          # anchor range (inclusive)
    gen = torch.Generator().manual_seed(args.seed + 1)
    seqs_dev = seqs.to(dev)
    del seqs
    w = torch.exp(-torch.arange(bsz - 1, device=dev, dtype=torch.float32) / args.gamma)
    slot = torch.arange(bsz, device=dev)
    pos_c_full = torch.arange(Ltot, device=dev)

    def lr_at(i, total, frac):
        """Linear warm-up, then cosine to 5 %; progress is by step, or by spent time when frac is given."""
        if i < args.warmup:
            return args.lr * (i + 1) / args.warmup
        pr = frac if frac is not None else (i - args.warmup) / max(1, total - args.warmup)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * min(1.0, pr))))

    def block_pass(x, anchors):
        """Weighted block loss and teacher-forced expected accepted run for sequences x at anchors."""
        B, K = anchors.shape
        pos_q = (anchors[:, :, None] + slot).reshape(B, K * bsz)          # [B, K*bsz]
        lab = torch.gather(x, 1, pos_q).view(B, K, bsz)[:, :, 1:]
        block = torch.full((B, K, bsz), dc.mask_token_id, device=dev, dtype=torch.long)
        block[:, :, 0] = torch.gather(x, 1, anchors)
        mask = block_mask(anchors, Ltot, bsz)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=(dev == "cuda")):
            with torch.no_grad():
                _, tp = target(x, taps=taps, return_hidden=True)
            lg = drafter_logits(drafter, target, block.view(B, K * bsz), tp, pos_q,
                                pos_c_full[None].expand(B, -1), mask)
        lg = lg.float().view(B, K, bsz, -1)[:, :, 1:]
        ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), lab.reshape(-1), reduction="none").view(B, K, bsz - 1)
        loss = (ce * w).sum(-1).mean() / w.sum()
        acc = (lg.argmax(-1) == lab).float()
        # expected accepted run length under teacher forcing (cumulative product of matches)
        return loss, acc.cumprod(-1).sum(-1).mean() + 1

    def anchors_for(n, g):
        return (torch.rand(n, hi - lo + 1, generator=g).argsort(-1)[:, :args.anchors] + lo).to(dev)

    val_anchors = anchors_for(len(val), torch.Generator().manual_seed(args.seed + 99)) if val is not None else None

    @torch.no_grad()
    def validate():
        drafter.eval()
        runs = []
        for j in range(0, len(val), args.batch):
            runs.append(block_pass(val[j:j + args.batch].long(), val_anchors[j:j + args.batch])[1].item())
        drafter.train()
        return sum(runs) / len(runs)

    def step(i, total, frac):
        lr = lr_at(i, total, frac)
        for g_ in opt.param_groups:
            g_["lr"] = lr
        rows = torch.randint(0, len(seqs_dev), (args.batch,), generator=gen).to(dev)
        loss, run = block_pass(seqs_dev[rows].long(), anchors_for(args.batch, gen))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        return loss, run

    total = args.steps if args.steps else 10**9
    if args.tiny:
        total = 10
    # With --refresh-every and --time-budget, the budget is wall time for training and regeneration together and
    # the learning-rate schedule follows the spent share of it.
    timed = bool(args.refresh_every and args.time_budget and not args.steps)
    t1 = time.time()
    i = 0
    losses, vals = [], []
    refresh = 0
    while i < total:
        if args.refresh_every and i > 0 and i % args.refresh_every == 0:
            refresh += 1
            torch.backends.cuda.matmul.allow_tf32 = False
            seqs_dev = make_generations(target, stream, args.gen_seqs, P, G, args.gen_batch, args.seed + 1000 * refresh,
                                        dev, unseen, args.unseen_share).to(dev)
            torch.backends.cuda.matmul.allow_tf32 = True
        frac = (time.time() - t1) / args.time_budget if timed else None
        if timed and frac >= 1.0:
            total = i
            break
        loss, run = step(i, total, frac)
        if i == 9 and args.time_budget and not args.steps and not timed:
            torch.cuda.synchronize()
            t10 = time.time()
        if i == 39 and args.time_budget and not args.steps and not timed:
            # measured after warm-up: the first steps (allocator, cuBLAS/cudnn autotune) are several times slower
            torch.cuda.synchronize()
            per = (time.time() - t10) / 30
            total = int((args.time_budget - (t10 - t1)) / per) + 10
            print(f"step time {per * 1000:.1f} ms -> --steps {total}", flush=True)
        if i % 100 == 0 or i == total - 1:
            losses.append((i, loss.item(), run.item()))
            print(f"step {i} loss {loss.item():.4f} block-run {run.item():.2f} {time.time() - t1:.0f}s", flush=True)
        if val is not None and (i % 500 == 0 or i == total - 1):
            v = validate()
            vals.append((i, v))
            print(f"step {i} val block-run {v:.3f}", flush=True)
        i += 1
    if val is not None and (not vals or vals[-1][0] != total - 1):
        vals.append((total - 1, validate()))
        print(f"final val block-run {vals[-1][1]:.3f} after {total} steps", flush=True)
    train_s = time.time() - t1
    if args.quantize_bits:
        import mlxquant
        bf = os.path.join(args.out, "bf16")
        save_drafter(drafter, bf)
        done = mlxquant.quantize_dir(bf, args.out, args.quantize_bits, 64, args.quantize_bits)
        print(f"drafter quantized: {len(done)} modules at {args.quantize_bits} bits, "
              f"{os.path.getsize(os.path.join(args.out, 'model.safetensors'))} bytes", flush=True)
    else:
        save_drafter(drafter, args.out)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(args.target, f), os.path.join(args.out, f))
    shipped = load_drafter(args.out, dev).eval()
    prompts = json.load(open(args.prompts))[:args.eval_n]
    t2 = time.time()
    tau, per, match = evaluate_tau(target, shipped, tok, prompts, args.eval_new, stops, bsz, dev)
    print(f"tau {tau:.3f} over {len(prompts)} prompts (max_new {args.eval_new}); per-prompt "
          f"{[round(x, 2) for x in per]}; dflash==greedy AR on {match}/{len(prompts)}; {time.time() - t2:.0f}s",
          flush=True)
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump({"steps": total, "batch": args.batch, "anchors": args.anchors, "lr": args.lr, "seed": args.seed,
                   "gamma": args.gamma, "gen_seqs": args.gen_seqs, "unseen_share": args.unseen_share, "prompt_len": P, "gen_len": G,
                   "train_seconds": train_s, "losses": losses, "val_block_run": vals,
                   "refresh_every": args.refresh_every, "tau": tau, "tau_per_prompt": per,
                   "dflash_equals_ar": match, "eval_prompts": len(prompts), "eval_max_new": args.eval_new},
                  f, indent=1)


if __name__ == "__main__":
    main()
