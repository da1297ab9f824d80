package toolcall_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/adapters/toolcall"
)

type call = toolcall.Call

var parseCases = []struct {
	name    string
	text    string
	content string
	calls   []call
}{
	{"plain text", "Hello, world!\n", "Hello, world!\n", nil},
	{"empty", "", "", nil},
	{"whitespace only", " \n", " \n", nil},
	{"one call", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>", "",
		[]call{{"get_weather", `{"location": "Paris"}`}}},
	{"content then call", "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
		"Let me check.", []call{{"f", `{"a": 1}`}}},
	{"parallel calls", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": \"東京\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>\n",
		"", []call{{"f", `{"x": "東京"}`}, {"g", `{}`}}},
	{"arguments as written", "<tool_call>{\"name\":\"s\",\"arguments\": {\"z\":1.50,\n \"a\":[1, 2],\"m\":{\"q\":1e3}} }</tool_call>", "",
		[]call{{"s", "{\"z\":1.50,\n \"a\":[1, 2],\"m\":{\"q\":1e3}}"}}},
	{"no HTML escaping", `<tool_call>{"name":"s","arguments":{"q":"<a> & b"}}</tool_call>`, "", []call{{"s", `{"q":"<a> & b"}`}}},
	{"arguments as a string", `<tool_call>{"name": "f", "arguments": " {\"a\": 1}"}</tool_call>`, "", []call{{"f", `{"a": 1}`}}},
	{"parameters as an alias of arguments", `<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>`, "", []call{{"f", `{"a": 1}`}}},
	{"arguments win over parameters", `<tool_call>{"name": "f", "arguments": {"b": 2}, "parameters": {"a": 1}}</tool_call>`, "", []call{{"f", `{"b": 2}`}}},
	{"arguments absent", `<tool_call>{"name": "now"}</tool_call>`, "", []call{{"now", `{}`}}},
	{"arguments null", `<tool_call>{"name": "now", "arguments": null}</tool_call>`, "", []call{{"now", `{}`}}},
	{"text after a call", "<tool_call>{\"name\": \"f\"}</tool_call>\n\nDone.", "Done.", []call{{"f", `{}`}}},
	{"text between calls", "A\n<tool_call>{\"name\": \"f\"}</tool_call>\nB\n<tool_call>{\"name\": \"g\"}</tool_call>\n", "A\nB",
		[]call{{"f", `{}`}, {"g", `{}`}}},
	{"unclosed complete block at the end", "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n", "",
		[]call{{"f", `{"a": 1}`}}},
	{"unclosed truncated block is dropped", "Hi\n<tool_call>\n{\"name\": \"f\", \"argu", "Hi", nil},
	{"unclosed block alone is dropped", "<tool_call>\n{\"name\": \"f\"", "", nil},
	{"malformed JSON", "A\n<tool_call>\n{name: f}\n</tool_call>\nB", "A\n<tool_call>\n{name: f}\n</tool_call>\nB", nil},
	{"name missing", `<tool_call>{"arguments": {}}</tool_call>`, `<tool_call>{"arguments": {}}</tool_call>`, nil},
	{"name empty", `<tool_call>{"name": ""}</tool_call>`, `<tool_call>{"name": ""}</tool_call>`, nil},
	{"name not a string", `<tool_call>{"name": 3}</tool_call>`, `<tool_call>{"name": 3}</tool_call>`, nil},
	{"arguments an array", `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`, `<tool_call>{"name": "f", "arguments": [1]}</tool_call>`, nil},
	{"arguments a string of non-object", `<tool_call>{"name": "f", "arguments": "x"}</tool_call>`, `<tool_call>{"name": "f", "arguments": "x"}</tool_call>`, nil},
	{"body an array", `<tool_call>[{"name": "f"}]</tool_call>`, `<tool_call>[{"name": "f"}]</tool_call>`, nil},
	{"trailing garbage in body", `<tool_call>{"name": "f"} x</tool_call>`, `<tool_call>{"name": "f"} x</tool_call>`, nil},
	{"bad block then good block", "<tool_call>oops</tool_call>\n<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>oops</tool_call>",
		[]call{{"f", `{}`}}},
	{"good block then bad block", "<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>oops</tool_call>", "<tool_call>oops</tool_call>",
		[]call{{"f", `{}`}}},
	{"stray close tag", "a </tool_call> b", "a </tool_call> b", nil},
	{"partial open tag at the end is dropped", "see <tool_c", "see", nil},
	{"partial open tag after a call is dropped", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>\n<tool_", "", []call{{"f", "{}"}}},
	{"a lone < at the end stays", "a <", "a <", nil},
	{"a lone < that is all the text is dropped", " <", "", nil},
	{"close tag inside a JSON string ends the block", `<tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}}</tool_call>`,
		`<tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}}</tool_call>`, nil},
}

func TestParse(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			content, calls := toolcall.Parse(c.text, nil)
			assert.Equal(t, c.content, content)
			assert.Equal(t, c.calls, calls)
		})
	}
}

