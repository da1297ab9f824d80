#!/usr/bin/env bash
# Stage 1 on the accelerator machine: versions, a tiny end-to-end smoke of the whole pipeline, then the real
# tokenizer + target training and the numerical checks. Run from the repository root with tools/train/data
# carried. Results: tools/train/out/target (and copies under $OUT when set).
set -euo pipefail
T=tools/train
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0)); print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__); import transformers as t; print('has Qwen3NextForCausalLM', hasattr(t, 'Qwen3NextForCausalLM'))"
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader
if [ "${SKIP_SMOKE:-0}" != 1 ]; then
  S=$(mktemp -d)
  python3 $T/train_target.py --tiny --out $S/target
  python3 $T/checks.py --target $S/target
  python3 $T/train_drafter.py --tiny --target $S/target --out $S/drafter
  echo "SMOKE OK"
fi
python3 $T/train_target.py --out $T/out/target ${TARGET_ARGS:---time-budget 300}
python3 $T/checks.py --target $T/out/target || echo "CHECKS FAILED"
if [ -n "${OUT:-}" ]; then mkdir -p $OUT/target && cp $T/out/target/* $OUT/target/; fi
