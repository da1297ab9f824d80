#!/usr/bin/env python3
"""Numerical goldens for the higgs CPU backend (issue 3 item 5) and the DFlash trace goldens (issue 4 item 5).

Run on a machine with PyTorch + transformers (the accelerator machine):

    python3 tools/goldens/make_goldens.py --out OUTDIR [--dflash third_party_ref/dflash]

It writes OUTDIR/<case>/ for every case (checkpoint + goldens) and OUTDIR/index.json; copy OUTDIR over
testdata/goldens/. testdata/goldens/README.md documents every file. Everything is seeded; the reference forward runs
on the CPU in float32 with transformers' own model classes (eager attention), so re-running reproduces the files
except the DFlash drafters, which are fitted on the GPU (not bit-reproducible; the committed weights are the truth).

Nothing here needs network access.
"""

import argparse
import importlib.util
import json
import math
import os
import platform
import sys
import time
import traceback
import zlib

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mlxq  # noqa: E402
import stio  # noqa: E402

try:
    import transformers  # noqa: E402
except ImportError:  # lets the pure-numpy helpers be smoke-tested where transformers is absent
    transformers = None

V = 512  # vocabulary of the dense Qwen3 cases
V_HYBRID = 256  # hybrid cases and the DFlash target: smaller, to keep the committed checkpoints tiny
T_PROMPT = 12
N_GREEDY = 16

# ---------------------------------------------------------------------------------------------------------------
# Case table
# ---------------------------------------------------------------------------------------------------------------

ROPE_Q3 = 1_000_000.0


def _q3(**kw):
    base = dict(
        vocab_size=V,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        attention_bias=False,
        hidden_act="silu",
        rope_parameters={"rope_type": "default", "rope_theta": ROPE_Q3},
    )
    base.update(kw)
    return base


def _hybrid(**kw):
    base = dict(
        vocab_size=V_HYBRID,
        hidden_size=64,
        intermediate_size=64,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        rms_norm_eps=1e-6,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        attention_bias=False,
        hidden_act="silu",
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=16,
        linear_value_head_dim=16,
        linear_conv_kernel_dim=4,
        partial_rotary_factor=0.25,
        rope_parameters={"rope_type": "default", "rope_theta": 10_000_000.0, "partial_rotary_factor": 0.25},
    )
    base.update(kw)
    return base


LIN, FULL = "linear_attention", "full_attention"


def _next_dense(**kw):
    """The qwen3_next_dense shape: [lin,full,lin,full], num_experts 0 (dense MLP everywhere)."""
    base = dict(
        layer_types=[LIN, FULL, LIN, FULL],
        full_attention_interval=2,
        num_experts=0,
        num_experts_per_tok=1,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=64,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        norm_topk_prob=True,
    )
    base.update(kw)
    return _hybrid(**base)

CASES = [
    dict(
        name="qwen3_dense_tied",
        family="qwen3",
        about="Qwen3 dense, tied embeddings, head_dim = hidden/heads, GQA 4/2.",
        cfg=_q3(),
    ),
    dict(
        name="qwen3_dense_untied",
        family="qwen3",
        about="Qwen3 dense, untied lm_head, head_dim 24 != hidden/heads (16), GQA 4/1, rope_theta 1e4, eps 1e-5, "
        "vocab 256.",
        cfg=_q3(
            vocab_size=V_HYBRID,
            num_hidden_layers=3,
            num_key_value_heads=1,
            head_dim=24,
            intermediate_size=96,
            rms_norm_eps=1e-5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10_000.0},
        ),
    ),
    dict(
        name="qwen3_next_dense",
        family="qwen3_next",
        about="Qwen3-Next hybrid, layer_types [lin,full,lin,full] (full_attention_interval 2), partial rotary 0.25 "
        "(8 of 32 dims), num_experts 0 -> dense MLP everywhere, GDN Hk=2 Hv=4 (rho 2), untied.",
        cfg=_next_dense(),
    ),
    dict(
        name="qwen3_next_moe",
        family="qwen3_next",
        about="Qwen3-Next hybrid MoE on every layer, 4 experts top-2, norm_topk_prob true, shared expert + sigmoid "
        "gate, layer_types [lin,lin,full] (full_attention_interval 3), untied.",
        cfg=_hybrid(
            num_hidden_layers=3,
            layer_types=[LIN, LIN, FULL],
            full_attention_interval=3,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            norm_topk_prob=True,
        ),
    ),
    dict(
        name="qwen3_next_moe_sparse",
        family="qwen3_next",
        about="Qwen3-Next hybrid, norm_topk_prob false, decoder_sparse_step 2, mlp_only_layers [3] -> MoE only on "
        "layer 1 (top-3 of 4), dense MLP on 0,2,3; partial rotary 0.5; tied embeddings.",
        cfg=_hybrid(
            layer_types=[LIN, FULL, LIN, FULL],
            full_attention_interval=2,
            num_experts=4,
            num_experts_per_tok=3,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            decoder_sparse_step=2,
            mlp_only_layers=[3],
            norm_topk_prob=False,
            tie_word_embeddings=True,
            partial_rotary_factor=0.5,
            rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "partial_rotary_factor": 0.5},
        ),
    ),
    dict(
        name="qwen3_5_dense",
        family="qwen3_5",
        about="Qwen3.5 dense hybrid saved in the multimodal-wrapper layout (model_type qwen3_5, text_config, "
        "model.language_model.* names, tiny vision_config but no vision weights), tied, separate "
        "in_proj_qkv/z/b/a, mrope (text-only => plain partial RoPE).",
        cfg=_hybrid(
            layer_types=[LIN, LIN, LIN, FULL],
            full_attention_interval=4,
            num_key_value_heads=1,
            tie_word_embeddings=True,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10_000_000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
            },
        ),
    ),
    dict(
        name="qwen3_5_moe",
        family="qwen3_5_moe",
        about="Qwen3.5-MoE hybrid in the multimodal-wrapper layout, MoE on every layer (4 experts top-2, always "
        "renormalised), fused experts.gate_up_proj/down_proj, GDN Hk=Hv=2 with dk 16 != dv 32, layer_types "
        "[lin,lin,full], untied.",
        cfg=_hybrid(
            num_hidden_layers=3,
            layer_types=[LIN, LIN, FULL],
            full_attention_interval=3,
            linear_num_value_heads=2,
            linear_value_head_dim=32,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            norm_topk_prob=True,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 10_000_000.0,
                "partial_rotary_factor": 0.25,
                "mrope_section": [2, 1, 1],
                "mrope_interleaved": True,
            },
        ),
    ),
    dict(
        name="qwen3_dflash_target",
        family="qwen3",
        about="Qwen3 dense 5-layer target for the DFlash trace goldens (tied, vocab 256).",
        cfg=_q3(num_hidden_layers=5, intermediate_size=64, vocab_size=V_HYBRID),
    ),
    dict(
        name="qwen3_dense_yarn",
        family="qwen3",
        about="Qwen3 dense with YaRN RoPE scaling: factor 4 over original_max_position_embeddings 32 "
        "(max_position_embeddings 128), rope_theta 1e4, so with head_dim 16 the frequencies span extrapolated, "
        "ramped and interpolated dimensions; default beta_fast/beta_slow and attention factor (0.1 ln 4 + 1).",
        cfg=_q3(
            max_position_embeddings=128,
            rope_parameters={"rope_type": "yarn", "rope_theta": 10_000.0, "factor": 4.0,
                             "original_max_position_embeddings": 32},
        ),
    ),
    dict(
        name="qwen3_next_linear",
        family="qwen3_next",
        about="Qwen3-Next dense hybrid with linear RoPE scaling (factor 2) on partial rotary 0.25, layer_types "
        "[lin,full,lin,full].",
        cfg=_next_dense(rope_parameters={"rope_type": "linear", "rope_theta": 10_000_000.0, "factor": 2.0,
                                         "partial_rotary_factor": 0.25}),
    ),
]

