#!/usr/bin/env python3
"""Embedding goldens for /v1/embeddings (issue 36 item 3).

For every Hugging Face-layout case already in testdata/goldens (dense Qwen3, Qwen3-Next and Qwen3.5, dense and
MoE), load the checkpoint with transformers' own loader (AutoModelForCausalLM, float32, eager attention, on the
CPU as make_goldens.py ran), run a few token sequences, and write <case>/embed.json with, per sequence:

- last_hidden: the final norm's output at the last position (a forward hook on the text model's final norm,
  model.norm), the row the LM head reads;
- embedding: that row L2-normalised (torch.nn.functional.normalize, p=2), which is Qwen3-Embedding's
  last_token_pool followed by its normalisation;
- mrl_32: the first 32 values of the unnormalised row, normalised again (Matryoshka truncation as
  Qwen3-Embedding's users do it: embedding[:, :d] then normalize).

Each sequence is run in a fresh, cache-free forward of that sequence alone. As a cross-check of the pooling,
the script also runs the sequences together as Qwen3-Embedding's own example batches them (left padding with an
attention mask, the last row pooled) and records the largest difference to the one-by-one rows
(batched_left_padded_max_abs_diff); that figure is informational (a recurrent layer sees the padding).

Usage: python3 tools/goldens/make_embed_goldens.py [--root testdata/goldens] [--out DIR]
Writes <out>/<case>/embed.json (out defaults to root) and prints one line per case.
"""

import argparse
import json
import os
import platform
import sys

import torch
import torch.nn.functional as F
import transformers

# The sequences, as functions of a case's 12-token golden prompt: one token, a short prefix, the whole prompt,
# and the prompt with a last token appended (where an embedding model's <|endoftext|> goes).
def sequences(prompt, vocab):
    return [
        prompt[:1],
        prompt[:5],
        list(prompt),
        list(prompt) + [vocab - 1],
    ]


def final_norm(model):
    for name in ("model.norm", "model.language_model.norm"):
        try:
            return model.get_submodule(name)
        except AttributeError:
            continue
    raise SystemExit(f"{type(model).__name__}: no final norm at model.norm or model.language_model.norm")


def load(d):
    cls = transformers.AutoModelForCausalLM
    try:
        m = cls.from_pretrained(d, dtype=torch.float32, attn_implementation="eager")
    except TypeError:
        m = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager")
    return m.float().eval()


def run(model, ids, mask=None):
    """The final norm's output [B, T, H] for ids (a forward with the LM head, whose output is dropped)."""
    got = {}
    h = final_norm(model).register_forward_hook(lambda _m, _i, out: got.__setitem__("x", out))
    try:
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask, use_cache=False)
    finally:
        h.remove()
    return got["x"].float()


def case_goldens(d, meta):
    model = load(d)
    vocab = meta["vocab_size"]
    seqs = sequences(meta["prompt"], vocab)
    rows = []
    for s in seqs:
        x = run(model, torch.tensor([s]))[0, -1]
        rows.append(x)
    hidden = torch.stack(rows)
    emb = F.normalize(hidden, p=2, dim=-1)
    mrl = F.normalize(hidden[:, :32], p=2, dim=-1)
    # Qwen3-Embedding's batching: left padding, then the last row of each (the pad id is never attended).
    T = max(len(s) for s in seqs)
    pad = 0
    ids = torch.tensor([[pad] * (T - len(s)) + s for s in seqs])
    mask = torch.tensor([[0] * (T - len(s)) + [1] * len(s) for s in seqs])
    try:
        batched = run(model, ids, mask)[:, -1]
        bdiff = float((batched - hidden).abs().max())
    except Exception as e:  # noqa: BLE001 (informational only)
        bdiff = f"error: {type(e).__name__}: {e}"[:300]
    return {
        "case": meta["case"],
        "family": meta["family"],
        "hidden_size": meta["hidden_size"],
        "pooling": "last position of the final norm's output (hook on the text model's norm), one fresh forward per sequence",
        "normalisation": "torch.nn.functional.normalize(p=2, dim=-1)",
        "mrl_dims": 32,
        "sequences": seqs,
        "last_hidden": hidden.tolist(),
        "embedding": emb.tolist(),
        "mrl_32": mrl.tolist(),
        "batched_left_padded_max_abs_diff": bdiff,
        "reference": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "device": "cpu",
            "dtype": "float32",
            "attn_implementation": "eager",
            "class": type(model).__name__,
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default="testdata/goldens")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    out = a.out or a.root
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    with open(os.path.join(a.root, "index.json")) as f:
        index = json.load(f)
    failed = 0
    for c in index["cases"]:
        name = c.get("case")
        if c.get("layout") != "hf" or not name:
            continue
        d = os.path.join(a.root, name)
        with open(os.path.join(d, "golden.json")) as f:
            meta = json.load(f)
        try:
            g = case_goldens(d, meta)
        except Exception as e:  # noqa: BLE001
            failed += 1
            print(f"{name}: FAILED {type(e).__name__}: {e}", flush=True)
            continue
        os.makedirs(os.path.join(out, name), exist_ok=True)
        with open(os.path.join(out, name, "embed.json"), "w") as f:
            json.dump(g, f, indent=1)
            f.write("\n")
        print(f"{name}: {len(g['sequences'])} sequences; batched left-padded diff {g['batched_left_padded_max_abs_diff']}", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