// feedPieces runs a Parser over pieces and returns everything it released.
func feedPieces(pieces []string) (string, []call, bool) {
	p := toolcall.Parser{Types: xmlTypes}
	var sb strings.Builder
	var calls []call
	for _, s := range pieces {
		c, k := p.Feed(s)
		sb.WriteString(c)
		calls = append(calls, k...)
	}
	c, k := p.Flush()
	sb.WriteString(c)
	return sb.String(), append(calls, k...), p.Called()
}

// feedParts runs a Parser over pieces and returns the parts it released, adjacent content joined.
func feedParts(pieces []string) []toolcall.Part {
	p := toolcall.Parser{Types: xmlTypes}
	var parts []toolcall.Part
	add := func(ps []toolcall.Part) {
		for _, pt := range ps {
			if n := len(parts); pt.Call == nil && n > 0 && parts[n-1].Call == nil {
				parts[n-1].Content += pt.Content
			} else {
				parts = append(parts, pt)
			}
		}
	}
	for _, s := range pieces {
		add(p.FeedParts(s))
	}
	add(p.FlushParts())
	return parts
}

// TestParseParts: content and calls come in the order the model wrote them.
func TestParseParts(t *testing.T) {
	text := "A\n<tool_call>\n{\"name\": \"f\"}\n</tool_call>\nB\n<tool_call>\n{\"name\": \"g\"}\n</tool_call>\n<tool_"
	f, g := call{"f", "{}"}, call{"g", "{}"}
	want := []toolcall.Part{{Content: "A"}, {Call: &f}, {Content: "\nB"}, {Call: &g}}
	assert.Equal(t, want, toolcall.ParseParts(text, nil))
	for i := range len(text) + 1 {
		assert.Equal(t, want, feedParts([]string{text[:i], text[i:]}), "cut %d", i)
	}
}

// TestStreamingMatchesParse cuts every case at every byte (one piece per byte, and every two-piece split):
// the streamed result must be the whole-text result.
func TestStreamingMatchesParse(t *testing.T) {
	for _, c := range parseCases {
		t.Run(c.name, func(t *testing.T) {
			var bytes []string
			for i := range len(c.text) {
				bytes = append(bytes, c.text[i:i+1])
			}
			content, calls, called := feedPieces(bytes)
			assert.Equal(t, c.content, content, "byte by byte")
			assert.Equal(t, c.calls, calls, "byte by byte")
			assert.Equal(t, len(c.calls) > 0, called)
			for i := range len(c.text) + 1 {
				content, calls, _ := feedPieces([]string{c.text[:i], c.text[i:]})
				assert.Equal(t, c.content, content, "split at %d", i)
				assert.Equal(t, c.calls, calls, "split at %d", i)
			}
		})
	}
}

