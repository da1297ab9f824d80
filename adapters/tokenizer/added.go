package tokenizer

import (
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedMatcher finds added tokens in text the way tokenizers' AddedVocabulary does with its leftmost-longest
// Aho-Corasick automaton. Added tokens are few, so candidates are bucketed by first byte and tried
// longest first.
type addedMatcher struct {
	byFirst [256][]*addedToken
	any     bool
}

func newAddedMatcher(tokens []*addedToken, content func(*addedToken) string) *addedMatcher {
	m := &addedMatcher{}
	type entry struct {
		tok *addedToken
		pat string
	}
	var entries []entry
	for _, t := range tokens {
		if p := content(t); p != "" {
			entries = append(entries, entry{t, p})
		}
	}
	// Longest first within a bucket; ties cannot happen (same content means same token).
	sort.SliceStable(entries, func(i, j int) bool { return len(entries[i].pat) > len(entries[j].pat) })
	for _, e := range entries {
		tok := *e.tok
		tok.content = e.pat
		m.byFirst[e.pat[0]] = append(m.byFirst[e.pat[0]], &tok)
		m.any = true
	}
	return m
}

// next returns the leftmost-longest match at or after i.
func (m *addedMatcher) next(s string, i int) (tok *addedToken, start int) {
	for ; i < len(s); i++ {
		for _, t := range m.byFirst[s[i]] {
			if strings.HasPrefix(s[i:], t.content) {
				return t, i
			}
		}
	}
	return nil, -1
}

// split calls fn for each piece of s in order: plain text (tok == nil) and added-token matches, honouring
// single_word, lstrip and rstrip as tokenizers' find_matches does.
func (m *addedMatcher) split(s string, fn func(piece string, tok *addedToken)) {
	if !m.any {
		fn(s, nil)
		return
	}
	startOffset := 0
	for i := 0; i < len(s); {
		t, start := m.next(s, i)
		if t == nil {
			break
		}
		stop := start + len(t.content)
		i = stop // a discarded match still consumes its text, as Aho-Corasick's find_iter does
		if t.singleWord {
			startSpace := start == 0 || !endsWithWord(s[:start])
			stopSpace := stop == len(s) || !startsWithWord(s[stop:])
			if !startSpace || !stopSpace {
				continue
			}
		}
		if t.lstrip {
			start = max(len(strings.TrimRightFunc(s[:start], unicode.IsSpace)), startOffset)
		}
		if t.rstrip {
			stop = len(s) - len(strings.TrimLeftFunc(s[stop:], unicode.IsSpace))
			i = max(i, stop)
		}
		if start < startOffset {
			start = startOffset
		}
		if startOffset < start {
			fn(s[startOffset:start], nil)
		}
		fn(s[start:stop], t)
		startOffset = stop
	}
	if startOffset != len(s) {
		fn(s[startOffset:], nil)
	}
}

// isWordChar is Rust regex's Unicode \w.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		r == 0x200C || r == 0x200D
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return s != "" && isWordChar(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return s != "" && isWordChar(r)
}
