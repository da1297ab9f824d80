"""PyTorch reference of the demo models, following MODEL-REFERENCE.md exactly.

Target: Qwen3-Next hybrid (HF `Qwen3NextForCausalLM` naming and conventions): zero-centred (1+w) RMSNorms for
input/post/final/q_norm/k_norm, plain-weight gated RMSNorm in GDN, q_proj per-head [query|gate] interleave,
fused in_proj_qkvz / in_proj_ba grouped by key head, conv1d weight [C,1,Kc], A_log and dt_bias fp32, tied
embeddings, dense MLP (num_experts 0).
GDN core: a chunked (WY) delta rule for training and prefill, plus the sequential recurrence as the oracle and
for one-token decode.

Drafter: DFlash draft model (z-lab layout): fc [H, n*H], hidden_norm, Qwen3 attention (standard w*x norms,
full RoPE) with dual-stream non-causal attention over [context rows ; block rows], final norm; the target's
embedding and LM head are borrowed.
"""
import json
import math
from dataclasses import dataclass, field, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


# ----------------------------------------------------------------------------------------------------------
# configs


@dataclass
class TargetConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 8
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    linear_num_key_heads: int = 2
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 64
    linear_value_head_dim: int = 64
    linear_conv_kernel_dim: int = 4
    partial_rotary_factor: float = 0.5
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    full_attention_interval: int = 4
    max_position_embeddings: int = 4096
    bos_token_id: int = 0
    eos_token_id: int = 0
    layer_types: list = field(default_factory=list)

    def __post_init__(self):
        if not self.layer_types:
            self.layer_types = [
                "full_attention" if (i + 1) % self.full_attention_interval == 0 else "linear_attention"
                for i in range(self.num_hidden_layers)
            ]

    def hf_dict(self):
        d = {
            "architectures": ["Qwen3NextForCausalLM"],
            "model_type": "qwen3_next",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": self.max_position_embeddings,
            "initializer_range": 0.02,
            "rms_norm_eps": self.rms_norm_eps,
            "use_cache": True,
            "tie_word_embeddings": True,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta,
                                "partial_rotary_factor": self.partial_rotary_factor},
            "partial_rotary_factor": self.partial_rotary_factor,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "linear_conv_kernel_dim": self.linear_conv_kernel_dim,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_value_head_dim": self.linear_value_head_dim,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "full_attention_interval": self.full_attention_interval,
            "layer_types": self.layer_types,
            "decoder_sparse_step": 1,
            "moe_intermediate_size": 0,
            "shared_expert_intermediate_size": 0,
            "num_experts_per_tok": 0,
            "num_experts": 0,
            "norm_topk_prob": True,
            "output_router_logits": False,
            "router_aux_loss_coef": 0.001,
            "mlp_only_layers": [],
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "bfloat16",
        }
        return d

    @classmethod
    def from_hf(cls, d):
        keys = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in keys})


@dataclass
class DrafterConfig:
    hidden_size: int = 256
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    vocab_size: int = 4096
    block_size: int = 16
    num_target_layers: int = 8
    target_layer_ids: list = field(default_factory=lambda: [1, 3, 5, 7])
    mask_token_id: int = 0

    def hf_dict(self):
        return {
            "architectures": ["DFlashDraftModel"],
            "model_type": "qwen3",
            "hidden_size": self.hidden_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "intermediate_size": self.intermediate_size,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "attention_bias": False,
            "attention_dropout": 0.0,
            "max_position_embeddings": self.max_position_embeddings,
            "vocab_size": self.vocab_size,
            "tie_word_embeddings": False,
            "block_size": self.block_size,
            "num_target_layers": self.num_target_layers,
            "dflash_config": {"target_layer_ids": self.target_layer_ids,
                              "mask_token_id": self.mask_token_id,
                              "block_size": self.block_size},
            "torch_dtype": "bfloat16",
        }

    @classmethod
    def from_hf(cls, d):
        keys = {f for f in cls.__dataclass_fields__}
        kw = {k: v for k, v in d.items() if k in keys}
        kw["target_layer_ids"] = d["dflash_config"]["target_layer_ids"]
        kw["mask_token_id"] = d["dflash_config"]["mask_token_id"]
        return cls(**kw)


# ----------------------------------------------------------------------------------------------------------
# primitives