// TestStreamingHoldsBackOnlyWhatItMust checks what is released while the text is still being written: the
// content before a block goes out before the block is complete, a partial tag and whitespace that may
// precede a block wait, and a call comes out as soon as its block closes.
func TestStreamingHoldsBackOnlyWhatItMust(t *testing.T) {
	var p toolcall.Parser
	steps := []struct {
		in      string
		content string
		calls   []call
	}{
		{"Let me ", "Let me", nil},
		{"check.\n<tool_c", " check.", nil},
		{"all>\n{\"name\": \"f\",", "", nil},
		{" \"arguments\": {}}\n</tool_", "", nil},
		{"call>\n<tool_call>{\"name\": \"g\"}</tool_call>", "", []call{{"f", "{}"}, {"g", "{}"}}},
		{"\n", "", nil},
	}
	for i, s := range steps {
		c, k := p.Feed(s.in)
		assert.Equal(t, s.content, c, "step %d", i)
		assert.Equal(t, s.calls, k, "step %d", i)
	}
	c, k := p.Flush()
	assert.Empty(t, c)
	assert.Empty(t, k)
	assert.True(t, p.Called())
}

// FuzzParse checks, for any text and any cut into two or three pieces, that nothing panics, that the
// streamed result equals Parse's, that text without calls comes back unchanged, and that every call has a
// name and a JSON object as arguments. The seed corpus is in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	for _, c := range parseCases {
		f.Add(c.text, uint16(len(c.text)/3), uint16(len(c.text)/2))
	}
	f.Fuzz(func(t *testing.T, text string, a, b uint16) {
		content, calls := toolcall.Parse(text, xmlTypes)
		i, j := int(a)%(len(text)+1), int(b)%(len(text)+1)
		if i > j {
			i, j = j, i
		}
		got, gotCalls, called := feedPieces([]string{text[:i], text[i:j], text[j:]})
		require.Equal(t, content, got, "streamed content, cuts %d %d", i, j)
		require.Equal(t, calls, gotCalls, "streamed calls, cuts %d %d", i, j)
		require.Equal(t, len(calls) > 0, called)
		require.Equal(t, toolcall.ParseParts(text, xmlTypes), feedParts([]string{text[:i], text[i:j], text[j:]}), "streamed parts, cuts %d %d", i, j)
		if len(calls) == 0 && !strings.Contains(text, toolcall.Open) && !endsInTag(text) && strings.TrimLeft(text, " \t\r\n") != "<" {
			require.Equal(t, text, content, "text without calls must come back unchanged")
		}
		// The start of a tag at the end is dropped (once: in "<t<t" the first "<t" is text).
		if endsInTag(text) && !endsInTag(strings.TrimSuffix(text, "<t")) {
			require.False(t, endsInTag(content), "content %q ends in a partial tag", content)
		}
		if utf8.ValidString(text) {
			require.True(t, utf8.ValidString(content), "content %q", content)
		}
		for _, c := range calls {
			require.NotEmpty(t, c.Name)
			var obj map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(c.Arguments), &obj), "arguments %q", c.Arguments)
			require.NotNil(t, obj, "arguments %q must be an object", c.Arguments)
		}
	})
}

// endsInTag reports whether s ends inside an opening tag ("<t" … "<tool_call"), which Parse drops.
func endsInTag(s string) bool {
	for n := 2; n < len(toolcall.Open); n++ {
		if strings.HasSuffix(s, toolcall.Open[:n]) {
			return true
		}
	}
	return false
}

// xmlTypes are the parameter types of the tools the XML cases call (what ParamTypesOf reads from a request).
var xmlTypes = toolcall.ParamTypesOf([]byte(`[
	{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{
		"location":{"type":"string"},"days":{"type":"integer"},"scale":{"type":"number"},"hourly":{"type":"boolean"},
		"opts":{"type":"object"},"tags":{"type":"array"},"note":{"anyOf":[{"type":"string"},{"type":"null"}]},
		"limit":{"type":["integer","null"]},"any":{}}}}},
	{"type":"function","function":{"name":"now"}}]`))

