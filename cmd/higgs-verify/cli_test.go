package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/mlx"
	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app/models"
	"github.com/higgs-go/higgs/app/verify"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// fixtures are tiny random checkpoints shared by the tests (written once).
var fixtures struct {
	dense, hybrid, drafter, text string
}

func TestMain(m *testing.M) {
	runHogIfAsked() // the hog test's children are this test binary
	dir, err := os.MkdirTemp("", "higgs-verify-test")
	if err != nil {
		panic(err)
	}
	mk := func(name string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(p, 0o755); err != nil {
			panic(err)
		}
		return p
	}
	fixtures.dense, fixtures.hybrid, fixtures.drafter = mk("dense"), mk("hybrid"), mk("drafter")
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(synth.WriteTarget(fixtures.dense, synth.TargetSpec{Family: "qwen3", Seed: 1, EOS: []int32{3}}))
	must(synth.WriteTarget(fixtures.hybrid, synth.TargetSpec{Family: "qwen3_next", Seed: 2}))
	// A model with a tokenizer and chat template: testmodel's hand-made tokenizer and a vocabulary that matches it.
	fixtures.text = mk("text")
	must(synth.WriteTarget(fixtures.text, synth.TargetSpec{Family: "qwen3", Seed: 4, Vocab: testmodel.TokenizerVocab}))
	must(testmodel.CopyTokenizer(fixtures.text))
	must(synth.WriteDrafter(fixtures.drafter, synth.DrafterSpec{Seed: 3, Taps: []int{0, 2, 3}, NumTargetLayers: 36, Mask: 63, BlockSize: 8}))
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, &out, &errb, initModels)
	return result{code, out.String(), errb.String()}
}

// oneJSON decodes stdout as exactly one JSON object.
func oneJSON(t *testing.T, s string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	require.NoError(t, dec.Decode(v), "stdout: %s", s)
	var extra json.RawMessage
	assert.Error(t, dec.Decode(&extra), "stdout holds more than one JSON value")
}

type genOut struct {
	Tokens []int32 `json:"tokens"`
	Prompt []int32 `json:"prompt"`
	Rounds []struct {
		Block    []int32 `json:"block"`
		Accepted int     `json:"accepted"`
	} `json:"rounds"`
	Stats map[string]any `json:"stats"`
}

func TestGenerateWithAndWithoutDraft(t *testing.T) {
	for _, model := range []string{fixtures.dense, fixtures.hybrid} {
		t.Run(filepath.Base(model), func(t *testing.T) {
			ar := runCLI(t, "generate", "--model", model, "--tokens", "5,9,13", "--max-tokens", "24", "--json")
			require.Equal(t, 0, ar.code, ar.stderr)
			var a genOut
			oneJSON(t, ar.stdout, &a)
			for _, bs := range []string{"", "2", "4"} {
				args := []string{"generate", "--model", model, "--draft", fixtures.drafter, "--tokens", "5,9,13", "--max-tokens", "24", "--json"}
				if bs != "" {
					args = append(args, "--block-size", bs)
				}
				sp := runCLI(t, args...)
				require.Equal(t, 0, sp.code, sp.stderr)
				var s genOut
				oneJSON(t, sp.stdout, &s)
				assert.Equal(t, a.Tokens, s.Tokens, "block size %q", bs)
				require.NotEmpty(t, s.Rounds)
				seq := append(append([]int32{}, s.Prompt...), s.Tokens...)
				emitted := len(s.Prompt) + 1
				total := 0
				for i, r := range s.Rounds {
					require.NotEmpty(t, r.Block)
					assert.Equal(t, seq[emitted-1], r.Block[0], "round %d: block[0] is the last committed token", i)
					assert.LessOrEqual(t, r.Accepted, len(r.Block)-1)
					emitted += r.Accepted + 1
					total += r.Accepted
				}
				for _, k := range []string{"rounds", "mean_accepted", "tau"} {
					assert.Contains(t, s.Stats, k)
				}
				assert.InDelta(t, float64(total)/float64(len(s.Rounds)), s.Stats["mean_accepted"], 1e-9)
				assert.InDelta(t, float64(total)/float64(len(s.Rounds))+1, s.Stats["tau"], 1e-9)
			}
		})
	}
}

