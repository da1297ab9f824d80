package grammar

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func accepts(g *Grammar, text string) bool {
	return g.Start().Advance([]byte(text)).Accepting()
}

func alive(g *Grammar, text string) bool {
	return !g.Start().Advance([]byte(text)).Dead()
}

func mustSchema(t *testing.T, doc string) *Grammar {
	t.Helper()
	g, err := CompileSchema(context.Background(), []byte(doc))
	require.NoError(t, err, doc)
	return g
}

func TestSchemaLanguage(t *testing.T) {
	cases := []struct {
		name   string
		schema string
		yes    []string
		no     []string
	}{
		{"object", `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`,
			[]string{`{"a":1}`, `{"a": -12, "b": "x"}`, "{\n  \"a\": 0,\n  \"b\": \"\"\n}"},
			[]string{`{}`, `{"b":"x"}`, `{"b":"x","a":1}`, `{"a":1.5}`, `{"a":01}`, `{"a":1,}`, `{"a":1} `, `{"c":1}`}},
		{"optional order", `{"type":"object","properties":{"x":{"type":"boolean"},"y":{"type":"null"},"z":{"type":"boolean"}},"required":["z"]}`,
			[]string{`{"z":true}`, `{"x":false,"z":true}`, `{"y":null,"z":false}`, `{"x":true,"y":null,"z":true}`},
			[]string{`{"x":true}`, `{"z":true,"x":true}`, `{}`}},
		{"enum", `{"enum":["red","green",3,null,{"k":[1]}]}`,
			[]string{`"red"`, `"green"`, `3`, `null`, `{"k":[1]}`},
			[]string{`"blue"`, `"re"`, `30`, `{"k": [1]}`}},
		{"const", `{"const":"a<b"}`, []string{`"a<b"`}, []string{`"a\u003cb"`, `"a"`}},
		{"array", `{"type":"array","items":{"type":"number"},"minItems":1,"maxItems":3}`,
			[]string{`[1]`, `[1.5, -2e10, 0]`, `[0.25,1,2]`},
			[]string{`[]`, `[1,2,3,4]`, `[1,]`, `[.5]`, `[1.]`, `[-]`}},
		{"string bounds", `{"type":"string","minLength":2,"maxLength":3}`,
			[]string{`"ab"`, `"abc"`, `"é\n"`, `"\u00e9x"`},
			[]string{`"a"`, `"abcd"`, "\"a\x01\"", `"\ud800x"`, `"\q"`}},
		{"anyOf", `{"anyOf":[{"type":"string"},{"type":"integer","minimum":0}]}`,
			[]string{`"x"`, `0`, `17`}, []string{`-1`, `true`}},
		{"type array", `{"type":["string","null"]}`, []string{`"x"`, `null`}, []string{`1`}},
		{"integer bounds", `{"type":"integer","minimum":-5,"maximum":120}`,
			[]string{`-5`, `0`, `7`, `99`, `120`, `-0`}, []string{`-6`, `121`, `1000`, `-10`, `1.0`}},
		{"number bounds", `{"type":"number","minimum":0.5,"maximum":2.25}`,
			[]string{`0.5`, `1`, `2.25`, `2.2`, `0.75`}, []string{`0.4`, `2.26`, `3`, `-1`, `1e0`}},
		{"ref", `{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],"additionalProperties":false}},"$ref":"#/$defs/node"}`,
			[]string{`{"v":1,"next":null}`, `{"v":1,"next":{"v":2,"next":null}}`},
			[]string{`{"v":1}`, `{"v":1,"next":{"v":2}}`}},
		{"free", `{}`, []string{`1`, `"s"`, `{"a":[1,{"b":null}]}`, `[true,false]`}, []string{`{a:1}`, `[1 2]`, `nul`}},
		{"utf8", `{"type":"string"}`, []string{"\"日本\"", "\"\U0001F600\""}, []string{"\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\""}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := mustSchema(t, c.schema)
			for _, y := range c.yes {
				assert.True(t, accepts(g, y), "should accept %s", y)
			}
			for _, n := range c.no {
				assert.False(t, accepts(g, n), "should refuse %s", n)
			}
		})
	}
}

func TestPrefixesStayAlive(t *testing.T) {
	g := mustSchema(t, `{"type":"integer","minimum":100,"maximum":150}`)
	assert.True(t, alive(g, "1"))
	assert.True(t, alive(g, "14"))
	assert.False(t, alive(g, "16"))
	assert.False(t, alive(g, "2"))
	assert.False(t, accepts(g, "14"))
	assert.True(t, accepts(g, "145"))
}

