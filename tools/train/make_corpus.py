#!/usr/bin/env python3
"""Build the demo corpus from the local Go toolchain's standard library source.

Runs locally (no torch needed). Writes, under tools/train/data/ (git-ignored):
  train.jsonl.gz    one JSON string per document (Go files, some as ChatML "complete this code" turns)
  heldout.jsonl.gz  held-out Go files (whole packages listed in HELDOUT_PACKAGES), raw text
  unseen.jsonl.gz   *_test.go files outside the held-out packages: never in the target's training text, used only
                    as prompts for the drafter's training generations (train_drafter.py --unseen-share)
and tools/train/eval_prompts.json (committed): fixed raw Go code prefixes from held-out files.

Go source is (c) The Go Authors, BSD-3-Clause ($GOROOT/LICENSE); the model card records it.
Deterministic: file order is sorted, sampling uses a fixed seed.
"""
import argparse
import gzip
import json
import os
import random
import subprocess

# Whole packages (directory only, not sub-directories) kept out of training for evaluation.
HELDOUT_PACKAGES = [
    "encoding/json",
    "text/template",
    "compress/flate",
    "container/list",
    "container/heap",
    "container/ring",
    "bufio",
]
MAX_FILE_BYTES = 120_000
MAX_DOC_BYTES = 12_000  # long files are split at blank lines into documents of about this size
CHAT_SHARE = 0.12
TRAIN_BUDGET_BYTES = 30_000_000
UNSEEN_BUDGET_BYTES = 8_000_000


def goroot():
    return subprocess.check_output(["go", "env", "GOROOT"], text=True).strip()


def keep_file(rel, text):
    parts = rel.split("/")
    if "testdata" in parts or "vendor" in parts:
        return False
    if rel.endswith("_test.go") or not rel.endswith(".go"):
        return False
    base = parts[-1]
    if base.startswith("z") or "table" in base:  # zerrors_*, zsyscall_*, tables.go: generated data
        return False
    if len(text) > MAX_FILE_BYTES:
        return False
    head = text[:2000]
    if "Code generated" in head and "DO NOT EDIT" in head:
        return False
    return True


def split_doc(text):
    """Split a file into chunks of about MAX_DOC_BYTES at blank lines (top-level boundaries)."""
    if len(text) <= MAX_DOC_BYTES:
        return [text]
    out, cur = [], []
    size = 0
    for block in text.split("\n\n"):
        if size + len(block) > MAX_DOC_BYTES and cur:
            out.append("\n\n".join(cur) + "\n")
            cur, size = [], 0
        cur.append(block)
        size += len(block) + 2
    if cur:
        out.append("\n\n".join(cur))
    return out


def chat_doc(rng, text):
    """Format a document as a ChatML turn: the user gives a prefix, the assistant continues it."""
    lines = text.split("\n")
    if len(lines) < 8:
        return None
    cut = rng.randint(3, max(4, min(len(lines) // 2, 40)))
    prefix = "\n".join(lines[:cut]) + "\n"
    rest = "\n".join(lines[cut:])
    return (
        "<|im_start|>user\nComplete this Go code:\n\n" + prefix + "<|im_end|>\n"
        "<|im_start|>assistant\n" + rest.rstrip("\n") + "\n<|im_end|>\n"
    )


def eval_prompts(heldout, n=24, seed=7):
    """Raw Go prefixes that end right after a line opening a function body (so the continuation is code)."""
    rng = random.Random(seed)
    cands = []
    for rel, text in heldout:
        lines = text.split("\n")
        for i, ln in enumerate(lines):
            if ln.startswith("func ") and ln.rstrip().endswith("{") and i >= 12:
                start = max(0, i - 30)
                cands.append((rel, i, "\n".join(lines[start : i + 1]) + "\n"))
    rng.shuffle(cands)
    seen, out = set(), []
    for rel, i, p in cands:
        if rel in seen or len(p) < 300:
            continue
        seen.add(rel)
        out.append({"file": rel, "line": i + 1, "prompt": p[-1500:]})
        if len(out) == n:
            break
    return out


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "data"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    src = os.path.join(goroot(), "src")
    train_files, heldout, unseen = [], [], []
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        for fn in sorted(filenames):
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, src)
            try:
                text = open(path, encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            if not keep_file(rel, text):
                parts = rel.split("/")
                if (rel.endswith("_test.go") and "testdata" not in parts and "vendor" not in parts
                        and len(text) <= MAX_FILE_BYTES and os.path.dirname(rel) not in HELDOUT_PACKAGES):
                    unseen.append(text)
                continue
            pkg = os.path.dirname(rel)
            if pkg in HELDOUT_PACKAGES:
                heldout.append((rel, text))
            else:
                train_files.append((rel, text))
    rng.shuffle(train_files)
    docs, total = [], 0
    for rel, text in train_files:
        if total >= TRAIN_BUDGET_BYTES:
            break
        for d in split_doc(text):
            if rng.random() < CHAT_SHARE:
                c = chat_doc(rng, d)
                if c:
                    d = c
            docs.append(d)
            total += len(d)
    os.makedirs(args.out, exist_ok=True)
    with gzip.open(os.path.join(args.out, "train.jsonl.gz"), "wt", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    with gzip.open(os.path.join(args.out, "heldout.jsonl.gz"), "wt", encoding="utf-8") as f:
        for rel, text in heldout:
            f.write(json.dumps(text) + "\n")
    # separate generator: the training documents above do not depend on this
    random.Random(args.seed + 1).shuffle(unseen)
    kept, size = [], 0
    for text in unseen:
        if size >= UNSEEN_BUDGET_BYTES:
            break
        kept.append(text)
        size += len(text)
    with gzip.open(os.path.join(args.out, "unseen.jsonl.gz"), "wt", encoding="utf-8") as f:
        for text in kept:
            f.write(json.dumps(text) + "\n")
    print(f"unseen (*_test.go, prompts only) files {len(kept)} bytes {size}")
    prompts = eval_prompts(heldout)
    with open(os.path.join(here, "eval_prompts.json"), "w") as f:
        json.dump(prompts, f, indent=1)
    print(f"train docs {len(docs)} bytes {total}; heldout files {len(heldout)} "
          f"bytes {sum(len(t) for _, t in heldout)}; eval prompts {len(prompts)}")
    with open(os.path.join(args.out, "heldout_files.txt"), "w") as f:
        f.write("\n".join(r for r, _ in heldout) + "\n")


if __name__ == "__main__":
    main()