func TestGenerateSeededReproducible(t *testing.T) {
	args := []string{"generate", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2",
		"--max-tokens", "16", "--temperature", "0.8", "--seed", "42", "--json"}
	a, b := runCLI(t, args...), runCLI(t, args...)
	require.Equal(t, 0, a.code, a.stderr)
	var x, y genOut
	oneJSON(t, a.stdout, &x)
	oneJSON(t, b.stdout, &y)
	assert.Equal(t, x.Tokens, y.Tokens)
	assert.Len(t, x.Tokens, 16)
}

func TestStopIDs(t *testing.T) {
	ar := runCLI(t, "generate", "--model", fixtures.hybrid, "--tokens", "5", "--max-tokens", "20", "--json")
	require.Equal(t, 0, ar.code, ar.stderr)
	var a genOut
	oneJSON(t, ar.stdout, &a)
	stop := a.Tokens[5]
	first := 0
	for first < len(a.Tokens) && a.Tokens[first] != stop {
		first++
	}
	for _, draft := range []bool{false, true} {
		args := []string{"generate", "--model", fixtures.hybrid, "--tokens", "5", "--max-tokens", "20", "--json",
			"--stop-ids", strconv.Itoa(int(stop))}
		if draft {
			args = append(args, "--draft", fixtures.drafter)
		}
		r := runCLI(t, args...)
		require.Equal(t, 0, r.code, r.stderr)
		var g genOut
		oneJSON(t, r.stdout, &g)
		assert.Equal(t, a.Tokens[:first+1], g.Tokens, "draft %v: generation ends at the first stop token, included", draft)
	}
}

func TestLosslessCommand(t *testing.T) {
	prompts := filepath.Join(t.TempDir(), "prompts.json")
	require.NoError(t, os.WriteFile(prompts, []byte(`[[1,2,3],[7],{"tokens":[40,41,42,43]}]`), 0o644))
	r := runCLI(t, "lossless", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--prompts", prompts,
		"--max-tokens", "12", "--block-sizes", "2,4,8", "--rollback", "replay,recompute", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Pass  bool             `json:"pass"`
		Cases []map[string]any `json:"cases"`
	}
	oneJSON(t, r.stdout, &out)
	assert.True(t, out.Pass)
	assert.Len(t, out.Cases, 3*3*2)
}

func TestBenchCommand(t *testing.T) {
	r := runCLI(t, "bench", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "1,2,3",
		"--max-tokens", "8", "--repeats", "1", "--warmup", "0", "--block-sizes", "2,4", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out map[string]any
	oneJSON(t, r.stdout, &out)
	ar, ok := out["ar"].(map[string]any)
	require.True(t, ok)
	spec, ok := out["spec"].(map[string]any)
	require.True(t, ok)
	for _, k := range []string{"tokens_per_s", "ms_per_token"} {
		assert.Contains(t, ar, k)
	}
	for _, k := range []string{"tokens_per_s", "tau", "draft_ms_per_round", "verify_ms_per_round"} {
		assert.Contains(t, spec, k)
	}
	assert.Contains(t, out, "speedup")
	assert.Len(t, out["sweep"], 2)
	assert.Contains(t, out, "adaptive")
	// One prompt, one pass: each speedup is the single ratio against the autoregressive run of that pass.
	for _, v := range append([]any{spec, out["adaptive"]}, out["sweep"].([]any)...) {
		s := v.(map[string]any)
		assert.InDelta(t, s["tokens_per_s"].(float64)/ar["tokens_per_s"].(float64), s["speedup"].(float64), 1e-9)
		// The arms account for every round and all the round time.
		arms, ok := s["arms"].([]any)
		require.True(t, ok, "arms in %v", s)
		rounds, share := 0.0, 0.0
		for _, a := range arms {
			arm := a.(map[string]any)
			rounds += arm["rounds"].(float64)
			share += arm["time_share"].(float64)
			assert.LessOrEqual(t, arm["probes"].(float64), arm["rounds"].(float64), "arm %v", arm["arm"])
			assert.Regexp(t, `^(plain|chain \d+|tree \d+)$`, arm["arm"])
		}
		assert.Equal(t, s["rounds"], rounds)
		assert.InDelta(t, 1, share, 1e-9)
	}
	assert.Greater(t, ar["step_ms"].(float64), 0.0)

	// The text lists the adaptive row's arms under it.
	r = runCLI(t, "bench", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "1,2,3", "--max-tokens", "8",
		"--repeats", "1", "--warmup", "0", "--adaptive")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `(?m)^    arms \(ms of draft, verify and rollback; an autoregressive step: [0-9.]+ ms\)$`, r.stdout)
	assert.Regexp(t, `(?m)^    plain +\d+ rounds \(\d+ probing\) tau +1\.00 `, r.stdout)
}

