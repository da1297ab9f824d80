package serve

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	oaiapi "github.com/higgs-go/higgs/adapters/openai"
	"github.com/higgs-go/higgs/app/models"
)

// TestE2EDemoModels serves the bundled demo target and drafter (loaded by LoadModels on the CPU backend)
// and asks them for a short chat answer through the OpenAI SDK.
func TestE2EDemoModels(t *testing.T) {
	if testing.Short() {
		t.Skip("loads the real demo models; skipped with -short")
	}
	root := filepath.Join("..", "..", models.DemoTargetDir)
	if _, err := os.Stat(filepath.Join(root, "config.json")); err != nil {
		t.Fatalf("the bundled demo model %s is absent", root)
	}
	leakCheck(t)
	m, err := models.LoadModels(t.Context(), models.ModelConfig{Model: root, Draft: filepath.Join("..", "..", models.DemoDrafterDir)}, zerolog.Nop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	serve, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 4}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(EngineFromModels(m)))
	srv := httptest.NewServer(oaiapi.New(serve, oaiapi.Options{Log: zerolog.Nop()}))
	hc := &http.Client{Transport: &http.Transport{}}
	t.Cleanup(func() { hc.CloseIdleConnections(); srv.Close() })
	client := openai.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("x"), option.WithMaxRetries(0),
		option.WithHTTPClient(hc))
	p := openai.ChatCompletionNewParams{Model: openai.ChatModel(m.Name), Messages: userMsg("Hello!"),
		MaxTokens: openai.Int(16), Temperature: openai.Float(0)}
	spec, err := client.Chat.Completions.New(t.Context(), p)
	require.NoError(t, err)
	plain, err := client.Chat.Completions.New(t.Context(), p, option.WithJSONSet("block_size", 1))
	require.NoError(t, err)
	assert.Equal(t, plain.Choices[0].Message.Content, spec.Choices[0].Message.Content, "speculation must be lossless")
	assert.Positive(t, spec.Usage.CompletionTokens)
	s := specOf(t, spec.Usage.RawJSON())
	assert.Positive(t, s.Rounds)
	assert.Positive(t, s.Drafted, "the demo drafter must be in use")
	t.Logf("demo answer %q, tau %.2f", spec.Choices[0].Message.Content, s.Tau)
}