class ZCRMSNorm(nn.Module):
    """Qwen3-Next zero-centred RMSNorm: y = x_hat * (1 + w), computed in fp32."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (y * (1.0 + self.weight.float())).to(x.dtype)


class RMSNorm(nn.Module):
    """Standard Qwen3 RMSNorm: y = w * cast(x_hat)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class GatedRMSNorm(nn.Module):
    """GDN output norm: w * x_hat * silu(z), plain weight (init 1)."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x, z):
        dt = x.dtype
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        y = self.weight * y.to(dt)
        return (y * F.silu(z.float())).to(dt)


def rope_cos_sin(positions, rot_dim, theta, device):
    """positions: LongTensor [...]; returns cos, sin [..., rot_dim] (NeoX rotate-half layout), fp32."""
    inv = 1.0 / (theta ** (torch.arange(0, rot_dim, 2, device=device, dtype=torch.float32) / rot_dim))
    ang = positions.to(torch.float32)[..., None] * inv
    emb = torch.cat([ang, ang], -1)
    return emb.cos(), emb.sin()


def apply_rope(x, cos, sin):
    """x [B, heads, T, d]; cos/sin [B or 1, T, r]: rotate the first r dims, pass the rest through."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    c = cos[:, None].to(x.dtype)
    s = sin[:, None].to(x.dtype)
    x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
    rot = torch.cat([-x2, x1], -1)
    return torch.cat([xr * c + rot * s, xp], -1)