# MLX affine-quantized variants (MODEL-REFERENCE §1.4), derived from a case above.
QUANT_CASES = [
    dict(
        name="qwen3_dense_tied_mlx_q4",
        base="qwen3_dense_tied",
        sdtype="BF16",
        default={"group_size": 64, "bits": 4},
        overrides={
            "model.layers.0.self_attn.q_proj": False,
            "model.layers.0.self_attn.k_proj": {"group_size": 64, "bits": 5},
            "model.layers.0.mlp.down_proj": {"group_size": 32, "bits": 8},
            "model.layers.1.self_attn.v_proj": {"group_size": 64, "bits": 3},
            "model.layers.1.self_attn.o_proj": {"group_size": 32, "bits": 6},
            "model.layers.1.mlp.gate_proj": {"group_size": 64, "bits": 2},
            "model.layers.1.mlp.down_proj": {"group_size": 128, "bits": 4},
        },
        about="MLX 4-bit/64 quantization of qwen3_dense_tied (quantized tied embedding = lm_head), BF16 scales/"
        "biases and BF16 norms, with per-module overrides covering 2/3/5/6/8 bits, groups 32/64/128 and one "
        "module left unquantized (false).",
    ),
    dict(
        name="qwen3_next_moe_mlx_q4",
        base="qwen3_next_moe",
        sdtype="F16",
        default={"group_size": 64, "bits": 4},
        overrides=dict(
            [(f"model.layers.{i}.mlp.gate", {"group_size": 64, "bits": 8}) for i in range(3)]
            + [(f"model.layers.{i}.mlp.shared_expert_gate", {"group_size": 64, "bits": 8}) for i in range(3)]
            + [(f"model.layers.{i}.mlp.switch_mlp.down_proj", {"group_size": 32, "bits": 4}) for i in range(3)]
            + [(f"model.layers.{i}.mlp.shared_expert.down_proj", {"group_size": 32, "bits": 4}) for i in range(3)]
            + [
                ("model.layers.0.linear_attn.in_proj_qkvz", {"group_size": 64, "bits": 3}),
                ("model.layers.1.linear_attn.in_proj_ba", {"group_size": 32, "bits": 5}),
                ("model.layers.2.self_attn.o_proj", {"group_size": 128, "bits": 6}),
            ]
        ),
        about="MLX (mlx-lm layout) 4-bit/64 quantization of qwen3_next_moe: switch_mlp stacked experts, router and "
        "shared_expert_gate 8-bit, norms with +1 folded, conv1d as [C,Kc,1], F16 scales/biases/norms, A_log and "
        "dt_bias F32, 3/5/6-bit overrides.",
    ),
]

DFLASH_DRAFTERS = [
    dict(
        name="dflash_drafter_b8",
        about="DFlash drafter, block 8, 2 layers, taps [1,3] of the 5-layer target (num_target_layers 5).",
        cfg=dict(
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            rope_theta=ROPE_Q3,
            block_size=8,
            num_target_layers=5,
            dflash_config={"target_layer_ids": [1, 3], "mask_token_id": 255},
        ),
        block_sizes=[8, 4],
    ),
    dict(
        name="dflash_drafter_b16_taps",
        about="DFlash drafter, block 16, 3 taps [0,2,3] for 2 layers while num_target_layers says 8 (target has 5; "
        "the default formula would give [1,5]); its own head layout (2 heads x 32, 1 kv head) and rope_theta 1e4; "
        "block_size also in dflash_config (newer layout).",
        cfg=dict(
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=32,
            rope_theta=10_000.0,
            block_size=16,
            num_target_layers=8,
            dflash_config={"target_layer_ids": [0, 2, 3], "mask_token_id": 250, "block_size": 16},
        ),
        block_sizes=[16],
    ),
]

DFLASH_PROMPT_LENS = [12, 20, 7]
DFLASH_MAX_NEW = 48


# ---------------------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------------------


def log(*a):
    print(*a, flush=True)


def seed_of(name):
    return zlib.crc32(name.encode()) & 0x7FFFFFFF


def rng_for(name):
    g = torch.Generator()
    g.manual_seed(seed_of(name))
    return g


def versions():
    v = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
    }
    for mod in ("safetensors", "tokenizers", "huggingface_hub"):
        try:
            v[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001
            pass
    try:
        import fla  # noqa: F401

        v["fla"] = getattr(sys.modules["fla"], "__version__", "present")
    except Exception:  # noqa: BLE001
        v["fla"] = None
    try:
        import causal_conv1d  # noqa: F401

        v["causal_conv1d"] = "present"
    except Exception:  # noqa: BLE001
        v["causal_conv1d"] = None
    return v


def classes_for(family):
    """(config class, CausalLM class, wrapper config class or None)."""
    names = {
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", None),
        "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", None),
        "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", "Qwen3_5Config"),
        "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", "Qwen3_5MoeConfig"),
    }[family]
    out = []
    for n in names:
        if n is None:
            out.append(None)
            continue
        c = getattr(transformers, n, None)
        if c is None:
            raise MissingClass(f"transformers {transformers.__version__} has no {n}")
        out.append(c)
    return out


class MissingClass(Exception):
    pass


def make_config(cls, kw):
    """Build a config; newer transformers want rope_parameters, older ones rope_theta/partial_rotary_factor."""
    kw = dict(kw)
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        log(f"  config with rope_parameters failed ({e}); retrying with legacy rope keys")
        rp = kw.pop("rope_parameters", None) or {}
        if "rope_theta" in rp:
            kw["rope_theta"] = rp["rope_theta"]
        if "partial_rotary_factor" in rp:
            kw["partial_rotary_factor"] = rp["partial_rotary_factor"]
        return cls(**kw)


def set_eager(config):
    for attr in ("_attn_implementation", "attn_implementation"):
        try:
            setattr(config, attr, "eager")
            return
        except Exception:  # noqa: BLE001
            pass


def build_model(case):
    cfg_cls, lm_cls, _ = classes_for(case["family"])
    kw = dict(case["cfg"])
    config = make_config(cfg_cls, kw)
    set_eager(config)
    torch.manual_seed(seed_of(case["name"]))
    model = lm_cls(config)
    try:
        model.set_attn_implementation("eager")
    except Exception:  # noqa: BLE001
        pass
    model = model.float().eval()
    randomize(model, case)
    return model


