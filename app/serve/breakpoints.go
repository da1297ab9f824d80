package serve

import (
	"slices"
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// cacheBreaks places a chat request's cache breakpoints in its prompt: breakpoint i (an index into the
// messages) is the prompt up to the end of message i's turn, found by rendering the conversation up to that
// message (no generation prompt) and encoding that text as the whole prompt was encoded. A breakpoint lands
// where that encoding stops agreeing with the prompt's, so the entry made there is exactly a prefix of this
// prompt and of the next request's (an agent's next turn resends the same messages and appends to them).
// A breakpoint that cannot be placed (a template that renders a shorter conversation differently, as Qwen3's
// does for the reasoning of turns before the last question) is dropped: the request still caches its prompt
// at the usual places.
func (s *Serve) cacheBreaks(l *loaded, req ports.GenerateRequest, enc encoded) []int {
	if req.Messages == nil || l.Template == nil || len(req.CacheBreakpoints) == 0 || len(enc.ids) == 0 {
		return nil
	}
	idx := slices.Clone(req.CacheBreakpoints)
	slices.Sort(idx)
	idx = slices.Compact(idx)
	opts := req.Chat
	opts.AddGenerationPrompt = false
	var out []int
	for _, i := range idx {
		if i < 0 || i >= len(req.Messages) {
			continue
		}
		text, err := l.Template.Render(req.Messages[:i+1], opts)
		if err != nil || text == "" || !strings.HasPrefix(enc.text, text) {
			s.log.Debug().Int("message", i).Msg("cache breakpoint dropped: the template renders the conversation up to it differently")
			continue
		}
		var plain []ports.Span
		for _, sp := range enc.plain {
			if sp.Start < len(text) {
				plain = append(plain, ports.Span{Start: sp.Start, End: min(sp.End, len(text))})
			}
		}
		ids, err := encodeText(l.Tokenizer, text, plain)
		if err != nil {
			continue
		}
		if n := commonPrefix(ids, enc.ids); n > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []ports.Token) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