def sdpa(q, k, v, attn_mask=None, is_causal=False):
    """F.scaled_dot_product_attention, with a plain fallback for old torch (local CPU smoke tests)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=is_causal)
    s = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if is_causal:
        L, S = s.shape[-2:]
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(S - L)
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, -float("inf"))
    return (s.softmax(-1) @ v.float()).to(q.dtype)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


# ----------------------------------------------------------------------------------------------------------
# gated delta rule cores (all fp32). Layout: q,k [B,T,H,dk] (already expanded to value heads, L2-normed, q
# scaled), v [B,T,H,dv], g (log decay) and beta [B,T,H]. State S in HF layout [B,H,dk,dv].


def gdr_sequential(q, k, v, g, beta, state=None):
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(B, H, dk, dv, device=q.device, dtype=torch.float32) if state is None else state.float()
    out = []
    for t in range(T):
        S = S * g[:, t].exp()[..., None, None]
        kt = k[:, t]
        mem = torch.einsum("bhkv,bhk->bhv", S, kt)
        delta = beta[:, t][..., None] * (v[:, t] - mem)
        S = S + kt[..., :, None] * delta[..., None, :]
        out.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]))
    return torch.stack(out, 1), S


def gdr_chunked(q, k, v, g, beta, state=None, chunk=64):
    """WY / chunked gated delta rule; mathematically equal to gdr_sequential. Right-pads T to a chunk multiple
    (padded rows come after every real row and have beta=0, g=0, so they never change real outputs; the final
    state is only valid when no padding was needed or is taken from the real length, see `final_state`)."""
    B, T, H, dk = k.shape
    dv = v.shape[-1]
    pad = (chunk - T % chunk) % chunk
    q, k, v, g, beta = [x.float().transpose(1, 2) for x in (q, k, v, g, beta)]  # [B,H,T,...]
    if pad:
        q = F.pad(q, (0, 0, 0, pad))
        k = F.pad(k, (0, 0, 0, pad))
        v = F.pad(v, (0, 0, 0, pad))
        g = F.pad(g, (0, pad))
        beta = F.pad(beta, (0, pad))
    n = (T + pad) // chunk
    q, k, v = [x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v)]
    g = g.reshape(B, H, n, chunk).cumsum(-1)
    beta = beta.reshape(B, H, n, chunk)
    kb = k * beta[..., None]
    vb = v * beta[..., None]
    tri_incl = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device))
    tri_strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool, device=q.device), -1)
    diff = (g[..., :, None] - g[..., None, :]).masked_fill(~tri_incl, -float("inf"))
    decay = diff.exp()  # [B,H,n,c,c], lower incl., exp(g_i - g_j)
    Lm = ((kb @ k.transpose(-1, -2)) * decay).masked_fill(~tri_strict, 0.0)
    eye = torch.eye(chunk, device=q.device, dtype=torch.float32)
    Tinv = torch.linalg.solve_triangular(eye + Lm, eye.expand_as(Lm), upper=False, unitriangular=True)
    U = Tinv @ vb                                   # pseudo values
    W = Tinv @ (kb * g.exp()[..., None])            # decayed keys
    S = torch.zeros(B, H, dk, dv, device=q.device, dtype=torch.float32) if state is None else state.float()
    qk = (q @ k.transpose(-1, -2)) * decay          # intra-chunk attention incl. diagonal
    outs = []
    for i in range(n):
        vn = U[:, :, i] - W[:, :, i] @ S
        o = (q[:, :, i] * g[:, :, i, :, None].exp()) @ S + qk[:, :, i] @ vn
        outs.append(o)
        glast = g[:, :, i, -1]
        S = S * glast.exp()[..., None, None] + (k[:, :, i] * (glast[..., None] - g[:, :, i]).exp()[..., None]).transpose(-1, -2) @ vn
    o = torch.stack(outs, 2).reshape(B, H, n * chunk, dv)[:, :, :T]
    return o.transpose(1, 2), S


# ----------------------------------------------------------------------------------------------------------
# target layers


class GatedDeltaNet(nn.Module):
    def __init__(self, c: TargetConfig):
        super().__init__()
        self.Hk, self.Hv = c.linear_num_key_heads, c.linear_num_value_heads
        self.dk, self.dv = c.linear_key_head_dim, c.linear_value_head_dim
        self.rho = self.Hv // self.Hk
        self.Kc = c.linear_conv_kernel_dim
        self.Dk, self.Dv = self.Hk * self.dk, self.Hv * self.dv
        self.C = 2 * self.Dk + self.Dv
        H = c.hidden_size
        self.in_proj_qkvz = nn.Linear(H, 2 * self.Dk + 2 * self.Dv, bias=False)
        self.in_proj_ba = nn.Linear(H, 2 * self.Hv, bias=False)
        self.conv1d = nn.Conv1d(self.C, self.C, self.Kc, groups=self.C, bias=False, padding=self.Kc - 1)
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.Hv).uniform_(1, 16)))
        self.norm = GatedRMSNorm(self.dv, c.rms_norm_eps)
        self.out_proj = nn.Linear(self.Dv, H, bias=False)

    def project(self, a):
        B, T, _ = a.shape
        U = self.in_proj_qkvz(a).view(B, T, self.Hk, 2 * self.dk + 2 * self.rho * self.dv)
        q, k, v, z = torch.split(U, [self.dk, self.dk, self.rho * self.dv, self.rho * self.dv], -1)
        Bm = self.in_proj_ba(a).view(B, T, self.Hk, 2 * self.rho)
        b, ar = torch.split(Bm, [self.rho, self.rho], -1)
        P = torch.cat([q.reshape(B, T, -1), k.reshape(B, T, -1), v.reshape(B, T, -1)], -1)
        return P, z.reshape(B, T, self.Hv, self.dv), b.reshape(B, T, self.Hv), ar.reshape(B, T, self.Hv)

    def forward(self, a, cache=None, mode="chunked"):
        """cache: dict with 'conv' [B,Kc-1,C] and 'S' [B,Hv,dk,dv] (updated in place semantics: returned)."""
        B, T, _ = a.shape
        P, z, b, ar = self.project(a)
        w = self.conv1d.weight[:, 0, :]  # [C, Kc]
        prev = cache.get("conv") if cache is not None else None
        if prev is None:
            prev = torch.zeros(B, self.Kc - 1, self.C, device=a.device, dtype=P.dtype)
        X = torch.cat([prev.to(P.dtype), P], 1)  # [B, Kc-1+T, C]
        if T == 1:
            Y = (X * w.t()[None].to(X.dtype)).sum(1, keepdim=True)
        else:
            Y = F.conv1d(X.transpose(1, 2), w[:, None, :].to(X.dtype), groups=self.C).transpose(1, 2)
        Y = F.silu(Y)
        q, k, v = torch.split(Y, [self.Dk, self.Dk, self.Dv], -1)
        q = q.reshape(B, T, self.Hk, self.dk).float()
        k = k.reshape(B, T, self.Hk, self.dk).float()
        v = v.reshape(B, T, self.Hv, self.dv).float()
        q = l2norm(q) * (self.dk ** -0.5)
        k = l2norm(k)
        if self.rho > 1:
            q = q.repeat_interleave(self.rho, 2)
            k = k.repeat_interleave(self.rho, 2)
        beta = torch.sigmoid(b.float())
        g = -self.A_log.float().exp() * F.softplus(ar.float() + self.dt_bias.float())
        state = cache.get("S") if cache is not None else None
        with torch.autocast(device_type=a.device.type, enabled=False):
            if mode == "sequential" or T == 1:
                o, S = gdr_sequential(q, k, v, g, beta, state)
            else:
                o, S = gdr_chunked(q, k, v, g, beta, state)
        if cache is not None:
            cache["conv"] = X[:, -(self.Kc - 1):].detach()
            cache["S"] = S.detach()
        o = self.norm(o.to(z.dtype), z)
        return self.out_proj(o.reshape(B, T, self.Dv))


class GatedAttention(nn.Module):
    def __init__(self, c: TargetConfig):
        super().__init__()
        self.Hq, self.Hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        H = c.hidden_size
        self.q_proj = nn.Linear(H, 2 * self.Hq * self.d, bias=False)
        self.k_proj = nn.Linear(H, self.Hkv * self.d, bias=False)
        self.v_proj = nn.Linear(H, self.Hkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.Hq * self.d, H, bias=False)
        self.q_norm = ZCRMSNorm(self.d, c.rms_norm_eps)
        self.k_norm = ZCRMSNorm(self.d, c.rms_norm_eps)
        self.rot = int(self.d * c.partial_rotary_factor)
        self.theta = c.rope_theta

    def forward(self, a, pos, cache=None):
        """pos: LongTensor [T] absolute positions of these rows. cache: {'k','v': [B,Hkv,L,d]} appended."""
        B, T, _ = a.shape
        Q2 = self.q_proj(a).view(B, T, self.Hq, 2 * self.d)
        q, gate = Q2[..., : self.d], Q2[..., self.d:]
        gate = gate.reshape(B, T, self.Hq * self.d)
        q = self.q_norm(q).transpose(1, 2)
        k = self.k_norm(self.k_proj(a).view(B, T, self.Hkv, self.d)).transpose(1, 2)
        v = self.v_proj(a).view(B, T, self.Hkv, self.d).transpose(1, 2)
        cos, sin = rope_cos_sin(pos[None], self.rot, self.theta, a.device)
        q = apply_rope(q, cos, sin)
        k = apply_rope(k, cos, sin)
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], 2)
                v = torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k.detach(), v.detach()
        L = k.shape[2]
        rep = self.Hq // self.Hkv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        if T == L:
            o = sdpa(q, k, v, is_causal=True)
        elif T == 1:
            o = sdpa(q, k, v)
        else:
            qpos = torch.arange(L - T, L, device=a.device)
            mask = torch.arange(L, device=a.device)[None, :] <= qpos[:, None]
            o = sdpa(q, k, v, attn_mask=mask)
        o = o.transpose(1, 2).reshape(B, T, self.Hq * self.d)
        o = o * torch.sigmoid(gate)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, H, I):
        super().__init__()
        self.gate_proj = nn.Linear(H, I, bias=False)
        self.up_proj = nn.Linear(H, I, bias=False)
        self.down_proj = nn.Linear(I, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c: TargetConfig, i):
        super().__init__()
        self.kind = c.layer_types[i]
        if self.kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(c)
        else:
            self.self_attn = GatedAttention(c)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)
        self.input_layernorm = ZCRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = ZCRMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, pos, cache=None, mode="chunked"):
        a = self.input_layernorm(x)
        if self.kind == "linear_attention":
            h = x + self.linear_attn(a, cache, mode)
        else:
            h = x + self.self_attn(a, pos, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class Inner(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c, i) for i in range(c.num_hidden_layers)])
        self.norm = ZCRMSNorm(c.hidden_size, c.rms_norm_eps)


class Target(nn.Module):
    """Qwen3NextForCausalLM with tied embeddings; parameter names == HF names."""

    def __init__(self, c: TargetConfig):
        super().__init__()
        self.config = c
        self.model = Inner(c)
        self.apply(self._init)

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def lm_head(self, h):
        return h @ self.model.embed_tokens.weight.t().to(h.dtype)

    def forward(self, ids, pos0=0, caches=None, mode="chunked", taps=None, return_hidden=False):
        """ids [B,T]. caches: list of per-layer dicts (or None). taps: layer ids whose OUTPUTS are returned
        (concatenated in order). Returns (logits or final hidden, taps)."""
        x = self.model.embed_tokens(ids)
        T = ids.shape[1]
        pos = torch.arange(pos0, pos0 + T, device=ids.device)
        tapped = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, pos, caches[i] if caches is not None else None, mode)
            if taps is not None and i in taps:
                tapped.append((i, x))
        h = self.model.norm(x)
        tap_out = None
        if taps is not None:
            d = dict(tapped)
            tap_out = torch.cat([d[i] for i in taps], -1)
        if return_hidden:
            return h, tap_out
        return self.lm_head(h), tap_out


# ----------------------------------------------------------------------------------------------------------
# drafter


class DraftAttention(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.Hq, self.Hkv, self.d = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        H = c.hidden_size
        self.q_proj = nn.Linear(H, self.Hq * self.d, bias=False)
        self.k_proj = nn.Linear(H, self.Hkv * self.d, bias=False)
        self.v_proj = nn.Linear(H, self.Hkv * self.d, bias=False)
        self.o_proj = nn.Linear(self.Hq * self.d, H, bias=False)
        self.q_norm = RMSNorm(self.d, c.rms_norm_eps)
        self.k_norm = RMSNorm(self.d, c.rms_norm_eps)
        self.theta = c.rope_theta

    def forward(self, h, ctx, pos_q, pos_c, mask):
        """h [B,Nq,H] block rows (input-normed); ctx [B,Nc,H] projected context rows (NOT input-normed);
        pos_q [B,Nq], pos_c [B,Nc]; mask [B,1,Nq,Nc+Nq] bool (True = may attend) or None (attend all)."""
        B, Nq, _ = h.shape
        Nc = ctx.shape[1]
        q = self.q_norm(self.q_proj(h).view(B, Nq, self.Hq, self.d)).transpose(1, 2)
        kin = torch.cat([ctx, h], 1)
        k = self.k_norm(self.k_proj(kin).view(B, Nc + Nq, self.Hkv, self.d)).transpose(1, 2)
        v = self.v_proj(kin).view(B, Nc + Nq, self.Hkv, self.d).transpose(1, 2)
        cq, sq = rope_cos_sin(pos_q, self.d, self.theta, h.device)
        ck, sk = rope_cos_sin(torch.cat([pos_c, pos_q], 1), self.d, self.theta, h.device)
        q = apply_rope(q, cq, sq)
        k = apply_rope(k, ck, sk)
        rep = self.Hq // self.Hkv
        k = k.repeat_interleave(rep, 1)
        v = v.repeat_interleave(rep, 1)
        o = sdpa(q, k, v, attn_mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(B, Nq, self.Hq * self.d))


class DraftLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.self_attn = DraftAttention(c)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, x, ctx, pos_q, pos_c, mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx, pos_q, pos_c, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Drafter(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        self.config = c
        n = len(c.target_layer_ids)
        self.fc = nn.Linear(n * c.hidden_size, c.hidden_size, bias=False)
        self.hidden_norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.layers = nn.ModuleList([DraftLayer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, x, taps, pos_q, pos_c, mask):
        """x: embedded block rows [B,Nq,H]; taps [B,Nc,n*H] target features of context rows."""
        ctx = self.hidden_norm(self.fc(taps))
        for layer in self.layers:
            x = layer(x, ctx, pos_q, pos_c, mask)
        return self.norm(x)


# ----------------------------------------------------------------------------------------------------------
# saving / loading (HF layout)


def save_target(model: Target, path, dtype=torch.bfloat16):
    from safetensors.torch import save_file
    import os
    os.makedirs(path, exist_ok=True)
    sd = {}
    for k, v in model.state_dict().items():
        keep32 = k.endswith("A_log") or k.endswith("dt_bias")
        sd[k] = v.detach().to(torch.float32 if keep32 else dtype).contiguous().cpu()
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(model.config.hf_dict(), f, indent=2)


def load_target(path, device="cpu"):
    import os
    with open(os.path.join(path, "config.json")) as f:
        c = TargetConfig.from_hf(json.load(f))
    m = Target(c)
    m.load_state_dict(_float_state(path), strict=True)
    return m.to(device)


def save_drafter(model: Drafter, path, dtype=torch.bfloat16):
    from safetensors.torch import save_file
    import os
    os.makedirs(path, exist_ok=True)
    sd = {k: v.detach().to(dtype).contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(sd, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(model.config.hf_dict(), f, indent=2)


def load_drafter(path, device="cpu"):
    import os
    with open(os.path.join(path, "config.json")) as f:
        c = DrafterConfig.from_hf(json.load(f))
    m = Drafter(c)
    m.load_state_dict(_float_state(path), strict=True)
    return m.to(device)


def _float_state(path):
    """fp32 state dict of a checkpoint directory; an MLX-quantized one (config.json "quantization", written by
    mlxquant.py) is dequantized exactly as the engine reads it, so what is evaluated is what ships."""
    import os
    with open(os.path.join(path, "config.json")) as f:
        cfg = json.load(f)
    q = cfg.get("quantization")
    if q:
        import mlxquant
        sd = mlxquant.dequantized_state(os.path.join(path, "model.safetensors"), q,
                                        hybrid=cfg.get("model_type") == "qwen3_next")
        return {k: torch.from_numpy(v) for k, v in sd.items()}
    from safetensors.torch import load_file
    return {k: v.float() for k, v in load_file(os.path.join(path, "model.safetensors")).items()}
