package grammar

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/tokenizer"
)

// qwenVocab is Qwen3's 151,669-token vocabulary (the tokenizer's test copy) as the grammar sees it.
func qwenVocab(b *testing.B) (*Vocab, *tokenizer.Tokenizer) {
	b.Helper()
	tok, err := tokenizer.Load(filepath.Join("..", "tokenizer", "testdata", "qwen3"))
	require.NoError(b, err)
	bytes := make([][]byte, tok.VocabSize())
	for id := range bytes {
		if p, special, ok := tok.TokenBytes(int32(id)); ok && !special {
			bytes[id] = p
		}
	}
	return NewVocab(bytes), tok
}

// BenchmarkMaskUncached is the cost of one mask computed from scratch over Qwen3's vocabulary, at the
// states a JSON answer passes through (the start, after a key, inside a string, inside a number).
func BenchmarkMaskUncached(b *testing.B) {
	v, _ := qwenVocab(b)
	doc, err := os.ReadFile("testdata/schemas/34_tool_arguments.json")
	require.NoError(b, err)
	g, err := CompileSchema(context.Background(), doc)
	require.NoError(b, err)
	free, err := CompileSchema(context.Background(), []byte(`{"type":"object","properties":{"q":{"type":"string"}}}`))
	require.NoError(b, err)
	strict, err := StrictTools(context.Background(), []Tool{{Name: "get_weather", Parameters: doc}}, Hermes)
	require.NoError(b, err)
	for _, c := range []struct {
		name, prefix string
		g            *Grammar
	}{
		{"start", ``, g}, {"key", `{"city": `, g}, {"bounded_string", `{"city": "Par`, g},
		{"number", `{"city": "P", "unit": "celsius", "days": `, g}, {"string", `{"q": "Par`, free},
		{"text", `Let me check `, strict},
	} {
		g := c.g
		st := g.Start().Advance([]byte(c.prefix))
		require.False(b, st.Dead(), c.prefix)
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				m, _ := NewMatcher(g, v, []int32{151645})
				allowed(b, m, st)
			}
		})
	}
}

// BenchmarkMaskPerToken walks a tokenized JSON answer through one Matcher: per token one Advance and one
// mask (computed the first time a state is seen, cached after), as a generation does.
func BenchmarkMaskPerToken(b *testing.B) {
	v, tok := qwenVocab(b)
	doc, err := os.ReadFile("testdata/schemas/34_tool_arguments.json")
	require.NoError(b, err)
	g, err := CompileSchema(context.Background(), doc)
	require.NoError(b, err)
	ids, err := tok.Encode(`{"city": "Paris", "unit": "celsius", "days": 3}`)
	require.NoError(b, err)
	m, err := NewMatcher(g, v, []int32{151645})
	require.NoError(b, err)
	for b.Loop() {
		st := m.Start()
		for _, id := range ids {
			if !allowed(b, m, st).Has(id) {
				b.Fatalf("token %d refused", id)
			}
			st = m.Advance(st, id)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids))/1e6, "ms/token")
}

// BenchmarkClosing is the cost of a row's mask near the end of the token budget over Qwen3's vocabulary (the
// grammar's own mask cached): the tokens left equal to the completion (tight) and fewer (short: best effort,
// every allowed token advanced).
func BenchmarkClosing(b *testing.B) {
	v, _ := qwenVocab(b)
	doc, err := os.ReadFile("testdata/schemas/34_tool_arguments.json")
	require.NoError(b, err)
	g, err := CompileSchema(context.Background(), doc)
	require.NoError(b, err)
	list, err := CompileSchema(context.Background(), []byte(`{"type":"array","items":{"type":"string"}}`))
	require.NoError(b, err)
	for _, c := range []struct {
		name, prefix string
		g            *Grammar
	}{
		{"key", `{"city": `, g}, {"bounded_string", `{"city": "Par`, g}, {"string", `["a", "Par`, list},
	} {
		st := c.g.Start().Advance([]byte(c.prefix))
		require.False(b, st.Dead(), c.prefix)
		m, err := NewMatcher(c.g, v, []int32{151645})
		require.NoError(b, err)
		d := c.g.Distance(st)
		for _, left := range []struct {
			name string
			n    int
		}{{"tight", d}, {"short", max(d/2, 1)}} {
			b.Run(c.name+"/"+left.name, func(b *testing.B) {
				for b.Loop() {
					if _, _, err := m.Closing(context.Background(), st, left.n); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
