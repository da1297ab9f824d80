package serve

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// newOpsServe is a ready Serve over the fake engine with cfg (MaxConcurrency and QueueSize filled in).
func newOpsServe(t *testing.T, cfg ServeConfig, ctxLen int, noEOS bool, edit func(*Engine)) *Serve {
	t.Helper()
	cfg.MaxConcurrency, cfg.QueueSize = max(cfg.MaxConcurrency, 1), max(cfg.QueueSize, 4)
	s, err := NewServe(cfg, zerolog.Nop())
	require.NoError(t, err)
	eng, _ := srvEngine(ctxLen, 0, noEOS)
	if edit != nil {
		edit(&eng)
	}
	require.NoError(t, s.SetEngine(eng))
	return s
}

// TestDefaultMaxTokens: a request without max_tokens stops at the operator's default, else the model's
// generation config's max_new_tokens, else FallbackMaxTokens, never past the context; -1 restores "up to the
// context"; a request's own max_tokens always wins.
func TestDefaultMaxTokens(t *testing.T) {
	cases := []struct {
		name         string
		flag, ctxLen int
		maxNew       int
		asked        int
		want         int
	}{
		{"flag", 7, 4096, 0, 0, 7},
		{"flag over the model's", 7, 4096, 5, 0, 7},
		{"generation config", 0, 4096, 5, 0, 5},
		{"fallback", 0, 4096, 0, 0, FallbackMaxTokens},
		{"capped by the context", 0, 40, 0, 0, 40 - 8},
		{"none", -1, 40, 0, 0, 40 - 8},
		{"request wins", 7, 4096, 5, 11, 11},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newOpsServe(t, ServeConfig{DefaultMaxTokens: c.flag}, c.ctxLen, true, func(e *Engine) { e.MaxNewTokens = c.maxNew })
			res, err := s.Generate(t.Context(), ports.GenerateRequest{Prompt: "abcdefgh", MaxTokens: c.asked}, nil)
			require.NoError(t, err)
			assert.Equal(t, c.want, res.CompletionTokens)
			assert.Equal(t, "length", res.FinishReason)
			card := map[bool]int{true: c.flag, false: c.maxNew}[c.flag != 0]
			switch {
			case card < 0:
				card = 0
			case card == 0:
				card = FallbackMaxTokens
			}
			assert.Equal(t, card, s.Models()[0].DefaultMaxTokens, "the card states the default")
		})
	}
}

// TestContextLengthCap: --context-length lowers the model's context for every request and the card; a
// value above the model's is refused when the engine is set.
func TestContextLengthCap(t *testing.T) {
	s := newOpsServe(t, ServeConfig{ContextLength: 20, DefaultMaxTokens: -1}, 4096, true, nil)
	assert.Equal(t, 20, s.Models()[0].ContextLength)
	res, err := s.Generate(t.Context(), ports.GenerateRequest{Prompt: "abcdefgh"}, nil)
	require.NoError(t, err)
	assert.Equal(t, 12, res.CompletionTokens, "prompt and output fill the capped context")
	_, err = s.Generate(t.Context(), ports.GenerateRequest{Prompt: "abcdefgh", MaxTokens: 13}, nil)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "max_tokens", re.Param)
	assert.Contains(t, re.Message, "20 tokens")
	tok, err := s.Tokenize(t.Context(), ports.GenerateRequest{Prompt: "ab"}, true)
	require.NoError(t, err)
	assert.Equal(t, 20, tok.MaxModelLen)

	big, err := NewServe(ServeConfig{ContextLength: 5000, MaxConcurrency: 1}, zerolog.Nop())
	require.NoError(t, err)
	eng, _ := srvEngine(4096, 0, true)
	err = big.SetEngine(eng)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--context-length 5000 exceeds the model's context length of 4096 tokens")
	assert.False(t, big.Ready())
}

// TestModelCard: the card states the backend, kernels, drafter, speculation mode, block size and context.
func TestModelCard(t *testing.T) {
	edit := func(e *Engine) {
		e.Backend, e.Kernels, e.DrafterName, e.DrafterGeneration = "cpu", "fast", "toy/drafter", "DFlash2"
	}
	card := newOpsServe(t, ServeConfig{Adaptive: true}, 4096, false, edit).Models()[0]
	assert.Equal(t, ports.ModelCard{ID: "toy", Created: 1700000000, OwnedBy: "higgs", Backend: "cpu", Kernels: "fast",
		ContextLength: 4096, DefaultMaxTokens: FallbackMaxTokens, Speculation: ports.SpeculationAdaptive, BlockSize: 4,
		Drafter: &ports.DrafterCard{Name: "toy/drafter", Generation: "DFlash2", BlockSize: 4}}, card)

	fixed := newOpsServe(t, ServeConfig{BlockSize: 3}, 4096, false, edit).Models()[0]
	assert.Equal(t, ports.SpeculationFixed, fixed.Speculation)
	assert.Equal(t, 3, fixed.BlockSize)
	assert.Equal(t, 4, fixed.Drafter.BlockSize, "the drafter's own block size")

	off := newOpsServe(t, ServeConfig{Adaptive: true, BlockSize: 1}, 4096, false, nil).Models()[0]
	assert.Equal(t, ports.SpeculationOff, off.Speculation)
	noDrafter := newOpsServe(t, ServeConfig{}, 4096, false, func(e *Engine) { e.Drafter = nil }).Models()[0]
	assert.Equal(t, ports.SpeculationOff, noDrafter.Speculation)
	assert.Nil(t, noDrafter.Drafter)
}