ZERO_CENTRED_FAMILIES = ("qwen3_next", "qwen3_5", "qwen3_5_moe")


def randomize(model, case):
    """Overwrite every parameter with seeded values that make bugs visible (norms != 1, A_log/dt_bias random)."""
    g = rng_for(case["name"] + "/weights")
    zc = case["family"] in ZERO_CENTRED_FAMILIES
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if name.endswith("A_log"):
                val = torch.log(torch.rand(shape, generator=g) * 1.5 + 0.05)
            elif name.endswith("dt_bias"):
                val = torch.randn(shape, generator=g) * 0.5
            elif "conv1d" in name:
                val = torch.randn(shape, generator=g) * 0.5
            elif name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                if zc and "linear_attn.norm" not in name:
                    val = (torch.rand(shape, generator=g) - 0.5) * 0.6  # applied as (1 + w)
                else:
                    val = torch.rand(shape, generator=g) * 0.6 + 0.7
            elif "embed_tokens" in name:
                val = torch.randn(shape, generator=g) * 0.5
            elif name.endswith("lm_head.weight"):
                val = torch.randn(shape, generator=g) * 0.5
            elif "visual" in name:
                val = torch.randn(shape, generator=g) * 0.02
            elif p.ndim >= 2:
                fan_in = shape[-1]
                scale = 1.0 / math.sqrt(fan_in)
                if name.endswith("mlp.gate.weight"):
                    scale *= 3.0  # decisive routing: keep top-k gaps far from ties
                val = torch.randn(shape, generator=g) * scale
            else:
                val = torch.randn(shape, generator=g) * 0.1
            p.copy_(val.to(p.dtype))


def model_state(model):
    """name -> float32 numpy, persistent tensors only, as the model names them."""
    return {k: v.detach().to(torch.float32).cpu().numpy().copy() for k, v in model.state_dict().items()}


def to_hub(case_family, sd, tied):
    """Model state_dict -> the Hugging Face hub checkpoint naming of that family."""
    out = {}
    for k, v in sd.items():
        if tied and k == "lm_head.weight":
            continue
        if case_family == "qwen3_next" and k.endswith(".mlp.experts.gate_up_proj"):
            pre = k[: -len("gate_up_proj")]
            half = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{pre}{e}.gate_proj.weight"] = v[e, :half].copy()
                out[f"{pre}{e}.up_proj.weight"] = v[e, half:].copy()
            continue
        if case_family == "qwen3_next" and k.endswith(".mlp.experts.down_proj"):
            pre = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{pre}{e}.down_proj.weight"] = v[e].copy()
            continue
        if case_family in ("qwen3_5", "qwen3_5_moe") and k.startswith("model."):
            out["model.language_model." + k[len("model.") :]] = v
            continue
        out[k] = v
    return out


def from_hub(case_family, hub, model_keys):
    """Inverse of to_hub onto the keys the installed model uses (fused or per-expert)."""
    sd = {}
    for k, v in hub.items():
        if case_family in ("qwen3_5", "qwen3_5_moe") and k.startswith("model.language_model."):
            k = "model." + k[len("model.language_model.") :]
        sd[k] = v
    if case_family == "qwen3_next":
        fused = [k for k in model_keys if k.endswith(".mlp.experts.gate_up_proj")]
        for fk in fused:
            pre = fk[: -len("gate_up_proj")]
            es = sorted({int(k[len(pre) :].split(".")[0]) for k in sd if k.startswith(pre) and k.endswith("gate_proj.weight")})
            sd[fk] = np.stack([np.concatenate([sd.pop(f"{pre}{e}.gate_proj.weight"), sd.pop(f"{pre}{e}.up_proj.weight")], 0) for e in es])
            sd[pre + "down_proj"] = np.stack([sd.pop(f"{pre}{e}.down_proj.weight") for e in es])
    if "lm_head.weight" in model_keys and "lm_head.weight" not in sd:
        sd["lm_head.weight"] = sd["model.embed_tokens.weight"]
    return sd


def load_state(model, sd):
    msd = model.state_dict()
    missing = [k for k in msd if k not in sd]
    extra = [k for k in sd if k not in msd]
    if missing or extra:
        raise RuntimeError(f"state mismatch: missing {missing[:8]} extra {extra[:8]}")
    with torch.no_grad():
        for k, t in msd.items():
            src = torch.from_numpy(np.ascontiguousarray(sd[k])).to(t.dtype)
            if tuple(src.shape) != tuple(t.shape):
                raise RuntimeError(f"{k}: shape {tuple(src.shape)} != {tuple(t.shape)}")
            t.copy_(src)


def top2(logits):
    """logits: torch [.., V] -> (argmax, top1 - top2) numpy."""
    v, i = torch.topk(logits.double(), 2, dim=-1)
    return i[..., 0].cpu().numpy(), (v[..., 0] - v[..., 1]).cpu().numpy()


def r6(x):
    """6 significant digits: margins only steer which comparisons a test makes."""
    return float(f"{float(x):.6g}")


class Capture:
    """Forward hooks: embedding output, every decoder layer's output, MoE router inputs."""

    def __init__(self, model):
        self.handles = []
        self.layers = []
        self.emb = None
        self.router_inputs = []
        inner = model.model
        self.handles.append(inner.embed_tokens.register_forward_hook(self._emb))
        for i, layer in enumerate(inner.layers):
            self.handles.append(layer.register_forward_hook(self._layer(i)))
            mlp = getattr(layer, "mlp", None)
            gate = getattr(mlp, "gate", None) if mlp is not None else None
            if gate is not None and hasattr(gate, "weight") and getattr(mlp, "experts", None) is not None:
                k = getattr(gate, "top_k", None) or getattr(mlp, "top_k", None) or model.config.num_experts_per_tok
                self.handles.append(gate.register_forward_hook(self._router(gate, k)))
        self.n = len(inner.layers)

    def reset(self):
        self.layers = [None] * self.n
        self.emb = None

    def _emb(self, mod, inp, out):
        self.emb = out.detach().clone()

    def _layer(self, i):
        def hook(mod, inp, out):
            o = out[0] if isinstance(out, (tuple, list)) else out
            self.layers[i] = o.detach().clone()

        return hook

    def _router(self, gate, k):
        def hook(mod, inp, out):
            x = inp[0].detach().reshape(-1, gate.weight.shape[1]).double()
            p = torch.softmax(x @ gate.weight.detach().double().T, dim=-1)
            s, _ = torch.sort(p, dim=-1, descending=True)
            gap = (s[:, k - 1] - s[:, k]).min().item() if s.shape[1] > k else float("inf")
            self.router_inputs.append(gap)

        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def forward_logits(model, ids, **kw):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False, **kw)
    return out


def greedy(model, prompt, n):
    """Own loop: a fresh full forward over prompt+generated every step, no cache."""
    seq = list(prompt)
    toks, margins = [], []
    for _ in range(n):
        logits = forward_logits(model, seq).logits[0, -1]
        a, m = top2(logits)
        toks.append(int(a))
        margins.append(r6(m))
        seq.append(int(a))
    return toks, margins


