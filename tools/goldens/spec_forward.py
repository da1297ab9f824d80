#!/usr/bin/env python3
"""An independent float64 implementation of MODEL-REFERENCE §3/§5/§6.2 in numpy, checked against the goldens.

    python3 tools/goldens/spec_forward.py [testdata/goldens]

It reads each committed checkpoint the way the Go engine must (config.json incl. text_config, HF or MLX naming,
zero-centred norms only for HF hybrids, conv1d in either layout, MLX dequantization), runs the forward written from
the specification (not from transformers), and compares with the transformers goldens: logits, every hidden state,
the greedy continuation; for the DFlash traces it re-implements the drafter and the §6.2 loop and compares the
rounds under the README's rules. Agreement here means: the goldens, the specification and transformers agree, so a Go
implementation that follows the specification should pass. Needs numpy only.
"""

import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlxq  # noqa: E402
import stio  # noqa: E402

FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL:", msg)


# ------------------------------------------------------------------ loading


class Model:
    def __init__(self, d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        self.cfg = cfg
        self.c = cfg.get("text_config", cfg)
        raw, meta = stio.read_safetensors(os.path.join(d, "model.safetensors"))
        q = cfg.get("quantization")
        self.mlx = q is not None
        w = {}
        for k, (dt, shape, data) in raw.items():
            if k.endswith((".scales", ".biases")):
                continue
            if dt == "U32":
                mod = k[: -len(".weight")]
                spec = q.get(mod) if isinstance(q.get(mod), dict) else {"bits": q["bits"], "group_size": q["group_size"]}
                sc = stio.to_numpy(*raw[mod + ".scales"])
                bi = stio.to_numpy(*raw[mod + ".biases"])
                a = mlxq.dequantize(stio.to_numpy(dt, shape, data), sc, bi, spec["bits"], spec["group_size"])
            else:
                a = stio.to_numpy(dt, shape, data)
            w[canon(k)] = a.astype(np.float64)
        self.w = w
        c = self.c
        self.family = c.get("model_type", cfg.get("model_type")).replace("_text", "")
        self.hybrid = self.family in ("qwen3_next", "qwen3_5", "qwen3_5_moe")
        conv_mlx = any(k.endswith("conv1d.weight") and v.shape[-1] == 1 for k, v in w.items())
        self.zero_centred = self.hybrid and not (self.mlx or conv_mlx)
        self.L = c["num_hidden_layers"]
        self.H = c["hidden_size"]
        self.eps = c["rms_norm_eps"]
        self.Hq, self.Hkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = c.get("head_dim") or self.H // self.Hq
        rp = c.get("rope_parameters") or {}
        self.theta = rp.get("rope_theta", c.get("rope_theta", 10000.0))
        prf = rp.get("partial_rotary_factor", c.get("partial_rotary_factor", 1.0)) if self.hybrid else 1.0
        self.r = int(self.d * prf)
        scaling = rp if ("rope_type" in rp or "type" in rp) else c.get("rope_scaling")
        self.freqs = rope_freqs(scaling, self.r, self.theta, c.get("max_position_embeddings"))
        lt = c.get("layer_types")
        if not lt:
            iv = c.get("full_attention_interval", 4)
            lt = ["full_attention" if (i + 1) % iv == 0 else "linear_attention" for i in range(self.L)] if self.hybrid \
                else ["full_attention"] * self.L
        self.layer_types = lt
        self.tied = bool(c.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))
        self.lm = w["embed_tokens.weight"] if self.tied or "lm_head.weight" not in w else w["lm_head.weight"]

    def moe_layer(self, i):
        c = self.c
        E = c.get("num_experts", 0) or 0
        if E == 0:
            return False
        if self.family == "qwen3_5_moe":
            return True
        return i not in (c.get("mlp_only_layers") or []) and (i + 1) % c.get("decoder_sparse_step", 1) == 0


def canon(k):
    for p in ("model.language_model.", "language_model.model.", "language_model.", "model."):
        if k.startswith(p):
            return k[len(p) :]
    return k


# ------------------------------------------------------------------ primitives (float64)


def rmsnorm(x, w, eps, zero_centred=False):
    xh = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return xh * ((1.0 + w) if zero_centred else w)


