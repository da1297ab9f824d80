#!/usr/bin/env python3
"""Block-size trace goldens (issue 32 item 1): the DFlash authors' generation loop at block sizes below, at and
above each drafter's configured block_size, for both drafter generations.

Run on the accelerator machine (PyTorch + transformers, no network), from the repository root, with the authors'
dflash/model.py in a git-ignored directory (never committed):

    python3 tools/goldens/make_blocksize_goldens.py --dflash third_party_ref/dflash --out $OUT/blocksize

It reuses the committed target testdata/goldens/qwen3_dflash_target and the DFlash drafters dflash_drafter_b8 and
dflash_drafter_b16_taps, and writes a tiny random DFlash2 drafter (OUT/dflash2_drafter_b8: config.json in the
authors' format + model.safetensors, the candidate selector's codebooks stored without `.weight` as published
checkpoints do) and OUT/blocksize_traces.json. Copy both into testdata/goldens/. Every run is the authors'
`dflash_generate`, unchanged, greedy, stop_token_ids None, on the CPU in float32; forward hooks record each verify
block, its accepted count (the loop's own rule on the target's argmax) and the drafter's top-2 logit margins.
"""

import argparse
import importlib
import importlib.util
import json
import os
import platform
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stio  # noqa: E402

GOLDENS = "testdata/goldens"
TARGET = "qwen3_dflash_target"
MAX_NEW = 32
PROMPTS = [
    [250, 19, 27, 249, 150, 160, 16, 54, 68, 96, 120, 8],
    [4, 180, 192, 240, 0, 2, 109, 22, 179, 96, 26, 182, 208, 74, 202, 58, 112, 152, 101, 7],
    [167, 1, 123, 244, 48, 153, 242],
]
DFLASH2_DIR = "dflash2_drafter_b8"


def import_dflash(path):
    """The authors' model.py, unchanged; re-exports newer transformers moved are patched onto modeling_qwen3, and
    a DynamicCache without activate_past_recording gets a no-op one (plumbing only, recorded in the output)."""
    import transformers.models.qwen3.modeling_qwen3 as mq
    from transformers import DynamicCache

    wanted = {
        "GradientCheckpointingLayer": ("transformers.modeling_layers", "GradientCheckpointingLayer"),
        "ALL_ATTENTION_FUNCTIONS": ("transformers.modeling_utils", "ALL_ATTENTION_FUNCTIONS"),
        "Qwen3Config": ("transformers.models.qwen3.configuration_qwen3", "Qwen3Config"),
    }
    patched = []
    for attr, (mod, src) in wanted.items():
        if not hasattr(mq, attr):
            setattr(mq, attr, getattr(importlib.import_module(mod), src))
            patched.append(attr)
    if not hasattr(DynamicCache, "activate_past_recording"):
        DynamicCache.activate_past_recording = lambda self: None
        patched.append("DynamicCache.activate_past_recording (no-op)")
    spec = importlib.util.spec_from_file_location("dflash_model", os.path.join(path, "model.py"))
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m, patched


def dflash2_config(target_cfg):
    return {
        "architectures": ["DFlash2DraftModel"], "model_type": "qwen3", "vocab_size": target_cfg["vocab_size"],
        "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0, "rope_scaling": None, "max_position_embeddings": 512, "attention_bias": False,
        "attention_dropout": 0.0, "tie_word_embeddings": False, "use_sliding_window": False, "sliding_window": None,
        "layer_types": ["full_attention", "full_attention"], "num_target_layers": 5, "torch_dtype": "float32",
        "dflash_config": {"target_layer_ids": [1, 3], "mask_token_id": 254, "block_size": 8,
                          "conv_kernel_size": 3, "conv_group_size": 16, "selector_rank": 8, "selector_top_k": 6},
    }


def make_dflash2(dfl, cfg_dict, out_dir):
    """A random DFlash2 drafter: weights scaled so activations stay O(1) and the selector's pairwise term moves
    some choices off the argmax; saved in the published layout."""
    from transformers import Qwen3Config

    torch.manual_seed(32)
    cfg = Qwen3Config(**{k: v for k, v in cfg_dict.items() if k not in ("architectures", "torch_dtype")})
    cfg.dflash_config = cfg_dict["dflash_config"]
    model = dfl.DFlash2DraftModel(cfg).float().eval()
    g = torch.Generator().manual_seed(32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=g))
            elif "base_kernel" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif "codebook" in name:
                p.copy_(0.7 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / np.sqrt(p.shape[-1]))
    os.makedirs(out_dir, exist_ok=True)
    tensors = {}
    for name, t in model.state_dict().items():
        if "rotary_emb" in name:
            continue
        if name.startswith("candidate_selector.") and "codebook" in name:
            name = name[: -len(".weight")]
        tensors[name] = stio.tensor_from_f32(t.detach().cpu().numpy().astype(np.float32))
    stio.write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg_dict, f, indent=1)
    return model


