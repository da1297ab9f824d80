#!/usr/bin/env bash
# Drafter stage 5 on the accelerator machine: continue the shipped drafter on a stream of fresh target
# generations (regenerated every --refresh-every steps, so no epoch repeats one set), reporting the
# teacher-forced block run on generations from unseen documents never used for training prompts.
# Carry tools/train/data. Result: $OUT/drafter. Extra arguments go to train_drafter.py.
set -euo pipefail
T=tools/train
# smoke: the same code path at toy size, so a bug costs seconds, not the budget
python3 $T/train_drafter.py --target models/demo/target --out /tmp/smoke --tiny --unseen-share 0.5 --val-seqs 16 \
  --refresh-every 4 >/tmp/smoke.log 2>&1 || { tail -30 /tmp/smoke.log; exit 1; }
python3 $T/train_drafter.py --target models/demo/target --init models/demo/drafter --out ${OUT:-$T/out}/drafter \
  --seed 7001 --gen-seqs 16384 --gen-batch 4096 --refresh-every 250 --unseen-share 0.5 --val-seqs 1024 \
  --batch 192 --lr 1.5e-3 --warmup 20 --eval-n 0 "$@"
