package chattemplate

import (
	"math"
	"strings"
	"testing"

	"github.com/ardanlabs/jinja"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// The expected strings are what Python 3's json.dumps prints (transformers' tojson: ensure_ascii=False).
func TestPyFloatRepr(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", -0.0 * 1: "0.0", 0.5: "0.5", 0.1: "0.1", 100: "100.0", 1234567: "1234567.0", 0.0001: "0.0001",
		0.00001: "1e-05", 1.5e-7: "1.5e-07", 1e15: "1000000000000000.0", 1e16: "1e+16", 1.5e16: "1.5e+16",
		1e100: "1e+100", -2.5: "-2.5", 123456789.125: "123456789.125", 1.0 / 3: "0.3333333333333333",
		math.Inf(1): "Infinity", math.Inf(-1): "-Infinity",
	} {
		assert.Equal(t, want, pyFloatRepr(f), "%v", f)
	}
	assert.Equal(t, "-0.0", pyFloatRepr(math.Copysign(0, -1)))
	assert.Equal(t, "NaN", pyFloatRepr(math.NaN()))
}

func TestToJSON(t *testing.T) {
	v, err := decodeJSON([]byte(`{"b": 1.0, "a": [1, 2.50, 1e2, true, null, {}], "s": "é<&>\u2028\"\\\n\t\u0001\u007f😀", "e": []}`))
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		kwargs map[string]jinja.Value
		want   string
	}{
		{"defaults", nil, `{"b": 1.0, "a": [1, 2.5, 100.0, true, null, {}], "s": "é<&>` + "\u2028" + `\"\\\n\t\u0001` + "\u007f" + `😀", "e": []}`},
		{"sort_keys and separators", map[string]jinja.Value{"sort_keys": jinja.NewBool(true),
			"separators": jinja.NewList([]jinja.Value{jinja.NewString(","), jinja.NewString(":")})},
			`{"a":[1,2.5,100.0,true,null,{}],"b":1.0,"e":[],"s":"é<&>` + "\u2028" + `\"\\\n\t\u0001` + "\u007f" + `😀"}`},
		{"ensure_ascii", map[string]jinja.Value{"ensure_ascii": jinja.NewBool(true)},
			`{"b": 1.0, "a": [1, 2.5, 100.0, true, null, {}], "s": "\u00e9<&>\u2028\"\\\n\t\u0001\u007f\ud83d\ude00", "e": []}`},
		{"indent", map[string]jinja.Value{"indent": jinja.NewInt(2)},
			"{\n  \"b\": 1.0,\n  \"a\": [\n    1,\n    2.5,\n    100.0,\n    true,\n    null,\n    {}\n  ],\n  \"s\": \"é<&>\u2028\\\"\\\\\\n\\t\\u0001\u007f😀\",\n  \"e\": []\n}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pyToJSON([]jinja.Value{v}, tc.kwargs)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.AsString())
		})
	}
	_, err = pyToJSON(nil, nil)
	assert.Error(t, err)
	_, err = pyToJSON([]jinja.Value{v}, map[string]jinja.Value{"separators": jinja.NewString(",")})
	assert.Error(t, err)
	// Positional arguments follow transformers' signature; unknown or repeated ones and undefined values fail as
	// they do in Python.
	got, err := pyToJSON([]jinja.Value{jinja.NewString("é"), jinja.NewBool(true)}, nil)
	require.NoError(t, err)
	assert.Equal(t, `"\u00e9"`, got.AsString())
	_, err = pyToJSON([]jinja.Value{v}, map[string]jinja.Value{"indnet": jinja.NewInt(2)})
	assert.Error(t, err)
	_, err = pyToJSON([]jinja.Value{v, jinja.NewBool(true)}, map[string]jinja.Value{"ensure_ascii": jinja.NewBool(true)})
	assert.Error(t, err)
	_, err = pyToJSON([]jinja.Value{jinja.Undefined()}, nil)
	assert.Error(t, err)
}

// TestToJSONOverride: a template's `tojson` is pyToJSON (the library's own would print 1.0 as "1" and escape
// U+2028), which also proves the library still resolves filters through filterOverridePrefix.
func TestToJSONOverride(t *testing.T) {
	tmpl, err := New(`{{ tools | tojson }}|{{ messages[0].content | tojson }}`, SpecialTokens{})
	require.NoError(t, err)
	got, err := tmpl.Render([]ports.ChatMessage{{Role: "user", Content: "a\u2028b"}},
		ports.ChatOptions{Tools: []byte(`[{"temperature": 1.0, "n": 2}]`)})
	require.NoError(t, err)
	assert.Equal(t, `[{"temperature": 1.0, "n": 2}]|"a`+"\u2028"+`b"`, got)
}

func TestRewriteToJSON(t *testing.T) {
	const py = pyToJSONName
	for _, tc := range []struct{ in, want string }{
		{`{{ x | tojson }}`, `{{ x | ` + py + ` }}`},
		{`{{x|tojson(indent=2)}}`, `{{x|` + py + `(indent=2)}}`},
		{`{{- x|string|tojson -}}`, `{{- x|string|` + py + ` -}}`},
		{`{%- set y = x | tojson %}`, `{%- set y = x | ` + py + ` %}`},
		{`{% filter tojson %}a{% endfilter %}`, `{% filter ` + py + ` %}a{% endfilter %}`},
		{`text | tojson {# x | tojson #}`, `text | tojson {# x | tojson #}`},
		{`{{ "| tojson" ~ '|tojson' }}`, `{{ "| tojson" ~ '|tojson' }}`},
		{`{{ tojson }}{{ x.tojson }}{{ x | tojson_x }}`, `{{ tojson }}{{ x.tojson }}{{ x | tojson_x }}`},
		{`{% raw %}{{ x | tojson }}{% endraw %}{{ y|tojson }}`, `{% raw %}{{ x | tojson }}{% endraw %}{{ y|` + py + ` }}`},
		{`{{ "a\"|tojson" | tojson }}`, `{{ "a\"|tojson" | ` + py + ` }}`},
		{`{ not a tag } {{ unclosed | tojson`, `{ not a tag } {{ unclosed | ` + py},
		{`{# don't #}{{ x | tojson }}{# "a #}{{ y|tojson }}`, `{# don't #}{{ x | ` + py + ` }}{# "a #}{{ y|` + py + ` }}`},
	} {
		assert.Equal(t, tc.want, rewriteToJSON(tc.in), "%s", tc.in)
	}
}

// FuzzRewriteToJSON: the rewrite never panics and only ever renames the filter (undoing the rename gives the
// input back, for inputs that do not already contain the new name).
func FuzzRewriteToJSON(f *testing.F) {
	for _, s := range []string{`{{ x | tojson }}`, `{% filter tojson %}{% endfilter %}`, `{% raw %}{{|tojson}}`,
		`{{ "\"" | tojson }}`, `{#`, `{{'`, `{%- if a -%}{{ b|tojson(indent=2) }}{% endif %}`, "{\x00{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		got := rewriteToJSON(src)
		if !strings.Contains(src, pyToJSONName) {
			assert.Equal(t, src, strings.ReplaceAll(got, pyToJSONName, "tojson"))
		}
	})
}