func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no subcommand", nil, 2, "subcommand"},
		{"unknown flag", []string{"generate", "--bogus"}, 2, "unknown flag"},
		{"missing model", []string{"generate", "--model", "/nonexistent/x", "--tokens", "1"}, 2, "/nonexistent/x"},
		{"bad tokens", []string{"generate", "--model", fixtures.dense, "--tokens", "1,x"}, 2, "not a non-negative integer"},
		{"token outside vocab", []string{"generate", "--model", fixtures.dense, "--tokens", "64"}, 2, "outside this model's vocabulary of 64"},
		{"block size out of range", []string{"generate", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "1", "--block-size", "16777216"}, 2, "block_size 16777216 exceeds this model's context length"},
		{"mlx backend", []string{"generate", "--model", fixtures.dense, "--tokens", "1", "--backend", "mlx"}, 2, "MLX backend not available"},
		{"parity with mlx", []string{"parity", "--model", fixtures.dense, "--tokens", "1", "--a", "cpu", "--b", "mlx"}, 2, "MLX backend not available"},
		{"prompt without tokenizer", []string{"generate", "--model", fixtures.dense, "--prompt", "hi"}, 2, "no tokenizer.json"},
		{"lossless without drafter", []string{"lossless", "--model", fixtures.dense, "--tokens", "1"}, 2, "needs a drafter"},
		{"bench with zero tokens", []string{"bench", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "1", "--max-tokens", "0"}, 2, "--max-tokens 0"},
		{"bench with zero repeats", []string{"bench", "--model", fixtures.dense, "--draft", fixtures.drafter, "--tokens", "1", "--repeats", "0"}, 2, "--repeats 0"},
		{"max tokens past the context", []string{"generate", "--model", fixtures.dense, "--tokens", "1,2", "--max-tokens", "511"}, 2, "max tokens 511 is too large"},
		{"drafter for another hidden size", []string{"generate", "--model", fixtures.dense, "--draft", fixtures.dense, "--tokens", "1"}, 2, "not a DFlash drafter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.msg, "MLX") && mlx.Available() == nil {
				t.Skip("libmlxc is available here: the MLX backend runs")
			}
			r := runCLI(t, tc.args...)
			assert.Equal(t, tc.code, r.code)
			assert.Empty(t, r.stdout)
			assert.Contains(t, r.stderr, tc.msg)
			assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line on stderr: %q", r.stderr)
		})
	}
}

func TestAutoBackendFallsBack(t *testing.T) {
	r := runCLI(t, "generate", "--model", fixtures.dense, "--tokens", "1", "--max-tokens", "2", "--backend", "auto", "--json", "--log-level", "info")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "auto backend falls back to cpu")
	var g genOut
	oneJSON(t, r.stdout, &g)
	assert.Len(t, g.Tokens, 2)
}

func TestLogitsCommand(t *testing.T) {
	r := runCLI(t, "logits", "--model", fixtures.hybrid, "--tokens", "17,25,3", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Model   string      `json:"model"`
		Backend string      `json:"backend"`
		Tokens  []int32     `json:"tokens"`
		Logits  [][]float32 `json:"logits"`
	}
	oneJSON(t, r.stdout, &out)
	assert.Equal(t, "cpu", out.Backend)
	assert.Equal(t, []int32{17, 25, 3}, out.Tokens)
	require.Len(t, out.Logits, 3)
	for _, row := range out.Logits {
		assert.Len(t, row, 64)
	}
}

