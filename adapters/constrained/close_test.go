package constrained

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/grammar"
	"github.com/higgs-go/higgs/ports"
)

// TestConstrainedClosesWithinBudget: greedy decoding on flat logits (the lowest allowed id wins, so the
// string never ends by itself) writes a document that parses exactly as the budget ends, Forced says the
// budget closed it, and rolling back before the close forgets that.
func TestConstrainedClosesWithinBudget(t *testing.T) {
	g, err := grammar.CompileSchema(t.Context(), []byte(`{"type":"array","items":{"type":"string"}}`))
	require.NoError(t, err)
	var toks [][]byte
	for c := byte(0x20); c < 0x7f; c++ {
		toks = append(toks, []byte{c})
	}
	toks = append(toks, []byte("\n"), []byte("\t"), nil)
	eos := ports.Token(len(toks) - 1)
	m, err := grammar.NewMatcher(g, grammar.NewVocab(toks), []int32{int32(eos)})
	require.NoError(t, err)
	for _, budget := range []int{2, 3, 8, 20} {
		const prompt = 1
		inner := &rowSession{vocab: len(toks)}
		sess, c := Wrap(inner, m, prompt, prompt+budget, len(toks), wallClock{})
		next := ports.Token(0) // the prompt
		var text []byte
		for sess.Len() < prompt+budget {
			fr, err := sess.Forward(t.Context(), []ports.Token{next}, ports.ForwardOptions{})
			require.NoError(t, err)
			if next = fr.Greedy[0]; next == eos {
				break
			}
			text = append(text, toks[next]...)
		}
		if next != eos { // the budget's last token: its row is read, as the decoder's last forward does
			_, err := sess.Forward(t.Context(), []ports.Token{next}, ports.ForwardOptions{})
			require.NoError(t, err)
		}
		assert.Len(t, text, budget, "budget %d: %q", budget, text)
		assert.True(t, json.Valid(text), "budget %d: %q", budget, text)
		assert.True(t, c.Forced(len(text)), "budget %d", budget)
		// Roll back to the first generated token: the rows after it are forgotten.
		if budget >= 8 {
			require.NoError(t, sess.TrimKV(prompt+1))
			assert.False(t, c.Forced(len(text)), "budget %d: rolled back before the close", budget)
		}
	}
	// Without a budget nothing is forced.
	inner := &rowSession{vocab: len(toks)}
	sess, c := Wrap(inner, m, 1, 0, len(toks), wallClock{})
	for _, tk := range []ports.Token{0, '[' - 0x20, '"' - 0x20, 0} {
		_, err := sess.Forward(t.Context(), []ports.Token{tk}, ports.ForwardOptions{})
		require.NoError(t, err)
	}
	assert.False(t, c.Forced(3))
}
