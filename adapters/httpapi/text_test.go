package httpapi

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestInvalidText(t *testing.T) {
	for _, c := range []struct {
		doc  string
		path []any
	}{
		{"{\"a\":\"ok\",\"b\":[1,\"x\xffy\"]}", []any{"b", 1}},
		{"{\"messages\":[{\"role\":\"user\",\"content\":\"hi \xc3\"}]}", []any{"messages", 0, "content"}},
		{"{\"a\":{\"k\xfe\":1}}", []any{"a", "k\ufffd"}},
		{`{"a":"\ud800"}`, []any{"a"}},
		{`{"a":"\udc00x"}`, []any{"a"}},
		{`{"a":"\ud800\u0041"}`, []any{"a"}},
		{"[\"\xed\xa0\x80\"]", []any{0}}, // a surrogate written in UTF-8
		{"\"\xc0\xaf\"", []any{}},        // an overlong form, the document a string
	} {
		path, found := InvalidText([]byte(c.doc))
		assert.True(t, found, c.doc)
		assert.Equal(t, c.path, append([]any{}, path...), c.doc)
	}
	for _, doc := range []string{
		`{"a":"ok","b":[1,true,null,-2.5e3,{"c":"é😀"}]}`,
		`{"a":"\ud83d\ude00 \u00e9 \\u \" \/"}`,
		`{"a":"\uFFFD written on purpose"}`,
		`{"a":`, // not JSON: the decoder says so
		``,
	} {
		_, found := InvalidText([]byte(doc))
		assert.False(t, found, doc)
	}
	deep := strings.Repeat("[", maxTextDepth+5) + "\"\xff\"" + strings.Repeat("]", maxTextDepth+5)
	_, found := InvalidText([]byte(deep))
	assert.False(t, found, "past the depth limit the scan gives up (encoding/json refuses such a document)")
}

// FuzzInvalidText holds the scanner to encoding/json: for a valid JSON document without U+FFFD of its own,
// some string is not text exactly when decoding it produces U+FFFD (the replacement of invalid UTF-8 and lone
// surrogates).
func FuzzInvalidText(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, "{\"a\":\"\xff\"}", `["\ud800"]`, "{\"k\xfe\":[1,{\"x\":\"\\udc00\"}]}", `"x"`, `[1,2,{"a":null}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		path, found := InvalidText(doc)
		if !json.Valid(doc) || bytes.Contains(doc, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(doc), []byte(`\ufffd`)) {
			return
		}
		var v any
		if err := json.Unmarshal(doc, &v); err != nil {
			return // too deep
		}
		repl := strings.Contains(dump(v), "\uFFFD")
		if found != repl {
			t.Fatalf("found %v (at %v), decoded with replacements %v: %q", found, path, repl, doc)
		}
	})
}

// dump writes every key and string of a decoded value.
func dump(v any) string {
	var sb strings.Builder
	var walk func(any)
	walk = func(x any) {
		switch t := x.(type) {
		case string:
			sb.WriteString(t)
		case []any:
			for _, e := range t {
				walk(e)
			}
		case map[string]any:
			for k, e := range t {
				sb.WriteString(k)
				walk(e)
			}
		}
	}
	walk(v)
	return sb.String()
}