def reference(model, prompt, n_greedy=N_GREEDY):
    cap = Capture(model)
    try:
        cap.reset()
        out = forward_logits(model, prompt, output_hidden_states=True)
        logits = out.logits[0].detach().float()
        hidden = [cap.emb[0]] + [h[0] for h in cap.layers]
        hidden = torch.stack(hidden).float()
        hf = out.hidden_states
        notes = {}
        if hf is not None:
            notes["hf_hidden_states_len"] = len(hf)
            d = [float((hf[i][0].float() - hidden[i]).abs().max()) for i in range(min(len(hf), hidden.shape[0]))]
            notes["hf_hidden_states_vs_hooks_max_abs"] = d
            try:
                with torch.no_grad():
                    normed = model.model.norm(hidden[-1][None])[0]
                notes["hf_last_hidden_state_is_final_norm"] = bool(
                    float((hf[-1][0].float() - normed).abs().max()) < 1e-5
                )
            except Exception as e:  # noqa: BLE001
                notes["hf_last_hidden_state_is_final_norm"] = f"error: {e}"
        toks, margins = greedy(model, prompt, n_greedy)
        gaps = cap.router_inputs
        return logits, hidden, toks, margins, (min(gaps) if gaps else None), notes
    finally:
        cap.close()


def fp64_delta(model, prompt, logits32):
    try:
        m64 = model.double()
        with torch.no_grad():
            l64 = m64(input_ids=torch.tensor([prompt]), use_cache=False).logits[0]
        return float((l64 - logits32.double()).abs().max())
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}: {e}"
    finally:
        model.float()


def pick_eos(used, vocab):
    for t in range(vocab - 1, -1, -1):
        if t not in used:
            return t
    return None


def config_dict(model, case, eos):
    cfg = model.config.to_dict()
    cfg["architectures"] = [type(model).__name__]
    cfg["eos_token_id"] = eos
    if "full_attention_interval" in case["cfg"]:
        cfg["full_attention_interval"] = case["cfg"]["full_attention_interval"]
    cfg.pop("_attn_implementation_autoset", None)
    cfg.pop("_name_or_path", None)
    cfg.pop("attn_implementation", None)
    cfg.pop("_attn_implementation", None)
    if "dtype" not in cfg and "torch_dtype" not in cfg:
        cfg["torch_dtype"] = "float32"
    if cfg.get("dtype") is None and "dtype" in cfg:
        cfg["dtype"] = "float32"
    if cfg.get("torch_dtype") is None and "torch_dtype" in cfg:
        cfg["torch_dtype"] = "float32"
    return cfg


def wrapper_config(case, text_cfg, eos):
    """Qwen3.5 multimodal wrapper: text config nested, a tiny vision config (no vision weights are saved)."""
    _, _, wcls = classes_for(case["family"])
    vision = dict(
        depth=1,
        hidden_size=16,
        intermediate_size=32,
        num_heads=2,
        in_channels=3,
        patch_size=2,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=text_cfg["hidden_size"],
        num_position_embeddings=16,
    )
    text = dict(text_cfg)
    text.pop("architectures", None)
    tied = bool(text.get("tie_word_embeddings", False))
    try:
        w = wcls(text_config=text, vision_config=vision, tie_word_embeddings=tied).to_dict()
    except Exception as e:  # noqa: BLE001
        log(f"  wrapper config class failed ({e}); writing the wrapper by hand")
        w = {"text_config": text, "vision_config": vision, "tie_word_embeddings": tied}
    w["model_type"] = case["family"]
    w["architectures"] = [wcls.__name__.replace("Config", "ForConditionalGeneration")]
    w["tie_word_embeddings"] = tied
    w["eos_token_id"] = eos
    w["text_config"]["eos_token_id"] = eos
    for k in ("_attn_implementation_autoset", "_name_or_path", "attn_implementation", "_attn_implementation"):
        w.pop(k, None)
        w["text_config"].pop(k, None)
    return w


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1, sort_keys=False)
        f.write("\n")


def write_checkpoint_f32(d, hub, metadata_format="pt"):
    tensors = {k: stio.tensor_from_f32(v, "F32") for k, v in hub.items()}
    stio.write_safetensors(os.path.join(d, "model.safetensors"), tensors, {"format": metadata_format})


def save_goldens(d, case_name, logits, hidden, prompt, toks, margins):
    stio.write_f32(os.path.join(d, "logits.f32"), logits.numpy())
    stio.write_f32(os.path.join(d, "hidden.f32"), hidden.numpy())
    am, mg = top2(logits)
    return {
        "prompt": list(prompt),
        "logits": {"file": "logits.f32", "shape": list(logits.shape)},
        "hidden_states": {"file": "hidden.f32", "shape": list(hidden.shape)},
        "prompt_argmax": [int(x) for x in am],
        "prompt_top2_margin": [r6(x) for x in mg],
        "greedy": {"tokens": toks, "top2_margin": margins},
    }


def reload_check(d, family, logits, prompt):
    """Load the saved directory with transformers' own loader and compare logits."""
    tries = [("AutoModelForCausalLM", getattr(transformers, "AutoModelForCausalLM"))]
    if family == "qwen3_5":
        tries.append(("Qwen3_5ForConditionalGeneration", getattr(transformers, "Qwen3_5ForConditionalGeneration", None)))
    if family == "qwen3_5_moe":
        tries.append(
            ("Qwen3_5MoeForConditionalGeneration", getattr(transformers, "Qwen3_5MoeForConditionalGeneration", None))
        )
    errors = []
    for name, cls in tries:
        if cls is None:
            continue
        try:
            try:
                m, info = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
            except TypeError:
                m, info = cls.from_pretrained(
                    d, torch_dtype=torch.float32, attn_implementation="eager", output_loading_info=True
                )
            m = m.float().eval()
            with torch.no_grad():
                l2 = m(input_ids=torch.tensor([prompt]), use_cache=False).logits[0].float()
            diff = float((l2 - logits).abs().max())
            info = {k: sorted(v)[:20] if isinstance(v, (list, set)) else str(v)[:200] for k, v in (info or {}).items()}
            info = {k: v for k, v in info.items() if v}
            ok = diff <= 1e-5
            res = {"loader": name, "class": type(m).__name__, "max_abs_logit_diff": diff, "ok": ok, "loading_info": info}
            if ok:
                return res
            errors.append(res)
        except Exception as e:  # noqa: BLE001
            errors.append({"loader": name, "error": f"{type(e).__name__}: {e}"[:500]})
    return {"ok": False, "attempts": errors}


# ---------------------------------------------------------------------------------------------------------------
# Plain (HF-layout, fp32) cases
# ---------------------------------------------------------------------------------------------------------------


def prompt_for(name, vocab, n=T_PROMPT, salt="prompt"):
    g = rng_for(name + "/" + salt)
    return [int(x) for x in torch.randint(0, vocab, (n,), generator=g)]


