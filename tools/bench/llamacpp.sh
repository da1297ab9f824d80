#!/usr/bin/env bash
# Side by side with llama.cpp on the same weights (issue 15 item 4).
#
#   tools/bench/llamacpp.sh LLAMA_BUILD_DIR [options]
#
# LLAMA_BUILD_DIR is a llama.cpp CPU build the user made (this script builds nothing of llama.cpp): its bin/
# (or the directory itself) must hold llama-bench, and llama-simple for the greedy check. For each type it
# writes a dense Qwen3 synth whose weights GGUF stores exactly (`synth --dense --symmetric`: 8-bit → Q8_0,
# 4-bit → Q4_0, floats stored as F16 (`--f16`) → F16, all group 32), exports it (`export-gguf`, which refuses anything inexact), then
# measures on the same threads, one run:
#   llama.cpp  llama-bench: pp<ctx> (prefill tokens/s from empty), and at depth <ctx>: tg<n> (decode) and
#              pp16 (a 16-token batch: the cost of a 16-row verify)
#   higgs      bench --kernel-costs (prefill of <ctx> tokens, decode and verify(16) at context <ctx>), with the
#              exact and the fast CPU kernels
# and checks that both engines' greedy continuations of the same text prompt agree (llama-simple against
# `higgs-verify generate`, same tokenizer, same weights). One table comes out on stdout; the raw JSON of
# every run stays in --out.
#
# Options (defaults in brackets):
#   --out DIR          work directory [/tmp/higgs-llamacpp]
#   --threads LIST     threads for both engines, a comma list measured one after the other [2]
#   --types LIST       comma list of q8_0, q4_0, f16 [q8_0,q4_0,f16]
#   --kernels LIST     higgs CPU kernels to measure [exact,fast]
#   --wide W --layers L --vocab V   synth size [16, 20, the demo tokenizer's 4,093 ids: hidden 1024, 260M
#                      parameters]; a vocabulary past the tokenizer pads the GGUF with UNUSED tokens, which
#                      llama.cpp prints as nothing and higgs cannot decode, so the greedy check needs V = 4093
#   --context C        context/prefill tokens [128]   --gen N  decode tokens of tg [32]
#   --repeats R        llama-bench repetitions and higgs --cost-repeats [5]
#   --rounds N         measure both engines N times, alternating, and report each figure's median over the
#                      rounds [3] (on a shared machine a burst of other load then hits one round, not one engine)
#   --prompt TEXT      greedy-check prompt ["func main() {"]   --check-tokens N [32]
#   --higgs-verify BIN a prebuilt higgs-verify [build ./cmd/higgs-verify from this checkout]
#   --keep             keep the synth models and GGUF files (about 2.5 GB for the three types)
set -euo pipefail

die() { echo "llamacpp.sh: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || die "usage: $0 LLAMA_BUILD_DIR [--out DIR] [--threads N] [--types q8_0,q4_0,f16] ..."
LLAMA=$1; shift
OUT=/tmp/higgs-llamacpp THREADS=2 TYPES=q8_0,q4_0,f16 KERNELS=exact,fast
WIDE=16 LAYERS=20 VOCAB="" CTX=128 GEN=32 REPEATS=5 ROUNDS=3
PROMPT="func main() {" CHECK=32 HV="" KEEP=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--threads) THREADS=$2; shift 2 ;;
	--types) TYPES=$2; shift 2 ;;
	--kernels) KERNELS=$2; shift 2 ;;
	--wide) WIDE=$2; shift 2 ;;
	--layers) LAYERS=$2; shift 2 ;;
	--vocab) VOCAB=$2; shift 2 ;;
	--context) CTX=$2; shift 2 ;;
	--gen) GEN=$2; shift 2 ;;
	--repeats) REPEATS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--prompt) PROMPT=$2; shift 2 ;;
	--check-tokens) CHECK=$2; shift 2 ;;
	--higgs-verify) HV=$2; shift 2 ;;
	--keep) KEEP=1; shift ;;
	*) die "unknown option $1" ;;
	esac
done

bin() { # bin NAME: the llama.cpp binary NAME in the build directory
	for d in "$LLAMA/bin" "$LLAMA"; do [[ -x $d/$1 ]] && { echo "$d/$1"; return; }; done
	return 1
}
BENCH=$(bin llama-bench) || die "no llama-bench in $LLAMA or $LLAMA/bin (build it: cmake --build BUILD --target llama-bench llama-simple)"
SIMPLE=$(bin llama-simple || true)
[[ -n $SIMPLE ]] || echo "llamacpp.sh: no llama-simple in $LLAMA: skipping the greedy check" >&2
command -v python3 >/dev/null || die "python3 is needed to assemble the table"

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$OUT"
if [[ -z $HV ]]; then
	HV=$OUT/higgs-verify
	(cd "$ROOT" && go build -o "$HV" ./cmd/higgs-verify) || die "go build ./cmd/higgs-verify failed"