def load_dflash1(dfl, d):
    return dfl.DFlashDraftModel.from_pretrained(d, torch_dtype=torch.float32).float().eval()


def trace(dfl, model, target, prompt, bs):
    """One greedy dflash_generate run with hooks: the verify blocks, accepted counts and draft margins."""
    rounds, margins = [], []
    calls = {"n": 0}

    def pre(_mod, args, kwargs):
        ids = args[0] if args else kwargs["input_ids"]
        calls["ids"] = ids.detach().clone()

    def post(_mod, _args, _kwargs, out):
        calls["n"] += 1
        if calls["n"] == 1:  # the prefill
            return
        block = calls["ids"][0].tolist()
        post_ = torch.argmax(out.logits, dim=-1)[0].tolist()
        a = 0
        while a < len(block) - 1 and block[a + 1] == post_[a]:
            a += 1
        m = margins.pop() if len(block) > 1 and margins else []
        rounds.append({"block": block, "accepted": a, "draft_top2_margin": m})

    orig = model.compute_logits

    def logits(hidden, head):
        x = orig(hidden, head)
        top = torch.topk(x.float(), 2, dim=-1).values[0]
        margins.append((top[:, 0] - top[:, 1]).tolist())
        return x

    model.compute_logits = logits
    h1 = target.register_forward_pre_hook(pre, with_kwargs=True)
    h2 = target.register_forward_hook(post, with_kwargs=True)
    try:
        ids = torch.tensor([prompt], dtype=torch.long)
        res = dfl.dflash_generate(model, target, ids, MAX_NEW, None, temperature=0.0, block_size=bs, return_stats=True)
    finally:
        h1.remove()
        h2.remove()
        model.compute_logits = orig
    out = res.output_ids[0, len(prompt):].tolist()
    for r, produced in zip(rounds, res.acceptance_lengths):
        r["produced"] = produced
    return {"block_size": bs, "prompt": prompt, "tokens": out, "rounds": rounds}


def greedy(target, prompt, n):
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(torch.argmax(target(torch.tensor([ids])).logits[0, -1])))
    return ids[len(prompt):]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dflash", required=True, help="directory holding the authors' dflash/model.py (and COMMIT)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(min(16, os.cpu_count() or 1))
    dfl, patched = import_dflash(args.dflash)
    commit_file = os.path.join(args.dflash, "COMMIT")
    commit = open(commit_file).read().strip() if os.path.exists(commit_file) else "unknown"
    os.makedirs(args.out, exist_ok=True)
    target = AutoModelForCausalLM.from_pretrained(os.path.join(GOLDENS, TARGET), torch_dtype=torch.float32,
                                                  attn_implementation="eager").eval()
    with open(os.path.join(GOLDENS, TARGET, "config.json")) as f:
        tcfg = json.load(f)
    drafters = [
        ("dflash_drafter_b8", load_dflash1(dfl, os.path.join(GOLDENS, "dflash_drafter_b8")), [2, 4, 8, 12, 16]),
        ("dflash_drafter_b16_taps", load_dflash1(dfl, os.path.join(GOLDENS, "dflash_drafter_b16_taps")), [2, 4, 12, 16, 20]),
        (DFLASH2_DIR, make_dflash2(dfl, dflash2_config(tcfg), os.path.join(args.out, DFLASH2_DIR)), [2, 4, 8, 12, 16]),
    ]
    ar = {tuple(p): greedy(target, p, MAX_NEW) for p in PROMPTS}
    cases = []
    for name, model, sizes in drafters:
        runs = []
        for bs in sizes:
            for p in PROMPTS:
                r = trace(dfl, model, target, p, bs)
                r["tokens_equal_ar"] = r["tokens"] == ar[tuple(p)]
                runs.append(r)
                print(f"{name} bs {bs}: {len(r['rounds'])} rounds, accepted {[x['accepted'] for x in r['rounds']]}, equal AR {r['tokens_equal_ar']}", flush=True)
        cases.append({"drafter": name, "configured_block_size": int(model.block_size), "generation": type(model).__name__, "runs": runs})
    doc = {
        "about": "greedy traces of the DFlash authors' dflash_generate at block sizes below, at and above each drafter's configured block_size; made by tools/goldens/make_blocksize_goldens.py",
        "target": TARGET, "max_new_tokens": MAX_NEW, "temperature": 0, "cases": cases,
        "reference": {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
                      "device": "cpu", "dtype": "float32", "attn_implementation": "eager (target)", "dflash_commit": commit,
                      "dflash_patched_imports": patched,
                      "loop": "dflash_generate unchanged, stop_token_ids=None, temperature=0, block_size as listed"},
    }
    with open(os.path.join(args.out, "blocksize_traces.json"), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
