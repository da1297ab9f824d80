package grammar

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/higgs-go/higgs/adapters/tokenizer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// suite is one committed test schema with its grammar and an independent validator for it.
type suite struct {
	name  string
	doc   []byte
	g     *Grammar
	valid *jsonschema.Schema
}

func loadSuite(t testing.TB) []suite {
	t.Helper()
	paths, err := filepath.Glob("testdata/schemas/*.json")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 30)
	var out []suite
	for _, p := range paths {
		doc, err := os.ReadFile(p)
		require.NoError(t, err)
		g, err := CompileSchema(context.Background(), doc)
		require.NoError(t, err, p)
		out = append(out, suite{name: filepath.Base(p), doc: doc, g: g, valid: compileValidator(t, doc)})
	}
	return out
}

func compileValidator(t testing.TB, doc []byte) *jsonschema.Schema {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	require.NoError(t, c.AddResource("urn:test", v))
	s, err := c.Compile("urn:test")
	require.NoError(t, err)
	return s
}

// validates reports whether text is one JSON document the independent validator accepts.
func validates(s *jsonschema.Schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// walk generates a random sentence of g byte by byte: every step picks among the bytes the automaton
// allows, leaning towards closing brackets and quotes as the text grows so that the walk ends.
func walk(g *Grammar, rnd *rand.Rand) (string, bool) {
	s := g.Start()
	var out []byte
	for step := 0; step < 2000; step++ {
		if s.Accepting() && (rnd.IntN(4) == 0 || step > 80) {
			return string(out), true
		}
		var cands, closers []byte
		for b := 0; b < 256; b++ {
			if !s.Advance([]byte{byte(b)}).Dead() {
				cands = append(cands, byte(b))
				if strings.IndexByte(`"]}`, byte(b)) >= 0 {
					closers = append(closers, byte(b))
				}
			}
		}
		if len(cands) == 0 {
			return string(out), s.Accepting()
		}
		pick := cands[rnd.IntN(len(cands))]
		switch {
		case step > 40 && len(closers) > 0:
			pick = closers[rnd.IntN(len(closers))]
		case isWS(pick) && rnd.IntN(8) != 0:
			if i := slices.IndexFunc(cands, func(b byte) bool { return !isWS(b) }); i >= 0 {
				pick = cands[i+rnd.IntN(len(cands)-i)]
				if isWS(pick) {
					pick = cands[i]
				}
			}
		}
		out = append(out, pick)
		s = s.Advance([]byte{pick})
	}
	return string(out), false
}

// TestRandomSentencesValidate: random sentences of every committed schema's grammar are valid under the
// schema by an independent validator (santhosh-tekuri/jsonschema).
func TestRandomSentencesValidate(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for _, s := range loadSuite(t) {
		t.Run(s.name, func(t *testing.T) {
			ended := 0
			for range 20 {
				text, ok := walk(s.g, rnd)
				if !ok {
					continue // the walk did not end in time; the grammar still said every byte was fine
				}
				ended++
				assert.NoError(t, validates(s.valid, text), "%s", text)
			}
			assert.GreaterOrEqual(t, ended, 15, "walks that ended")
		})
	}
}

func FuzzCompileSchema(f *testing.F) {
	paths, _ := filepath.Glob("testdata/schemas/*.json")
	for _, p := range paths {
		doc, _ := os.ReadFile(p)
		f.Add(doc, []byte(`{"a":1}`))
	}
	f.Add([]byte(`{"anyOf":[{"$ref":"#"},{"type":"null"}]}`), []byte("null"))
	f.Add([]byte(`{"type":"number","minimum":1e3}`), []byte("1000"))
	f.Add(nestedAnyOf(3), []byte(`{"a":{"a":{"a":`))
	f.Add([]byte(`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`), []byte(`{"a":{"a":`))
	f.Add([]byte(`{"type":"array","items":{"$ref":"#"},"minItems":1}`), []byte(`[[[`))
	f.Fuzz(func(t *testing.T, doc, text []byte) {
		g, err := CompileSchema(context.Background(), doc)
		if err != nil {
			var se *SchemaError
			if !assertAs(err, &se) {
				t.Fatalf("error %v is not a *SchemaError", err)
			}
			return
		}
		// Whatever the grammar accepts must be valid JSON (the schema's own semantics are checked by
		// FuzzAcceptedValidates over the committed schemas).
		if st := g.Start().Advance(text); st.Accepting() && !json.Valid(text) {
			t.Fatalf("grammar of %s accepts invalid JSON %q", doc, text)
		}
	})
}

func assertAs(err error, se **SchemaError) bool {
	e, ok := err.(*SchemaError)
	*se = e
	return ok
}

// FuzzAcceptedValidates: a text the grammar accepts is valid under the schema (independent validator).
func FuzzAcceptedValidates(f *testing.F) {
	for _, seed := range []string{`{"name":"a","age":3}`, `[1,2]`, `"red"`, `true`, `{"v":1,"kids":[]}`, `-0.5`} {
		for i := range 34 {
			f.Add(uint8(i), []byte(seed))
		}
	}
	suites := loadSuite(f)
	f.Fuzz(func(t *testing.T, which uint8, text []byte) {
		s := suites[int(which)%len(suites)]
		st := s.g.Start()
		for i := range text {
			// Every prefix is fed the same whether byte by byte or at once.
			if st = st.Advance(text[i : i+1]); st.Dead() {
				break
			}
		}
		if st.Accepting() {
			if err := validates(s.valid, string(text)); err != nil {
				t.Fatalf("%s accepts %q, which the validator refuses: %v", s.name, text, err)
			}
		}
		assert.Equal(t, st.Key(), s.g.Start().Advance(text).Key())
	})
}

// TestStringShortcutEqualsWalk: masks computed with the string shortcut (plain tokens allowed without a
// walk) equal those of the full trie walk, at every state of random sentences of every committed schema,
// over the demo model's byte-level vocabulary.
func TestStringShortcutEqualsWalk(t *testing.T) {
	tok, err := tokenizer.Load(filepath.Join("..", "..", "models", "demo", "target"))
	if err != nil {
		t.Skipf("no demo tokenizer: %v", err)
	}
	bytes := make([][]byte, tok.VocabSize())
	for id := range bytes {
		if p, special, ok := tok.TokenBytes(int32(id)); ok && !special {
			bytes[id] = p
		}
	}
	v := NewVocab(bytes)
	rnd := rand.New(rand.NewPCG(3, 4))
	checked := 0
	for _, s := range loadSuite(t) {
		fast, err := NewMatcher(s.g, v, []int32{4092})
		require.NoError(t, err)
		slow, err := NewMatcher(s.g, v, []int32{4092})
		require.NoError(t, err)
		slow.walkAll = true
		text, _ := walk(s.g, rnd)
		st := s.g.Start()
		for i := 0; i <= len(text); i++ {
			if i > 0 {
				st = st.Advance([]byte{text[i-1]})
			}
			require.Equal(t, allowed(t, slow, st), allowed(t, fast, st), "%s after %q", s.name, text[:i])
			checked++
		}
	}
	assert.Greater(t, checked, 500)

	// Free text with strict tool calls: the text shortcut equals the walk too.
	g, err := StrictTools(context.Background(), []Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"n":{"type":"integer"}}}`)}}, Hermes)
	require.NoError(t, err)
	fast, err := NewMatcher(g, v, []int32{4092})
	require.NoError(t, err)
	slow, err := NewMatcher(g, v, []int32{4092})
	require.NoError(t, err)
	slow.walkAll = true
	text := "see <tool_ <tool_call>\n{\"name\": \"f\", \"arguments\": {\"n\": 4}}\n</tool_call>\nthen <tool_call"
	st := g.Start()
	for i := 0; i <= len(text); i++ {
		if i > 0 {
			st = st.Advance([]byte{text[i-1]})
		}
		require.False(t, st.Dead(), text[:i])
		require.Equal(t, allowed(t, slow, st), allowed(t, fast, st), "after %q", text[:i])
	}
}