func TestUnsupportedKeywordsNamed(t *testing.T) {
	for kw, doc := range map[string]string{
		"pattern":              `{"type":"string","pattern":"^a"}`,
		"oneOf":                `{"oneOf":[{"type":"string"}]}`,
		"allOf":                `{"allOf":[{"type":"string"}]}`,
		"exclusiveMinimum":     `{"type":"number","exclusiveMinimum":0}`,
		"multipleOf":           `{"type":"integer","multipleOf":2}`,
		"additionalProperties": `{"type":"object","additionalProperties":{"type":"string"}}`,
		"patternProperties":    `{"type":"object","properties":{"a":{"patternProperties":{"x":{}}}}}`,
		"prefixItems":          `{"type":"array","prefixItems":[{}]}`,
		"uniqueItems":          `{"type":"array","uniqueItems":true}`,
		"$ref":                 `{"$ref":"https://example.com/s.json"}`,
		"not":                  `{"not":{"type":"string"}}`,
	} {
		_, err := CompileSchema(context.Background(), []byte(doc))
		var se *SchemaError
		require.ErrorAs(t, err, &se, kw)
		assert.Equal(t, kw, se.Keyword, doc)
		assert.Contains(t, err.Error(), kw)
	}
	for _, doc := range []string{`{"type":"strin"}`, `{"type":"array","minItems":-1}`, `[`, `false`,
		`{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, `{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`} {
		_, err := CompileSchema(context.Background(), []byte(doc))
		assert.Error(t, err, doc)
	}
}

func TestToolCalls(t *testing.T) {
	g, err := ToolCalls(context.Background(), []Tool{
		{Name: "get_weather", Parameters: []byte(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false}`)},
		{Name: "now"},
	}, Hermes, true)
	require.NoError(t, err)
	one := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
	assert.True(t, accepts(g, one))
	assert.True(t, accepts(g, "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"))
	assert.True(t, accepts(g, one+"\n"+one))
	assert.False(t, accepts(g, "<tool_call>\n{\"name\":\"now\",\"arguments\":{\"x\":1}}\n</tool_call>"))
	assert.False(t, accepts(g, "<tool_call>\n{\"name\":\"other\",\"arguments\":{}}\n</tool_call>"))
	assert.False(t, accepts(g, "hello"))
	// A parallel answer ends after MaxParallelCalls calls: nothing but EOS may follow the last.
	calls := one
	for range MaxParallelCalls - 1 {
		assert.True(t, alive(g, calls+"\n"), "call %d of %d", strings.Count(calls, "<tool_call>"), MaxParallelCalls)
		calls += "\n" + one
	}
	assert.True(t, accepts(g, calls))
	assert.False(t, alive(g, calls+"\n"))

	single, err := ToolCalls(context.Background(), []Tool{{Name: "now"}}, Hermes, false)
	require.NoError(t, err)
	call := "<tool_call>\n{\"name\":\"now\",\"arguments\":{}}\n</tool_call>"
	assert.True(t, accepts(single, call))
	assert.False(t, alive(single, call+"\n"))
}

func TestAfterReasoning(t *testing.T) {
	g := JSONObject().AfterReasoning("<think>", "</think>", false)
	assert.True(t, accepts(g, `{"a":1}`))
	assert.True(t, accepts(g, "<think>\nhmm {</think>\n\n{\"a\":1}"))
	assert.False(t, accepts(g, "<think>never closed"))
	in := JSONObject().AfterReasoning("<think>", "</think>", true)
	assert.True(t, accepts(in, "ok </thi </think>{}"))
	assert.False(t, accepts(in, "{}"))
}

func TestMaskOverVocab(t *testing.T) {
	toks := [][]byte{[]byte("{"), []byte("}"), []byte(`"`), []byte(`"a"`), []byte(":"), []byte("1"), []byte("12"),
		[]byte(`{"a":`), []byte(" "), nil, []byte("x")}
	v := NewVocab(toks)
	g := mustSchema(t, `{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}`)
	m, err := NewMatcher(g, v, []int32{9})
	require.NoError(t, err)
	s := m.Start()
	mk := allowed(t, m, s)
	assert.Equal(t, []bool{true, false, false, false, false, false, false, true, false, false, false}, bitsOf(mk, len(toks)))
	s = m.Advance(s, 7) // {"a":
	mk = allowed(t, m, s)
	assert.True(t, mk.Has(5) && mk.Has(6) && mk.Has(8))
	assert.False(t, mk.Has(1) || mk.Has(9))
	s = m.Advance(m.Advance(s, 6), 1)
	mk = allowed(t, m, s)
	assert.Equal(t, 1, mk.Count())
	assert.True(t, mk.Has(9), "only EOS after the object")
	assert.Equal(t, 3, m.Computed())
	allowed(t, m, s)
	assert.Equal(t, 3, m.Computed(), "cached")
}

func bitsOf(m Mask, n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = m.Has(int32(i))
	}
	return out
}

func TestStrictTools(t *testing.T) {
	g, err := StrictTools(context.Background(), []Tool{{Name: "f", Parameters: []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}}, Hermes)
	require.NoError(t, err)
	assert.True(t, accepts(g, ""))
	assert.True(t, accepts(g, "just text <tool_ca"))
	assert.True(t, accepts(g, "x <tool_call>\n{\"name\":\"f\",\"arguments\":{\"n\":3}}\n</tool_call> more"))
	assert.False(t, alive(g, "x <tool_call>\n{\"name\":\"g\""))
	assert.False(t, accepts(g, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"n\":3}}"))
	assert.False(t, alive(g, "<tool_call>\n{\"name\":\"f\",\"arguments\":{\"n\":\"x\""))
}

func TestLimits(t *testing.T) {
	alts := make([]string, maxAlternatives+1)
	for i := range alts {
		alts[i] = fmt.Sprintf(`{"const":%d}`, i)
	}
	_, err := CompileSchema(context.Background(), []byte(`{"anyOf":[`+strings.Join(alts, ",")+`]}`))
	var se *SchemaError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "anyOf", se.Keyword)
	vals := make([]string, maxEnum+1)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	_, err = CompileSchema(context.Background(), []byte(`{"enum":[`+strings.Join(vals, ",")+`]}`))
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "enum", se.Keyword)
}

func allowed(tb testing.TB, m *Matcher, s State) Mask {
	tb.Helper()
	mk, err := m.Allowed(context.Background(), s)
	require.NoError(tb, err)
	return mk
}
