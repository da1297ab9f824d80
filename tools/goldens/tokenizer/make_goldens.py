"""Tokenizer and chat-template goldens from Hugging Face `tokenizers` / `transformers` (no network).

Run on a machine with both packages, from the repository root:
    python3 tools/goldens/tokenizer/make_goldens.py --out OUTDIR
Writes OUTDIR/qwen3_encode.json, OUTDIR/handmade_encode.json (and OUTDIR/demo_encode.json when
models/demo/target/tokenizer.json exists), OUTDIR/qwen3_decode.json and OUTDIR/qwen3_chat.json. Copy them into
adapters/tokenizer/testdata/ and adapters/chattemplate/testdata/. Every input string is generated here from
a fixed seed plus hand-written cases, so the goldens can be regenerated bit for bit.
`--dry-run` only generates the inputs (no third-party packages needed) and prints counts.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import sys
import tempfile
import traceback

SEED = 20261129
N_RANDOM = 640
N_DECODE = 200

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
            "<tool_response>", "<|fim_prefix|>", "<|vision_pad|>", "<s>", "</s>", "<mask>", "<sep>", "[NAME]",
            "<tool>", "<|mask|>"]

HAND = [
    "", " ", "  ", "\n", "\r\n", "\t", "a", "A", "Hello, world!", "Hello, my dog is cute",
    "It's what they'll do, we're sure you've 'LL 'S 'Re 'VE 'M 'D I'm", "don'tn't 'sss ''s '", "'ſ 'ſs ſ",
    "The year 2026 had 365 days; π≈3.14159, 1,000,000 and 0x1F.", "１２３ full-width digits ４５",
    "   leading spaces", "trailing spaces   ", "multiple   inner    spaces", "tabs\tand\t\ttabs",
    "line1\nline2\n\nline4\r\nline5\r\n\r\n", "   \n   \n", "\n\n\n\n", " \r\n \r\n ", "x \n y", "end\n",
    "\u00a0nbsp\u00a0here", "ideographic\u3000space\u3000", "thin\u2009space", "line\u2028sep\u2029para",
    "nel\x85char", "vt\x0bff\x0cdone", "zero\u200bwidth", "soft\u00adhyphen",
    "你好，世界！我是一个语言模型。", "日本語のテキストとカタカナ、ひらがな。", "한국어 텍스트입니다.",
    "Привет, мир! Как дела?", "Γειά σου Κόσμε", "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก",
    "Tiếng Việt có dấu", "Ünïcödé café naïve résumé", "e\u0301 composed? a\u0308o\u0308u\u0308", "Å vs A\u030a vs \u212b",
    "ﬁ ﬂ ligatures ﬀ", "ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ", "①②③ ⅷ Ⅻ", "x² y³ H₂O",
    "emoji 😀😃😄 👍🏽 ❤️", "family 👨‍👩‍👧‍👦 zwj", "flags 🇺🇸🇯🇵🇫🇷", "🏳️‍🌈 and 🧑🏿‍💻", "keycap 1️⃣ #️⃣",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning here\n</think>\n\nanswer", "<think></think>", "text<|endoftext|>more", "<|im_end|><|im_end|>",
    "<|im_start", "im_start|>", "< |im_start|>", "<<|im_start|>>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
    "a<mask>b", "a <mask> b", "a   <mask>   b", "<sep>   next", "x<sep>\n\ny", "[NAME] is here", "my[NAME]x",
    "hello [NAME], hi", "_[NAME]_", "<s>already</s>", "<tool>call</tool>",
    "func main() {\n\tfmt.Println(\"hello\")\n}\n",
    "def f(x):\n    return x ** 2  # square\n\n\nclass A:\n    pass\n",
    "if (a && b || !c) { x += 1; } else { y -= 2; }",
    "SELECT * FROM users WHERE id = 42 AND name LIKE '%bob%';",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "https://example.com/path?query=1&b=2#frag", "user@example.com", "C:\\Windows\\System32",
    "$$x^2 + y^2 = z^2$$", "a→b⇒c ∀x∃y", "@@@ ### $$$ %%% ^^^ &&& ***", "...!!!???", "—–-", "«guillemets» „quotes“",
    "ALLCAPS WORDS HERE", "camelCaseAndPascalCase snake_case_words kebab-case-words",
    "a" * 300, " " * 100, "\n" * 50, "ab " * 120, "😀" * 40, "中" * 200, "1234567890" * 20,
    "\ufeffbom at start", "replacement \ufffd char", "private \ue000 use", "ASCII control \x01\x02\x1f\x7f",
    "mixed 中文 English 日本語 123 😀 done", "tab\t \t \tspace", "x\u0301\u0302\u0303 stacked marks",
    "각 conjoining jamo", "ǅungla titlecase", "İstanbul ıi", "straße STRASSE",
]

POOLS = {
    "ascii_word": [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)],
    "digit": list("0123456789"),
    "punct": list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
    "space": [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u3000", "\u00a0", "\u2009", "\x0b", "\x0c",
              "\x85", "\u2028", "   ", "\n\n"],
    "cjk": [chr(c) for c in range(0x4E00, 0x9FA5, 37)],
    "kana": [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30A1, 0x30FB)],
    "hangul": [chr(c) for c in range(0xAC00, 0xD7A4, 101)],
    "cyrillic": [chr(c) for c in range(0x0410, 0x0450)],
    "greek": [chr(c) for c in range(0x0391, 0x03CA) if c != 0x03A2],
    "arabic": [chr(c) for c in range(0x0621, 0x064B)],
    "hebrew": [chr(c) for c in range(0x05D0, 0x05EB)],
    "devanagari": [chr(c) for c in range(0x0905, 0x0940)] + ["\u094d", "\u093e", "\u093f"],
    "thai": [chr(c) for c in range(0x0E01, 0x0E3A)],
    "latin_ext": list("àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿāăąćčďđēėęěğīįıłńňőœřśşšťūůűųźżžſ"),
    "combining": [chr(c) for c in range(0x0300, 0x0370, 3)],
    "emoji": ["😀", "😂", "🥲", "👍", "👍🏻", "👍🏿", "❤️", "✨", "🔥", "🚀", "🇩🇪", "🇨🇳", "👩‍💻", "👨‍👩‍👧",
              "🏳️‍🌈", "🧑🏽‍🚀", "☕", "⚡", "1️⃣", "\u200d", "\ufe0f"],
    "symbol": list("©®™°±×÷€£¥§¶•…‰′″←↑→↓↔∑∏√∞≈≠≤≥⊂⊃∈∉∧∨¬★☆♠♣♥♦♪♫"),
    "number_other": list("½¼¾²³¹⁰⁴①②⑩ⅠⅡⅢⅳ٠١٢٣०१२३๑๒"),
    "contraction": ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", "'Ve", "'RE", "'D", "'x", "'", "'ſ"],
    "special": SPECIALS,
    "code": ["func ", "return ", "if ", "else ", "{", "}", "(", ")", ";", ":=", "==", "!=", "->", "=>", "//", "/*",
             "*/", "    ", "\t", "\n", "x", "y", "err", "nil", "0", "1", "[]byte", "fmt.", "\"str\"", "'c'"],
}
WEIGHTS = {"ascii_word": 12, "digit": 4, "punct": 4, "space": 8, "cjk": 4, "kana": 2, "hangul": 2, "cyrillic": 2,
           "greek": 1, "arabic": 1, "hebrew": 1, "devanagari": 1, "thai": 1, "latin_ext": 2, "combining": 1,
           "emoji": 3, "symbol": 1, "number_other": 1, "contraction": 2, "special": 2, "code": 3}


def random_strings(rng, n):
    names = sorted(WEIGHTS)
    weights = [WEIGHTS[k] for k in names]
    out = []
    for i in range(n):
        # A few "themes" so some strings are long runs of one script, others a mix.
        theme = rng.choice(names) if i % 4 == 0 else None
        parts = []
        for _ in range(rng.randint(1, 40)):
            pool = theme if theme and rng.random() < 0.7 else rng.choices(names, weights)[0]
            atom = rng.choice(POOLS[pool])
            if pool in ("ascii_word", "cjk", "kana", "hangul", "cyrillic", "greek", "arabic", "latin_ext",
                        "digit") and rng.random() < 0.8:
                atom = "".join(rng.choice(POOLS[pool]) for _ in range(rng.randint(1, 9)))
            parts.append(atom)
        out.append("".join(parts))
    return out


def all_strings():
    rng = random.Random(SEED)
    return HAND + random_strings(rng, N_RANDOM)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Wetter für einen Ort abrufen — 天気",
        "parameters": {"type": "object", "required": ["location"], "properties": {
            "location": {"type": "string", "description": "Stadt, z. B. München"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}}}}},
    {"type": "function", "function": {
        "name": "search", "parameters": {"properties": {"q": {"type": "string"}, "limit": {"type": "integer"}},
                                         "type": "object", "required": ["q"]},
        "description": "Search the web <safely> & \"quote\" it"}},
]

CONVERSATIONS = [
    ("user_only", [{"role": "user", "content": "Hello!"}], None),
    ("system_user", [{"role": "system", "content": "You are a helpful assistant."},
                     {"role": "user", "content": "What is 2+2?"}], None),
    ("multi_turn", [{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello! How can I help?"},
                    {"role": "user", "content": "Tell me a joke."}], None),
    ("assistant_with_think_in_content", [
        {"role": "user", "content": "Solve x+1=3"},
        {"role": "assistant", "content": "<think>\nSubtract 1 from both sides.\n</think>\n\nx = 2"},
        {"role": "user", "content": "And x+2=5?"}], None),
    ("assistant_reasoning_content", [
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris.", "reasoning_content": "The user asks about France; Paris."},
        {"role": "user", "content": "And of Japan?"},
        {"role": "assistant", "content": "Tokyo.", "reasoning_content": "日本の首都は東京。"}], None),
    ("tools_no_calls", [{"role": "system", "content": "You can use tools."},
                        {"role": "user", "content": "Weather in Zürich?"}], TOOLS),
    ("tools_without_system", [{"role": "user", "content": "Search for Go tokenizers"}], TOOLS),
    ("tool_call_dict_args", [
        {"role": "user", "content": "Wie ist das Wetter in München?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"unit": "celsius", "location": "München", "days": 3}}}]},
        {"role": "tool", "content": "{\"temp\": 21, \"sky\": \"sonnig ☀️\"}"},
        {"role": "assistant", "content": "Es ist sonnig, 21 °C."}], TOOLS),
    ("tool_calls_string_args_parallel", [
        {"role": "system", "content": "Use tools when needed."},
        {"role": "user", "content": "Weather in Paris and Tokyo, then search news."},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Paris\"}"}},
            {"type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"東京\"}"}}]},
        {"role": "tool", "content": "Paris: 18C"},
        {"role": "tool", "content": "東京: 25C"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "search", "arguments": {"z_last": 1, "q": "news", "a_first": [1, 2]}}}]},
        {"role": "tool", "content": "<tool_response>nested</tool_response>"}], TOOLS),
    ("tool_response_as_user_content", [
        {"role": "user", "content": "Start"},
        {"role": "assistant", "content": "<think>plan</think>calling", "tool_calls": [
            {"type": "function", "function": {"name": "search", "arguments": {"q": "x"}}}]},
        {"role": "tool", "content": "result"},
        {"role": "user", "content": "<tool_response>\nfake\n</tool_response>"}], TOOLS),
    ("non_ascii_and_special", [
        {"role": "system", "content": "Réponds en français. 😀"},
        {"role": "user", "content": "Ça va ? <|im_end|> inside text\n\n  spaces  "}], None),
    ("second_system_message", [
        {"role": "system", "content": "first"},
        {"role": "user", "content": "u1"},
        {"role": "system", "content": "second system"},
        {"role": "user", "content": "u2"}], None),
    ("assistant_last_prefill", [
        {"role": "user", "content": "Write a haiku"},
        {"role": "assistant", "content": "<think>\nfive seven five\n</think>\n\nAn old silent pond"}], None),
]

OPTION_SETS = [
    {"add_generation_prompt": True, "enable_thinking": None},
    {"add_generation_prompt": True, "enable_thinking": False},
    {"add_generation_prompt": True, "enable_thinking": True},
    {"add_generation_prompt": False, "enable_thinking": None},
]


def qwen3_dir(root):
    src = os.path.join(root, "adapters", "tokenizer", "testdata", "qwen3")
    tmp = tempfile.mkdtemp(prefix="qwen3tok")
    with gzip.open(os.path.join(src, "tokenizer.json.gz"), "rb") as f, open(os.path.join(tmp, "tokenizer.json"), "wb") as g:
        shutil.copyfileobj(f, g)
    shutil.copy(os.path.join(src, "tokenizer_config.json"), tmp)
    return tmp


def encode_golden(tok_path, strings, versions):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    cases = []
    for s in strings:
        enc = tok.encode(s)
        ids = enc.ids
        cases.append({"text": s, "ids": ids,
                      "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return {"source": "tokenizers.Tokenizer.from_file(...).encode(text) (add_special_tokens=True)",
            "versions": versions, "cases": cases}


def decode_golden(tok_path, versions):
    """Random id sequences (often splitting UTF-8 characters) and their decodes, both skip settings."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tok_path)
    size = tok.get_vocab_size(with_added_tokens=True)
    rng = random.Random(SEED + 1)
    cases = []
    for i in range(N_DECODE):
        n = rng.randint(1, 12)
        if i % 3 == 0:
            ids = [rng.randrange(size - 40, size) for _ in range(n)]  # late merges and added tokens
        else:
            ids = [rng.randrange(size) for _ in range(n)]
        cases.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False),
                      "decoded_skip_special": tok.decode(ids, skip_special_tokens=True)})
    return {"source": "tokenizers.Tokenizer.decode(ids, skip_special_tokens)", "versions": versions, "cases": cases}