def run_case(case, out_root, ver):
    t0 = time.time()
    name, fam = case["name"], case["family"]
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    model = build_model(case)
    cfg = model.config
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    prompt = prompt_for(name, int(cfg.vocab_size))
    logits, hidden, toks, margins, gap, notes = reference(model, prompt)
    eos = pick_eos(set(toks), int(cfg.vocab_size))
    hub = to_hub(fam, model_state(model), tied)
    if fam in ("qwen3_5", "qwen3_5_moe"):
        text_cfg = config_dict(model, case, eos)
        cj = wrapper_config(case, text_cfg, eos)
    else:
        cj = config_dict(model, case, eos)
    write_json(os.path.join(d, "config.json"), cj)
    write_json(os.path.join(d, "generation_config.json"), {"eos_token_id": [eos], "do_sample": False})
    write_checkpoint_f32(d, hub)
    g = save_goldens(d, name, logits, hidden, prompt, toks, margins)
    rot = None
    try:
        rot = int(model.model.rotary_emb.inv_freq.numel() * 2)
    except Exception:  # noqa: BLE001
        pass
    meta = {
        "case": name,
        "family": fam,
        "layout": "hf",
        "about": case["about"],
        "files": {"config": "config.json", "generation_config": "generation_config.json", "weights": "model.safetensors"},
        "weights_dtype": "F32",
        "tied": tied,
        "eos_token_id": eos,
        "num_hidden_layers": int(cfg.num_hidden_layers),
        "hidden_size": int(cfg.hidden_size),
        "vocab_size": int(cfg.vocab_size),
        "layer_types": list(getattr(cfg, "layer_types", []) or []),
        "rotary_dim": rot,
        **g,
        "router_min_topk_prob_gap": gap,
        "fp64_vs_fp32_max_abs_logit": fp64_delta(model, prompt, logits),
        "reference": dict(ver, device="cpu", dtype="float32", attn_implementation="eager",
                          experts_implementation=str(getattr(cfg, "_experts_implementation", None))),
        "tensor_names": sorted(hub),
        "notes": notes,
    }
    meta["reload_check"] = reload_check(d, fam, logits, prompt)
    write_json(os.path.join(d, "golden.json"), meta)
    log(
        f"  {name}: ok in {time.time() - t0:.1f}s; greedy {toks}; min margin {min(margins):.4g}; "
        f"reload {meta['reload_check'].get('ok')}; fp64 delta {meta['fp64_vs_fp32_max_abs_logit']}"
    )
    return model, meta


# ---------------------------------------------------------------------------------------------------------------
# MLX-quantized cases
# ---------------------------------------------------------------------------------------------------------------

MLX_NORM_SUFFIXES = (".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight")


def is_quantizable(name, arr):
    """Linear/embedding weights (2-D, or stacked 3-D experts) -- never norms, conv1d, A_log, dt_bias."""
    if not name.endswith(".weight") or "conv1d" in name or "norm" in name:
        return False
    return arr.ndim in (2, 3)


def to_mlx(family, hub, zero_centred):
    """HF hub naming -> mlx-lm naming: switch_mlp stacked experts, conv1d [C,Kc,1], +1 folded into norms."""
    out = {}
    experts = {}
    for k, v in hub.items():
        if ".mlp.experts." in k:
            pre, rest = k.split(".mlp.experts.")
            e, proj, _ = rest.split(".")
            experts.setdefault((pre, proj), {})[int(e)] = v
            continue
        if k.endswith("conv1d.weight") and v.ndim == 3 and v.shape[-1] != 1:
            v = np.ascontiguousarray(np.moveaxis(v, 2, 1))
        if zero_centred and (k.endswith(MLX_NORM_SUFFIXES) or k == "model.norm.weight"):
            v = (v + np.float32(1.0)).astype(np.float32)
        out[k] = v
    for (pre, proj), es in experts.items():
        out[f"{pre}.mlp.switch_mlp.{proj}.weight"] = np.stack([es[e] for e in sorted(es)])
    return out


def quantize_mlx(qcase, mlx_f32):
    """-> (tensors for the file, quantization block, float32 'effective' values of every tensor as stored)."""
    sd = qcase["sdtype"]
    default = qcase["default"]
    overrides = qcase["overrides"]
    tensors, effective, qinfo = {}, {}, {}
    for k, v in mlx_f32.items():
        module = k[: -len(".weight")] if k.endswith(".weight") else None
        spec = default
        if module is not None and module in overrides:
            spec = overrides[module]
        if module is not None and spec and is_quantizable(k, v):
            bits, gs = spec["bits"], spec["group_size"]
            words, scales, biases = mlxq.quantize(v, bits, gs, sd)
            tensors[module + ".weight"] = stio.tensor_u32(words)
            tensors[module + ".scales"] = stio.tensor_from_f32(scales, sd)
            tensors[module + ".biases"] = stio.tensor_from_f32(biases, sd)
            effective[k] = mlxq.dequantize(words, scales, biases, bits, gs)
            qinfo[module] = {"bits": bits, "group_size": gs, "shape": list(v.shape)}
            continue
        dt = "F32" if (k.endswith("A_log") or k.endswith("dt_bias")) else sd
        tensors[k] = stio.tensor_from_f32(v, dt)
        effective[k] = stio.round_to(v, dt)
    used = {m for m in overrides if overrides[m] is not False}
    missing = sorted(used - set(qinfo))
    if missing:
        raise RuntimeError(f"overrides name modules that were not quantized: {missing}")
    qblock = dict(default)
    qblock["mode"] = "affine"
    for m, s in overrides.items():
        qblock[m] = s
    return tensors, qblock, effective, qinfo


def dequantize_file(path, qblock, default):
    """Read an MLX checkpoint back from its bytes into float32 (dequantizing), mlx naming kept."""
    raw, _ = stio.read_safetensors(path)
    out = {}
    for k, (dt, shape, data) in raw.items():
        if k.endswith(".scales") or k.endswith(".biases"):
            continue
        if dt == "U32":
            module = k[: -len(".weight")]
            spec = qblock.get(module, default)
            sc = stio.to_numpy(*raw[module + ".scales"])
            bi = stio.to_numpy(*raw[module + ".biases"])
            out[k] = mlxq.dequantize(stio.to_numpy(dt, shape, data), sc, bi, spec["bits"], spec["group_size"])
        else:
            out[k] = stio.to_numpy(dt, shape, data)
    return out


def mlx_to_hub(family, mlx, zero_centred):
    """Inverse of to_mlx on float32 values."""
    hub = {}
    for k, v in mlx.items():
        if ".mlp.switch_mlp." in k:
            pre, rest = k.split(".mlp.switch_mlp.")
            proj = rest.split(".")[0]
            for e in range(v.shape[0]):
                hub[f"{pre}.mlp.experts.{e}.{proj}.weight"] = v[e]
            continue
        if k.endswith("conv1d.weight") and v.ndim == 3 and v.shape[-1] == 1:
            v = np.ascontiguousarray(np.moveaxis(v, 1, 2))
        if zero_centred and (k.endswith(MLX_NORM_SUFFIXES) or k == "model.norm.weight"):
            v = (v - np.float32(1.0)).astype(np.float32)  # exact: stored values are near 1
        hub[k] = v
    return hub


