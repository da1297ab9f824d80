#!/usr/bin/env python3
"""CPU smoke test of both training stages without the `tokenizers` package (a byte-level stand-in
tokenizer replaces the BPE one). Usage: /usr/bin/python3 tools/train/smoke_local.py  (needs torch, safetensors
is replaced by torch.save when absent). Checks chunked == sequential GDN, cached decode == full forward, and runs
a few steps of each stage plus the DFlash loop."""
import json
import os
import sys
import tempfile
import types

import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import tok as tokmod  # noqa: E402
import model as M  # noqa: E402

try:
    import safetensors  # noqa: F401
except ImportError:  # local Debian torch has no safetensors: stand in with the goldens' numpy writer
    sys.path.insert(0, os.path.join(here, "..", "goldens"))
    import stio  # noqa: E402
    st = types.ModuleType("safetensors")
    stt = types.ModuleType("safetensors.torch")

    def _save(sd, path, metadata=None):
        stio.write_safetensors(path, {k: stio.tensor_from_f32(v.float().numpy(), "BF16" if v.dtype == torch.bfloat16
                                                              else "F32") for k, v in sd.items()}, metadata)

    def _load(path):
        raw, _ = stio.read_safetensors(path)
        return {k: torch.from_numpy(stio.to_numpy(*v).copy()) for k, v in raw.items()}
    stt.save_file = _save
    stt.load_file = _load
    sys.modules["safetensors"] = st
    sys.modules["safetensors.torch"] = stt


class FakeEnc:
    def __init__(self, ids):
        self.ids = ids


class FakeTok:
    """Bytes 0..255 plus the added tokens at 4090.. (same ids layout as the real one)."""

    def __init__(self):
        self.sp = {s: tokmod.VOCAB_SIZE - len(tokmod.ADDED) + i for i, (s, _) in enumerate(tokmod.ADDED)}

    def encode(self, text, add_special_tokens=False):
        return FakeEnc(list(text.encode("utf-8")[:2000]))

    def encode_batch(self, texts, add_special_tokens=False):
        return [self.encode(t) for t in texts]

    def token_to_id(self, s):
        return self.sp[s]

    def decode(self, ids, skip_special_tokens=False):
        return bytes(i for i in ids if i < 256).decode("utf-8", "replace")


def fake_train_tokenizer(texts, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    open(os.path.join(out_dir, "tokenizer.json"), "w").write("{}")
    open(os.path.join(out_dir, "tokenizer_config.json"), "w").write("{}")
    return FakeTok()


def main():
    torch.manual_seed(0)
    c = M.TargetConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4)
    m = M.Target(c)
    ids = torch.randint(0, 300, (2, 150))
    with torch.no_grad():
        l1, _ = m(ids)
        l2, _ = m(ids, mode="sequential")
        caches = [{} for _ in range(4)]
        lp, _ = m(ids[:, :100], 0, caches)
        outs = [lp] + [m(ids[:, t:t + 1], t, caches)[0] for t in range(100, 150)]
    d1, d2 = (l1 - l2).abs().max().item(), (torch.cat(outs, 1) - l1).abs().max().item()
    print(f"chunked vs sequential {d1:.2e}; cached decode vs full {d2:.2e}")
    assert d1 < 1e-4 and d2 < 1e-4

    tokmod.train_tokenizer = fake_train_tokenizer
    import train_target
    import train_drafter
    train_drafter.load_tokenizer = lambda path: FakeTok()
    data = os.path.join(here, "data")
    with tempfile.TemporaryDirectory() as tmp:
        sys.argv = ["x", "--data", data, "--out", f"{tmp}/target", "--tiny", "--batch", "2", "--seq", "128"]
        train_target.main()
        sys.argv = ["x", "--data", data, "--target", f"{tmp}/target", "--out", f"{tmp}/drafter", "--tiny",
                    "--unseen-share", "0.5"]
        train_drafter.main()
        print(json.load(open(f"{tmp}/drafter/config.json")))
        # the gocoder path: reused tokenizer, model-shape flags, MLX-quantized target and drafter
        tokmod.reuse_tokenizer = lambda src, out: fake_train_tokenizer([], out)
        shape = ["--hidden", "128", "--layers", "4", "--intermediate", "192", "--heads", "2", "--kv-heads", "1",
                 "--linear-key-heads", "1", "--linear-value-heads", "2"]
        sys.argv = ["x", "--data", data, "--out", f"{tmp}/t2", "--tiny", "--batch", "2", "--seq", "128",
                    "--tokenizer", "unused", "--quantize", f"{tmp}/q2"] + shape
        train_target.main()
        qcfg = json.load(open(f"{tmp}/q2/config.json"))
        assert qcfg["quantization"]["model.embed_tokens"]["bits"] == 8, qcfg["quantization"]
        sys.argv = ["x", "--data", data, "--target", f"{tmp}/q2", "--out", f"{tmp}/d2", "--tiny",
                    "--unseen-share", "0.5", "--taps", "0,1,2,3", "--heads", "2", "--kv-heads", "1",
                    "--quantize-bits", "4"]
        train_drafter.main()
        print(json.load(open(f"{tmp}/d2/config.json"))["quantization"])
    print("smoke ok")


if __name__ == "__main__":
    main()