func TestParityCommand(t *testing.T) {
	r := runCLI(t, "parity", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2,3,4,5",
		"--a", "cpu", "--b", "cpu", "--b-threads", "1", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out map[string]any
	oneJSON(t, r.stdout, &out)
	assert.Equal(t, true, out["pass"])
	for _, k := range []string{"max_abs", "max_rel", "argmax_agree", "tap_max_abs", "continuation_match", "replay_a", "replay_b"} {
		assert.Contains(t, out, k)
	}
	// cpu-fast names the cpu backend with --kernels fast (these weights are not 4-bit, so it changes no bits).
	r = runCLI(t, "parity", "--model", fixtures.hybrid, "--tokens", "1,2,3", "--a", "cpu", "--b", "cpu-fast", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var sides struct {
		A, B struct{ Backend string }
	}
	oneJSON(t, r.stdout, &sides)
	assert.Equal(t, "cpu", sides.A.Backend)
	assert.Equal(t, "cpu-fast", sides.B.Backend)
	r = runCLI(t, "parity", "--model", fixtures.hybrid, "--tokens", "1", "--a", "cpu", "--b", "gpu")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "want cpu, cpu-fast or mlx")
	// Two different weight sets fail the check: exit 1, the JSON still printed.
	r = runCLI(t, "parity", "--model", fixtures.hybrid, "--b-model", fixtures.dense, "--tokens", "1,2,3", "--a", "cpu", "--b", "cpu", "--json")
	assert.Equal(t, 1, r.code, r.stderr)
	oneJSON(t, r.stdout, &out)
	assert.Equal(t, false, out["pass"])
}

func TestPromptTextAndChat(t *testing.T) {
	tok := runCLI(t, "tokenize", "--tokenizer", fixtures.text, "--text", "hello world", "--json")
	require.Equal(t, 0, tok.code, tok.stderr)
	var ids struct {
		IDs []int32 `json:"ids"`
	}
	oneJSON(t, tok.stdout, &ids)
	require.NotEmpty(t, ids.IDs)

	gen := runCLI(t, "generate", "--model", fixtures.text, "--prompt", "hello world", "--max-tokens", "4", "--json")
	require.Equal(t, 0, gen.code, gen.stderr)
	var g struct {
		genOut
		Text *string `json:"text"`
	}
	oneJSON(t, gen.stdout, &g)
	assert.Equal(t, ids.IDs, g.Prompt, "--prompt is encoded like tokenize --text")
	assert.NotNil(t, g.Text)

	chat := filepath.Join(t.TempDir(), "chat.json")
	require.NoError(t, os.WriteFile(chat, []byte(`{"messages":[{"role":"user","content":"hello world"}]}`), 0o644))
	tok = runCLI(t, "tokenize", "--tokenizer", fixtures.text, "--chat", chat, "--json")
	require.Equal(t, 0, tok.code, tok.stderr)
	var chatIDs struct {
		Text string  `json:"text"`
		IDs  []int32 `json:"ids"`
	}
	oneJSON(t, tok.stdout, &chatIDs)
	gen = runCLI(t, "generate", "--model", fixtures.text, "--prompt", "hello world", "--chat", "--max-tokens", "4", "--json")
	require.Equal(t, 0, gen.code, gen.stderr)
	oneJSON(t, gen.stdout, &g)
	assert.Equal(t, chatIDs.IDs, g.Prompt, "--prompt --chat is rendered and encoded like tokenize --chat")

	r := runCLI(t, "tokenize", "--tokenizer", fixtures.text, "--json")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "exactly one of --text and --chat")
}

