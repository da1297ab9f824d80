#!/usr/bin/env bash
# gocoder, device call 2: the DFlash drafter, trained from scratch against the MLX-quantized target exactly as
# the engine runs it (mlxquant.py dequantizes what ships), on a stream of the target's own greedy
# generations (fresh every --refresh-every steps; half the prompts from *_test.go files the target never
# saw), then shipped 4-bit (g64) and its tau measured with the PyTorch DFlash loop on held-out prompts.
# Carry a tree with tools/train (data/ may hold subsets: the generation prompts only need some text),
# tools/goldens/{mlxq,stio}.py and models/gocoder/target. Result: $OUT/drafter (+ $OUT/bf16).
set -euo pipefail
T=tools/train
OUT=${OUT:-$T/out}
BUDGET=${BUDGET:-460}
python3 $T/train_drafter.py --target models/gocoder/target --out $T/out/drafter --seed 8101 \
  --layers 2 --heads 8 --kv-heads 2 --head-dim 64 --intermediate 1280 --taps 1,4,7,10 --quantize-bits 4 \
  --gen-seqs 16384 --gen-batch 4096 --refresh-every 500 --unseen-share 0.5 --val-seqs 1024 \
  --batch 128 --lr 3e-3 --warmup 100 --time-budget $BUDGET --eval-n 12 --eval-new 128
mkdir -p $OUT/drafter $OUT/bf16
cp $T/out/drafter/config.json $T/out/drafter/model.safetensors $T/out/drafter/train_log.json $OUT/drafter/
cp $T/out/drafter/bf16/config.json $T/out/drafter/bf16/model.safetensors $OUT/bf16/
sha256sum $OUT/drafter/model.safetensors