def pick_dequant_samples(qinfo, overrides):
    """One module per distinct (bits, group_size, rank), overrides first, plus the embedding."""
    order = [m for m in overrides if overrides[m] is not False and m in qinfo] + sorted(qinfo)
    seen, pick = set(), []
    for m in order:
        key = (qinfo[m]["bits"], qinfo[m]["group_size"], len(qinfo[m]["shape"]))
        if key in seen and not m.endswith("embed_tokens"):
            continue
        if m in pick:
            continue
        seen.add(key)
        pick.append(m)
    return pick


def write_dequant_samples(d, effective, qinfo, overrides):
    """Dequantized float32 copies of a few modules so the Go dequantizer can be checked bit for bit."""
    for f in os.listdir(d):
        if f.startswith("dequant.") and f.endswith(".f32"):
            os.remove(os.path.join(d, f))
    samples = []
    for m in pick_dequant_samples(qinfo, overrides):
        fn = "dequant." + m.replace("model.", "").replace(".", "_") + ".f32"
        arr = effective[m + ".weight"]
        stio.write_f32(os.path.join(d, fn), arr)
        samples.append({"module": m, "file": fn, "shape": list(arr.shape), **{k: qinfo[m][k] for k in ("bits", "group_size")}})
    return samples


def resample_dequant(goldens_dir):
    """Re-derive the dequant.*.f32 samples of the committed MLX cases from their safetensors bytes alone
    (no transformers needed): what run_quant_case writes, for when only the sample choice changed."""
    idx = json.load(open(os.path.join(goldens_dir, "index.json")))
    for e in idx["cases"]:
        if e.get("layout") != "mlx" or not e.get("ok"):
            continue
        d = os.path.join(goldens_dir, e["dir"])
        gpath = os.path.join(d, "golden.json")
        g = json.load(open(gpath))
        q = next(q for q in QUANT_CASES if q["name"] == e["case"])
        qblock = json.load(open(os.path.join(d, "config.json")))["quantization"]
        eff = dequantize_file(os.path.join(d, "model.safetensors"), qblock, q["default"])
        g["dequant_samples"] = write_dequant_samples(d, eff, g["quantized_modules"], q["overrides"])
        write_json(gpath, g)
        log(f"{e['case']}: {[s['module'] for s in g['dequant_samples']]}")


def run_quant_case(qcase, base_case, out_root, ver):
    t0 = time.time()
    name, fam = qcase["name"], base_case["family"]
    if fam not in ("qwen3", "qwen3_next"):
        raise RuntimeError("MLX variants are implemented for qwen3 and qwen3_next naming only")
    d = os.path.join(out_root, name)
    os.makedirs(d, exist_ok=True)
    model = build_model(base_case)
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    zc = fam in ZERO_CENTRED_FAMILIES
    hub = to_hub(fam, model_state(model), tied)
    mlx = to_mlx(fam, hub, zc)
    tensors, qblock, effective, qinfo = quantize_mlx(qcase, mlx)
    # Reference model = the fp32 model carrying exactly the values the Go engine will compute from the file.
    load_state(model, from_hub(fam, mlx_to_hub(fam, effective, zc), set(model.state_dict())))
    prompt = prompt_for(name, int(model.config.vocab_size))
    logits, hidden, toks, margins, gap, notes = reference(model, prompt)
    eos = pick_eos(set(toks), int(model.config.vocab_size))
    cj = config_dict(model, base_case, eos)
    cj["quantization"] = qblock
    cj["quantization_config"] = qblock
    write_json(os.path.join(d, "config.json"), cj)
    write_json(os.path.join(d, "generation_config.json"), {"eos_token_id": [eos], "do_sample": False})
    stio.write_safetensors(os.path.join(d, "model.safetensors"), tensors, {"format": "mlx"})
    g = save_goldens(d, name, logits, hidden, prompt, toks, margins)
    samples = write_dequant_samples(d, effective, qinfo, qcase["overrides"])
    # Sanity: read the file back from its bytes, dequantize, reload into a fresh model, same logits.
    fresh = build_model(base_case)
    back = dequantize_file(os.path.join(d, "model.safetensors"), qblock, qcase["default"])
    load_state(fresh, from_hub(fam, mlx_to_hub(fam, back, zc), set(fresh.state_dict())))
    with torch.no_grad():
        l2 = fresh(input_ids=torch.tensor([prompt]), use_cache=False).logits[0].float()
    rdiff = float((l2 - logits).abs().max())
    meta = {
        "case": name,
        "family": fam,
        "layout": "mlx",
        "base_case": base_case["name"],
        "about": qcase["about"],
        "files": {"config": "config.json", "generation_config": "generation_config.json", "weights": "model.safetensors"},
        "scales_dtype": qcase["sdtype"],
        "tied": tied,
        "eos_token_id": eos,
        "num_hidden_layers": int(model.config.num_hidden_layers),
        "hidden_size": int(model.config.hidden_size),
        "vocab_size": int(model.config.vocab_size),
        "layer_types": list(getattr(model.config, "layer_types", []) or []),
        **g,
        "router_min_topk_prob_gap": gap,
        "quantized_modules": qinfo,
        "dequant_samples": samples,
        "reference": dict(ver, device="cpu", dtype="float32", attn_implementation="eager",
                          weights="dequantized from this checkpoint (float32), loaded into the transformers model"),
        "tensor_names": sorted(tensors),
        "notes": notes,
        "reload_check": {"loader": "own MLX dequantizer from the file bytes -> transformers model",
                         "max_abs_logit_diff": rdiff, "ok": rdiff <= 1e-6},
    }
    write_json(os.path.join(d, "golden.json"), meta)
    log(f"  {name}: ok in {time.time() - t0:.1f}s; greedy {toks}; min margin {min(margins):.4g}; reload diff {rdiff}")
    return meta


# ---------------------------------------------------------------------------------------------------------------
# DFlash
# ---------------------------------------------------------------------------------------------------------------


def import_dflash(path):
    """Load the authors' dflash/model.py unchanged. Missing re-exports in newer transformers are patched onto
    transformers.models.qwen3.modeling_qwen3 first (plumbing only; no math is touched)."""
    import transformers.models.qwen3.modeling_qwen3 as mq

    wanted = {
        "GradientCheckpointingLayer": ("transformers.modeling_layers", "GradientCheckpointingLayer"),
        "FlashAttentionKwargs": ("transformers.modeling_flash_attention_utils", "FlashAttentionKwargs"),
        "ALL_ATTENTION_FUNCTIONS": ("transformers.modeling_utils", "ALL_ATTENTION_FUNCTIONS"),
        "Qwen3Config": ("transformers.models.qwen3.configuration_qwen3", "Qwen3Config"),
    }
    patched = []
    for attr, (mod, src) in wanted.items():
        if not hasattr(mq, attr):
            setattr(mq, attr, getattr(importlib.import_module(mod), src))
            patched.append(attr)
    spec = importlib.util.spec_from_file_location("dflash_model", os.path.join(path, "model.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m, patched


def drafter_config(dcase, target_cfg):
    c = dict(dcase["cfg"])
    n = c["num_hidden_layers"]
    cfg = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": int(target_cfg.vocab_size),
        "hidden_size": c["hidden_size"],
        "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": n,
        "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"],
        "head_dim": c["head_dim"],
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": c["rope_theta"],
        "rope_scaling": None,
        "max_position_embeddings": 512,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": None,
        "layer_types": ["full_attention"] * n,
        "block_size": c["block_size"],
        "num_target_layers": c["num_target_layers"],
        "dflash_config": c["dflash_config"],
        "torch_dtype": "float32",
    }
    return cfg


