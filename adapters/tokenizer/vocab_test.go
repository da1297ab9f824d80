package tokenizer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/higgs-go/higgs/ports"
)

func TestTokenBytes(t *testing.T) {
	tok, err := tokenizer.Load(demoDir)
	require.NoError(t, err)
	ids, err := tok.Encode("héllo <think>")
	require.NoError(t, err)
	var all []byte
	for _, id := range ids {
		b, special, ok := tok.TokenBytes(id)
		require.True(t, ok)
		assert.False(t, special)
		all = append(all, b...)
	}
	assert.Equal(t, "héllo <think>", string(all))
	id, ok := tok.TokenID("<|im_end|>")
	require.True(t, ok)
	b, special, ok := tok.TokenBytes(id)
	assert.True(t, ok && special)
	assert.Equal(t, "<|im_end|>", string(b))
	_, _, ok = tok.TokenBytes(ports.Token(tok.VocabSize()))
	assert.False(t, ok)
}
