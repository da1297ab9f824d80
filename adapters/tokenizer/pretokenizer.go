package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
)

// matcher finds the non-overlapping matches of a split pattern, in order.
type matcher interface {
	matches(s string, fn func(start, end int))
}

// scanMatcher runs a hand-written scanner whose every position starts a match.
type scanMatcher func(s string, i int) int

func (m scanMatcher) matches(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		e := m(s, i)
		fn(i, e)
		i = e
	}
}

// regexMatcher is the general case: a regexp2 (.NET-flavoured, backtracking, with lookaround) regex compiled
// once at load. regexp2 reports rune offsets, which are converted back to byte offsets.
type regexMatcher struct{ re *regexp2.Regexp }

func (m regexMatcher) matches(s string, fn func(start, end int)) {
	runes := make([]rune, 0, len(s))
	byteAt := make([]int, 0, len(s)+1)
	for i, r := range s {
		runes = append(runes, r)
		byteAt = append(byteAt, i)
	}
	byteAt = append(byteAt, len(s))
	mt, err := m.re.FindRunesMatch(runes)
	for err == nil && mt != nil {
		fn(byteAt[mt.Index], byteAt[mt.Index+mt.Length])
		mt, err = m.re.FindNextMatch(mt)
	}
}

// literalMatcher matches a fixed string.
type literalMatcher string

func (m literalMatcher) matches(s string, fn func(start, end int)) {
	if m == "" {
		return
	}
	for i := 0; ; {
		j := strings.Index(s[i:], string(m))
		if j < 0 {
			return
		}
		fn(i+j, i+j+len(m))
		i += j + len(m)
	}
}

func compilePattern(pattern string) (matcher, error) {
	switch pattern {
	case qwenPattern:
		return scanMatcher(qwenNext), nil
	case gpt2Pattern:
		return scanMatcher(gpt2Next), nil
	}
	re, err := regexp2.Compile(pattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile split regex %q: %w", pattern, err)
	}
	return regexMatcher{re}, nil
}

type behavior uint8