def make_drafter(dfl, cfg_dict):
    from transformers import Qwen3Config

    kw = {k: v for k, v in cfg_dict.items() if k not in ("architectures", "model_type", "torch_dtype",
                                                         "transformers_version")}
    try:
        conf = Qwen3Config(**kw)
    except (TypeError, ValueError) as e:
        # Plumbing only: build from the core fields, then attach the DFlash extras as attributes.
        log(f"  drafter config: direct construction failed ({e}); core fields + attributes")
        extras = {k: kw.pop(k) for k in ("block_size", "num_target_layers", "dflash_config")}
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": kw.pop("rope_theta")}
        kw.pop("rope_scaling", None)
        conf = Qwen3Config(**kw)
        for k, v in extras.items():
            setattr(conf, k, v)
    set_eager(conf)
    model = dfl.DFlashDraftModel(conf)
    try:
        model.set_attn_implementation("eager")
    except Exception:  # noqa: BLE001
        pass
    return model.float()


def init_drafter(model, name):
    g = rng_for(name + "/drafter")
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("norm.weight") or n.endswith("layernorm.weight"):
                p.copy_(torch.rand(p.shape, generator=g) * 0.4 + 0.8)
            elif p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def batched_greedy(target, prompts, n):
    seq = prompts
    with torch.no_grad():
        for _ in range(n):
            nxt = target(input_ids=seq, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
    return seq


def fit_drafter(dfl, drafter, target, dcase, device, logs):
    """Fit the drafter to the target's greedy continuations (DFlash-style block objective), a few hundred steps.
    Stops once slot-1 accuracy on held-out sequences reaches 0.75 (or after 2000 steps)."""
    c = dcase["cfg"]
    bs, taps, mask = c["block_size"], c["dflash_config"]["target_layer_ids"], c["dflash_config"]["mask_token_id"]
    g = torch.Generator(device="cpu")
    g.manual_seed(seed_of(dcase["name"] + "/data"))
    tgt = target.to(device)
    tgt.requires_grad_(False)
    drafter.to(device).train()
    n_seq, n_val, p0, gen = 6656, 512, 8, 56
    tv = int(target.config.vocab_size)
    prompts = torch.randint(0, tv, (n_seq, p0), generator=g).to(device)
    seqs = batched_greedy(tgt, prompts, gen)
    with torch.no_grad():
        hs = tgt(input_ids=seqs, use_cache=False, output_hidden_states=True).hidden_states
        feats = dfl.extract_context_feature(hs, taps)
    train_idx, val_idx = torch.arange(0, n_seq - n_val), torch.arange(n_seq - n_val, n_seq)
    opt = torch.optim.AdamW([p for p in drafter.parameters() if p.requires_grad], lr=2e-3, weight_decay=0.01)
    emb, head = tgt.model.embed_tokens, tgt.lm_head
    S = seqs.shape[1]

    def batch_loss(idx, p):
        ctx = feats[idx, :p]
        block = seqs[idx, p : p + bs].clone()
        block[:, 1:] = mask
        noise = emb(block)
        pos = torch.arange(0, p + bs, device=device)[None].expand(len(idx), -1)
        h = drafter(target_hidden=ctx, noise_embedding=noise, position_ids=pos, past_key_values=None,
                    use_cache=False, is_causal=False)
        logits = head(h[:, 1:])
        labels = seqs[idx, p + 1 : p + bs]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
        acc1 = (logits[:, 0].argmax(-1) == labels[:, 0]).float().mean().item()
        return loss, acc1

    steps, acc = 0, 0.0
    for steps in range(1, 2001):
        p = int(torch.randint(4, S - bs + 1, (1,), generator=g))
        idx = train_idx[torch.randint(0, len(train_idx), (256,), generator=g)]
        loss, _ = batch_loss(idx, p)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if steps % 50 == 0:
            with torch.no_grad():
                accs = [batch_loss(val_idx, pp)[1] for pp in (10, 24, 40)]
            acc = sum(accs) / len(accs)
            logs.append({"step": steps, "loss": float(loss), "val_slot1_acc": acc})
            if acc >= 0.75 and steps >= 200:
                break
    drafter.eval()
    return {"steps": steps, "val_slot1_acc": acc, "device": str(device), "n_sequences": n_seq,
            "sequence_len": int(S), "history": logs}


def trace_run(dfl, drafter, target, prompt, max_new, block_size):
    """Run the authors' dflash_generate unchanged; hooks record each target/drafter call."""
    calls = []

    def th(mod, args, kwargs, out):
        ids = args[0] if args else kwargs.get("input_ids")
        calls.append(("target", ids[0].tolist(), out.logits[0].detach().float().clone()))

    def dh(mod, args, kwargs, out):
        calls.append(("draft", out.detach().float().clone()))

    h1 = target.register_forward_hook(th, with_kwargs=True)
    h2 = drafter.register_forward_hook(dh, with_kwargs=True)
    try:
        out_ids = dfl.dflash_generate(
            drafter,
            target=target,
            input_ids=torch.tensor([prompt]),
            max_new_tokens=max_new,
            stop_token_ids=None,
            temperature=0.0,
            block_size=block_size,
        )
    finally:
        h1.remove()
        h2.remove()
    tokens = out_ids[0, len(prompt) :].tolist()
    assert calls[0][0] == "target", "first call must be the prefill"
    first = int(calls[0][2][-1].argmax())
    rounds = []
    start = len(prompt)
    i = 1
    emitted = 1
    while i < len(calls):
        if block_size > 1:
            kind, dout = calls[i]
            assert kind == "draft", f"expected a drafter call at {i}"
            i += 1
        kind, block, vlog = calls[i]
        assert kind == "target"
        i += 1
        bs = len(block)
        rnd = {"start": start, "remaining": max_new - emitted, "block": block}
        if block_size > 1:
            with torch.no_grad():
                dlog = target.lm_head(dout[:, 1 - bs :, :].to(target.lm_head.weight.dtype))[0].float()
            da, dm = top2(dlog)
            if [int(x) for x in da] != block[1:]:
                raise RuntimeError("recomputed draft argmax differs from the verified block")
            rnd["draft_top2_margin"] = [r6(x) for x in dm]
        ta, tm = top2(vlog)
        acc = 0
        for j in range(1, bs):
            if block[j] == int(ta[j - 1]):
                acc += 1
            else:
                break
        rnd["accepted"] = acc
        rnd["target_argmax"] = [int(x) for x in ta]
        rnd["target_top2_margin"] = [r6(x) for x in tm]
        rounds.append(rnd)
        start += acc + 1
        emitted += acc + 1
    return first, tokens, rounds


def save_drafter(d, cfg_dict, drafter):
    os.makedirs(d, exist_ok=True)
    write_json(os.path.join(d, "config.json"), cfg_dict)
    sd = {k: v.detach().float().cpu().numpy() for k, v in drafter.state_dict().items()}
    write_checkpoint_f32(d, sd)
    return sorted(sd)


def load_drafter(dfl, d):
    cls = dfl.DFlashDraftModel
    try:
        m = cls.from_pretrained(d, attn_implementation="eager", dtype=torch.float32)
    except TypeError:
        m = cls.from_pretrained(d, attn_implementation="eager", torch_dtype=torch.float32)
    return m.float().eval()


def run_dflash(dflash_path, target, target_case, out_root, ver, index):
    dfl, patched = import_dflash(dflash_path)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    commit = None
    cpath = os.path.join(dflash_path, "COMMIT")
    if os.path.exists(cpath):
        commit = open(cpath).read().strip()
    tv = int(target.config.vocab_size)
    prompts = [prompt_for("dflash", tv, n, salt=f"p{i}") for i, n in enumerate(DFLASH_PROMPT_LENS)]
    ar = {}
    target = target.float().eval().cpu()
    for pi, p in enumerate(prompts):
        ar[pi] = greedy(target, p, DFLASH_MAX_NEW)
    for dcase in DFLASH_DRAFTERS:
        t0 = time.time()
        name = dcase["name"]
        try:
            cfg_dict = drafter_config(dcase, target.config)
            cfg_dict["transformers_version"] = transformers.__version__
            drafter = make_drafter(dfl, cfg_dict)
            init_drafter(drafter, name)
            fit = fit_drafter(dfl, drafter, target, dcase, device, [])
            target = target.cpu().float().eval()
            d = os.path.join(out_root, name)
            names = save_drafter(d, cfg_dict, drafter.cpu())
            loaded = load_drafter(dfl, d)  # the authors' loading path, from the saved directory
            runs = []
            for bsz in dcase["block_sizes"]:
                for pi, p in enumerate(prompts):
                    first, tokens, rounds = trace_run(dfl, loaded, target, p, DFLASH_MAX_NEW, bsz)
                    ar_toks, ar_m = ar[pi]
                    acc = [r["accepted"] for r in rounds]
                    runs.append({
                        "block_size": bsz,
                        "prompt": p,
                        "first_token": first,
                        "tokens": tokens,
                        "ar_tokens": ar_toks,
                        "ar_top2_margin": ar_m,
                        "tokens_equal_ar": tokens == ar_toks,
                        "rounds": rounds,
                        "num_rounds": len(rounds),
                        "mean_accepted": float(np.mean(acc)) if acc else 0.0,
                        "tau": float(np.mean([a + 1 for a in acc])) if acc else 0.0,
                    })
                    log(f"  {name} bs={bsz} prompt{pi}: rounds {len(rounds)} accepted {acc} equal_ar {tokens == ar_toks}")
            trace = {
                "drafter": name,
                "target": target_case["name"],
                "about": dcase["about"],
                "max_new_tokens": DFLASH_MAX_NEW,
                "temperature": 0.0,
                "stop_token_ids": None,
                "fit": fit,
                "runs": runs,
                "reference": dict(ver, device="cpu", dtype="float32", attn_implementation="eager",
                                  dflash_commit=commit, dflash_patched_imports=patched,
                                  loop="z-lab dflash/model.py dflash_generate, unchanged, called with "
                                       "stop_token_ids=None, temperature=0, block_size as listed"),
                "tensor_names": names,
            }
            write_json(os.path.join(d, "trace.json"), trace)
            index["dflash"].append({"drafter": name, "dir": name, "ok": True,
                                    "tau": [r["tau"] for r in runs],
                                    "all_equal_ar": all(r["tokens_equal_ar"] for r in runs)})
            log(f"  {name}: ok in {time.time() - t0:.1f}s fit {fit['steps']} steps acc {fit['val_slot1_acc']:.2f}")
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            index["dflash"].append({"drafter": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:1000]})