// TestSynthF16 writes the same symmetric dense synth with F16 and with BF16 weights (--symmetric makes every
// float exact in both): the F16 Linears the CPU backend then streams compute the same bits, so greedy decoding
// gives the same tokens; --f32 with --f16 is refused.
func TestSynthF16(t *testing.T) {
	tokens := map[string][]int{}
	for _, dtype := range []string{"f16", "bf16"} {
		dir := t.TempDir()
		args := []string{"synth", "--out", dir, "--wide", "2", "--layers", "2", "--vocab", "256", "--dense", "--symmetric", "--json"}
		if dtype == "f16" {
			args = append(args, "--f16")
		}
		r := runCLI(t, args...)
		require.Equal(t, 0, r.code, r.stderr)
		var out struct{ Target, DType string }
		oneJSON(t, r.stdout, &out)
		assert.Equal(t, dtype, out.DType)
		r = runCLI(t, "generate", "--model", out.Target, "--tokens", "1,2,3,4,5", "--max-tokens", "12", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var g struct{ Tokens []int }
		oneJSON(t, r.stdout, &g)
		require.Len(t, g.Tokens, 12, dtype)
		tokens[dtype] = g.Tokens
	}
	assert.Equal(t, tokens["bf16"], tokens["f16"])
	r := runCLI(t, "synth", "--out", t.TempDir(), "--f32", "--f16")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--f32 and --f16 exclude each other")
}

// TestSynthCommand writes a small random hybrid in bf16 and 4-bit; bench runs on it and reports its figures.
func TestSynthCommand(t *testing.T) {
	for _, bits := range []string{"0", "4"} {
		dir := t.TempDir()
		r := runCLI(t, "synth", "--out", dir, "--wide", "2", "--layers", "4", "--vocab", "256", "--bits", bits,
			"--group-size", "32", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var out struct {
			Target, Drafter, DType string
			Params                 int64
			Layers, Hidden, Vocab  int
		}
		oneJSON(t, r.stdout, &out)
		assert.Equal(t, 4, out.Layers)
		assert.Equal(t, 128, out.Hidden)
		assert.Equal(t, 256, out.Vocab)
		assert.Equal(t, int64(922960), out.Params, "bits %s: the same logical weights either way", bits)
		if bits == "4" {
			assert.Equal(t, "q4/g32", out.DType)
		} else {
			assert.Equal(t, "bf16", out.DType)
		}
		r = runCLI(t, "bench", "--model", out.Target, "--draft", out.Drafter, "--tokens", "1,2,3,4,5",
			"--max-tokens", "6", "--repeats", "1", "--warmup", "0", "--block-sizes", "2", "--json")
		require.Equal(t, 0, r.code, r.stderr)
		var b map[string]any
		oneJSON(t, r.stdout, &b)
		assert.Contains(t, b, "adaptive")
	}
	r := runCLI(t, "synth", "--wide", "0", "--bits", "3", "--group-size", "7")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "output directory is required")
	assert.Contains(t, r.stderr, "wide 0")
	assert.Contains(t, r.stderr, "group")
}

// A panic anywhere below the command line (here in the model loader) still ends with exit 2, one line on
// stderr and nothing on stdout.
func TestPanicIsOneLineExit2(t *testing.T) {
	boom := func(context.Context, models.ModelConfig, zerolog.Logger) (*models.Models, func(), error) {
		panic("index out of range [9] with length 4")
	}
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"logits", "--tokens", "1,2", "--json"}, &out, &errb, boom)
	assert.Equal(t, 2, code)
	assert.Empty(t, out.String())
	assert.Equal(t, 1, strings.Count(errb.String(), "\n"), "one line: %q", errb.String())
	assert.Contains(t, errb.String(), "internal error")
	assert.Contains(t, errb.String(), "index out of range [9] with length 4")
}

// A result JSON cannot encode (NaN logits from a corrupt checkpoint) is exit 2 with a reason, and stdout stays
// empty rather than holding half an object.
func TestNonFiniteResultIsBadInput(t *testing.T) {
	c := &cli{stdout: new(bytes.Buffer)}
	err := c.emit(true, map[string]any{"logits": [][]float32{{1, float32(math.NaN())}}}, nil)
	require.ErrorIs(t, err, verify.ErrBadInput)
	assert.Contains(t, err.Error(), "NaN")
	assert.Empty(t, c.stdout.(*bytes.Buffer).String())
}

