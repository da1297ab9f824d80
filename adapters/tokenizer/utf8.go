package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// validPrefixLen reports how many leading bytes of b form a valid UTF-8 sequence prefix starting at a lead
// byte (0 when b[0] cannot start a sequence) and the full length that sequence needs.
func validPrefixLen(b []byte) (have, need int) {
	c := b[0]
	var lo, hi byte = 0x80, 0xBF
	switch {
	case c < 0x80:
		return 1, 1
	case c >= 0xC2 && c <= 0xDF:
		need = 2
	case c == 0xE0:
		need, lo = 3, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 3
	case c == 0xED:
		need, hi = 3, 0x9F
	case c == 0xF0:
		need, lo = 4, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 4
	case c == 0xF4:
		need, hi = 4, 0x8F
	default:
		return 0, 1
	}
	have = 1
	for have < need && have < len(b) {
		x := b[have]
		if have == 1 {
			if x < lo || x > hi {
				break
			}
		} else if x < 0x80 || x > 0xBF {
			break
		}
		have++
	}
	return have, need
}

// appendLossy appends b to sb, replacing each maximal ill-formed subsequence by one U+FFFD (the Unicode
// "substitution of maximal subparts" practice used by Rust's from_utf8_lossy and Python's errors="replace").
// When holdTail is true, an incomplete but so-far valid sequence at the very end is not written; its length
// is returned so a stream decoder can wait for the rest.
func appendLossy(sb *strings.Builder, b []byte, holdTail bool) (held int) {
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			sb.WriteByte(b[i])
			i++
			continue
		}
		have, need := validPrefixLen(b[i:])
		switch {
		case have == need:
			sb.Write(b[i : i+need])
			i += need
		case have == 0:
			sb.WriteRune(utf8.RuneError)
			i++
		case i+have == len(b) && holdTail:
			return have
		default:
			sb.WriteRune(utf8.RuneError)
			i += have
		}
	}
	return 0
}

// sanitizeUTF8 returns s unchanged when it is valid UTF-8 and otherwise with invalid parts replaced.
func sanitizeUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var sb strings.Builder
	appendLossy(&sb, []byte(s), false)
	return sb.String()
}
