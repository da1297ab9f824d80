package httpapi

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// InvalidText finds the first string of a JSON document, key or value, that is not text: invalid UTF-8, or a
// \u escape of a lone surrogate. encoding/json decodes both to U+FFFD, so the model would read characters
// the client never sent; OpenAI answers 400. It returns the string's path (object keys as strings, array
// indices as ints; a key at fault ends the path) and true, or false when every string is text. A document
// that is not JSON gives false at the first syntax error: the decoder reports that.
func InvalidText(doc []byte) (path []any, found bool) {
	if utf8.Valid(doc) && !bytes.Contains(doc, []byte(`\u`)) {
		return nil, false // the common case: nothing to look for
	}
	s := textScanner{b: doc}
	found, _ = s.value(0)
	return s.bad, found
}

// maxTextDepth bounds the nesting the scanner follows (encoding/json refuses documents deeper than 10,000).
const maxTextDepth = 10000

type textScanner struct {
	b []byte
	i int
	// path is where the scan is; bad the path of the string found.
	path, bad []any
}

// fail records the string at the current path (and key, when a key is at fault).
func (s *textScanner) fail(key ...any) (found, stop bool) {
	s.bad = append(append([]any{}, s.path...), key...)
	return true, true
}

// after reads what follows a member or an element: a comma (more follow) or closer (the container ends);
// anything else stops the scan.
func (s *textScanner) after(closer byte) (more, stop bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, true
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		return true, false
	case closer:
		s.i++
		return false, false
	}
	return false, true
}

func (s *textScanner) ws() {
	for s.i < len(s.b) && (s.b[s.i] == ' ' || s.b[s.i] == '\t' || s.b[s.i] == '\n' || s.b[s.i] == '\r') {
		s.i++
	}
}

// value scans one value at s.path; found says a string in it is not text, stop that the scan is over
// (found, or a syntax error).
func (s *textScanner) value(depth int) (found, stop bool) {
	s.ws()
	if s.i >= len(s.b) || depth > maxTextDepth {
		return false, true
	}
	switch s.b[s.i] {
	case '{':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == '}' {
			s.i++
			return false, false
		}
		for {
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] != '"' {
				return false, true
			}
			start := s.i
			text, ok := s.str()
			if !ok {
				return false, true
			}
			var key string
			_ = json.Unmarshal(s.b[start:s.i], &key)
			if !text {
				return s.fail(key)
			}
			s.ws()
			if s.i >= len(s.b) || s.b[s.i] != ':' {
				return false, true
			}
			s.i++
			s.path = append(s.path, key)
			found, stop := s.value(depth + 1)
			s.path = s.path[:len(s.path)-1]
			if stop {
				return found, true
			}
			if more, stop := s.after('}'); stop || !more {
				return false, stop
			}
		}
	case '[':
		s.i++
		s.ws()
		if s.i < len(s.b) && s.b[s.i] == ']' {
			s.i++
			return false, false
		}
		for n := 0; ; n++ {
			s.path = append(s.path, n)
			found, stop := s.value(depth + 1)
			s.path = s.path[:len(s.path)-1]
			if stop {
				return found, true
			}
			if more, stop := s.after(']'); stop || !more {
				return false, stop
			}
		}
	case '"':
		text, ok := s.str()
		switch {
		case !ok:
			return false, true
		case !text:
			return s.fail()
		}
		return false, false
	}
	// A number or a literal: skip to its end (the decoder checks its syntax).
	for s.i < len(s.b) && !bytes.ContainsRune([]byte(",]}: \t\n\r"), rune(s.b[s.i])) {
		s.i++
	}
	return false, false
}

// str scans the string at s.i (its opening quote); text says it is valid UTF-8 without lone surrogate
// escapes, ok that it ended.
func (s *textScanner) str() (text, ok bool) {
	s.i++ // the opening quote
	text = true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return text, true
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return text, false
			}
			if s.b[s.i+1] != 'u' {
				s.i += 2
				continue
			}
			r, ok := s.hex(s.i + 2)
			if !ok {
				return text, false
			}
			s.i += 6
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				text = false // a low surrogate without a high one
			case r >= 0xD800 && r <= 0xDBFF:
				lo, ok := rune(0), false
				if s.i+1 < len(s.b) && s.b[s.i] == '\\' && s.b[s.i+1] == 'u' {
					lo, ok = s.hex(s.i + 2)
				}
				if ok && lo >= 0xDC00 && lo <= 0xDFFF {
					s.i += 6
				} else {
					text = false // a high surrogate without a low one
				}
			}
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, size := utf8.DecodeRune(s.b[s.i:])
			if r == utf8.RuneError && size <= 1 {
				text = false
			}
			s.i += max(size, 1)
		}
	}
	return text, false
}

// hex reads the four hex digits at i.
func (s *textScanner) hex(i int) (rune, bool) {
	if i+4 > len(s.b) {
		return 0, false
	}
	var r rune
	for _, c := range s.b[i : i+4] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	return r, true
}