# ---------------------------------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder (one sub-folder per case)")
    ap.add_argument("--dflash", default="third_party_ref/dflash", help="folder holding the authors' model.py")
    ap.add_argument("--only", default="", help="comma-separated case names (debugging)")
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--resample-dequant", action="store_true",
                    help="only re-derive the MLX cases' dequant.*.f32 samples in --out from their checkpoints")
    args = ap.parse_args()
    if args.resample_dequant:
        resample_dequant(args.out)
        return
    torch.set_num_threads(args.threads)
    torch.set_default_dtype(torch.float32)
    os.makedirs(args.out, exist_ok=True)
    ver = versions()
    log("versions:", json.dumps(ver))
    try:
        log("cuda:", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
    except Exception:  # noqa: BLE001
        pass
    only = set(filter(None, args.only.split(",")))
    index = {"generator": "tools/goldens/make_goldens.py", "versions": ver, "cases": [], "dflash": [], "skipped": []}
    models = {}
    for case in CASES:
        if only and case["name"] not in only:
            continue
        log(f"case {case['name']}")
        try:
            m, meta = run_case(case, args.out, ver)
            models[case["name"]] = m
            index["cases"].append({"case": case["name"], "dir": case["name"], "family": case["family"],
                                   "layout": "hf", "ok": True, "reload_ok": meta["reload_check"].get("ok")})
        except MissingClass as e:
            log(f"  SKIPPED: {e}")
            index["skipped"].append({"case": case["name"], "reason": str(e)})
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            index["cases"].append({"case": case["name"], "ok": False, "error": f"{type(e).__name__}: {e}"[:1000]})
    for q in QUANT_CASES:
        if only and q["name"] not in only:
            continue
        log(f"case {q['name']}")
        base = next(c for c in CASES if c["name"] == q["base"])
        try:
            meta = run_quant_case(q, base, args.out, ver)
            index["cases"].append({"case": q["name"], "dir": q["name"], "family": base["family"], "layout": "mlx",
                                   "ok": True, "reload_ok": meta["reload_check"]["ok"]})
        except MissingClass as e:
            index["skipped"].append({"case": q["name"], "reason": str(e)})
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            index["cases"].append({"case": q["name"], "ok": False, "error": f"{type(e).__name__}: {e}"[:1000]})
    tgt_case = next(c for c in CASES if c["name"] == "qwen3_dflash_target")
    if "qwen3_dflash_target" in models and (not only or "dflash" in only):
        log("dflash")
        try:
            run_dflash(args.dflash, models["qwen3_dflash_target"], tgt_case, args.out, ver, index)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            index["dflash"].append({"ok": False, "error": f"{type(e).__name__}: {e}"[:1000]})
    write_json(os.path.join(args.out, "index.json"), index)
    bad = [c for c in index["cases"] if not c.get("ok") or c.get("reload_ok") is False]
    bad += [c for c in index["dflash"] if not c.get("ok")]
    log("SUMMARY:", json.dumps({"cases": len(index["cases"]), "bad": bad, "skipped": index["skipped"]})[:4000])


if __name__ == "__main__":
    main()
