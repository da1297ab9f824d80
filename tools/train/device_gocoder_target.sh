#!/usr/bin/env bash
# gocoder, device call 1: versions, a toy-size smoke of every new path (reused tokenizer, model-shape flags,
# MLX quantization of target and drafter), then the target itself, quantized as mlx-lm would (4-bit g64,
# 8-bit embedding) and its held-out perplexity before and after quantization. Run from a tree holding
# tools/train, tools/goldens/{mlxq,stio}.py, models/demo/target/tokenizer*.json and tools/train/data/*.xz
# (make_corpus.py --modules ~/go/pkg/mod --xz). Results under $OUT (the quantized weights split in 15 MB parts:
# cat model.safetensors.part* > model.safetensors).
set -euo pipefail
T=tools/train
OUT=${OUT:-$T/out}
BUDGET=${BUDGET:-380}
SHAPE="--hidden 640 --layers 12 --intermediate 1280 --heads 8 --kv-heads 2 --head-dim 64 \
  --linear-key-heads 4 --linear-value-heads 8 --linear-head-dim 64"
python3 -c "import torch, transformers, tokenizers, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'numpy', numpy.__version__)"
S=$(mktemp -d)
python3 $T/train_target.py --tiny --tokenizer models/demo/target --out $S/target --quantize $S/q $SHAPE
python3 $T/train_drafter.py --tiny --target $S/q --out $S/drafter --taps 1,4,7,10 --heads 8 --kv-heads 2 \
  --intermediate 1280 --quantize-bits 4 --unseen-share 0.5
echo "SMOKE OK"
python3 $T/train_target.py --tokenizer models/demo/target --out $T/out/target --quantize $T/out/q \
  --time-budget $BUDGET --lr 1.5e-3 --warmup 200 --min-lr 0.05 $SHAPE
cp $T/out/target/train_log.json $T/out/q/
timeout 90 python3 $T/checks.py --target $T/out/target > $OUT/checks.log 2>&1 || echo "CHECKS FAILED (see checks.log)"
mkdir -p $OUT/target
cp $T/out/q/config.json $T/out/q/generation_config.json $T/out/q/train_log.json $OUT/target/
split -b 15M -d $T/out/q/model.safetensors $OUT/target/model.safetensors.part
sha256sum $T/out/q/model.safetensors
ls -la $OUT/target