def silu(x):
    return x / (1.0 + np.exp(-x))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def softplus(x):
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def rope_freqs(rp, r, theta, max_pos):
    """Inverse frequencies of the r rotated dims and the cos/sin factor, for rope_parameters rp (rope_type
    default, linear or yarn, as transformers' rope initialisers define them; an explicit factor wins)."""
    rp = rp or {}
    kind = rp.get("rope_type", rp.get("type", "default"))
    half = r // 2
    pos_freqs = theta ** (np.arange(half, dtype=np.float64) * 2.0 / r)
    if kind == "default":
        return 1.0 / pos_freqs, 1.0
    orig = rp.get("original_max_position_embeddings") or max_pos
    factor = rp.get("factor") or max_pos / orig
    if kind == "linear":
        return 1.0 / (factor * pos_freqs), 1.0
    if kind != "yarn":
        raise ValueError(f"rope_type {kind}")

    def mscale(scale, m=1.0):
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    att = rp.get("attention_factor")
    if att is None:
        if rp.get("mscale") and rp.get("mscale_all_dim"):
            att = mscale(factor, rp["mscale"]) / mscale(factor, rp["mscale_all_dim"])
        else:
            att = mscale(factor)
    beta_fast, beta_slow = rp.get("beta_fast") or 32, rp.get("beta_slow") or 1

    def corr_dim(rot):
        return (r * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(theta))

    lo, hi = corr_dim(beta_fast), corr_dim(beta_slow)
    if rp.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, r - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(half, dtype=np.float64) - lo) / (hi - lo), 0, 1)
    extra = 1 - ramp  # 1: keep the original frequency (fast dims), 0: interpolate by the factor
    inv = (1.0 / (factor * pos_freqs)) * (1 - extra) + (1.0 / pos_freqs) * extra
    return inv, att


def rope(x, pos, r, freqs):
    """x [T, heads, d]; rotate-half on the first r dims; freqs = rope_freqs(...)."""
    if r == 0:
        return x
    half = r // 2
    inv, att = freqs
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = att * np.cos(ang)[:, None, :], att * np.sin(ang)[:, None, :]
    out = x.copy()
    a, b = x[..., :half], x[..., half:r]
    out[..., :half] = a * cos - b * sin
    out[..., half:r] = b * cos + a * sin
    return out


def attention(q, k, v, mask):
    """q [Tq,Hq,d], k/v [Tk,Hkv,d]; mask [Tq,Tk] bool (True = visible) or None."""
    Hq, Hkv = q.shape[1], k.shape[1]
    rep = Hq // Hkv
    out = np.zeros((q.shape[0], Hq, v.shape[2]))
    for h in range(Hq):
        kh = h // rep
        s = q[:, h] @ k[:, kh].T / math.sqrt(q.shape[2])
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        s = s - s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        out[:, h] = p @ v[:, kh]
    return out


