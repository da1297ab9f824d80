package grammar

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bruteDistance is the fewest bytes of alphabet from s to an accepting state, found by a
// breadth-first search over states (-1 past maxDepth).
func bruteDistance(s State, maxDepth int, alphabet []byte) int {
	level := []State{s}
	for d := 0; d <= maxDepth; d++ {
		seen := map[string]bool{}
		var next []State
		for _, st := range level {
			if st.Accepting() {
				return d
			}
			for _, b := range alphabet {
				nst := st.Advance([]byte{b})
				if !nst.Dead() && !seen[nst.Key()] && len(next) < 20000 {
					seen[nst.Key()] = true
					next = append(next, nst)
				}
			}
		}
		level = next
	}
	return -1
}

// TestDistance: the shortest completion of every prefix of a few valid documents is what a search over the
// automaton finds, and it closes strings, arrays and objects and writes the required properties still
// missing.
func TestDistance(t *testing.T) {
	cases := []struct {
		name, schema string
		docs         []string // every prefix checked against a search (no numbers: they widen it)
		// want are prefixes with their expected distances.
		want map[string]int
	}{
		{"strings in an array", `{"type":"array","items":{"type":"string"}}`,
			[]string{`["ab","c\"d", "\u00e9é"]`},
			map[string]int{``: 2, `[`: 1, `["`: 2, `["abc`: 2, `["a",`: 3, `["a\`: 3, `["a"`: 1, `["a"]`: 0}},
		{"object with required properties", `{"type":"object","properties":{"id":{"type":"integer"},"tags":{"type":"array","items":{"type":"string"},"minItems":1},"note":{"type":"string"}},"required":["id","tags"],"additionalProperties":false}`,
			[]string{`{"id": 0, "tags": ["x", "y"], "note": "n"}`, `{"id":0,"tags":[""]}`},
			map[string]int{``: len(`{"id":0,"tags":[""]}`), `{`: len(`"id":0,"tags":[""]}`), `{"id":5`: len(`,"tags":[""]}`),
				`{"id":5,"tags":["a"]`: 1, `{"id":5,"tags":[`: 4, `{"i`: len(`d":0,"tags":[""]}`)}},
		{"nested", `{"type":"object","properties":{"a":{"type":"object","properties":{"b":{"type":"array","items":{"type":"object","properties":{"c":{"type":"string","minLength":2}},"required":["c"]},"minItems":1}},"required":["b"]}},"required":["a"]}`,
			[]string{`{"a":{"b":[{"c":"xyz"},{"c":"pq"}]}}`},
			map[string]int{``: len(`{"a":{"b":[{"c":"  "}]}}`), `{"a":{"b":[{"c":"x`: len(`x"}]}}`), `{"a":{"b":[{"c":"xy"},`: len(`{"c":"  "}]}}`)}},
		{"free object", `{"type":"object"}`, []string{`{"k": [0, {"x": null}], "s": "v"}`}, map[string]int{``: 2, `{"k": [1, {"x": n`: len(`ull}]}`)}},
		{"numbers and enums", `{"type":"object","properties":{"n":{"type":"integer","minimum":100},"e":{"enum":["red","green"]},"f":{"type":"number"}},"required":["n","e","f"]}`,
			nil,
			map[string]int{`{"n":`: len(`100,"e":"red","f":0}`), `{"n":1`: len(`00,"e":"red","f":0}`), `{"n":100,"e":"g`: len(`reen","f":0}`), `{"n":100,"e":"red","f":-1.`: len(`0}`)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := mustSchema(t, c.schema)
			for prefix, want := range c.want {
				s := g.Start().Advance([]byte(prefix))
				require.False(t, s.Dead(), "%q", prefix)
				assert.Equal(t, want, g.Distance(s), "%q", prefix)
			}
			alphabet := []byte(`"[]{},:0 x`)
			for _, b := range []byte(c.schema) {
				if b >= 'a' && b <= 'z' {
					alphabet = append(alphabet, b)
				}
			}
			for _, doc := range c.docs {
				alphabet := append(alphabet, doc...)
				require.True(t, accepts(g, doc), doc)
				for i := range len(doc) + 1 {
					s := g.Start().Advance([]byte(doc[:i]))
					assert.Equal(t, bruteDistance(s, 40, alphabet), g.Distance(s), "%q", doc[:i])
				}
			}
		})
	}
}

// TestClosing: with the budget tight, every sequence of tokens Closing allows ends accepting when the budget
// ends, and the budget forces a token out only when it must.
func TestClosing(t *testing.T) {
	g := mustSchema(t, `{"type":"object","properties":{"items":{"type":"array","items":{"type":"string"}},"n":{"type":"integer"}},"required":["items","n"]}`)
	var toks [][]byte
	for c := byte(0x20); c < 0x7f; c++ {
		toks = append(toks, []byte{c})
	}
	toks = append(toks, []byte("\n"), []byte("\t"), []byte(`"]`), []byte(`"},`), []byte(`hello world`), []byte(`{"items": ["`), nil)
	eos := int32(len(toks) - 1)
	m, err := NewMatcher(g, NewVocab(toks), []int32{eos})
	require.NoError(t, err)
	ctx := context.Background()
	// A budget shorter than the completion in bytes keeps the tokens that shorten it most.
	mk, forced, err := m.Closing(ctx, m.Start(), 3)
	require.NoError(t, err)
	assert.True(t, forced)
	assert.Equal(t, 1, mk.Count())
	assert.True(t, mk.Has(int32(len(toks)-2)), "the token %q", toks[len(toks)-2])
	// A greedy walk that always prefers the longest allowed token, at several budgets.
	d := g.Distance(m.Start())
	for budget := d; budget <= 40; budget++ {
		s := m.Start()
		var text []byte
		ended := false
		for left := budget; left > 0; left-- {
			mk, _, err := m.Closing(ctx, s, left)
			require.NoError(t, err)
			best := int32(-1)
			for id := range toks {
				if mk.Has(int32(id)) && int32(id) != eos && (best < 0 || len(toks[id]) > len(toks[best]) || len(toks[id]) == len(toks[best]) && toks[id][0] == 'x') {
					best = int32(id)
				}
			}
			if best < 0 {
				require.True(t, mk.Has(eos), "budget %d: nothing allowed after %q", budget, text)
				ended = true
				break
			}
			text = append(text, toks[best]...)
			s = m.Advance(s, best)
		}
		assert.True(t, ended || s.Accepting(), "budget %d: %q", budget, text)
		assert.True(t, json.Valid(text), "budget %d: %q", budget, text)
	}
}
