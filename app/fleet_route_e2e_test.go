package app

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/openai/openai-go/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/app/models"
)

// TestTwoLocalModelsAndARouteUnderMixedLoad is issue 34's set-up end to end: one higgsd serving two local
// models loaded on demand (gocoder with its drafter, the demo without one) and routing claude-.* to a second
// higgsd in the Anthropic format, under concurrent requests of all three kinds over both APIs. Every answer
// comes from the model it named and equals the answer that model gives when asked alone (greedy).
func TestTwoLocalModelsAndARouteUnderMixedLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the bundled models; skipped with -short")
	}
	root := ".."
	remote := startHiggsd(t, []string{"--model", "claude-demo=" + filepath.Join(root, models.DemoTargetDir) + ",draft=" + filepath.Join(root, models.DemoDrafterDir),
		"--api-key", "remote-secret"}, nil, nil)
	front := startHiggsd(t, []string{"--api-key", "k1", "--max-concurrency", "2",
		"--model", "coder=" + filepath.Join(root, models.DefaultTargetDir) + ",draft=" + filepath.Join(root, models.DefaultDrafterDir) + ",alias=gocoder",
		"--model", "demo=" + filepath.Join(root, models.DemoTargetDir),
		"--provider", "up=anthropic," + remote + ",key_env=UP_KEY", "--route", "claude-.*=up"},
		map[string]string{"UP_KEY": "remote-secret"}, nil)
	oai, ant := oaiClient(front, "k1"), antClient(front, "k1")

	chat := func(model, prompt string) (string, string, error) {
		r, err := oai.Chat.Completions.New(t.Context(), openai.ChatCompletionNewParams{Model: model, MaxTokens: openai.Int(8),
			Temperature: openai.Float(0), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)}})
		if err != nil {
			return "", "", err
		}
		return r.Model, r.Choices[0].Message.Content, nil
	}
	message := func(model, prompt string) (string, string, error) {
		m, err := ant.Messages.New(t.Context(), sdk.MessageNewParams{Model: sdk.Model(model), MaxTokens: 8,
			Messages: []sdk.MessageParam{sdk.NewUserMessage(sdk.NewTextBlock(prompt))}}, greedy)
		if err != nil {
			return "", "", err
		}
		text := ""
		for _, b := range m.Content {
			text += b.Text
		}
		return string(m.Model), text, nil
	}
	type ask struct {
		api, model, prompt string
	}
	var asks []ask
	for i, model := range []string{"coder", "gocoder", "demo", "claude-demo"} {
		for j := range 2 {
			prompt := fmt.Sprintf("func f%d%d() int {", i, j)
			asks = append(asks, ask{"openai", model, prompt}, ask{"anthropic", model, prompt})
		}
	}
	run := func(a ask) (string, string, error) {
		if a.api == "openai" {
			return chat(a.model, a.prompt)
		}
		return message(a.model, a.prompt)
	}
	// Alone first (the first request of each local model loads it), then all at once.
	want := make([]string, len(asks))
	for i, a := range asks {
		_, text, err := run(a)
		require.NoError(t, err, "%s %s", a.api, a.model)
		want[i] = text
	}
	var wg sync.WaitGroup
	for range 2 {
		for i, a := range asks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				model, text, err := run(a)
				if !assert.NoError(t, err, "%s %s", a.api, a.model) {
					return
				}
				wantModel := a.model
				if a.model == "gocoder" {
					wantModel = "coder" // an alias answers as the model's name
				}
				assert.Equal(t, wantModel, model, "%s %s", a.api, a.model)
				assert.Equal(t, want[i], text, "%s %s: the same answer under load as alone", a.api, a.model)
			}()
		}
	}
	wg.Wait()
	// Unknown names are refused with the choices; the routed names are matched, not listed.
	_, _, err := chat("nope", "x")
	var apiErr *openai.Error
	require.ErrorAs(t, err, &apiErr)
	assert.Equal(t, 404, apiErr.StatusCode)
	assert.Contains(t, apiErr.Message, "coder")
	assert.Contains(t, apiErr.Message, "demo")
}
