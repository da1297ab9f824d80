#!/usr/bin/env python3
"""Store a trained checkpoint as mlx-lm would quantize it, and read such a checkpoint back (numpy only).

mlx-lm's default (`mlx_lm.convert -q`, or `--q-bits 4 --q-group-size 64` with an 8-bit override for the
embedding, as its mixed recipes do) quantizes every Linear and Embedding whose input width is a multiple of the
group size: 4-bit affine codes in groups of 64 with one BF16 scale and bias per group, the embedding (which is
also the tied LM head) at 8 bits. Norms, conv1d, A_log and dt_bias stay as they were. config.json gains
"quantization" (and the "quantization_config" mirror mlx-lm writes), e.g.
  {"group_size": 64, "bits": 4, "mode": "affine", "model.embed_tokens": {"group_size": 64, "bits": 8}}

The format itself (packing, dequantization) is tools/goldens/mlxq.py, which the Go engine's goldens already
check; this file only decides which tensors are quantized and at which width.

  python3 tools/train/mlxquant.py SRC_DIR DST_DIR [--bits 4] [--group-size 64] [--embed-bits 8]
"""
import argparse
import json
import os
import shutil
import sys

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "goldens"))
import mlxq  # noqa: E402
import stio  # noqa: E402

EMBED = "model.embed_tokens"
# mlx-lm's qwen3_next sanitize folds the 1 of the zero-centred norms into the stored weight and stores conv1d
# as MLX lays it out ([C, K, 1]); loaders (the engine's too) recognise such a checkpoint by its quantization
# block. The gated GDN norm (linear_attn.norm) has a plain weight and is left alone.
ZC_NORMS = (".input_layernorm.weight", ".post_attention_layernorm.weight", "model.norm.weight",
            ".q_norm.weight", ".k_norm.weight")
SIDE_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


def quantizable(name, shape, group):
    """mlx-lm's predicate: a 2-D Linear/Embedding weight whose input width divides into groups."""
    return name.endswith(".weight") and len(shape) == 2 and shape[-1] % group == 0


def quantize_state(sd, bits=4, group=64, embed_bits=8, sdtype="BF16", hybrid=False):
    """sd: {name: (dtype, float32 array)} -> (list of stio tensors, {module: bits} of what was quantized).
    hybrid: a qwen3_next target, whose norms and conv1d are stored the MLX way (ZC_NORMS); the folded norms are
    kept F32 so that adding 1 loses nothing."""
    out, done = [], {}
    for name in sorted(sd):
        dtype, a = sd[name]
        if hybrid and name.endswith(ZC_NORMS) and a.ndim == 1:
            out.append((name, stio.tensor_from_f32(a + np.float32(1), "F32")))
            continue
        if hybrid and name.endswith("conv1d.weight") and a.ndim == 3 and a.shape[1] == 1:
            out.append((name, stio.tensor_from_f32(np.ascontiguousarray(np.moveaxis(a, 2, 1)), dtype)))
            continue
        if quantizable(name, a.shape, group):
            mod = name[: -len(".weight")]
            b = embed_bits if mod == EMBED else bits
            w, s, z = mlxq.quantize(a, b, group, sdtype)
            out += [(name, stio.tensor_u32(w)), (mod + ".scales", stio.tensor_from_f32(s, sdtype)),
                    (mod + ".biases", stio.tensor_from_f32(z, sdtype))]
            done[mod] = b
        else:
            out.append((name, stio.tensor_from_f32(a, dtype)))
    return out, done


def read_float_state(path):
    """{name: (dtype, float32 array)} of an unquantized safetensors file."""
    raw, _ = stio.read_safetensors(path)
    return {k: (dt, stio.to_numpy(dt, shape, data)) for k, (dt, shape, data) in raw.items()}


def quantize_dir(src, dst, bits=4, group=64, embed_bits=8):
    """Quantize src/model.safetensors into dst (config.json gains the quantization block; side files copied)."""
    os.makedirs(dst, exist_ok=True)
    sd = read_float_state(os.path.join(src, "model.safetensors"))
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("quantization"):
        raise ValueError(f"{src} is quantized already")
    tensors, done = quantize_state(sd, bits, group, embed_bits, hybrid=cfg.get("model_type") == "qwen3_next")
    stio.write_safetensors(os.path.join(dst, "model.safetensors"), dict(tensors), {"format": "mlx"})
    q = {"group_size": group, "bits": bits, "mode": "affine"}
    if EMBED in done and embed_bits != bits:
        q[EMBED] = {"group_size": group, "bits": embed_bits}
    cfg["quantization"] = q
    cfg["quantization_config"] = q
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for fn in SIDE_FILES:
        if os.path.exists(os.path.join(src, fn)) and os.path.abspath(src) != os.path.abspath(dst):
            shutil.copy(os.path.join(src, fn), os.path.join(dst, fn))
    return done


def spec_for(q, module):
    """(bits, group) of a module under a config's quantization block (module overrides win)."""
    o = q.get(module)
    if isinstance(o, dict):
        return o["bits"], o["group_size"]
    return q["bits"], q["group_size"]


def dequantized_state(path, quantization, hybrid=False):
    """{name: float32 array} in the training code's (HF) convention of a (possibly quantized) safetensors file:
    quantized weights are dequantized exactly as the engine reads them (mlxq.dequantize), scales and biases
    dropped; for a hybrid target the MLX-stored norms and conv1d are turned back (ZC_NORMS). quantization is
    the config's block (None: nothing is quantized)."""
    raw, _ = stio.read_safetensors(path)
    arr = {k: stio.to_numpy(dt, shape, data) for k, (dt, shape, data) in raw.items()}
    out = {}
    for k, a in arr.items():
        if k.endswith(".scales") or k.endswith(".biases"):
            continue
        mod = k[: -len(".weight")] if k.endswith(".weight") else None
        if mod is not None and mod + ".scales" in arr:
            if not quantization:
                raise ValueError(f"{path}: {k} is quantized but config.json has no quantization block")
            bits, group = spec_for(quantization, mod)
            out[k] = mlxq.dequantize(a, arr[mod + ".scales"], arr[mod + ".biases"], bits, group)
        elif hybrid and quantization and k.endswith(ZC_NORMS) and a.ndim == 1:
            out[k] = np.asarray(a, dtype=np.float32) - np.float32(1)
        elif hybrid and quantization and k.endswith("conv1d.weight") and a.ndim == 3 and a.shape[2] == 1:
            out[k] = np.ascontiguousarray(np.moveaxis(np.asarray(a, dtype=np.float32), 1, 2))
        else:
            out[k] = np.asarray(a, dtype=np.float32)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--bits", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=64)
    ap.add_argument("--embed-bits", type=int, default=8)
    a = ap.parse_args()
    done = quantize_dir(a.src, a.dst, a.bits, a.group_size, a.embed_bits)
    size = os.path.getsize(os.path.join(a.dst, "model.safetensors"))
    print(f"quantized {len(done)} modules ({sorted(set(done.values()))} bits) -> {a.dst} {size} bytes")


if __name__ == "__main__":
    main()