fi
TOKENIZER=$ROOT/models/demo/target
[[ -f $TOKENIZER/tokenizer.json ]] || die "no tokenizer at $TOKENIZER"
if [[ -z $VOCAB ]]; then # exactly the tokenizer's ids
	VOCAB=$(python3 -c 'import json, sys
t = json.load(open(sys.argv[1]))
print(1 + max(list(t["model"]["vocab"].values()) + [a["id"] for a in t["added_tokens"]]))' "$TOKENIZER/tokenizer.json")
fi

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

IFS=, read -ra types <<<"$TYPES"
IFS=, read -ra kernels <<<"$KERNELS"
IFS=, read -ra threads <<<"$THREADS"
for t in "${types[@]}"; do
	case $t in
	q8_0) synthq=(--bits 8 --group-size 32) ;;
	q4_0) synthq=(--bits 4 --group-size 32) ;;
	f16) synthq=(--f16) ;;
	*) die "type $t: want q8_0, q4_0 or f16" ;;
	esac
	dir=$OUT/synth-$t gguf=$OUT/synth-$t.gguf
	log "$t: synth (--dense --symmetric ${synthq[*]}, wide $WIDE, $LAYERS layers, vocab $VOCAB)"
	rm -rf "$dir" "$OUT/$t".*
	"$HV" synth --out "$dir" --dense --symmetric "${synthq[@]}" --wide "$WIDE" --layers "$LAYERS" \
		--vocab "$VOCAB" --tokenizer "$TOKENIZER" --json >"$OUT/$t.synth.json"
	log "$t: export-gguf"
	"$HV" export-gguf --model "$dir/target" --out "$gguf" --type "$t" --json >"$OUT/$t.export.json"

	for r in $(seq 1 "$ROUNDS"); do
		for th in "${threads[@]}"; do
			log "$t round $r/$ROUNDS, $th threads: llama-bench (pp$CTX; pp16 and tg$GEN at depth $CTX; $REPEATS repetitions)"
			"$BENCH" -m "$gguf" -t "$th" -r "$REPEATS" -p "$CTX" -n 0 -o json >"$OUT/$t.t$th.llama-prefill.$r.json" 2>"$OUT/$t.llama.log"
			"$BENCH" -m "$gguf" -t "$th" -r "$REPEATS" -d "$CTX" -p 16 -n "$GEN" -o json >"$OUT/$t.t$th.llama-depth.$r.json" 2>>"$OUT/$t.llama.log"
			for k in "${kernels[@]}"; do
				log "$t round $r/$ROUNDS, $th threads: higgs bench --kernel-costs --kernels $k"
				"$HV" bench --model "$dir/target" --draft "$dir/drafter" --threads "$th" --kernels "$k" \
					--tokens "$(seq -s, 101 108)" --max-tokens 8 --repeats 1 --warmup 0 \
					--kernel-costs --cost-context "$CTX" --cost-rows 16 --cost-repeats "$REPEATS" --json >"$OUT/$t.t$th.higgs-$k.$r.json"
			done
		done
	done
	if [[ -n $SIMPLE ]]; then
		log "$t: greedy check ($CHECK tokens)"
		"$SIMPLE" -m "$gguf" -n "$CHECK" "$PROMPT" >"$OUT/$t.llama-simple.txt" 2>"$OUT/$t.llama-simple.log"
		for k in "${kernels[@]}"; do
			"$HV" generate --model "$dir/target" --threads "${threads[0]}" --kernels "$k" --prompt "$PROMPT" \
				--max-tokens "$CHECK" --json >"$OUT/$t.higgs-$k.generate.json"
		done
	fi
	[[ $KEEP == 1 ]] || rm -f "$gguf"
done

python3 - "$OUT" "$TYPES" "$KERNELS" "$PROMPT" "$CTX" "$THREADS" "$ROUNDS" "$TOKENIZER/tokenizer.json" "$HV" <<'PY'
import json, subprocess, sys
out, types, kernels, prompt, ctx, threads, rounds, tokfile, hv = sys.argv[1:]
types, kernels, rounds, ctx = types.split(","), kernels.split(","), int(rounds), int(ctx)

def load(name):
    try:
        with open(f"{out}/{name}") as f:
            return json.load(f)
    except FileNotFoundError:
        return None

def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2

def ms(r):  # median wall time of one llama-bench test, in ms
    return median(r["samples_ns"]) / 1e6

# The bytes each token id stands for: byte-level BPE strings map back through GPT-2's byte-to-unicode table;
# added tokens are their UTF-8 content. llama-simple prints exactly these bytes, so the first token whose
# bytes differ is the first disagreement.
def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}

