package serve

import (
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/domain/batch"
	"github.com/higgs-go/higgs/ports"
	"github.com/higgs-go/higgs/ports/portfake"
)

// TestAdmissionWithoutMaxTokensOnDemo: on the demo with a 20 MB budget (the CPU backend prices a demo
// sequence at about 15 MB before its first token: its arena keeps every layer's activations of each pass
// shape), a request without max_tokens (as the OpenAI SDKs send by default) is not refused for the whole
// context it could reach: it reserves its fair share, runs, and ends with "length" at the reserved cap (or
// stops before it). A prompt that cannot fit at all is refused with a 400 naming the budget flag, not
// max_tokens.
func TestAdmissionWithoutMaxTokensOnDemo(t *testing.T) {
	m := loadDemo(t, 0)
	const budget = 20_000_000
	serve, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 8, QueueSize: 8, MemoryBudget: budget}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(EngineFromModels(m)))
	l := serve.engine.Load()

	req := ports.GenerateRequest{Prompt: "func (s *Server) "}
	p, err := serve.prepare(t.Context(), l, req)
	require.NoError(t, err)
	room := l.info.ContextLength - len(p.Prompt)
	whole := l.footprint.requestBytes(len(p.Prompt), room, p.Config.BlockSize, serve.cfg.PrefillChunk)
	require.Greater(t, whole, int64(budget), "the whole context does not fit: the case the policy is for")
	need, err := serve.admissionBytes(l, &p)
	require.NoError(t, err)
	assert.LessOrEqual(t, need, int64(budget))
	require.Positive(t, p.Config.MaxTokens)
	require.Less(t, p.Config.MaxTokens, room, "the generation is capped at what was reserved")
	assert.GreaterOrEqual(t, p.Config.MaxTokens, min(batch.DefaultTokenFloor, room))

	res, err := serve.Generate(t.Context(), req, nil)
	require.NoError(t, err)
	t.Logf("whole context %d bytes; reserved %d bytes for %d tokens; finished %q after %d", whole, need, p.Config.MaxTokens,
		res.FinishReason, res.CompletionTokens)
	switch res.FinishReason {
	case "length":
		assert.Equal(t, p.Config.MaxTokens, res.CompletionTokens)
	case "stop":
		assert.Less(t, res.CompletionTokens, p.Config.MaxTokens)
	default:
		t.Fatalf("finish %q", res.FinishReason)
	}
	assert.Zero(t, l.budget.Used(), "the reservation is given back")

	// A budget too small for the prompt itself: a clear 400 on the prompt and the budget.
	tiny, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 8, QueueSize: 8, MemoryBudget: 10_000}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, tiny.SetEngine(EngineFromModels(m)))
	_, err = tiny.Generate(t.Context(), ports.GenerateRequest{Prompt: strings.Repeat("func main() {} ", 20)}, nil)
	var re *ports.RequestError
	require.ErrorAs(t, err, &re)
	assert.Empty(t, re.Param, "the client set no max_tokens: it is not named")
	assert.Contains(t, re.Message, "--memory-budget-bytes")
	assert.Contains(t, re.Message, "shorten the prompt")
	assert.NotContains(t, re.Message, "max_tokens")
	assert.ErrorIs(t, err, ports.ErrInvalidRequest)
	assert.ErrorIs(t, err, batch.ErrOverBudget, "the error chain is kept")
}

// TestAdmissionCapsGenerationWithoutMaxTokens: on the toy model (no stop token) a request without max_tokens
// under a 100 000-byte budget at 1000 bytes a position reserves the whole budget (its 25 000-byte fair share is
// raised to the floor, which the budget then caps): 10 prompt tokens, a block of 4, 86 generated tokens; it
// ends with "length" there.
func TestAdmissionCapsGenerationWithoutMaxTokens(t *testing.T) {
	eng, tg := srvEngine(4096, 0, true)
	tg.Price = portfake.Price{PerPosition: 1000}
	serve, err := NewServe(ServeConfig{BlockSize: 4, MaxConcurrency: 4, QueueSize: 4, MemoryBudget: 100_000}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, serve.SetEngine(eng))
	res, err := serve.Generate(t.Context(), ports.GenerateRequest{Prompt: "abcdefghij"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "length", res.FinishReason)
	assert.Equal(t, 86, res.CompletionTokens)
}
