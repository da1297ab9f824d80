#!/usr/bin/env python3
"""Build the demo corpus from the local Go toolchain's standard library source.

Runs locally (no torch needed). Writes, under tools/train/data/ (git-ignored):
  train.jsonl.gz    one JSON string per document (Go files, some as ChatML "complete this code" turns)
  heldout.jsonl.gz  held-out Go files (whole packages listed in HELDOUT_PACKAGES), raw text
  unseen.jsonl.gz   *_test.go files outside the held-out packages: never in the target's training text, used only
                    as prompts for the drafter's training generations (train_drafter.py --unseen-share)
and tools/train/eval_prompts.json (committed): fixed raw Go code prefixes from held-out files.

With --modules DIR (e.g. ~/go/pkg/mod) the training text also takes Go files (tests included) of the modules
there whose licence is MIT, BSD or Apache-2.0 (newest version of each module only; others are skipped and
listed), minus files that share many lines with the held-out packages (forks of encoding/json, compress/flate,
text/template...), minus exact duplicates. The kept modules and their licences go to data/modules.tsv.
--xz writes the .jsonl files xz-compressed (small enough to carry to the accelerator machine).

Go source is (c) The Go Authors, BSD-3-Clause ($GOROOT/LICENSE); the model card records it.
Deterministic: file order is sorted, sampling uses a fixed seed.
"""
import argparse
import gzip
import json
import os
import lzma
import random
import re
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
MODULE_BUDGET_BYTES = 6_000_000  # at most this much text from one module (a few huge SDKs would dominate)
HELDOUT_OVERLAP = 0.2  # drop a module file when this share of its long lines also occurs in held-out files


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


def classify_licence(text):
    """SPDX-ish family of a licence file, or None for anything but MIT, BSD and Apache-2.0."""
    t = " ".join(text.split())
    if "GNU GENERAL PUBLIC" in t.upper() or "Mozilla Public License" in t:
        return None
    if "Apache License" in t and "Version 2.0" in t:
        return "Apache-2.0"
    if "Permission is hereby granted, free of charge" in t:
        return "MIT"
    if "Redistribution and use in source and binary forms" in t:
        return "BSD-3-Clause" if "Neither the name" in t or "names of its" in t else "BSD-2-Clause"
    return None


def version_key(v):
    """Orders module versions well enough to pick the newest (vX.Y.Z[-pre]); pseudo-versions sort by date."""
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)(.*)", v)
    if not m:
        return (0, 0, 0, v)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) == "", m.group(4))


def find_modules(root):
    """{module path: (version, dir)} for the newest version of each module under a GOMODCACHE."""
    mods = {}
    for dirpath, dirnames, _ in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == "cache" or rel.startswith("cache" + os.sep):
            dirnames[:] = []
            continue
        if "@" in os.path.basename(dirpath):
            dirnames[:] = []
            path, ver = rel.rsplit("@", 1)
            if path not in mods or version_key(ver) > version_key(mods[path][0]):
                mods[path] = (ver, dirpath)
        else:
            dirnames.sort()
    return mods


def long_lines(text):
    """Code lines long enough to be distinctive (comments excluded: every Go file shares the licence header)."""
    return {ln.strip() for ln in text.split("\n") if len(ln.strip()) >= 25 and not ln.strip().startswith("//")}


def module_files(root, heldout_lines, log):
    """(module, licence, [(rel, text)]) for every permissively licensed module under root, filtered."""
    seen_hash = set()
    out = []
    for path, (ver, d) in sorted(find_modules(root).items()):
        lic_files = sorted(f for f in os.listdir(d) if re.match(r"(?i)(licen[cs]e|copying)", f))
        lic = None
        if lic_files:
            try:
                lic = classify_licence(open(os.path.join(d, lic_files[0]), encoding="utf-8").read())
            except (UnicodeDecodeError, OSError):
                lic = None
        if lic is None:
            log.append(f"skip\t{path}@{ver}\t{lic_files[0] if lic_files else 'no licence file'}")
            continue
        files, dropped = [], 0
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames.sort()
            # a nested module with its own go.mod and licence is still covered by this one's terms only if it
            # has no licence of its own; keep it simple and skip nested modules entirely
            if dirpath != d and os.path.exists(os.path.join(dirpath, "go.mod")):
                dirnames[:] = []
                continue
            for fn in sorted(filenames):
                p = os.path.join(dirpath, fn)
                rel = os.path.relpath(p, d)
                parts = rel.split("/")
                if not fn.endswith(".go") or "testdata" in parts or "vendor" in parts:
                    continue
                if fn.endswith(".pb.go") or fn.startswith("z") or "table" in fn:
                    continue
                try:
                    text = open(p, encoding="utf-8").read()
                except (UnicodeDecodeError, OSError):
                    continue
                head = text[:2000]
                if len(text) > MAX_FILE_BYTES or ("Code generated" in head and "DO NOT EDIT" in head):
                    continue
                if max((len(ln) for ln in text.split("\n")), default=0) > 400:  # minified data, byte tables
                    continue
                h = hash(text)
                if h in seen_hash:
                    continue
                seen_hash.add(h)
                ll = long_lines(text)
                if ll and len(ll & heldout_lines) >= HELDOUT_OVERLAP * len(ll):
                    dropped += 1
                    continue
                files.append((f"{path}@{ver}/{rel}", text))
        # deterministic cap per module: keep files in sorted order up to the budget
        kept, size = [], 0
        for rel, text in files:
            if size + len(text) > MODULE_BUDGET_BYTES:
                continue
            kept.append((rel, text))
            size += len(text)
        log.append(f"keep\t{path}@{ver}\t{lic}\t{len(kept)} files\t{size} bytes\t{dropped} held-out-like dropped")
        out.append((f"{path}@{ver}", lic, kept))
    return out


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
    ap.add_argument("--modules", default="", help="a GOMODCACHE (e.g. ~/go/pkg/mod) whose MIT/BSD/Apache modules "
                    "add training text")
    ap.add_argument("--xz", action="store_true", help="write .jsonl.xz instead of .jsonl.gz")
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
    if args.modules:
        heldout_lines = set()
        for _, text in heldout:
            heldout_lines |= long_lines(text)
        log = []
        mods = module_files(os.path.expanduser(args.modules), heldout_lines, log)
        mrng = random.Random(args.seed + 2)
        mdocs = []
        for _, _, files in mods:
            for _, text in files:
                for d in split_doc(text):
                    if mrng.random() < CHAT_SHARE:
                        c = chat_doc(mrng, d)
                        if c:
                            d = c
                    mdocs.append(d)
        mrng.shuffle(mdocs)
        msize = sum(map(len, mdocs))
        print(f"modules: {len(mods)} kept, {len(mdocs)} docs, {msize} bytes")
        docs += mdocs
        total += msize
        random.Random(args.seed + 3).shuffle(docs)
        with open(os.path.join(args.out, "modules.tsv"), "w") as f:
            f.write("\n".join(log) + "\n")
    ext = "xz" if args.xz else "gz"

    def opener(name):
        path = os.path.join(args.out, f"{name}.jsonl.{ext}")
        return (lzma.open(path, "wt", encoding="utf-8", preset=9) if args.xz
                else gzip.open(path, "wt", encoding="utf-8"))

    with opener("train") as f:
        for d in docs:
            f.write(json.dumps(d) + "\n")
    with opener("heldout") as f:
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
    with opener("unseen") as f:
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
