package serve

import (
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// wideTokenizer encodes every prompt with a trailing </think>, an id the tokenizer knows but the toy model
// cannot embed.
type wideTokenizer struct{ srvTokenizer }

func (wideTokenizer) Encode(text string) ([]ports.Token, error) {
	ids, err := srvTokenizer{}.Encode(text)
	return append(ids, srvThinkClose), err
}

// A prompt that encodes to an id past the model's vocabulary is an invalid request naming the id, refused
// before it reaches the engine (not an internal error from inside the forward).
func TestPromptIDOutsideModelVocabulary(t *testing.T) {
	e, _ := srvEngine(4096, 0, false)
	e.Tokenizer = wideTokenizer{}
	s, err := NewServe(ServeConfig{MaxConcurrency: 1}, zerolog.Nop())
	require.NoError(t, err)
	require.NoError(t, s.SetEngine(e))
	_, err = s.Generate(t.Context(), ports.GenerateRequest{Prompt: "abc", MaxTokens: 2},
		func(ports.GenerateEvent) error { return nil })
	require.ErrorIs(t, err, ports.ErrInvalidRequest)
	assert.Contains(t, err.Error(), "token id 64 (position 3) is outside this model's vocabulary of 63")
}
