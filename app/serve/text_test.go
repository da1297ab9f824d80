package serve

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/higgs-go/higgs/ports"
)

// runPipe feeds text through a textPipe in the given piece sizes (one fake token per character) and returns
// what was streamed, the accumulated result, and whether a stop string ended it.
func runPipe(t testing.TB, text string, sizes []int, stops []string, think, inThink bool) (streamed []ports.GenerateEvent, content, reasoning string, stopped bool) {
	var evs []ports.GenerateEvent
	p := newTextPipe(&strStream{}, stops, think, inThink, map[ports.Token]bool{-5: true},
		func(ev ports.GenerateEvent) error { evs = append(evs, ev); return nil })
	runes := []rune(text)
	i, k := 0, 0
	for i < len(runes) {
		n := 1
		if len(sizes) > 0 {
			n = max(1, sizes[k%len(sizes)])
			k++
		}
		n = min(n, len(runes)-i)
		ids := make([]ports.Token, n)
		for j := range n {
			ids[j] = ports.Token(runes[i+j])
		}
		i += n
		if err := p.push(ids); err != nil {
			require.ErrorIs(t, err, errStopString)
			stopped = true
			break
		}
	}
	require.NoError(t, p.finish())
	return evs, p.content.String(), p.reasoning.String(), stopped
}

// strStream is a StreamDecoder whose ids are Unicode code points.
type strStream struct{}

func (*strStream) Push(id ports.Token) (string, error) { return string(rune(id)), nil }
func (*strStream) Flush() string                       { return "" }

func TestStopStrings(t *testing.T) {
	cases := []struct {
		text, want string
		stops      []string
		stopped    bool
	}{
		{"hello world", "hello world", nil, false},
		{"hello world", "hello ", []string{"wor"}, true},
		{"hello world", "he", []string{"wor", "llo"}, true},
		{"hello world", "hello world", []string{"word"}, false},
		{"aaab", "a", []string{"aab"}, true},
		{"ab", "ab", []string{"abc"}, false},
		{"x</s>y", "x", []string{"</s>"}, true},
		{"héllo wörld", "héllo w", []string{"ör"}, true},
		{"stop", "", []string{"stop"}, true},
	}
	for _, c := range cases {
		for _, sizes := range [][]int{{1}, {2}, {3, 1}, {100}} {
			evs, content, _, stopped := runPipe(t, c.text, sizes, c.stops, false, false)
			assert.Equal(t, c.want, content, "%q stops %q sizes %v", c.text, c.stops, sizes)
			assert.Equal(t, c.stopped, stopped, "%q stops %q", c.text, c.stops)
			var streamed strings.Builder
			for _, ev := range evs {
				streamed.WriteString(ev.Content)
			}
			assert.Equal(t, content, streamed.String())
		}
	}
}

// TestStopHoldsBackOnlyPossiblePrefixes checks that streaming releases text as soon as it cannot start a
// stop string.
func TestStopHoldsBackOnlyPossiblePrefixes(t *testing.T) {
	m := stopMatcher{stops: []string{"END", "xyz"}}
	out, hit := m.feed("abcE")
	assert.False(t, hit)
	assert.Equal(t, "abc", out, "only 'E' may start END")
	out, _ = m.feed("N")
	assert.Equal(t, "", out)
	out, _ = m.feed("D!")
	assert.Equal(t, "", out)
	assert.Equal(t, "", m.flush())
	m = stopMatcher{stops: []string{"END"}}
	out, _ = m.feed("EN")
	assert.Equal(t, "", out)
	out, _ = m.feed("X")
	assert.Equal(t, "ENX", out)
}

func TestThinkSplit(t *testing.T) {
	cases := []struct {
		name                    string
		text                    string
		inThink                 bool
		wantContent, wantReason string
	}{
		{"plain answer", "Hello", false, "Hello", ""},
		{"think block first", "<think>\nreason here\n</think>\n\nThe answer.", false, "The answer.", "reason here\n"},
		{"leading space then think", "  <think>r</think>a", false, "a", "r"},
		{"prompt opened think", "step 1, step 2</think>\n\nDone", true, "Done", "step 1, step 2"},
		{"never closed", "thinking forever", true, "", "thinking forever"},
		{"tag inside answer is text", "Use <think> tags", false, "Use <think> tags", ""},
		{"second block is text", "<think>a</think>b<think>c</think>", false, "b<think>c</think>", "a"},
		{"partial tag at end", "<thi", false, "<thi", ""},
		{"partial close at end", "<think>abc</thi", false, "", "abc</thi"},
		{"empty think", "<think></think>x", false, "x", ""},
	}
	for _, c := range cases {
		for _, sizes := range [][]int{{1}, {2}, {5, 1}, {1000}} {
			evs, content, reason, _ := runPipe(t, c.text, sizes, nil, true, c.inThink)
			assert.Equal(t, c.wantContent, content, "%s sizes %v", c.name, sizes)
			assert.Equal(t, c.wantReason, reason, "%s sizes %v", c.name, sizes)
			var sc, sr strings.Builder
			for _, ev := range evs {
				sc.WriteString(ev.Content)
				sr.WriteString(ev.Reasoning)
			}
			assert.Equal(t, content, sc.String())
			assert.Equal(t, reason, sr.String())
		}
	}
}

func TestStopAndThinkTogether(t *testing.T) {
	_, content, reason, stopped := runPipe(t, "<think>plan STOP</think>answer STOP more", []int{3}, []string{"STOP"}, true, false)
	// Stop strings are matched on the raw output, reasoning included (as vLLM does).
	assert.True(t, stopped)
	assert.Equal(t, "", content)
	assert.Equal(t, "plan ", reason)
}

func TestEOSNeverText(t *testing.T) {
	var got strings.Builder
	p := newTextPipe(&strStream{}, nil, false, false, map[ports.Token]bool{'#': true},
		func(ev ports.GenerateEvent) error { got.WriteString(ev.Content); return nil })
	require.NoError(t, p.push([]ports.Token{'a', '#'}))
	require.NoError(t, p.finish())
	assert.Equal(t, "a", got.String())
}

// FuzzTextPipe checks that the streamed pieces always add up to the final result whatever the chunking,
// that results do not depend on chunking, and that no stop string is ever released.
func FuzzTextPipe(f *testing.F) {
	f.Add("<think>a</think>bSTOPc", "STOP", uint8(3), true, false)
	f.Add("hello", "lo", uint8(1), false, false)
	f.Add("x</think>y", "", uint8(2), true, true)
	f.Fuzz(func(t *testing.T, text, stop string, size uint8, think, inThink bool) {
		var stops []string
		if stop != "" {
			stops = []string{stop}
		}
		_, c1, r1, s1 := runPipe(t, text, []int{1}, stops, think, inThink)
		evs, c2, r2, s2 := runPipe(t, text, []int{int(size)}, stops, think, inThink)
		if c1 != c2 || r1 != r2 || s1 != s2 {
			t.Fatalf("chunking changed the result: (%q %q %v) vs (%q %q %v)", c1, r1, s1, c2, r2, s2)
		}
		var sc, sr strings.Builder
		for _, ev := range evs {
			sc.WriteString(ev.Content)
			sr.WriteString(ev.Reasoning)
		}
		if sc.String() != c2 || sr.String() != r2 {
			t.Fatalf("streamed pieces differ from the result")
		}
		if stop != "" && (strings.Contains(c2, stop) || strings.Contains(r2, stop)) {
			t.Fatalf("stop string %q released: %q / %q", stop, c2, r2)
		}
	})
}
