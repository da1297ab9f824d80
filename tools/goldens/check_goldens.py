#!/usr/bin/env python3
"""Validate testdata/goldens without torch, numpy or transformers (Python standard library only).

    python3 tools/goldens/check_goldens.py [testdata/goldens]

Checks, for every case listed in index.json:
- every safetensors file: header length, JSON, dtypes, byte lengths = prod(shape) * itemsize, offsets contiguous from 0
  without gaps/overlaps and ending exactly at the end of the file; names equal golden.json's tensor_names;
- config.json agrees with golden.json (vocab, hidden size, layers; text_config for qwen3_5*), tied checkpoints carry
  no lm_head, eos_token_id matches generation_config.json;
- logits.f32 / hidden.f32 sizes match their shapes; prompt and greedy ids are inside the vocabulary; every margin
  is >= 0 and the recorded argmax equals the argmax of the stored logits;
- hidden state 0 equals the embedding rows of the prompt (F32 checkpoints: exactly) -- pins the index convention;
- MLX cases: every quantized module has weight U32 [.., out, in*bits/32] and scales/biases [.., out, in/gs] in the
  declared dtype with bits/group from the config's quantization block; the dequant_samples files equal an
  independent dequantization written from MODEL-REFERENCE §1.4's word/shift formula, bit for bit;
- DFlash traces: every round's block starts with the last committed token, has the block size, accepted <= B-1 and
  matches the recorded target argmax; replaying the rounds reproduces `tokens`, which equal `ar_tokens`; the drafter
  config's taps and mask id fit the target.
Exit status 0 when everything holds, 1 otherwise (each failure printed).
"""

import json
import math
import os
import struct
import sys

ITEMSIZE = {"F32": 4, "F16": 2, "BF16": 2, "U32": 4}
FAILS = []


def fail(msg):
    FAILS.append(msg)
    print("FAIL:", msg)


def load_json(path):
    with open(path) as f:
        return json.load(f)


