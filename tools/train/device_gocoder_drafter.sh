#!/usr/bin/env bash
# gocoder, device call 2: the DFlash drafter, trained from scratch against the MLX-quantized target exactly as
# the engine runs it (mlxquant.py dequantizes what ships), on the target's own greedy generations (half the
# prompts from *_test.go files the target never saw), shipped 4-bit (g64). Carry a tree with tools/train
# (data/ may hold subsets: the generation prompts only need some text), tools/goldens/{mlxq,stio}.py and
# models/gocoder/target. Writes straight to $OUT/drafter (+ $OUT/drafter/bf16) so that a call stopped at its
# limit still returns the weights. The defaults are the shipped run (models/gocoder/MODEL_CARD.md);
# STREAM=1 runs the longer streamed recipe instead (fresh generations every 500 steps, a validation run on
# generations from unseen documents), which needs about 90 s per 16,384 generations on one H200 on top of BUDGET.
set -euo pipefail
T=tools/train
OUT=${OUT:-$T/out}
COMMON="--target models/gocoder/target --out $OUT/drafter --seed 8101 --layers 2 --heads 8 --kv-heads 2 \
  --head-dim 64 --intermediate 1280 --taps 1,4,7,10 --quantize-bits 4 --gen-batch 4096 --unseen-share 0.5 --batch 128"
if [ "${STREAM:-0}" = 1 ]; then
  python3 $T/train_drafter.py $COMMON --gen-seqs 16384 --refresh-every 500 --val-seqs 1024 --lr 3e-3 --warmup 100 \
    --time-budget ${BUDGET:-300} --eval-n 4 --eval-new 64
else
  python3 $T/train_drafter.py $COMMON --gen-seqs 8192 --lr 3e-3 --warmup 50 --time-budget ${BUDGET:-135} --eval-n 0
fi
rm -f $OUT/drafter/tokenizer.json   # the target's copy; keeps the returned files few
sha256sum $OUT/drafter/model.safetensors