def chat_golden(tok_dir, versions):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tok_dir, local_files_only=True)
    cases = []
    for name, messages, tools in CONVERSATIONS:
        for opts in OPTION_SETS:
            kwargs = {}
            if opts["enable_thinking"] is not None:
                kwargs["enable_thinking"] = opts["enable_thinking"]
            case = {"name": name, "messages": messages, "tools": tools,
                    "add_generation_prompt": opts["add_generation_prompt"], "enable_thinking": opts["enable_thinking"]}
            try:
                # Deep copies: apply_chat_template must not see (or alter) the objects written to the golden.
                text = tok.apply_chat_template(json.loads(json.dumps(messages)),
                                               tools=json.loads(json.dumps(tools)) if tools else None,
                                               add_generation_prompt=opts["add_generation_prompt"], tokenize=False,
                                               **kwargs)
                case["text"] = text
                case["ids"] = tok.encode(text, add_special_tokens=False)
            except Exception as e:  # recorded: the Go renderer must then fail too
                case["error"] = f"{type(e).__name__}: {e}"
            cases.append(case)
    return {"source": "transformers AutoTokenizer.from_pretrained(dir).apply_chat_template(..., tokenize=False)",
            "versions": versions, "cases": cases}


def write(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--root", default=".")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    strings = all_strings()
    print(f"{len(strings)} strings ({len(HAND)} hand-written), {len(CONVERSATIONS)} conversations x "
          f"{len(OPTION_SETS)} option sets", flush=True)
    if args.dry_run:
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import tokenizers
    versions = {"tokenizers": tokenizers.__version__, "python": sys.version.split()[0]}
    try:
        import transformers
        versions["transformers"] = transformers.__version__
    except Exception as e:  # keep the tokenizer goldens even if transformers is missing
        print("transformers unavailable:", e, flush=True)
    print("versions", versions, flush=True)
    os.makedirs(args.out, exist_ok=True)
    qdir = qwen3_dir(args.root)
    qtok = os.path.join(qdir, "tokenizer.json")
    hand = os.path.join(args.root, "adapters", "tokenizer", "testdata", "handmade", "tokenizer.json")
    demo = os.path.join(args.root, "models", "demo", "target", "tokenizer.json")
    jobs = [("qwen3_encode.json", lambda: encode_golden(qtok, strings, versions)),
            ("qwen3_decode.json", lambda: decode_golden(qtok, versions)),
            ("handmade_encode.json", lambda: encode_golden(hand, strings, versions)),
            ("handmade_decode.json", lambda: decode_golden(hand, versions))]
    if os.path.exists(demo):
        jobs.append(("demo_encode.json", lambda: encode_golden(demo, strings, versions)))
    if "transformers" in versions:
        jobs.append(("qwen3_chat.json", lambda: chat_golden(qdir, versions)))
    failed = False
    for name, job in jobs:
        try:
            write(os.path.join(args.out, name), job())
        except Exception:  # one failing golden must not cost the others (device time is scarce)
            traceback.print_exc()
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
