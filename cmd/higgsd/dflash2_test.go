package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/synth"
	"github.com/higgs-go/higgs/app"
	"github.com/higgs-go/higgs/internal/testmodel"
)

// TestServesDFlash2Drafter runs the real injector with `--model DIR --draft DIR` where the drafter is a
// DFlash2 one: nothing else is asked of the user. A greedy completion through the official OpenAI SDK is
// drafted by it and equals the plain (block_size 1) answer.
func TestServesDFlash2Drafter(t *testing.T) {
	tdir := testmodel.Synth(t, synth.TargetSpec{Family: "qwen3", Seed: 4, Vocab: testmodel.TokenizerVocab})
	require.NoError(t, testmodel.CopyTokenizer(tdir))
	ddir := testmodel.SynthDrafter(t, synth.DrafterSpec{Seed: 5, Taps: []int{0, 2, 3}, Mask: 500, BlockSize: 8,
		Vocab: testmodel.TokenizerVocab, Nested: true, DFlash2: true})
	cfg, err := app.LoadConfig([]string{"--port", "0", "--model", tdir, "--draft", ddir, "--threads", "2"},
		func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	srv, err := initServer(cfg, zerolog.Nop())
	require.NoError(t, err)
	addr := make(chan net.Addr, 1)
	srv.OnListen = func(a net.Addr) { addr <- a }
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	var base string
	select {
	case a := <-addr:
		base = "http://" + a.String()
	case err := <-done:
		t.Fatalf("server stopped before listening: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("server did not listen")
	}
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	require.Eventually(t, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/health", nil)
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "models loaded")

	client := openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	p := openai.CompletionNewParams{Model: openai.CompletionNewParamsModel(filepath.Base(tdir)),
		Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello world")}, MaxTokens: openai.Int(24),
		Temperature: openai.Float(0)}
	spec, err := client.Completions.New(ctx, p)
	require.NoError(t, err)
	plain, err := client.Completions.New(ctx, p, option.WithJSONSet("block_size", 1))
	require.NoError(t, err)
	assert.Equal(t, plain.Choices[0].Text, spec.Choices[0].Text, "speculation with a DFlash2 drafter must be lossless")
	var u struct {
		Speculative struct {
			Rounds      int `json:"rounds"`
			DraftTokens int `json:"draft_tokens"`
		} `json:"speculative"`
	}
	require.NoError(t, json.Unmarshal([]byte(spec.Usage.RawJSON()), &u))
	assert.Positive(t, u.Speculative.Rounds)
	assert.Positive(t, u.Speculative.DraftTokens, "the DFlash2 drafter drafts")
}
