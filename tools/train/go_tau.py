#!/usr/bin/env python3
"""Acceptance of a drafter measured with the Go engine: greedy DFlash at block 16 on the held-out prompts.

Runs `higgs-verify generate --draft DIR --prompt P --max-tokens N --json` once per prompt of
tools/train/eval_prompts.json (prompt text passed verbatim, trailing newline included) and prints the mean of the
per-prompt τ and the pooled τ (tokens committed by all rounds / all rounds). Standard library only; run from the repo root:

  go build -o /tmp/higgs-verify ./cmd/higgs-verify
  python3 tools/train/go_tau.py --bin /tmp/higgs-verify --draft models/demo/drafter --max-tokens 256
"""
import argparse
import json
import os
import subprocess


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="higgs-verify")
    ap.add_argument("--model", default="models/demo/target")
    ap.add_argument("--draft", default="models/demo/drafter")
    ap.add_argument("--prompts", default=os.path.join(here, "eval_prompts.json"))
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("-n", type=int, default=24, help="first n prompts")
    args = ap.parse_args()
    prompts = json.load(open(args.prompts))[:args.n]
    per, rounds, committed = [], 0, 0
    for p in prompts:
        out = subprocess.run([args.bin, "generate", "--model", args.model, "--draft", args.draft,
                              "--prompt", p["prompt"], "--max-tokens", str(args.max_tokens), "--json"],
                             capture_output=True, text=True, check=True).stdout
        s = json.loads(out)["stats"]
        per.append(s["tau"])
        rounds += s["rounds"]
        committed += s["tau"] * s["rounds"]   # tokens committed by rounds (the prefill's first token is not one)
    print(json.dumps({"draft": args.draft, "prompts": len(prompts), "max_tokens": args.max_tokens,
                      "mean_tau": round(sum(per) / len(per), 3), "pooled_tau": round(committed / rounds, 3),
                      "per_prompt": [round(x, 2) for x in per]}))


if __name__ == "__main__":
    main()