tok = json.load(open(tokfile))
dec = byte_decoder()
pieces = {i: bytes(dec[ch] for ch in s) for s, i in tok["model"]["vocab"].items()}
for a in tok["added_tokens"]:
    pieces[a["id"]] = a["content"].encode()

def top2_gap(model, kernels, tokens):
    """higgs's margin between its two best logits after tokens: a near-tie explains a disagreement."""
    r = subprocess.run([hv, "logits", "--model", model, "--kernels", kernels, "--tokens", ",".join(map(str, tokens)), "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    row = json.loads(r.stdout)["logits"][-1]
    a, b = sorted(row, reverse=True)[:2]
    return a - b

def agreement(g, llama, model, kernels):
    """How many of higgs's greedy tokens llama.cpp's output reproduces, byte for byte."""
    ids = g["tokens"]
    pos = len(prompt.encode())
    if llama[:pos] != prompt.encode():
        return "llama.cpp echoed another prompt"
    for n, i in enumerate(ids):
        p = pieces.get(i)
        if p is None:
            return f"{n} tokens, then id {i} outside the tokenizer"
        if llama[pos:pos + len(p)] != p:
            if pos == len(llama):
                return f"{n}/{len(ids)} tokens (llama.cpp stopped at an end token)"
            gap = top2_gap(model, kernels, g["prompt"] + ids[:n])
            return f"first {n}/{len(ids)} tokens" + ("" if gap is None else f" (then higgs's top-2 logits {gap:.4f} apart)")
        pos += len(p)
    return f"all {len(ids)}/{len(ids)} tokens" + ("" if pos == len(llama) else " (llama.cpp printed more)")

rows, cpu, hcpu = [], None, None
for t, th in [(t, th) for t in types for th in threads.split(",")]:
    ex, syn = load(f"{t}.export.json"), load(f"{t}.synth.json")
    label = f'{t} ({syn["params"]/1e6:.0f}M, {ex["bytes"]/1e6:.0f} MB{", exact" if ex["exact"] else ""}), {th} thr'
    dec, pre, v16 = [], [], []
    for r in range(1, rounds + 1):
        p = next(x for x in load(f"{t}.t{th}.llama-prefill.{r}.json") if x["n_gen"] == 0)
        d = load(f"{t}.t{th}.llama-depth.{r}.json")
        pp16 = next(x for x in d if x["n_prompt"] == 16 and x["n_gen"] == 0)
        tg = next(x for x in d if x["n_gen"] > 0)
        cpu = cpu or p["cpu_info"]
        dec.append(ms(tg) / tg["n_gen"])
        pre.append(p["n_prompt"] / ms(p) * 1e3)
        v16.append(ms(pp16))
    steps = median([v / d for v, d in zip(v16, dec)])
    llama = None
    try:
        with open(f"{out}/{t}.llama-simple.txt", "rb") as f:
            llama = f.read().rstrip(b"\n")
    except FileNotFoundError:
        pass
    rows.append((label, "llama.cpp", median(dec), median(pre), median(v16), steps, "(reference)", (min(dec), max(dec))))
    for k in kernels:
        hs = [load(f"{t}.t{th}.higgs-{k}.{r}.json")["costs"] for r in range(1, rounds + 1)]
        hcpu = hcpu or hs[0].get("cpu")
        hdec = [c["decode_ms_per_token"] for c in hs]
        hv16 = [next(v for v in c["verify"] if v["rows"] == 16) for c in hs]
        g = load(f"{t}.higgs-{k}.generate.json")
        agree = agreement(g, llama, f"{out}/synth-{t}/target", k) if g is not None and llama is not None else "—"
        rows.append((label, f"higgs {k}", median(hdec), median([c["prefill_tokens_per_s"] for c in hs]),
                     median([v["ms"] for v in hv16]), median([v["decode_steps"] for v in hv16]), agree, (min(hdec), max(hdec))))

print(f"\nllama.cpp CPU: {cpu}")
if hcpu:
    print("higgs CPU features: " + ", ".join(f"{k}={v}" for k, v in hcpu.items()))
print(f"prefill: {ctx} tokens from empty; decode and verify(16) at context {ctx}; medians of {rounds} alternating rounds")
print(f"greedy: {prompt!r} continued by llama-simple and by higgs-verify generate ({threads.split(',')[0]} threads), compared token by token\n")
hdr = ("model", "engine", "decode ms/token", "decode tokens/s", "prefill tokens/s", "verify(16) ms",
       "verify(16) decode steps", "greedy tokens = llama.cpp's", "decode ms range")
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {1e3 / r[2]:.1f} | {r[3]:.0f} | {r[4]:.1f} | {r[5]:.2f} | {r[6]} | {r[7][0]:.1f}–{r[7][1]:.1f} |")
PY

if [[ $KEEP != 1 ]]; then
	for t in "${types[@]}"; do rm -rf "${OUT:?}/synth-$t"; done
fi
