#!/usr/bin/env bash
# Side by side with llama.cpp on the same weights (issue 15 item 4).
#
#   tools/bench/llamacpp.sh LLAMA_BUILD_DIR [options]
#
# LLAMA_BUILD_DIR is a llama.cpp CPU build the user made (this script builds nothing of llama.cpp): its bin/
# (or the directory itself) must hold llama-bench, and llama-simple for the greedy check. For each type it
# writes a dense Qwen3 synth whose weights GGUF stores exactly (`synth --dense --symmetric`: 8-bit → Q8_0,
# 4-bit → Q4_0, floats → F16, all group 32), exports it (`export-gguf`, which refuses anything inexact), then
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
#   --threads N        threads for both engines [2]
#   --types LIST       comma list of q8_0, q4_0, f16 [q8_0,q4_0,f16]
#   --kernels LIST     higgs CPU kernels to measure [exact,fast]
#   --wide W --layers L --vocab V   synth size [16, 20, 16384: hidden 1024, about 300M parameters]
#   --context C        context/prefill tokens [128]   --gen N  decode tokens of tg [32]
#   --repeats R        llama-bench repetitions and higgs --cost-repeats [5]
#   --prompt TEXT      greedy-check prompt ["func main() {"]   --check-tokens N [32]
#   --higgs-verify BIN a prebuilt higgs-verify [build ./cmd/higgs-verify from this checkout]
#   --keep             keep the synth models and GGUF files (about 2.5 GB for the three types)
set -euo pipefail

die() { echo "llamacpp.sh: $*" >&2; exit 2; }

[[ $# -ge 1 ]] || die "usage: $0 LLAMA_BUILD_DIR [--out DIR] [--threads N] [--types q8_0,q4_0,f16] ..."
LLAMA=$1; shift
OUT=/tmp/higgs-llamacpp THREADS=2 TYPES=q8_0,q4_0,f16 KERNELS=exact,fast
WIDE=16 LAYERS=20 VOCAB=16384 CTX=128 GEN=32 REPEATS=5
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

log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

IFS=, read -ra types <<<"$TYPES"
IFS=, read -ra kernels <<<"$KERNELS"
for t in "${types[@]}"; do
	case $t in
	q8_0) synthq=(--bits 8 --group-size 32) ;;
	q4_0) synthq=(--bits 4 --group-size 32) ;;
	f16) synthq=() ;;
	*) die "type $t: want q8_0, q4_0 or f16" ;;
	esac
	dir=$OUT/synth-$t gguf=$OUT/synth-$t.gguf
	log "$t: synth (--dense --symmetric ${synthq[*]:-bf16}, wide $WIDE, $LAYERS layers, vocab $VOCAB)"
	rm -rf "$dir"
	"$HV" synth --out "$dir" --dense --symmetric "${synthq[@]}" --wide "$WIDE" --layers "$LAYERS" \
		--vocab "$VOCAB" --tokenizer "$TOKENIZER" --json >"$OUT/$t.synth.json"
	log "$t: export-gguf"
	"$HV" export-gguf --model "$dir/target" --out "$gguf" --type "$t" --json >"$OUT/$t.export.json"

	log "$t: llama-bench (prefill pp$CTX; pp16 and tg$GEN at depth $CTX; $THREADS threads, $REPEATS repetitions)"
	"$BENCH" -m "$gguf" -t "$THREADS" -r "$REPEATS" -p "$CTX" -n 0 -o json >"$OUT/$t.llama-prefill.json" 2>"$OUT/$t.llama-prefill.log"
	"$BENCH" -m "$gguf" -t "$THREADS" -r "$REPEATS" -d "$CTX" -p 16 -n "$GEN" -o json >"$OUT/$t.llama-depth.json" 2>"$OUT/$t.llama-depth.log"

	for k in "${kernels[@]}"; do
		log "$t: higgs bench --kernel-costs --kernels $k"
		"$HV" bench --model "$dir/target" --draft "$dir/drafter" --threads "$THREADS" --kernels "$k" \
			--tokens "$(seq -s, 101 108)" --max-tokens 8 --repeats 1 --warmup 0 \
			--kernel-costs --cost-context "$CTX" --cost-rows 16 --cost-repeats "$REPEATS" --json >"$OUT/$t.higgs-$k.json"
		if [[ -n $SIMPLE ]]; then
			"$HV" generate --model "$dir/target" --threads "$THREADS" --kernels "$k" --prompt "$PROMPT" \
				--max-tokens "$CHECK" --json >"$OUT/$t.higgs-$k.generate.json"
		fi
	done
	if [[ -n $SIMPLE ]]; then
		log "$t: llama-simple greedy check"
		"$SIMPLE" -m "$gguf" -n "$CHECK" "$PROMPT" >"$OUT/$t.llama-simple.txt" 2>"$OUT/$t.llama-simple.log"
	fi
	[[ $KEEP == 1 ]] || rm -rf "$dir" "$gguf"
