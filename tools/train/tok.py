"""Byte-level BPE tokenizer for the demo models (Qwen-style), trained with `tokenizers`.

Writes tokenizer.json + tokenizer_config.json exactly as a Hugging Face model ships them: NFC normalizer,
Split(Qwen regex, Isolated) + ByteLevel(add_prefix_space=false, use_regex=false) pre-tokenizer, ByteLevel
decoder, ChatML chat template, special tokens appended after the BPE vocabulary (as Qwen does).
"""
import gzip
import json
import os

QWEN_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# (content, special): Qwen marks <think>/</think> as added but not special.
ADDED = [
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<think>", False),
    ("</think>", False),
    ("<|mask|>", True),
]
VOCAB_SIZE = 4096

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def load_docs(path):
    """One JSON string per line; path may name the .jsonl.gz while the data directory holds .jsonl.xz
    (make_corpus.py --xz), which is then read instead."""
    if not os.path.exists(path) and path.endswith(".gz") and os.path.exists(path[:-3] + ".xz"):
        path = path[:-3] + ".xz"
    if path.endswith(".xz"):
        import lzma
        with lzma.open(path, "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f]
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def reuse_tokenizer(src_dir, out_dir):
    """Copy an existing tokenizer (tokenizer.json + tokenizer_config.json) instead of training one, so a new
    model shares ids, corpus split and eval prompts with the earlier one; checks the added-token layout."""
    import shutil
    from tokenizers import Tokenizer
    os.makedirs(out_dir, exist_ok=True)
    for fn in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(src_dir, fn), os.path.join(out_dir, fn))
    tok = Tokenizer.from_file(os.path.join(out_dir, "tokenizer.json"))
    if tok.get_vocab_size() != VOCAB_SIZE or any(tok.token_to_id(s) is None for s, _ in ADDED):
        raise SystemExit(f"{src_dir}: tokenizer has {tok.get_vocab_size()} ids or lacks added tokens; want {VOCAB_SIZE}")
    print(f"tokenizer: reused {src_dir} ({tok.get_vocab_size()} ids)", flush=True)
    return tok


def train_tokenizer(texts, out_dir):
    from tokenizers import Tokenizer, Regex, AddedToken, models, normalizers, pre_tokenizers, decoders, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    # Special tokens must not take part in merges: train on text with them removed.
    clean = []
    for t in texts:
        for s, _ in ADDED:
            t = t.replace(s, "")
        clean.append(t)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(ADDED),
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(clean, trainer=trainer)
    n_bpe = tok.get_vocab_size()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s, sp in ADDED if sp])
    tok.add_tokens([AddedToken(s, special=False, normalized=False) for s, sp in ADDED if not sp])
    # Order the added ids as in ADDED (add_special_tokens/add_tokens assign in call order); re-check.
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    write_config(tok, out_dir)
    ids = {s: tok.token_to_id(s) for s, _ in ADDED}
    print(f"tokenizer: {n_bpe} BPE tokens + {len(ADDED)} added = {tok.get_vocab_size()}; ids {ids}", flush=True)
    return tok


def write_config(tok, out_dir):
    dec = {}
    for s, sp in ADDED:
        dec[str(tok.token_to_id(s))] = {
            "content": s, "lstrip": False, "normalized": False, "rstrip": False,
            "single_word": False, "special": sp,
        }
    dec = dict(sorted(dec.items(), key=lambda kv: int(kv[0])))
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": dec,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|mask|>"],
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "mask_token": "<|mask|>",
        "model_max_length": 4096,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)


def special_ids(tok):
    return {s: tok.token_to_id(s) for s, _ in ADDED}