def parse_safetensors(path):
    """-> ({name: (dtype, shape, bytes)}, metadata) after validating the layout."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: shorter than 8 bytes")
    (n,) = struct.unpack("<Q", buf[:8])
    if 8 + n > len(buf):
        raise ValueError(f"{path}: header length {n} past end of file")
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    meta = header.pop("__metadata__", {})
    base = 8 + n
    spans = []
    out = {}
    for name, h in header.items():
        dt, shape, (b, e) = h["dtype"], h["shape"], h["data_offsets"]
        if dt not in ITEMSIZE:
            raise ValueError(f"{path}: {name}: unexpected dtype {dt}")
        count = 1
        for s in shape:
            count *= s
        if e - b != count * ITEMSIZE[dt]:
            raise ValueError(f"{path}: {name}: {e - b} bytes for {dt}{shape}")
        spans.append((b, e, name))
        out[name] = (dt, shape, buf[base + b : base + e])
    spans.sort()
    pos = 0
    for b, e, name in spans:
        if b != pos:
            raise ValueError(f"{path}: {name} starts at {b}, expected {pos} (gap or overlap)")
        pos = e
    if base + pos != len(buf):
        raise ValueError(f"{path}: data ends at {base + pos}, file has {len(buf)} bytes")
    return out, meta


def floats(dt, data):
    if dt == "F32":
        return list(struct.unpack(f"<{len(data) // 4}f", data))
    if dt == "F16":
        return list(struct.unpack(f"<{len(data) // 2}e", data))
    if dt == "BF16":
        hs = struct.unpack(f"<{len(data) // 2}H", data)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in hs]
    raise ValueError(dt)


def read_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    return list(struct.unpack(f"<{len(data) // 4}f", data))


def to_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def text_cfg(cfg):
    return cfg.get("text_config", cfg)


def quant_spec(qblock, module):
    v = qblock.get(module)
    if v is False:
        return None
    if isinstance(v, dict):
        return v
    return {"bits": qblock["bits"], "group_size": qblock["group_size"]}


def dequant_literal(words_u32, scales, biases, shape, bits, gs):
    """Independent of tools/goldens/mlxq.py: the word/shift formula of MODEL-REFERENCE §1.4."""
    *lead, out, in_dim = shape
    rows = 1
    for s in lead:
        rows *= s
    rows *= out
    wpr = in_dim * bits // 32
    gpr = in_dim // gs
    res = []
    mask = (1 << bits) - 1
    for r in range(rows):
        row = words_u32[r * wpr : (r + 1) * wpr]
        for j in range(in_dim):
            w, s = (j * bits) // 32, (j * bits) % 32
            q = row[w] >> s
            if s + bits > 32:
                q |= row[w + 1] << (32 - s)
            q &= mask
            g = r * gpr + j // gs
            res.append(to_f32(scales[g] * q + biases[g]))
    return res


def check_case(root, entry):
    name = entry["case"]
    d = os.path.join(root, entry.get("dir", name))
    g = load_json(os.path.join(d, "golden.json"))
    cfg = load_json(os.path.join(d, "config.json"))
    gen = load_json(os.path.join(d, "generation_config.json"))
    tc = text_cfg(cfg)
    V, H, L = g["vocab_size"], g["hidden_size"], g["num_hidden_layers"]
    for k, want in (("vocab_size", V), ("hidden_size", H), ("num_hidden_layers", L)):
        if tc.get(k) != want:
            fail(f"{name}: config {k}={tc.get(k)} != golden {want}")
    if gen.get("eos_token_id") != [g["eos_token_id"]]:
        fail(f"{name}: generation_config eos {gen.get('eos_token_id')} != {g['eos_token_id']}")
    tensors, meta = parse_safetensors(os.path.join(d, "model.safetensors"))
    if sorted(tensors) != g["tensor_names"]:
        fail(f"{name}: safetensors names differ from golden.json tensor_names")
    want_fmt = "mlx" if g["layout"] == "mlx" else "pt"
    if meta.get("format") != want_fmt:
        fail(f"{name}: metadata format {meta.get('format')} != {want_fmt}")
    if g["tied"] and any(k.endswith("lm_head.weight") for k in tensors):
        fail(f"{name}: tied checkpoint stores lm_head.weight")
    T = len(g["prompt"])
    if g["logits"]["shape"] != [T, V] or g["hidden_states"]["shape"] != [L + 1, T, H]:
        fail(f"{name}: golden shapes {g['logits']['shape']} {g['hidden_states']['shape']}")
    logits = read_f32(os.path.join(d, g["logits"]["file"]))
    hidden = read_f32(os.path.join(d, g["hidden_states"]["file"]))
    if len(logits) != T * V or len(hidden) != (L + 1) * T * H:
        fail(f"{name}: logits/hidden file sizes {len(logits)} {len(hidden)}")
        return
    if any(not math.isfinite(x) for x in logits + hidden):
        fail(f"{name}: non-finite values")
    for t in range(T):
        row = logits[t * V : (t + 1) * V]
        am = max(range(V), key=lambda i: row[i])
        if am != g["prompt_argmax"][t]:
            fail(f"{name}: argmax at {t} is {am}, golden says {g['prompt_argmax'][t]}")
    toks = g["greedy"]["tokens"]
    if not all(0 <= x < V for x in g["prompt"] + toks):
        fail(f"{name}: token id outside the vocabulary")
    if g["eos_token_id"] in toks:
        fail(f"{name}: eos id appears in the greedy continuation")
    if len(toks) != len(g["greedy"]["top2_margin"]) or min(g["greedy"]["top2_margin"] + g["prompt_top2_margin"]) < 0:
        fail(f"{name}: margins malformed")
    if toks and toks[0] != g["prompt_argmax"][-1]:
        fail(f"{name}: first greedy token != argmax of the last prompt position")
    # hidden[0] = embedding rows of the prompt
    emb_name = next(k for k in tensors if k.endswith("embed_tokens.weight"))
    dt, shape, data = tensors[emb_name]
    if g["layout"] == "hf":
        emb = floats(dt, data)
        exp = [emb[tok * H + j] for tok in g["prompt"] for j in range(H)]
    else:
        mod = emb_name[: -len(".weight")]
        spec = quant_spec(load_json(os.path.join(d, "config.json"))["quantization"], mod)
        sc = floats(*tensors[mod + ".scales"][::2])
        bi = floats(*tensors[mod + ".biases"][::2])
        words = struct.unpack(f"<{len(data) // 4}I", data)
        in_dim = H
        exp = []
        for tok in g["prompt"]:
            wpr = in_dim * spec["bits"] // 32
            gpr = in_dim // spec["group_size"]
            exp += dequant_literal(words[tok * wpr : (tok + 1) * wpr], sc[tok * gpr : (tok + 1) * gpr],
                                   bi[tok * gpr : (tok + 1) * gpr], [1, in_dim], spec["bits"], spec["group_size"])
    got = hidden[: T * H]
    if got != exp:
        bad = max(abs(a - b) for a, b in zip(got, exp))
        fail(f"{name}: hidden_states[0] != embedding rows of the prompt (max |d| {bad})")
    if g["layout"] == "mlx":
        check_mlx(name, d, g, cfg, tensors)


def check_mlx(name, d, g, cfg, tensors):
    qb = cfg.get("quantization")
    if not isinstance(qb, dict) or cfg.get("quantization_config") != qb:
        fail(f"{name}: quantization block missing or not mirrored in quantization_config")
        return
    if qb.get("mode", "affine") != "affine":
        fail(f"{name}: mode {qb.get('mode')}")
    sd = g["scales_dtype"]
    for mod, info in g["quantized_modules"].items():
        spec = quant_spec(qb, mod)
        if spec is None or spec["bits"] != info["bits"] or spec["group_size"] != info["group_size"]:
            fail(f"{name}: {mod}: config spec {spec} != recorded {info}")
            continue
        b, gs = spec["bits"], spec["group_size"]
        *lead, out, in_dim = info["shape"]
        w, s, bi = (tensors.get(mod + sfx) for sfx in (".weight", ".scales", ".biases"))
        if not (w and s and bi):
            fail(f"{name}: {mod}: missing weight/scales/biases")
            continue
        if w[0] != "U32" or w[1] != lead + [out, in_dim * b // 32]:
            fail(f"{name}: {mod}.weight {w[0]}{w[1]}")
        for t, lbl in ((s, "scales"), (bi, "biases")):
            if t[0] != sd or t[1] != lead + [out, in_dim // gs]:
                fail(f"{name}: {mod}.{lbl} {t[0]}{t[1]}")
        if s[1][-1] * gs != in_dim or w[1][-1] * 32 != in_dim * b:
            fail(f"{name}: {mod}: cross-check in = scales.cols*gs, weight.cols*32 = in*bits failed")
    for k, (dt, shape, _) in tensors.items():
        if k.endswith(("A_log", "dt_bias")) and dt != "F32":
            fail(f"{name}: {k} stored as {dt}, expected F32")
        if k.endswith("conv1d.weight") and shape[-1] != 1:
            fail(f"{name}: {k} shape {shape}: MLX layout is [C, Kc, 1]")
    for smp in g["dequant_samples"]:
        mod = smp["module"]
        dt, shape, data = tensors[mod + ".weight"]
        words = list(struct.unpack(f"<{len(data) // 4}I", data))
        sc = floats(*tensors[mod + ".scales"][::2])
        bi = floats(*tensors[mod + ".biases"][::2])
        exp = dequant_literal(words, sc, bi, smp["shape"], smp["bits"], smp["group_size"])
        got = read_f32(os.path.join(d, smp["file"]))
        if got != exp:
            fail(f"{name}: dequant sample {mod} differs from the literal §1.4 decoding")


def check_trace(root, entry):
    name = entry["drafter"]
    d = os.path.join(root, entry.get("dir", name))
    tr = load_json(os.path.join(d, "trace.json"))
    cfg = load_json(os.path.join(d, "config.json"))
    tgt = load_json(os.path.join(root, tr["target"], "golden.json"))
    tensors, _ = parse_safetensors(os.path.join(d, "model.safetensors"))
    if sorted(tensors) != tr["tensor_names"]:
        fail(f"{name}: safetensors names differ from trace.json tensor_names")
    if cfg.get("architectures") != ["DFlashDraftModel"]:
        fail(f"{name}: architectures {cfg.get('architectures')}")
    dc = cfg["dflash_config"]
    taps, mask = dc["target_layer_ids"], dc["mask_token_id"]
    if not all(0 <= t < tgt["num_hidden_layers"] for t in taps):
        fail(f"{name}: taps {taps} outside the target's {tgt['num_hidden_layers']} layers")
    if not 0 <= mask < tgt["vocab_size"]:
        fail(f"{name}: mask id {mask} outside the vocabulary")
    H = cfg["hidden_size"]
    if tensors["fc.weight"][1] != [H, len(taps) * H]:
        fail(f"{name}: fc.weight shape {tensors['fc.weight'][1]}")
    for run in tr["runs"]:
        B = run["block_size"]
        label = f"{name} bs={B} prompt={run['prompt'][:3]}..."
        committed = [run["first_token"]]
        for i, rnd in enumerate(run["rounds"]):
            blk = rnd["block"]
            if len(blk) != B or blk[0] != committed[-1]:
                fail(f"{label}: round {i} block {blk} (last committed {committed[-1]})")
                break
            a = rnd["accepted"]
            ta = rnd["target_argmax"]
            want = 0
            while want < B - 1 and blk[want + 1] == ta[want]:
                want += 1
            if a != want:
                fail(f"{label}: round {i} accepted {a} but block vs target argmax gives {want}")
            if len(rnd["draft_top2_margin"]) != B - 1 or len(rnd["target_top2_margin"]) != B:
                fail(f"{label}: round {i} margin lengths")
            if rnd["remaining"] != tr["max_new_tokens"] - len(committed):
                fail(f"{label}: round {i} remaining {rnd['remaining']}")
            committed += blk[1 : 1 + a] + [ta[a]]
        committed = committed[: tr["max_new_tokens"]]
        if committed != run["tokens"]:
            fail(f"{label}: replaying the rounds gives {committed[:8]}..., tokens are {run['tokens'][:8]}...")
        if run["tokens"] != run["ar_tokens"] or not run["tokens_equal_ar"]:
            fail(f"{label}: speculative tokens differ from greedy AR")
        if len(run["tokens"]) != tr["max_new_tokens"]:
            fail(f"{label}: {len(run['tokens'])} tokens, expected {tr['max_new_tokens']}")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "testdata", "goldens")
    idx = load_json(os.path.join(root, "index.json"))
    passed = failed = 0
    items = [(e, e.get("case"), check_case) for e in idx["cases"]]
    items += [(e, e.get("drafter"), check_trace) for e in idx["dflash"]]
    for e, label, check in items:
        before = len(FAILS)
        if not e.get("ok"):
            fail(f"{label}: generator reported failure: {e.get('error')}")
        else:
            try:
                check(root, e)
            except Exception as ex:  # noqa: BLE001
                fail(f"{label}: {type(ex).__name__}: {ex}")
        if len(FAILS) == before:
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
