#!/usr/bin/env bash
# Stage 2 on the accelerator machine: the target's greedy generations, DFlash drafter training, tau on held-out
# prompts. Carry tools/train/data and tools/train/out/target. Results: tools/train/out/drafter (+ $OUT copies).
# DRAFTER_ARGS defaults to the recipe recommended after the first session (see models/demo/MODEL_CARD.md);
# the shipped drafter used: --gen-seqs 8192 --steps 2000 --lr 3e-3 --eval-n 12 --eval-new 128
set -euo pipefail
T=tools/train
python3 $T/train_drafter.py --out $T/out/drafter \
  ${DRAFTER_ARGS:---gen-seqs 16384 --unseen-share 0.5 --time-budget 300 --lr 3e-3 --eval-n 24 --eval-new 128}
if [ -n "${OUT:-}" ]; then mkdir -p $OUT/drafter && cp $T/out/drafter/* $OUT/drafter/; fi
