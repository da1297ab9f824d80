#!/usr/bin/env python3
"""Numerical checks of a saved target (accelerator machine, fp32, TF32 off):
  (a) chunked (WY) GDN == sequential recurrence; cached prefill + one-token decode == full forward;
  (b) transformers' Qwen3NextForCausalLM loading the saved directory gives the same logits and hidden states
      (proof that the HF-convention weights are read as intended);
  (c) the tokenizer files load with transformers' AutoTokenizer and agree with `tokenizers`; chat template renders.
Usage: python3 tools/train/checks.py --target tools/train/out/target
Prints one JSON line `CHECKS {...}` and exits non-zero when a tolerance is exceeded.
"""
import argparse
import gzip
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import load_target  # noqa: E402
import tok as tokmod  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--target", default=os.path.join(here, "out", "target"))
    ap.add_argument("--data", default=os.path.join(here, "data"))
    ap.add_argument("--tol", type=float, default=2e-3)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    res = {"torch": torch.__version__}
    from tokenizers import Tokenizer
    tk = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    text = tokmod.load_docs(os.path.join(args.data, "heldout.jsonl.gz"))[0]
    ids = tk.encode(text, add_special_tokens=False).ids[:300]
    x = torch.tensor([ids], device=dev)
    m = load_target(args.target, dev).eval()
    taps = list(range(m.config.num_hidden_layers))
    with torch.no_grad():
        lc, hc = m(x, taps=taps)
        ls, _ = m(x, mode="sequential")
        caches = [{} for _ in taps]
        lp, _ = m(x[:, :200], 0, caches)
        outs = [lp] + [m(x[:, t:t + 1], t, caches)[0] for t in range(200, x.shape[1])]
    res["chunked_vs_sequential"] = (lc - ls).abs().max().item()
    res["cached_vs_full"] = (torch.cat(outs, 1) - lc).abs().max().item()
    res["logit_scale"] = lc.abs().max().item()
    ok = res["chunked_vs_sequential"] < args.tol and res["cached_vs_full"] < args.tol
    try:
        import transformers
        res["transformers"] = transformers.__version__
        from transformers import Qwen3NextForCausalLM, AutoTokenizer
        res["has_qwen3next"] = True
    except Exception as e:  # noqa: BLE001
        res["has_qwen3next"] = False
        res["hf_error"] = repr(e)[:300]
    if res.get("has_qwen3next"):
        try:
            hf = Qwen3NextForCausalLM.from_pretrained(args.target, dtype=torch.float32)
        except TypeError:
            hf = Qwen3NextForCausalLM.from_pretrained(args.target, torch_dtype=torch.float32)
        hf = hf.to(dev).eval()
        with torch.no_grad():
            o = hf(x, output_hidden_states=True, use_cache=False)
        res["hf_logits_maxdiff"] = (o.logits.float() - lc).abs().max().item()
        H = m.config.hidden_size
        diffs = []
        for i in taps:
            hs = o.hidden_states[i + 1].float()
            diffs.append(round((hs - hc[..., i * H:(i + 1) * H]).abs().max().item(), 6))
        res["hf_hidden_states_maxdiff_by_layer"] = diffs
        ok = ok and res["hf_logits_maxdiff"] < args.tol
        at = AutoTokenizer.from_pretrained(args.target)
        sample = text[:2000] + "<|im_start|>user\nhi<|im_end|>"
        res["tokenizer_agrees"] = at.encode(sample, add_special_tokens=False) == tk.encode(
            sample, add_special_tokens=False).ids
        res["chat_template"] = at.apply_chat_template(
            [{"role": "user", "content": "Complete this Go code:\n\nfunc main() {"}],
            add_generation_prompt=True, tokenize=False)
        res["decode_roundtrip"] = at.decode(at.encode(text[:2000], add_special_tokens=False)) == text[:2000]
        ok = ok and res["tokenizer_agrees"] and res["decode_roundtrip"]
    res["ok"] = bool(ok)
    print("CHECKS " + json.dumps(res), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
