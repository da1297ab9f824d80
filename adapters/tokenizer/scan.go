package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written scanners for the two split patterns byte-level BPE tokenizers actually use. They give exactly
// the matches Oniguruma (what Hugging Face runs) finds for these patterns — leftmost-first alternation with
// backtracking worked out by hand below — at a fraction of a backtracking engine's cost. A differential fuzz
// test holds them to regexp2's answers.

// qwenPattern is the Split regex of Qwen2/Qwen2.5/Qwen3 tokenizers.
const qwenPattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// gpt2Pattern is the regex of the ByteLevel pre-tokenizer when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// charClass buckets a rune the way the patterns above look at it.
type charClass uint8

const (
	classEnd   charClass = iota // past the end of the input
	classL                      // \p{L}
	classN                      // \p{N}
	classSpace                  // \s other than \r and \n
	classNL                     // \r or \n
	classOther                  // anything else: [^\s\p{L}\p{N}]
)

var asciiClass [128]charClass

func init() {
	for r := rune(0); r < 128; r++ {
		asciiClass[r] = classifySlow(r)
	}
}

// isSpace is Oniguruma's Unicode \s: U+0009–U+000D, U+0085 and the Z categories; Go's unicode.IsSpace is the
// same set (the White_Space property).
func classifySlow(r rune) charClass {
	switch {
	case r == '\r' || r == '\n':
		return classNL
	case unicode.IsSpace(r):
		return classSpace
	case unicode.IsLetter(r):
		return classL
	case unicode.IsNumber(r):
		return classN
	default:
		return classOther
	}
}

// classAt returns the class of the rune at s[i:] and its width.
func classAt(s string, i int) (charClass, rune, int) {
	if i >= len(s) {
		return classEnd, 0, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], rune(c), 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	return classifySlow(r), r, w
}

func isWS(c charClass) bool { return c == classSpace || c == classNL }

// runOf returns the end of the run of runes starting at i whose class satisfies ok.
func runOf(s string, i int, ok func(charClass) bool) int {
	for i < len(s) {
		c, _, w := classAt(s, i)
		if !ok(c) {
			break
		}
		i += w
	}
	return i
}

func isL(c charClass) bool     { return c == classL }
func isN(c charClass) bool     { return c == classN }
func isOther(c charClass) bool { return c == classOther }
func isNL(c charClass) bool    { return c == classNL }

// whitespaceEnd handles the three whitespace alternatives shared by both patterns except `\s*[\r\n]+`:
// `\s+(?!\S)` then `\s+`, for a whitespace run starting at i.
func whitespaceEnd(s string, i int) int {
	j := runOf(s, i, isWS)
	if j == len(s) {
		return j
	}
	// Backtrack one rune so that the run is followed by whitespace, when the run is longer than one rune.
	_, w := utf8.DecodeLastRuneInString(s[:j])
	if j-w > i {
		return j - w
	}
	return j
}

// foldASCII lower-cases an ASCII letter; Oniguruma's (?i) also folds U+017F LONG S to 's'.
func foldASCII(r rune) rune {
	if r == 0x17F {
		return 's'
	}
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// contraction matches 's 't 're 've 'm 'll 'd at s[i:] (s[i] == '\”) and returns the end, or -1.
func contraction(s string, i int, fold bool) int {
	next := func(j int) (rune, int) {
		if j >= len(s) {
			return 0, 0
		}
		r, w := utf8.DecodeRuneInString(s[j:])
		if fold {
			r = foldASCII(r)
		}
		return r, w
	}
	r1, w1 := next(i + 1)
	switch r1 {
	case 's', 't', 'm', 'd':
		return i + 1 + w1
	case 'r', 'v', 'l':
		r2, w2 := next(i + 1 + w1)
		if (r1 == 'r' || r1 == 'v') && r2 == 'e' || r1 == 'l' && r2 == 'l' {
			return i + 1 + w1 + w2
		}
	}
	return -1
}

// qwenNext returns the end of the match of qwenPattern starting at i (i < len(s)). Every rune starts a
// match, so the pattern never leaves gaps.
func qwenNext(s string, i int) int {
	c, r, w := classAt(s, i)
	if r == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c == classL {
		return runOf(s, i+w, isL)
	}
	if c == classSpace || c == classOther {
		if c2, _, _ := classAt(s, i+w); c2 == classL {
			return runOf(s, i+w, isL)
		}
	}
	// \p{N}
	if c == classN {
		return i + w
	}
	// ` ?[^\s\p{L}\p{N}]+[\r\n]*`
	if r == ' ' {
		if c2, _, _ := classAt(s, i+1); c2 == classOther {
			return runOf(s, runOf(s, i+1, isOther), isNL)
		}
	}
	if c == classOther {
		return runOf(s, runOf(s, i, isOther), isNL)
	}
	// c is whitespace from here on. `\s*[\r\n]+` ends after the last newline of the whitespace run.
	j, lastNL := i, -1
	for j < len(s) {
		cj, _, wj := classAt(s, j)
		if !isWS(cj) {
			break
		}
		if cj == classNL {
			lastNL = j + wj
		}
		j += wj
	}
	if lastNL > 0 {
		return lastNL
	}
	return whitespaceEnd(s, i)
}

// gpt2Next returns the end of the match of gpt2Pattern starting at i (i < len(s)).
func gpt2Next(s string, i int) int {
	c, r, w := classAt(s, i)
	if r == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	if r == ' ' {
		switch c2, _, _ := classAt(s, i+1); c2 {
		case classL:
			return runOf(s, i+1, isL)
		case classN:
			return runOf(s, i+1, isN)
		case classOther:
			return runOf(s, i+1, isOther)
		}
	}
	switch c {
	case classL:
		return runOf(s, i, isL)
	case classN:
		return runOf(s, i, isN)
	case classOther:
		return runOf(s, i, isOther)
	}
	_ = w
	return whitespaceEnd(s, i)
}
