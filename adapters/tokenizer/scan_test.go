package tokenizer

import (
	"testing"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// regexSplits returns the matches of pattern found by regexp2, the reference the scanners are held to.
func regexSplits(t testing.TB, pattern, s string) []string {
	t.Helper()
	re, err := regexp2.Compile(pattern, regexp2.None)
	require.NoError(t, err)
	var out []string
	regexMatcher{re}.matches(s, func(a, b int) { out = append(out, s[a:b]) })
	return out
}

func scanSplits(next func(string, int) int, s string) []string {
	var out []string
	scanMatcher(next).matches(s, func(a, b int) { out = append(out, s[a:b]) })
	return out
}

var scanCases = []string{
	"", "a", "Hello, world!", "it's We'RE they'll I'M 'x ''s", "'ſ", " 'll", "  hi  there   ",
	"x\n\ny", " \n \n x", "a \r\n b", "\t\tfoo", "trailing   ", "12345 67", "$foo #bar", " !!\n\n", "?!\r\n",
	"你好，世界", "e\u0301", "\u00a0x", "a\u3000\u3000b", "😀 😀", "x\u2028y", " \u0085z", "\v\fq",
}

func TestScannersMatchRegexp2(t *testing.T) {
	for _, s := range scanCases {
		assert.Equal(t, regexSplits(t, qwenPattern, s), scanSplits(qwenNext, s), "qwen %q", s)
		assert.Equal(t, regexSplits(t, gpt2Pattern, s), scanSplits(gpt2Next, s), "gpt2 %q", s)
	}
}

func FuzzScannersMatchRegexp2(f *testing.F) {
	for _, s := range scanCases {
		f.Add(s)
	}
	qwen := regexp2.MustCompile(qwenPattern, regexp2.None)
	gpt2 := regexp2.MustCompile(gpt2Pattern, regexp2.None)
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return // Encode sanitises before splitting
		}
		for _, c := range []struct {
			re   *regexp2.Regexp
			next func(string, int) int
		}{{qwen, qwenNext}, {gpt2, gpt2Next}} {
			var want []string
			regexMatcher{c.re}.matches(s, func(a, b int) { want = append(want, s[a:b]) })
			if got := scanSplits(c.next, s); !assert.Equal(t, want, got, "%q", s) {
				return
			}
		}
	})
}

func TestAppendLossyMaximalSubparts(t *testing.T) {
	// Expected values follow the Unicode "maximal subpart" practice (Rust from_utf8_lossy, Python "replace").
	cases := []struct{ in, want string }{
		{"abc", "abc"},
		{"\xe4\xbd", "\ufffd"},                 // truncated 3-byte sequence: one replacement
		{"\xe4\xbdx", "\ufffdx"},               // ditto, followed by ASCII
		{"\xff\xfe", "\ufffd\ufffd"},           // bytes that never start a sequence: one each
		{"\xed\xa0\x80", "\ufffd\ufffd\ufffd"}, // surrogate: the second byte is out of range for ED
		{"\xf0\x9f\x98", "\ufffd"},             // truncated emoji
		{"\xc0\xaf", "\ufffd\ufffd"},           // overlong
		{"\xf4\x90\x80\x80", "\ufffd\ufffd\ufffd\ufffd"},
		{"a\x80b", "a\ufffdb"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, sanitizeUTF8(c.in), "%q", c.in)
	}
}
