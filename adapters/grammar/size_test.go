package grammar

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optionalProperties is the CPU amplification: an object of n optional string properties (n =
// 20,000 is a 605 KB body that cost 148 s of CPU before the limits).
func optionalProperties(n int) []byte {
	ps := make([]string, n)
	for i := range ps {
		ps[i] = fmt.Sprintf(`"p%d":{"type":"string"}`, i)
	}
	return []byte(`{"type":"object","properties":{` + strings.Join(ps, ",") + `}}`)
}

// stopAfter is a context whose Err reports Canceled from its n+1-th call on: a walk or compile that looks at
// it stops after n looks, whatever the machine's speed (no timing in the test).
type stopAfter struct {
	context.Context
	left atomic.Int64
}

func newStopAfter(n int64) *stopAfter {
	c := &stopAfter{Context: context.Background()}
	c.left.Store(n)
	return c
}

func (c *stopAfter) Err() error {
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// The size limits refuse the schemas before anything is compiled: even with a context already
// done, the answer is the limit (a compile would have stopped on the context first).
func TestSchemaSizeLimits(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		name string
		doc  []byte
		what string
	}{
		{"20,000 properties (605 KB)", optionalProperties(20000), "schema bytes"},
		{"5,000 properties", optionalProperties(5000), "members of one schema object"},
		{"2,000 properties", optionalProperties(2000), "members of one schema object"},
		{"257 properties", optionalProperties(MaxProperties + 1), "members of one schema object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, ctx := range []context.Context{context.Background(), done} {
				_, err := CompileSchema(ctx, c.doc)
				var le *LimitError
				require.ErrorAs(t, err, &le)
				assert.ErrorIs(t, err, ErrTooLarge)
				assert.NotErrorIs(t, err, context.Canceled)
				assert.True(t, strings.HasPrefix(le.What, c.what), le.What)
				assert.Contains(t, err.Error(), "over the limit of")
				assert.ErrorIs(t, ValidateSchema(c.doc), ErrTooLarge)
			}
		})
	}
	_, err := CompileSchema(context.Background(), optionalProperties(MaxProperties))
	assert.NoError(t, err, "the limit itself is allowed")

	var le *LimitError
	_, err = CompileSchema(context.Background(), []byte(`{"type":"object","properties":{"a":{"type":"object","properties":{`+
		strings.TrimPrefix(strings.TrimSuffix(string(optionalProperties(300)), "}}"), `{"type":"object","properties":{`)+`}}}}`))
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "/properties/a/properties", le.Path, "the path names the object")

	// Many small objects: the objects limit.
	var items []string
	for i := range MaxSchemaObjects {
		items = append(items, fmt.Sprintf(`{"const":%d}`, i))
	}
	_, err = CompileSchema(context.Background(), []byte(`{"anyOf":[`+strings.Join(items, ",")+`]}`))
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "schema objects", le.What)

	// A tool set: the number of tools, and the schemas' bytes together.
	tools := make([]Tool, MaxTools+1)
	for i := range tools {
		tools[i] = Tool{Name: fmt.Sprintf("f%d", i)}
	}
	_, err = ToolCalls(context.Background(), tools, Hermes, false)
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "tools", le.What)
	big := optionalProperties(200) // about 5 KB each: 60 of them pass the bytes limit together
	tools = tools[:60]
	for i := range tools {
		tools[i].Parameters = big
	}
	_, err = StrictTools(context.Background(), tools, Hermes)
	require.ErrorAs(t, err, &le)
	assert.Equal(t, "schema bytes", le.What)
}

// A compile in progress stops when its context is done, at its next look.
func TestCompileStopsWithContext(t *testing.T) {
	doc := optionalProperties(MaxProperties)
	for _, looks := range []int64{0, 1, 2, 3} {
		_, err := CompileSchema(newStopAfter(looks), doc)
		assert.ErrorIs(t, err, context.Canceled, "after %d looks", looks)
	}
	_, err := CompileSchema(newStopAfter(1000), doc)
	assert.NoError(t, err, "a compile that is never cancelled finishes")
	_, err = ToolCalls(newStopAfter(2), []Tool{{Name: "f", Parameters: doc}}, Hermes, false)
	assert.ErrorIs(t, err, context.Canceled)
}

// A mask walk in progress stops at its next look at the context, and caches nothing.
func TestAllowedStopsMidWalk(t *testing.T) {
	toks := make([][]byte, 1<<14)
	for i := range toks {
		toks[i] = []byte(fmt.Sprintf(`"p%d":`, i))
	}
	g, err := CompileSchema(context.Background(), optionalProperties(MaxProperties))
	require.NoError(t, err)
	m, err := NewMatcher(g, NewVocab(toks), nil)
	require.NoError(t, err)
	st := m.Start().Advance([]byte(`{`))
	_, err = m.Allowed(newStopAfter(1), st) // the first look (after ctxEvery steps) passes, the second stops it
	require.True(t, errors.Is(err, context.Canceled), "%v", err)
	assert.Zero(t, m.Computed(), "a stopped walk caches nothing")
	mk, err := m.Allowed(context.Background(), st)
	require.NoError(t, err)
	assert.Equal(t, MaxProperties, mk.Count(), "each declared key is allowed")
}

// BenchmarkRefuseOversizedSchema is the cost of refusing the schemas (compare the 2 s, 11.7 s and
// 148 s they cost before the limits).
func BenchmarkRefuseOversizedSchema(b *testing.B) {
	for _, n := range []int{2000, 5000, 20000} {
		doc := optionalProperties(n)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := CompileSchema(context.Background(), doc); !errors.Is(err, ErrTooLarge) {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMaskManyProperties is one mask inside an object of MaxProperties optional properties, over
// Qwen3's vocabulary: the most a mask of an object's keys costs under the limits.
func BenchmarkMaskManyProperties(b *testing.B) {
	v, _ := qwenVocab(b)
	g, err := CompileSchema(context.Background(), optionalProperties(MaxProperties))
	require.NoError(b, err)
	for b.Loop() {
		m, err := NewMatcher(g, v, nil)
		require.NoError(b, err)
		if _, err := m.Allowed(context.Background(), m.Start().Advance([]byte(`{`))); err != nil {
			b.Fatal(err)
		}
	}
}
