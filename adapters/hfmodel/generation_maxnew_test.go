package hfmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGenerationConfigMaxNewTokens: max_new_tokens is read (higgsd's default max_tokens); 0, a negative
// value or null say nothing; max_length is not read.
func TestGenerationConfigMaxNewTokens(t *testing.T) {
	g, err := ParseGenerationConfig([]byte(`{"eos_token_id": 2, "max_new_tokens": 2048, "max_length": 20}`))
	require.NoError(t, err)
	require.NotNil(t, g.MaxNewTokens)
	assert.Equal(t, 2048, *g.MaxNewTokens)
	for _, none := range []string{`{}`, `{"max_new_tokens": 0}`, `{"max_new_tokens": -1}`, `{"max_new_tokens": null}`, `{"max_length": 32768}`} {
		g, err := ParseGenerationConfig([]byte(none))
		require.NoError(t, err, none)
		assert.Nil(t, g.MaxNewTokens, none)
	}
	_, err = ParseGenerationConfig([]byte(`{"max_new_tokens": "many"}`))
	require.ErrorIs(t, err, ErrInvalidConfig)
}