def mlp(x, w, p):
    return (silu(x @ w[p + "gate_proj.weight"].T) * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


# ------------------------------------------------------------------ target forward


def self_attn(m, a, i, pos):
    w, p = m.w, f"layers.{i}.self_attn."
    T = a.shape[0]
    q2 = a @ w[p + "q_proj.weight"].T
    if m.hybrid:
        q2 = q2.reshape(T, m.Hq, 2 * m.d)
        q, gate = q2[..., : m.d], q2[..., m.d :].reshape(T, m.Hq * m.d)
    else:
        q, gate = q2.reshape(T, m.Hq, m.d), None
    k = (a @ w[p + "k_proj.weight"].T).reshape(T, m.Hkv, m.d)
    v = (a @ w[p + "v_proj.weight"].T).reshape(T, m.Hkv, m.d)
    q = rmsnorm(q, w[p + "q_norm.weight"], m.eps, m.zero_centred)
    k = rmsnorm(k, w[p + "k_norm.weight"], m.eps, m.zero_centred)
    q, k = rope(q, pos, m.r, m.freqs), rope(k, pos, m.r, m.freqs)
    o = attention(q, k, v, np.tril(np.ones((T, T), dtype=bool))).reshape(T, m.Hq * m.d)
    if gate is not None:
        o = o * sigmoid(gate)
    return o @ w[p + "o_proj.weight"].T


def gdn(m, a, i):
    c, w, p = m.c, m.w, f"layers.{i}.linear_attn."
    Hk, Hv, dk, dv, Kc = (c["linear_num_key_heads"], c["linear_num_value_heads"], c["linear_key_head_dim"],
                          c["linear_value_head_dim"], c["linear_conv_kernel_dim"])
    rho = Hv // Hk
    T = a.shape[0]
    if p + "in_proj_qkvz.weight" in w:  # Qwen3-Next: grouped by key head
        U = (a @ w[p + "in_proj_qkvz.weight"].T).reshape(T, Hk, 2 * dk + 2 * rho * dv)
        q, k = U[..., :dk], U[..., dk : 2 * dk]
        v = U[..., 2 * dk : 2 * dk + rho * dv].reshape(T, Hv, dv)
        z = U[..., 2 * dk + rho * dv :].reshape(T, Hv, dv)
        B = (a @ w[p + "in_proj_ba.weight"].T).reshape(T, Hk, 2 * rho)
        b, araw = B[..., :rho].reshape(T, Hv), B[..., rho:].reshape(T, Hv)
        P = np.concatenate([q.reshape(T, -1), k.reshape(T, -1), v.reshape(T, -1)], axis=-1)
    else:  # Qwen3.5: separate projections
        P = a @ w[p + "in_proj_qkv.weight"].T
        z = (a @ w[p + "in_proj_z.weight"].T).reshape(T, Hv, dv)
        b = a @ w[p + "in_proj_b.weight"].T
        araw = a @ w[p + "in_proj_a.weight"].T
    cw = w[p + "conv1d.weight"]
    cw = cw[:, :, 0] if cw.shape[-1] == 1 else cw[:, 0, :]  # -> [C, Kc]
    X = np.concatenate([np.zeros((Kc - 1, P.shape[1])), P], axis=0)
    Y = np.stack([(cw.T * X[t : t + Kc]).sum(axis=0) for t in range(T)])
    Y = silu(Y)
    Dk = Hk * dk
    q, k, v = Y[:, :Dk].reshape(T, Hk, dk), Y[:, Dk : 2 * Dk].reshape(T, Hk, dk), Y[:, 2 * Dk :].reshape(T, Hv, dv)
    q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / math.sqrt(dk)
    k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
    beta = sigmoid(b)
    g = -np.exp(w[p + "A_log"]) * softplus(araw + w[p + "dt_bias"])
    alpha = np.exp(g)
    S = np.zeros((Hv, dv, dk))
    o = np.zeros((T, Hv, dv))
    for t in range(T):
        for h in range(Hv):
            kh = h // rho
            S[h] *= alpha[t, h]
            mem = S[h] @ k[t, kh]
            delta = beta[t, h] * (v[t, h] - mem)
            S[h] += np.outer(delta, k[t, kh])
            o[t, h] = S[h] @ q[t, kh]
    o = rmsnorm(o, w[p + "norm.weight"], m.eps) * silu(z)
    return o.reshape(T, Hv * dv) @ w[p + "out_proj.weight"].T


def ffn(m, x, i):
    w, c = m.w, m.c
    p = f"layers.{i}.mlp."
    if not m.moe_layer(i):
        return mlp(x, w, p)
    k = c["num_experts_per_tok"]
    logits = x @ w[p + "gate.weight"].T
    pr = np.exp(logits - logits.max(-1, keepdims=True))
    pr /= pr.sum(-1, keepdims=True)
    norm = c.get("norm_topk_prob", True) if m.family != "qwen3_5_moe" else True
    y = np.zeros_like(x)
    for t in range(x.shape[0]):
        idx = sorted(range(pr.shape[1]), key=lambda e: (-pr[t, e], e))[:k]
        wt = pr[t, idx]
        if norm:
            wt = wt / wt.sum()
        for e, we in zip(idx, wt):
            y[t] += we * expert(w, p, e, x[t])
    sh = mlp(x, w, p + "shared_expert.")
    return y + sigmoid(x @ w[p + "shared_expert_gate.weight"].T) * sh


def expert(w, p, e, x):
    if p + "experts.gate_up_proj" in w:  # Qwen3.5-MoE fused [E, 2I, H] / [E, H, I]
        gu = w[p + "experts.gate_up_proj"][e]
        half = gu.shape[0] // 2
        return (silu(gu[:half] @ x) * (gu[half:] @ x)) @ w[p + "experts.down_proj"][e].T
    if p + "switch_mlp.gate_proj.weight" in w:  # MLX stacked
        g, u, dn = (w[p + f"switch_mlp.{n}.weight"][e] for n in ("gate_proj", "up_proj", "down_proj"))
    else:  # HF per expert
        g, u, dn = (w[p + f"experts.{e}.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj"))
    return (silu(g @ x) * (u @ x)) @ dn.T


def forward(m, tokens):
    """-> logits [T,V], hidden [L+1,T,H] (index 0 embeddings, l+1 output of layer l)."""
    w = m.w
    x = w["embed_tokens.weight"][np.asarray(tokens)]
    pos = np.arange(len(tokens))
    hs = [x]
    for i in range(m.L):
        a = rmsnorm(x, w[f"layers.{i}.input_layernorm.weight"], m.eps, m.zero_centred)
        if m.layer_types[i] == "linear_attention":
            x = x + gdn(m, a, i)
        else:
            x = x + self_attn(m, a, i, pos)
        mm = rmsnorm(x, w[f"layers.{i}.post_attention_layernorm.weight"], m.eps, m.zero_centred)
        x = x + ffn(m, mm, i)
        hs.append(x)
    h = rmsnorm(x, w["norm.weight"], m.eps, m.zero_centred)
    return h @ m.lm.T, np.stack(hs)


# ------------------------------------------------------------------ DFlash drafter (§5) and loop (§6.2)


class Drafter:
    def __init__(self, d):
        self.cfg = json.load(open(os.path.join(d, "config.json")))
        raw, _ = stio.read_safetensors(os.path.join(d, "model.safetensors"))
        self.w = {canon(k): stio.to_numpy(*v).astype(np.float64) for k, v in raw.items()}
        c = self.cfg
        dc = c["dflash_config"]
        self.taps, self.mask = dc["target_layer_ids"], dc["mask_token_id"]
        self.bs = dc.get("block_size", c.get("block_size"))
        self.n, self.Hq, self.Hkv, self.d = c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        self.eps = c["rms_norm_eps"]
        rp = c.get("rope_parameters") or {}
        self.theta = rp.get("rope_theta", c.get("rope_theta"))
        scaling = rp if ("rope_type" in rp or "type" in rp) else c.get("rope_scaling")
        self.freqs = rope_freqs(scaling, self.d, self.theta, c.get("max_position_embeddings"))
        self.cache = [(np.zeros((0, self.Hkv, self.d)), np.zeros((0, self.Hkv, self.d))) for _ in range(self.n)]

    def draft(self, target, ctx_feats, ctx_pos, block, p0):
        """ctx_feats [m, n·H] for positions ctx_pos; block ids [bs] at p0.. -> draft logits for slots 1..bs-1."""
        w = self.w
        c = rmsnorm(ctx_feats @ w["fc.weight"].T, w["hidden_norm.weight"], self.eps)
        x = target.w["embed_tokens.weight"][np.asarray(block)]
        bs = len(block)
        bpos = np.arange(p0, p0 + bs)
        for i in range(self.n):
            p = f"layers.{i}."
            h = rmsnorm(x, w[p + "input_layernorm.weight"], self.eps)
            q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(bs, self.Hq, self.d)
            q = rope(rmsnorm(q, w[p + "self_attn.q_norm.weight"], self.eps), bpos, self.d, self.freqs)
            kn = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(bs, self.Hkv, self.d)
            kn = rope(rmsnorm(kn, w[p + "self_attn.k_norm.weight"], self.eps), bpos, self.d, self.freqs)
            vn = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(bs, self.Hkv, self.d)
            kx = (c @ w[p + "self_attn.k_proj.weight"].T).reshape(len(c), self.Hkv, self.d)
            kx = rope(rmsnorm(kx, w[p + "self_attn.k_norm.weight"], self.eps), ctx_pos, self.d, self.freqs)
            vx = (c @ w[p + "self_attn.v_proj.weight"].T).reshape(len(c), self.Hkv, self.d)
            K0, V0 = self.cache[i]
            K0, V0 = np.concatenate([K0, kx]), np.concatenate([V0, vx])
            self.cache[i] = (K0, V0)
            A = attention(q, np.concatenate([K0, kn]), np.concatenate([V0, vn]), None)
            x = x + A.reshape(bs, -1) @ w[p + "self_attn.o_proj.weight"].T
            x = x + mlp(rmsnorm(x, w[p + "post_attention_layernorm.weight"], self.eps), w, p + "mlp.")
        y = rmsnorm(x, w["norm.weight"], self.eps)
        return y[1:] @ target.lm.T


def top2(row):
    o = np.argsort(-row, kind="stable")
    return int(o[0]), float(row[o[0]] - row[o[1]])


def spec_generate(target, drafter, prompt, max_new, B):
    """MODEL-REFERENCE §6.2 at temperature 0 (targets recomputed from scratch each round: no cache needed)."""
    logits, hs = forward(target, prompt)
    feats = lambda hs_, rows: np.concatenate([hs_[t + 1][rows] for t in drafter.taps], axis=-1)  # noqa: E731
    tokens = [top2(logits[-1])[0]]
    Lt = len(prompt)
    ctx, ctx_pos = feats(hs, slice(0, Lt)), np.arange(Lt)
    rounds = []
    while True:
        remaining = max_new - len(tokens)
        bs = min(B, remaining + 1)
        if bs <= 1:
            break
        block = [tokens[-1]] + [drafter.mask] * (bs - 1)
        dl = drafter.draft(target, ctx, ctx_pos, block, Lt)
        drafts = [top2(r)[0] for r in dl]
        verify = [tokens[-1]] + drafts
        seq = list(prompt) + tokens[:-1] + verify
        vl, vh = forward(target, seq)
        vl, vh = vl[Lt:], vh[:, Lt:]
        y = [top2(r)[0] for r in vl]
        a = 0
        while a < bs - 1 and drafts[a] == y[a]:
            a += 1
        new = drafts[:a] + [y[a]]
        rounds.append({"block": verify, "accepted": a, "draft_margins": [top2(r)[1] for r in dl], "remaining": remaining})
        ctx, ctx_pos = feats(vh, slice(0, a + 1)), np.arange(Lt, Lt + a + 1)
        Lt += a + 1
        tokens += new[:remaining]
    return tokens[:max_new], rounds


# ------------------------------------------------------------------ comparison


def check_case(root, e):
    d = os.path.join(root, e["dir"])
    g = json.load(open(os.path.join(d, "golden.json")))
    m = Model(d)
    T, V = g["logits"]["shape"]
    ref_l = np.fromfile(os.path.join(d, "logits.f32"), dtype="<f4").reshape(T, V)
    ref_h = np.fromfile(os.path.join(d, "hidden.f32"), dtype="<f4").reshape(g["hidden_states"]["shape"])
    logits, hs = forward(m, g["prompt"])
    dl = float(np.abs(logits - ref_l).max())
    dh = [float(np.abs(hs[i] - ref_h[i]).max()) for i in range(hs.shape[0])]
    seq, toks = list(g["prompt"]), []
    for _ in range(len(g["greedy"]["tokens"])):
        lg, _ = forward(m, seq)
        toks.append(top2(lg[-1])[0])
        seq.append(toks[-1])
    ok_t = toks == g["greedy"]["tokens"]
    print(f"{e['case']:26s} max|dlogit| {dl:.2e}  max|dhidden| {max(dh):.2e}  greedy {'ok' if ok_t else 'DIFFERS'}")
    if dl > 1e-4 or max(dh) > 1e-4 or not ok_t:
        fail(f"{e['case']}: spec forward disagrees (logits {dl:.3g}, hidden {['%.2g' % x for x in dh]}, greedy {ok_t})")


def check_trace(root, e):
    d = os.path.join(root, e["dir"])
    tr = json.load(open(os.path.join(d, "trace.json")))
    target = Model(os.path.join(root, tr["target"]))
    for run in tr["runs"]:
        B = run["block_size"]
        dr = Drafter(d)
        toks, rounds = spec_generate(target, dr, run["prompt"], tr["max_new_tokens"], B)
        label = f"{e['drafter']} bs={B} prompt {run['prompt'][:3]}.."
        if toks != run["tokens"]:
            fail(f"{label}: tokens differ")
        n_cmp, stopped = 0, False
        for i, ref in enumerate(run["rounds"]):
            if ref["remaining"] + 1 < B:
                break
            got = rounds[i]
            if got["block"][0] != ref["block"][0]:
                fail(f"{label}: round {i} anchor {got['block'][0]} != {ref['block'][0]}")
                break
            soft = False
            for j in range(1, B):
                if got["block"][j] != ref["block"][j]:
                    if ref["draft_top2_margin"][j - 1] > 1e-3:
                        fail(f"{label}: round {i} draft slot {j}: {got['block'][j]} != {ref['block'][j]}")
                    soft = True
            if any(ref["target_top2_margin"][k] <= 1e-3 for k in range(ref["accepted"] + 1)):
                soft = True
            if not soft and got["accepted"] != ref["accepted"]:
                fail(f"{label}: round {i} accepted {got['accepted']} != {ref['accepted']}")
            n_cmp += 1
            if soft:
                stopped = True
                break
        print(f"{label}: tokens {'ok' if toks == run['tokens'] else 'DIFFER'}, {n_cmp} rounds compared"
              f"{' (stopped at a low-margin slot)' if stopped else ''}, {len(rounds)} rounds in the spec loop vs "
              f"{len(run['rounds'])} in the reference")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "goldens")
    idx = json.load(open(os.path.join(root, "index.json")))
    for e in idx["cases"]:
        if e.get("ok"):
            check_case(root, e)
    for e in idx["dflash"]:
        if e.get("ok"):
            check_trace(root, e)
    print(f"{'all agree' if not FAILS else str(len(FAILS)) + ' disagreements'}")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