// TestSampledBenchAndLossless: bench at --temperature reports the sampling and the verification, lossless at
// --temperature under match adds the seeded comparison, and an unknown --verify is bad usage.
func TestSampledBenchAndLossless(t *testing.T) {
	r := runCLI(t, "bench", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2,3",
		"--max-tokens", "8", "--repeats", "1", "--warmup", "0", "--temperature", "0.7", "--seed", "5", "--verify", "residual", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var b map[string]any
	oneJSON(t, r.stdout, &b)
	assert.Equal(t, 0.7, b["temperature"])
	assert.Equal(t, "residual", b["verify"])
	assert.Contains(t, b["spec"], "tau")

	r = runCLI(t, "lossless", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2,3",
		"--max-tokens", "8", "--block-sizes", "2,4", "--temperature", "0.7", "--samples", "20", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var l struct {
		Pass        bool             `json:"pass"`
		Verify      string           `json:"verify"`
		SeededCases []map[string]any `json:"seeded_cases"`
	}
	oneJSON(t, r.stdout, &l)
	assert.True(t, l.Pass)
	assert.Equal(t, "match", l.Verify, "match is the default")
	assert.Len(t, l.SeededCases, 2*2)

	r = runCLI(t, "generate", "--model", fixtures.hybrid, "--tokens", "1", "--verify", "maybe")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `unknown verification "maybe"`)
}

// TestBenchMultiTurn: bench --multi-turn reports per turn the time to first token with the prefix cache off
// and on, the reused length (from the second turn on, the whole conversation but the last answer's final
// token and the new user turn), the same output on both sides, and τ on the last turn.
func TestBenchMultiTurn(t *testing.T) {
	r := runCLI(t, "bench", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2,3,4,5",
		"--max-tokens", "6", "--repeats", "1", "--warmup", "0", "--multi-turn", "--system-tokens", "40", "--turns", "3",
		"--prefix-cache-every", "16", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		Spec      map[string]any `json:"spec"`
		MultiTurn struct {
			Turns []struct {
				Turn         int     `json:"turn"`
				PromptTokens int     `json:"prompt_tokens"`
				CachedTokens int     `json:"cached_tokens"`
				TTFTMsOff    float64 `json:"ttft_ms_off"`
				TTFTMsOn     float64 `json:"ttft_ms_on"`
				Same         bool    `json:"same_output"`
			} `json:"turns"`
			SystemTokens int     `json:"system_tokens"`
			TauLastOn    float64 `json:"tau_last_on"`
			TauLastOff   float64 `json:"tau_last_off"`
		} `json:"multi_turn"`
	}
	oneJSON(t, r.stdout, &out)
	assert.NotEmpty(t, out.Spec, "the classic figures stay")
	mt := out.MultiTurn
	require.Len(t, mt.Turns, 3)
	assert.Equal(t, 40, mt.SystemTokens)
	for i, tn := range mt.Turns {
		assert.True(t, tn.Same, "turn %d: the cache changed the output", i+1)
		assert.Positive(t, tn.TTFTMsOff)
		assert.Positive(t, tn.TTFTMsOn)
	}
	assert.Zero(t, mt.Turns[0].CachedTokens, "the first turn finds a cold cache")
	for _, tn := range mt.Turns[1:] {
		// The conversation so far but the last answer's final token, which the session never held, and the
		// new 5-token user turn.
		assert.Equal(t, tn.PromptTokens-1-5, tn.CachedTokens, "turn %d reuses the previous turn's generation end", tn.Turn)
	}
	assert.Equal(t, mt.TauLastOff, mt.TauLastOn, "the restored drafter drafts as the cold one")
}

// TestBenchMultiTurnDisk: with --prefix-cache-dir, each turn also runs from the disk tier after a simulated
// restart: from the second turn on it restores what the cache-on side does, generates the cache-off side's
// tokens, and the bench reports the tier's bytes per cached token; its directory is removed afterwards.
func TestBenchMultiTurnDisk(t *testing.T) {
	dir := t.TempDir()
	r := runCLI(t, "bench", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2,3,4,5",
		"--max-tokens", "6", "--repeats", "1", "--warmup", "0", "--multi-turn", "--system-tokens", "40", "--turns", "3",
		"--prefix-cache-every", "16", "--prefix-cache-dir", dir, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	var out struct {
		MultiTurn struct {
			Turns []struct {
				Turn             int     `json:"turn"`
				CachedTokens     int     `json:"cached_tokens"`
				DiskCachedTokens int     `json:"disk_cached_tokens"`
				TTFTMsDisk       float64 `json:"ttft_ms_disk"`
				DiskSame         *bool   `json:"disk_same_output"`
			} `json:"turns"`
			DiskBytes         int64   `json:"disk_bytes"`
			DiskBytesPerToken float64 `json:"disk_bytes_per_token"`
		} `json:"multi_turn"`
	}
	oneJSON(t, r.stdout, &out)
	mt := out.MultiTurn
	require.Len(t, mt.Turns, 3)
	for _, tn := range mt.Turns {
		require.NotNil(t, tn.DiskSame, "turn %d", tn.Turn)
		assert.True(t, *tn.DiskSame, "turn %d: the disk tier changed the output", tn.Turn)
		assert.Positive(t, tn.TTFTMsDisk)
	}
	assert.Zero(t, mt.Turns[0].DiskCachedTokens)
	for _, tn := range mt.Turns[1:] {
		assert.Equal(t, tn.CachedTokens, tn.DiskCachedTokens, "turn %d restores from disk what memory gives", tn.Turn)
	}
	assert.Positive(t, mt.DiskBytes)
	assert.Positive(t, mt.DiskBytesPerToken)
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, left, "the bench's directory is removed")

	r = runCLI(t, "bench", "--model", fixtures.hybrid, "--draft", fixtures.drafter, "--tokens", "1,2,3", "--max-tokens", "2",
		"--repeats", "1", "--warmup", "0", "--multi-turn", "--system-tokens", "8", "--turns", "1",
		"--prefix-cache-dir", dir, "--prefix-cache-disk-bytes", "0")
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "--prefix-cache-disk-bytes 0")
}
