#!/usr/bin/env bash
# gocoder, device calls 2–4: the DFlash drafter, trained from scratch against the MLX-quantized target exactly as
# the engine runs it (mlxquant.py dequantizes what ships), on the target's own greedy generations (half the
# prompts from *_test.go files the target never saw), shipped 4-bit (g64). Carry a tree with tools/train
# (data/ may hold subsets: the generation prompts only need some text), tools/goldens/{mlxq,stio}.py and
# models/gocoder/target. Writes straight to $OUT/drafter (+ $OUT/drafter/bf16) so that a call stopped at its
# limit still returns the weights.
#
# The shipped drafter is three streamed calls (fresh generations every 500 steps, validation on generations from
# unseen documents), each under the 10-minute call limit; BUDGET counts the generations too:
#   STAGE=1 bash tools/train/device_gocoder_drafter.sh                       # from scratch, lr 3e-3, 215 s
#   STAGE=2 INIT=<stage 1's drafter/bf16> bash tools/train/device_gocoder_drafter.sh   # lr 2e-3, 430 s
#   STAGE=3 INIT=<stage 2's drafter/bf16> bash tools/train/device_gocoder_drafter.sh   # lr 1.2e-3, 300 s
# STAGE=short is the earlier 135 s non-streamed recipe (memorises its 8,192 generations; kept for comparison).
set -euo pipefail
T=tools/train
OUT=${OUT:-$T/out}
COMMON="--target models/gocoder/target --out $OUT/drafter --layers 2 --heads 8 --kv-heads 2 \
  --head-dim 64 --intermediate 1280 --taps 1,4,7,10 --quantize-bits 4 --gen-batch 4096 --unseen-share 0.5 --batch 128"
STREAMED="--gen-seqs 16384 --refresh-every 500 --val-seqs 1024 --eval-n 4 --eval-new 64"
need_init() { [ -n "${INIT:-}" ] || { echo "STAGE=$STAGE continues a drafter: set INIT to the previous stage's drafter/bf16" >&2; exit 2; }; }
case "${STAGE:-1}" in
  1) python3 $T/train_drafter.py $COMMON $STREAMED --seed 8101 --lr 3e-3 --warmup 100 --time-budget ${BUDGET:-215} ;;
  2) need_init; python3 $T/train_drafter.py $COMMON $STREAMED --init "$INIT" --seed 8102 --lr 2e-3 --warmup 50 \
       --time-budget ${BUDGET:-430} ;;
  3) need_init; python3 $T/train_drafter.py $COMMON $STREAMED --init "$INIT" --seed 8103 --lr 1.2e-3 --warmup 30 \
       --time-budget ${BUDGET:-300} ;;
  short) python3 $T/train_drafter.py $COMMON --seed 8101 --gen-seqs 8192 --lr 3e-3 --warmup 50 --time-budget ${BUDGET:-135} --eval-n 0 ;;
  *) echo "STAGE must be 1, 2, 3 or short" >&2; exit 2 ;;
esac
rm -f $OUT/drafter/tokenizer.json $OUT/drafter/tokenizer_config.json   # the target's copies; keeps the returned files few
sha256sum $OUT/drafter/model.safetensors
