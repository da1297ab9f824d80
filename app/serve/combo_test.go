package serve

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// comboPrefix is the prompt most combo requests start with, so the prefix cache has something to reuse.
const comboPrefix = "// Config is the JSON configuration.\nvar config = `"

// comboRequest is one request of the combination test and, when constrained, the schema it must obey.
type comboRequest struct {
	req    ports.GenerateRequest
	schema string // a file of adapters/grammar/testdata/schemas; "": free text
}

// comboRequests mixes everything a round may batch together: constrained (json_schema) and free text,
// greedy and seeded at T 0.7, block sizes 0 (the drafter's), 1, 4 and 16, most sharing comboPrefix.
func comboRequests(t *testing.T) []comboRequest {
	t.Helper()
	schemas := schemaSuite(t)
	seeded := func(r ports.GenerateRequest, seed uint64) ports.GenerateRequest {
		r.Seed = &seed
		r.Sampling = ports.SamplingParams{Temperature: 0.7, TopP: 1}
		return r
	}
	constrained := func(r ports.GenerateRequest, schema string) comboRequest {
		doc, ok := schemas[schema]
		require.True(t, ok, "schema %s", schema)
		r.Constraint = &ports.Constraint{Kind: ports.ConstrainJSONSchema, Schema: doc, Param: "response_format"}
		return comboRequest{req: r, schema: schema}
	}
	free := func(r ports.GenerateRequest) comboRequest { return comboRequest{req: r} }
	out := []comboRequest{
		constrained(ports.GenerateRequest{Prompt: comboPrefix, MaxTokens: 60, BlockSize: 0}, "02_boolean.json"),
		constrained(seeded(ports.GenerateRequest{Prompt: comboPrefix, MaxTokens: 60, BlockSize: 16}, 41), "05_integer_range.json"),
		constrained(ports.GenerateRequest{Prompt: comboPrefix, MaxTokens: 60, BlockSize: 4}, "03_enum_strings.json"),
		constrained(seeded(ports.GenerateRequest{Prompt: "func main() {\n\tcfg := `", MaxTokens: 120, BlockSize: 1}, 43), "34_tool_arguments.json"),
		free(ports.GenerateRequest{Prompt: comboPrefix + "{\"name\": ", MaxTokens: 10, BlockSize: 1}),
		free(seeded(ports.GenerateRequest{Prompt: "func (s *Server) ", MaxTokens: 12, BlockSize: 0}, 45)),
		free(ports.GenerateRequest{Prompt: "package main\n\nimport (", MaxTokens: 14, BlockSize: 16}),
		free(seeded(ports.GenerateRequest{Prompt: comboPrefix + "\n", MaxTokens: 10, BlockSize: 4}, 47)),
	}
	for i := range out {
		out[i].req.ID = fmt.Sprintf("combo%d", i)
	}
	return out
}

// TestE2EComboConcurrentEqualSolo: eight concurrent requests on the demo models (CPU backend) mixing
// constrained and free text, greedy and seeded sampling, block sizes 0/1/4/16, with the adaptive policy on
// and off, the prefix cache on (hits asserted) and chunked prefill, share rounds and each gets exactly what
// it gets alone on a plain server (one at a time, no cache, whole prefills, fixed blocks); constrained
// outputs are valid under their schema.
func TestE2EComboConcurrentEqualSolo(t *testing.T) {
	m := loadDemo(t, 0)
	reqs := comboRequests(t)
	schemas := schemaSuite(t)

	plain, err := NewServe(ServeConfig{MaxConcurrency: 1, QueueSize: 1}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, plain.SetEngine(EngineFromModels(m)))
	solo := make([]ports.GenerateResult, len(reqs))
	for i, r := range reqs {
		solo[i], err = plain.Generate(t.Context(), r.req, nil)
		require.NoError(t, err, "solo %d", i)
		assert.Zero(t, solo[i].CachedTokens, "solo %d: no cache", i)
		if r.schema != "" {
			require.Equal(t, "stop", solo[i].FinishReason, "solo %d (%s) ended: %q", i, r.schema, solo[i].Content)
			assert.NoError(t, validator(t, schemas[r.schema])(solo[i].Content), "solo %d (%s): %q", i, r.schema, solo[i].Content)
		}
	}

	for _, adaptive := range []bool{false, true} {
		t.Run(fmt.Sprintf("adaptive=%t", adaptive), func(t *testing.T) {
			serve, err := NewServe(ServeConfig{Adaptive: adaptive, MaxConcurrency: 8, QueueSize: 8, PrefillChunk: 5,
				PrefixCacheBytes: 64 << 20, PrefixCacheEvery: 4}, zerolog.Nop())
			require.NoError(t, err)
			metrics := &batchMetrics{}
			serve.SetMetrics(metrics)
			require.NoError(t, serve.SetEngine(EngineFromModels(m)))

			// One request first, alone, so the shared prefix is cached whatever order the eight then prefill
			// in: the hits below do not depend on timing.
			_, err = serve.Generate(t.Context(), ports.GenerateRequest{ID: "warm", Prompt: comboPrefix, MaxTokens: 2}, nil)
			require.NoError(t, err)

			got := make([]ports.GenerateResult, len(reqs))
			errs := make([]error, len(reqs))
			var wg sync.WaitGroup
			for i, r := range reqs {
				wg.Go(func() { got[i], errs[i] = serve.Generate(t.Context(), r.req, nil) })
			}
			wg.Wait()

			cached := 0
			for i, r := range reqs {
				require.NoError(t, errs[i], "request %d", i)
				desc := fmt.Sprintf("request %d (schema %q, block %d, T %g, prompt %q)", i, r.schema, r.req.BlockSize,
					r.req.Sampling.Temperature, r.req.Prompt)
				assert.Equal(t, solo[i].Content, got[i].Content, "%s: batched text differs from solo", desc)
				assert.Equal(t, solo[i].CompletionTokens, got[i].CompletionTokens, "%s: tokens", desc)
				assert.Equal(t, solo[i].FinishReason, got[i].FinishReason, "%s: finish reason", desc)
				if r.schema != "" {
					assert.NoError(t, validator(t, schemas[r.schema])(got[i].Content), "%s: %q", desc, got[i].Content)
				}
				if strings.HasPrefix(r.req.Prompt, comboPrefix) {
					// The warm-up cached comboPrefix's state at its boundaries, and 64 MiB holds every entry.
					assert.Positive(t, got[i].CachedTokens, "%s: the cached prefix was restored", desc)
				}
				cached = max(cached, got[i].CachedTokens)
			}
			assert.Positive(t, cached, "a request sharing the cached prefix restored it")
			assert.GreaterOrEqual(t, metrics.largest(), 2, "concurrent requests shared rounds")
		})
	}
}
