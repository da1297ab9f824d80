"""Builds adapters/tokenizer/testdata/handmade/tokenizer.json: a small byte-level BPE tokenizer written without
the `tokenizers` library, to exercise what the Qwen3 file does not: merges in the newer ["a", "b"] pair form,
ByteLevel(add_prefix_space=true, use_regex=true) (the GPT-2 split), an NFKC normalizer inside a Sequence, a
TemplateProcessing post-processor adding <s>, and added tokens with lstrip / rstrip / single_word /
normalized=true. Merges come from a tiny greedy pair-count trainer over a fixed corpus (deterministic).

Run: python3 tools/goldens/tokenizer/make_handmade.py   (no third-party packages needed)
"""
import collections
import json
import os
import re

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "adapters", "tokenizer", "testdata", "handmade")
NUM_MERGES = 400

CORPUS = """
The quick brown fox jumps over the lazy dog. The dog sleeps; the fox runs away.
It's a tokenizer test: we're testing what they'll do with words, numbers 12345 and 2026, and punctuation!!
func main() { fmt.Println("hello, world") } // Go code with braces, tabs\tand newlines
for i := 0; i < len(items); i++ { total += items[i] * 2 }
Tokenizers split text into words, then words into sub-word pieces with byte pair encoding.
Ünïcödé tëxt, naïve café, résumé — and some 中文 字符 与 日本語 テキスト.
the the the then there these those this that than thank think thing
"""

# GPT-2 byte map (bytes_to_unicode).
def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs)))

B2U = bytes_to_unicode()
# Python's `re` lacks \p{L}; this approximation is only used to cut the training corpus into words.
WORD = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


def main():
    words = collections.Counter()
    for m in WORD.finditer(CORPUS):
        w = m.group(0)
        words[tuple(B2U[b] for b in w.encode("utf-8"))] += 1
    vocab = {}
    for b in range(256):
        vocab[B2U[b]] = len(vocab)
    merges = []
    corpus = {w: list(w) for w in words}
    for _ in range(NUM_MERGES):
        pairs = collections.Counter()
        for w, syms in corpus.items():
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += words[w]
        if not pairs:
            break
        # Highest count, ties broken by the pair itself so the result is deterministic.
        (a, b), count = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        if count < 1:
            break
        merges.append([a, b])
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
        for w, syms in corpus.items():
            out, i = [], 0
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == a and syms[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            corpus[w] = out
    n = len(vocab)
    added = [
        # (content, special, lstrip, rstrip, single_word, normalized)
        ("<s>", True, False, False, False, False),
        ("</s>", True, False, False, False, False),
        ("<mask>", True, True, False, False, False),
        ("<sep>", True, False, True, False, False),
        ("[NAME]", False, False, False, True, True),
        ("<tool>", False, False, False, False, False),
    ]
    added_tokens = []
    for i, (content, special, lstrip, rstrip, single, normalized) in enumerate(added):
        added_tokens.append({"id": n + i, "content": content, "single_word": single, "lstrip": lstrip,
                             "rstrip": rstrip, "normalized": normalized, "special": special})
    tok = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [n], "tokens": ["<s>"]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    cfg = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": None, "unk_token": None,
           "chat_template": [
               {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}</s>{% endfor %}"},
               {"name": "tool_use", "template": "{{ bos_token }}TOOLS {{ tools | tojson }}{% for m in messages %}[{{ m.role }}] {{ m.content }}</s>{% endfor %}"},
           ]}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
    print(f"handmade tokenizer: {len(vocab)} vocab, {len(merges)} merges, {len(added)} added")


if __name__ == "__main__":
    main()