done

python3 - "$OUT" "$TYPES" "$KERNELS" "$PROMPT" "$CTX" "$GEN" "$THREADS" <<'PY'
import json, sys
out, types, kernels, prompt, ctx, gen, threads = sys.argv[1:]
types, kernels = types.split(","), kernels.split(",")

def load(name):
    try:
        with open(f"{out}/{name}") as f:
            return json.load(f)
    except FileNotFoundError:
        return None

def common_prefix(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n

rows, cpu = [], None
for t in types:
    ex = load(f"{t}.export.json")
    syn = load(f"{t}.synth.json")
    pre = {r["n_prompt"]: r for r in load(f"{t}.llama-prefill.json")}
    dep = load(f"{t}.llama-depth.json")
    pp16 = next(r for r in dep if r["n_prompt"] == 16 and r["n_gen"] == 0)
    tg = next(r for r in dep if r["n_gen"] > 0)
    cpu = cpu or pre[int(ctx)]["cpu_info"]
    dec_ms = 1e3 / tg["avg_ts"]
    v16_ms = pp16["avg_ns"] / 1e6
    label = f'{t} ({syn["params"]/1e6:.0f}M, {ex["bytes"]/1e6:.0f} MB{", exact" if ex["exact"] else ""})'
    llama_txt = None
    try:
        with open(f"{out}/{t}.llama-simple.txt", "rb") as f:
            llama_txt = f.read().decode("utf-8", "replace").rstrip("\n")
    except FileNotFoundError:
        pass
    rows.append((label, "llama.cpp", dec_ms, tg["avg_ts"], pre[int(ctx)]["avg_ts"], v16_ms, v16_ms / dec_ms, "—"))
    for k in kernels:
        h = load(f"{t}.higgs-{k}.json")
        c = h["costs"]
        v16 = next(v for v in c["verify"] if v["rows"] == 16)
        agree = "—"
        g = load(f"{t}.higgs-{k}.generate.json")
        if g is not None and llama_txt is not None:
            ht = prompt + (g.get("text") or "")
            n = common_prefix(ht, llama_txt)
            full = min(len(ht), len(llama_txt))
            agree = "same" if ht == llama_txt else f"first {n - len(prompt)} of {full - len(prompt)} chars"
        rows.append((label, f"higgs {k}", c["decode_ms_per_token"], 1e3 / c["decode_ms_per_token"],
                     c["prefill_tokens_per_s"], v16["ms"], v16["decode_steps"], agree))

print(f"\nllama.cpp CPU: {cpu}; {threads} threads; prefill {ctx} tokens from empty; decode and verify(16) at context {ctx}")
print(f'greedy check: {prompt!r} + continuation, llama-simple vs higgs-verify generate\n')
hdr = ("model", "engine", "decode ms/token", "decode tokens/s", f"prefill tokens/s", "verify(16) ms", "verify(16) decode steps", "greedy text vs llama.cpp")
print("| " + " | ".join(hdr) + " |")
print("|" + "---|" * len(hdr))
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.2f} | {r[3]:.1f} | {r[4]:.0f} | {r[5]:.1f} | {r[6]:.2f} | {r[7]} |")
PY