func TestBackendCardAndDrafterName(t *testing.T) {
	for in, want := range map[string][2]string{"cpu": {"cpu", "exact"}, "cpu-fast": {"cpu", "fast"}, "mlx": {"mlx", ""}} {
		b, k := backendCard(in)
		assert.Equal(t, want, [2]string{b, k}, in)
	}
	assert.Equal(t, "z-lab/Qwen3-4B-DFlash-b16", servedDrafterName("/h/.cache/huggingface/hub/models--z-lab--Qwen3-4B-DFlash-b16/snapshots/0123abc"))
	assert.Equal(t, "gocoder/drafter", servedDrafterName("/repo/models/gocoder/drafter/"))
	assert.Equal(t, "my-drafter", servedDrafterName("/srv/my-drafter"))
	assert.Empty(t, servedDrafterName(""))
}

// TestTokenizeDetokenize: the ids are those Generate prefills (the chat template's rendering for messages),
// and detokenize turns them back.
func TestTokenizeDetokenize(t *testing.T) {
	s := newOpsServe(t, ServeConfig{}, 4096, false, nil)
	got, err := s.Tokenize(t.Context(), ports.GenerateRequest{Prompt: "hello"}, true)
	require.NoError(t, err)
	assert.Equal(t, ports.Tokenized{Tokens: srvTokens("hello"), MaxModelLen: 4096}, got)
	msgs := []ports.ChatMessage{{Role: "user", Content: "hi"}}
	got, err = s.Tokenize(t.Context(), ports.GenerateRequest{Messages: msgs}, true)
	require.NoError(t, err)
	assert.Equal(t, srvTokens("[user]: hi\n[assistant]: "), got.Tokens)
	n, err := s.CountTokens(t.Context(), ports.GenerateRequest{Messages: msgs})
	require.NoError(t, err)
	assert.Len(t, got.Tokens, n)

	_, err = s.Tokenize(t.Context(), ports.GenerateRequest{Prompt: "hello"}, false)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re, "the toy tokenizer cannot leave its special tokens out")
	assert.Equal(t, "add_special_tokens", re.Param)
	_, err = s.Tokenize(t.Context(), ports.GenerateRequest{Model: "other", Prompt: "x"}, true)
	assert.ErrorIs(t, err, ports.ErrUnknownModel)

	text, err := s.Detokenize(t.Context(), "", append(srvTokens("hello"), srvEOS))
	require.NoError(t, err)
	assert.Equal(t, "hello<|end|>", text, "special tokens are kept")
	_, err = s.Detokenize(t.Context(), "toy", []ports.Token{1, 999})
	require.ErrorAs(t, err, &re)
	assert.Equal(t, "tokens", re.Param)
	assert.Contains(t, re.Message, "tokens[1] = 999")

	notReady, err := NewServe(ServeConfig{MaxConcurrency: 1}, zerolog.Nop())
	require.NoError(t, err)
	_, err = notReady.Detokenize(t.Context(), "", nil)
	assert.ErrorIs(t, err, ports.ErrNotReady)
}

// TestRequestLogLine: every generation request, served or refused, writes exactly one info-level line with
// the operator's figures, and nothing else is logged at info per request.
func TestRequestLogLine(t *testing.T) {
	var buf bytes.Buffer
	s, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 4, Adaptive: true}, zerolog.New(&buf).Level(zerolog.InfoLevel))
	require.NoError(t, err)
	eng, _ := srvEngine(4096, 0, true)
	require.NoError(t, s.SetEngine(eng))
	buf.Reset() // the engine-ready line
	_, err = s.Generate(t.Context(), ports.GenerateRequest{ID: "req-1", Prompt: "abcdefgh", MaxTokens: 9}, nil)
	require.NoError(t, err)
	_, err = s.Generate(t.Context(), ports.GenerateRequest{ID: "req-2", Prompt: "abc", MaxTokens: -1}, nil)
	require.Error(t, err)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, buf.String())
	var ok, bad map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &ok))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &bad))
	for _, k := range []string{"ttft", "tokens_per_s", "tau", "policy", "duration"} {
		assert.Contains(t, ok, k)
	}
	assert.Equal(t, "info", ok["level"])
	assert.Equal(t, "request", ok["message"])
	assert.Equal(t, "req-1", ok["id"])
	assert.Equal(t, "toy", ok["model"])
	assert.EqualValues(t, 8, ok["prompt_tokens"])
	assert.EqualValues(t, 0, ok["cached_tokens"])
	assert.EqualValues(t, 9, ok["completion_tokens"])
	assert.Equal(t, "length", ok["finish"])
	assert.Equal(t, "req-2", bad["id"])
	assert.Equal(t, "invalid", bad["finish"])
	assert.Contains(t, bad["error"], "max_tokens")
	assert.NotContains(t, bad, "ttft")
}