func TestParamTypesOf(t *testing.T) {
	w := xmlTypes["get_weather"]
	assert.Equal(t, toolcall.ParamType{Type: "string"}, w["location"])
	assert.Equal(t, toolcall.ParamType{Type: "integer"}, w["days"])
	assert.Equal(t, toolcall.ParamType{Type: "string", Nullable: true}, w["note"])
	assert.Equal(t, toolcall.ParamType{Type: "integer", Nullable: true}, w["limit"])
	assert.Equal(t, toolcall.ParamType{Type: "string"}, w["any"])
	assert.Empty(t, xmlTypes["now"])
	assert.Nil(t, toolcall.ParamTypesOf([]byte(`{`)))
}

func TestParseXML(t *testing.T) {
	cases := []struct {
		name    string
		text    string
		content string
		calls   []call
	}{
		{"Qwen3.5 layout", "Let me look.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>",
			"Let me look.", []call{{"get_weather", `{"location": "Paris", "days": 3}`}}},
		{"values by type", "<tool_call><function=get_weather><parameter=scale>2.50</parameter><parameter=hourly>True</parameter>" +
			"<parameter=opts>{\"a\": [1, 2]}</parameter><parameter=tags>[\"x\"]</parameter><parameter=note>None</parameter>" +
			"<parameter=limit>null</parameter><parameter=any>{\"k\": 1}</parameter><parameter=days>1.0</parameter></function></tool_call>", "",
			[]call{{"get_weather", `{"scale": 2.5, "hourly": true, "opts": {"a":[1,2]}, "tags": ["x"], "note": null, "limit": null, "any": "{\"k\": 1}", "days": "1.0"}`}}},
		{"multi-line string kept, HTML not escaped", "<tool_call>\n<function=get_weather>\n<parameter=location>\nline 1\n<b>line 2</b>\n\n</parameter>\n</function>\n</tool_call>", "",
			[]call{{"get_weather", "{\"location\": \"line 1\\n<b>line 2</b>\\n\"}"}}},
		{"unknown function: strings", "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>", "",
			[]call{{"other", `{"n": "5"}`}}},
		{"no parameters", "<tool_call>\n<function=now>\n</function>\n</tool_call>", "", []call{{"now", `{}`}}},
		{"bad number stays a string", "<tool_call><function=get_weather><parameter=days>three</parameter></function></tool_call>", "",
			[]call{{"get_weather", `{"days": "three"}`}}},
		{"two XML calls", "<tool_call>\n<function=now>\n</function>\n</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=location>\nTokyo\n</parameter>\n</function>\n</tool_call>", "",
			[]call{{"now", `{}`}, {"get_weather", `{"location": "Tokyo"}`}}},
		// As vLLM's qwen3_coder parser: missing close tags are tolerated, a value ends at the next parameter.
		{"missing </function>", "<tool_call>\n<function=now>\n</tool_call>", "", []call{{"now", `{}`}}},
		{"missing </parameter>", "<tool_call><function=now><parameter=a>1</function></tool_call>", "", []call{{"now", `{"a": "1"}`}}},
		{"missing </parameter> before the next one", "<tool_call><function=get_weather><parameter=location>\nParis\n<parameter=days>\n3\n</parameter></function></tool_call>",
			"", []call{{"get_weather", `{"location": "Paris", "days": 3}`}}},
		{"text between parameters", "<tool_call><function=now>hi<parameter=a>1</parameter></function></tool_call>", "<tool_call><function=now>hi<parameter=a>1</parameter></function></tool_call>", nil},
		{"repeated parameter", "<tool_call><function=now><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>",
			"<tool_call><function=now><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>", nil},
		{"empty name", "<tool_call><function=></function></tool_call>", "<tool_call><function=></function></tool_call>", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			content, calls := toolcall.Parse(c.text, xmlTypes)
			assert.Equal(t, c.content, content)
			assert.Equal(t, c.calls, calls)
			for _, k := range calls {
				assert.True(t, json.Valid([]byte(k.Arguments)), k.Arguments)
			}
			for i := range len(c.text) + 1 {
				got, gotCalls, _ := feedPieces([]string{c.text[:i], c.text[i:]})
				require.Equal(t, c.content, got, "split at %d", i)
				require.Equal(t, c.calls, gotCalls, "split at %d", i)
			}
		})
	}
}