const (
	behaviorIsolated behavior = iota
	behaviorRemoved
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

// splitStep is the Split pre-tokenizer.
type splitStep struct {
	m        matcher
	behavior behavior
	invert   bool
}

type segment struct {
	start, end int
	match      bool
}

func (st *splitStep) split(s string, emit func(string)) {
	if st.behavior == behaviorIsolated && !st.invert {
		// Every gap and every match is its own piece: no need to collect segments first.
		prev := 0
		st.m.matches(s, func(start, end int) {
			if prev != start {
				emit(s[prev:start])
			}
			if end > start {
				emit(s[start:end])
			}
			prev = end
		})
		if prev != len(s) {
			emit(s[prev:])
		}
		return
	}
	var segs []segment
	prev := 0
	st.m.matches(s, func(start, end int) {
		if prev != start {
			segs = append(segs, segment{prev, start, false})
		}
		segs = append(segs, segment{start, end, true})
		prev = end
	})
	if prev != len(s) {
		segs = append(segs, segment{prev, len(s), false})
	}
	if st.invert {
		for i := range segs {
			segs[i].match = !segs[i].match
		}
	}
	// Same folds as tokenizers' NormalizedString::split.
	var out []segment
	switch st.behavior {
	case behaviorIsolated:
		out = segs
	case behaviorRemoved:
		for _, sg := range segs {
			if !sg.match {
				out = append(out, sg)
			}
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, sg := range segs {
			if sg.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].end = sg.end
			} else {
				out = append(out, sg)
			}
			prevMatch = sg.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			sg := segs[i]
			if sg.match && !prevMatch && len(out) > 0 {
				out[len(out)-1].start = sg.start
			} else {
				out = append(out, sg)
			}
			prevMatch = sg.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case behaviorContiguous:
		prevMatch := false
		for _, sg := range segs {
			if sg.match == prevMatch && len(out) > 0 {
				out[len(out)-1].end = sg.end
			} else {
				out = append(out, sg)
			}
			prevMatch = sg.match
		}
	}
	for _, sg := range out {
		if sg.end > sg.start {
			emit(s[sg.start:sg.end])
		}
	}
}

// preTokenizer is the parsed pre_tokenizer: Split steps, then optionally a final ByteLevel step.
type preTokenizer struct {
	splits []*splitStep
	// byteLevel is true when the chain ends in ByteLevel: BPE then runs over bytes (each byte one symbol).
	byteLevel      bool
	addPrefixSpace bool
	// byteLevelRegex is the GPT-2 split ByteLevel applies when use_regex is true (nil otherwise).
	byteLevelRegex *splitStep
}

// run pre-tokenizes one piece of normalized text and calls emit with each non-empty word.
func (p *preTokenizer) run(s string, emit func(string)) {
	p.runFrom(0, s, emit)
}

func (p *preTokenizer) runFrom(i int, s string, emit func(string)) {
	if s == "" {
		return
	}
	if i < len(p.splits) {
		p.splits[i].split(s, func(part string) { p.runFrom(i+1, part, emit) })
		return
	}
	if p.byteLevel {
		// Hugging Face prepends the space to every piece that reaches ByteLevel, not only the first one.
		if p.addPrefixSpace && s[0] != ' ' {
			s = " " + s
		}
		if p.byteLevelRegex != nil {
			p.byteLevelRegex.split(s, emit)
			return
		}
	}
	emit(s)
}

func parsePreTokenizer(raw json.RawMessage) (*preTokenizer, error) {
	p := &preTokenizer{}
	if isNull(raw) {
		return p, nil
	}
	if err := p.add(raw); err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	return p, nil
}

func (p *preTokenizer) add(raw json.RawMessage) error {
	kind, err := componentType(raw)
	if err != nil {
		return err
	}
	if p.byteLevel {
		return fmt.Errorf("%s after ByteLevel: %w (ByteLevel must come last)", kind, ErrUnsupported)
	}
	switch kind {
	case "Sequence":
		var seq struct {
			PreTokenizers []json.RawMessage `json:"pretokenizers"`
		}
		if err := json.Unmarshal(raw, &seq); err != nil {
			return fmt.Errorf("Sequence: %w", err)
		}
		for i, sub := range seq.PreTokenizers {
			if err := p.add(sub); err != nil {
				return fmt.Errorf("Sequence[%d]: %w", i, err)
			}
		}
	case "Split":
		st, err := parseSplit(raw)
		if err != nil {
			return fmt.Errorf("Split: %w", err)
		}
		p.splits = append(p.splits, st)
	case "ByteLevel":
		var bl struct {
			AddPrefixSpace bool  `json:"add_prefix_space"`
			UseRegex       *bool `json:"use_regex"`
		}
		if err := json.Unmarshal(raw, &bl); err != nil {
			return fmt.Errorf("ByteLevel: %w", err)
		}
		p.byteLevel = true
		p.addPrefixSpace = bl.AddPrefixSpace
		// use_regex defaults to true in tokenizers when the field is absent.
		if bl.UseRegex == nil || *bl.UseRegex {
			p.byteLevelRegex = &splitStep{m: scanMatcher(gpt2Next), behavior: behaviorIsolated}
		}
	default:
		return fmt.Errorf("type %q: %w", kind, ErrUnsupported)
	}
	return nil
}

func parseSplit(raw json.RawMessage) (*splitStep, error) {
	var sp struct {
		Pattern struct {
			Regex  *string `json:"Regex"`
			String *string `json:"String"`
		} `json:"pattern"`
		Behavior string `json:"behavior"`
		Invert   bool   `json:"invert"`
	}
	if err := json.Unmarshal(raw, &sp); err != nil {
		return nil, err
	}
	st := &splitStep{invert: sp.Invert}
	switch {
	case sp.Pattern.Regex != nil:
		m, err := compilePattern(*sp.Pattern.Regex)
		if err != nil {
			return nil, err
		}
		st.m = m
	case sp.Pattern.String != nil:
		st.m = literalMatcher(*sp.Pattern.String)
	default:
		return nil, fmt.Errorf(`pattern has neither "Regex" nor "String"`)
	}
	switch sp.Behavior {
	case "Isolated":
		st.behavior = behaviorIsolated
	case "Removed":
		st.behavior = behaviorRemoved
	case "MergedWithPrevious":
		st.behavior = behaviorMergedWithPrevious
	case "MergedWithNext":
		st.behavior = behaviorMergedWithNext
	case "Contiguous":
		st.behavior = behaviorContiguous
	default:
		return nil, fmt.Errorf("behavior %q: %w", sp.Behavior, ErrUnsupported)
	}
	return st, nil
}