// TestTokenizeHTTP drives /tokenize, /detokenize and /v1/models over HTTP as vLLM's and llama.cpp's clients
// send them, and reads the model entry with the official OpenAI SDK.
func TestTokenizeHTTP(t *testing.T) {
	h := newHarness(t, harnessOpts{apiKey: "k"})
	auth := map[string]string{"Authorization": "Bearer k"}

	status, _, body := h.do("POST", "/tokenize", `{"model":"toy","prompt":"hello"}`, auth)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.JSONEq(t, `{"tokens":[8,5,12,12,15],"count":5,"max_model_len":4096}`, string(body))

	status, _, body = h.do("POST", "/tokenize", `{"content":"hello","add_special":true}`, auth)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.JSONEq(t, `{"tokens":[8,5,12,12,15],"count":5,"max_model_len":4096}`, string(body), "llama.cpp's spelling")

	status, _, body = h.do("POST", "/tokenize", `{"model":"toy","messages":[{"role":"user","content":"hi"}],"add_special_tokens":false}`, auth)
	require.Equal(t, http.StatusOK, status, string(body))
	var tok struct {
		Tokens []ports.Token `json:"tokens"`
		Count  int           `json:"count"`
	}
	require.NoError(t, json.Unmarshal(body, &tok))
	assert.Equal(t, srvTokens("[user]: hi\n[assistant]: "), tok.Tokens)
	assert.Equal(t, len(tok.Tokens), tok.Count)

	status, _, body = h.do("POST", "/detokenize", `{"model":"toy","tokens":[8,5,12,12,15]}`, auth)
	require.Equal(t, http.StatusOK, status, string(body))
	assert.JSONEq(t, `{"prompt":"hello","content":"hello"}`, string(body))

	for _, c := range []struct{ path, body, param string }{
		{"/tokenize", `{"prompt":"a","messages":[{"role":"user","content":"b"}]}`, "messages"},
		{"/tokenize", `{"model":"toy"}`, "prompt"},
		{"/tokenize", `{"prompt":"a","return_token_strs":true}`, "return_token_strs"},
		{"/tokenize", `{"messages":[{"role":"user","content":"b"}],"add_generation_prompt":false}`, "add_generation_prompt"},
		{"/detokenize", `{"model":"toy"}`, "tokens"},
		{"/detokenize", `{"tokens":[1,99999]}`, "tokens"},
	} {
		status, _, body = h.do("POST", c.path, c.body, auth)
		assert.Equal(t, http.StatusBadRequest, status, "%s %s: %s", c.path, c.body, body)
		var e struct {
			Error struct{ Param string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &e))
		assert.Equal(t, c.param, e.Error.Param, "%s %s", c.path, c.body)
	}
	status, _, _ = h.do("POST", "/tokenize", `{"model":"nope","prompt":"a"}`, auth)
	assert.Equal(t, http.StatusNotFound, status)
	status, _, _ = h.do("POST", "/tokenize", `{"prompt":"a"}`, nil)
	assert.Equal(t, http.StatusUnauthorized, status, "the API key guards /tokenize")
	status, hdr, _ := h.do("GET", "/detokenize", ``, auth)
	assert.Equal(t, http.StatusMethodNotAllowed, status)
	assert.Equal(t, "POST", hdr.Get("Allow"))

	page, err := h.client.Models.List(t.Context())
	require.NoError(t, err)
	require.Len(t, page.Data, 1)
	var entry map[string]any
	require.NoError(t, json.Unmarshal([]byte(page.Data[0].RawJSON()), &entry))
	assert.Equal(t, "toy", page.Data[0].ID)
	assert.EqualValues(t, 4096, entry["context_length"])
	assert.EqualValues(t, 4096, entry["max_model_len"])
	assert.EqualValues(t, FallbackMaxTokens, entry["default_max_tokens"])
	assert.Equal(t, map[string]any{"mode": "fixed", "block_size": float64(4)}, entry["speculation"])
	assert.Equal(t, map[string]any{"name": "", "block_size": float64(4)}, entry["drafter"])
}

// TestSDKCallWithoutMaxTokens: the official SDK's call, which sends no max_tokens, ends at the server's
// default instead of running to the context length.
func TestSDKCallWithoutMaxTokens(t *testing.T) {
	h := newHarness(t, harnessOpts{noEOS: true, ctxLen: 8192})
	resp, err := h.client.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{
		Model:    "toy",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")},
	})
	require.NoError(t, err)
	assert.EqualValues(t, FallbackMaxTokens, resp.Usage.CompletionTokens)
	assert.Equal(t, "length", resp.Choices[0].FinishReason)
}
