package grammar

import (
	"slices"
)

// Limits that keep every generated value finite and exactly representable.
const (
	// maxWS bounds the whitespace after a reasoning block; maxIndent the indentation after a newline
	// between two JSON tokens.
	maxWS     = 8
	maxIndent = 16
	// maxIntDigits and maxFracDigits bound a number's digits (float64 holds 15 significant digits exactly);
	// maxExpDigits bounds an exponent (unbounded numbers only).
	maxIntDigits  = 15
	maxFracDigits = 15
	maxExpDigits  = 2
)

// frame is one level of the automaton's stack: the node being matched, how far, and the frame waiting for
// it. Frames are immutable: a step returns new frames and shares the ones below.
type frame struct {
	n      *node // nil: the root sentinel
	ph     uint8 // phase, per kind (the constants below)
	ws     uint8 // whitespace bytes consumed in the current gap
	lo, hi uint8 // kString: the allowed range of the next UTF-8 continuation byte; kNumber: lo = exponent digits; kSeq: hi = repeats done
	i, j   int32 // per kind: property index / item count / part index / characters; offsets, digit counts
	buf    string
	up     *frame
}

// Phases.
const (
	rootWait uint8 = iota // the root's value is being matched
	rootDone              // the value is complete: only EOS may follow
)

const (
	oStart   uint8 = iota // expect '{'
	oOpen                 // after '{': whitespace, a key or '}'
	oKey                  // inside a declared key (buf: the bytes so far)
	oKeyIn                // a free key (a string frame above)
	oColon                // after a key: whitespace, ':'
	oValue                // after ':': whitespace, then the value
	oValueIn              // the value is being matched above
	oNext                 // after a value: whitespace, ',' or '}'
	oComma                // after ',': whitespace, then a key
	oDone
)

const (
	aStart uint8 = iota // expect '['
	aOpen               // after '[': whitespace, a value or ']'
	aIn                 // an item is being matched above
	aNext               // after an item: whitespace, ',' or ']'
	aComma              // after ',': whitespace, then an item
	aDone
)

const (
	sStart uint8 = iota // expect '"'
	sBody               // inside: i counts characters
	sEsc                // after '\'
	sHex                // inside \uXXXX: j digits left, lo the first digit
	sUTF                // inside a multi-byte character: j continuation bytes left
	sDone
)

const (
	nStart uint8 = iota
	nMinus       // after '-'
	nZero        // integer part "0"
	nInt         // in integer digits (i of them)
	nDot         // after '.'
	nFrac        // in fraction digits (j of them)
	nE           // after 'e' or 'E'
	nESign       // after the exponent's sign
	nExp         // in exponent digits (lo of them)
)

const (
	tText uint8 = iota // free text (j: how much of the trigger the text ends with)
	tIn                // the trigger's continuation is being matched above
)

const (
	qPart uint8 = iota // in part i (j: offset in a literal, matched length of a terminator, whitespace count)
	qIn                // part i's value is being matched above
	qEnd               // every part matched; may repeat after repeatSep
	qSep               // inside repeatSep (j: offset)
)

func isWS(b byte) bool { return b == ' ' || b == '\n' || b == '\t' || b == '\r' }

// push appends to out the frames that start matching n above up: one per alternative.
func push(n *node, up *frame, out []*frame) []*frame {
	if n.kind == kAlt {
		for _, a := range n.alts {
			out = append(out, &frame{n: a, up: up})
		}
		return out
	}
	return append(out, &frame{n: n, up: up})
}

// feed appends to out the stacks that result from consuming b on top of stack f: b continues f's own value,
// or f's value is complete and b continues what waits for it.
func feed(f *frame, b byte, out []*frame) []*frame {
	out = feedSelf(f, b, out)
	if f.up != nil && complete(f) {
		out = feed(childDone(f.up, f), b, out)
	}
	return out
}

// emit settles nf (a frame that can match nothing more is replaced by the frame waiting for it, so equal
// situations have equal stacks) and appends it.
func emit(out []*frame, nf *frame) []*frame {
	for nf.up != nil && final(nf) {
		nf = childDone(nf.up, nf)
	}
	return append(out, nf)
}

// start feeds b as the first byte of a value of node n pushed above parent (already in its waiting phase).
func start(n *node, parent *frame, b byte, out []*frame) []*frame {
	var tmp [8]*frame
	for _, cf := range push(n, parent, tmp[:0]) {
		out = feedSelf(cf, b, out)
	}
	return out
}

func with(f *frame, edit func(*frame)) *frame {
	nf := *f
	edit(&nf)
	return &nf
}

// gap handles a whitespace byte in a phase that allows whitespace; ok reports whether b was whitespace. A
// gap is empty, one space, or a newline and at most maxIndent spaces or tabs: compact and pretty-printed
// JSON both fit, and a model cannot spend its tokens on whitespace (f.ws: 0 nothing yet, 1 one space,
// 2+k a newline and k indentation bytes).
func gap(f *frame, b byte, out []*frame) ([]*frame, bool) {
	if !isWS(b) {
		return out, false
	}
	var ws uint8
	switch {
	case f.ws == 0 && b == ' ':
		ws = 1
	case f.ws == 0 && b == '\n':
		ws = 2
	case f.ws >= 2 && f.ws-2 < maxIndent && (b == ' ' || b == '\t'):
		ws = f.ws + 1
	default:
		return out, true
	}
	return append(out, with(f, func(nf *frame) { nf.ws = ws })), true
}

// feedSelf appends the stacks where b continues f's own value.
func feedSelf(f *frame, b byte, out []*frame) []*frame {
	if f.n == nil {
		return out // the root sentinel consumes nothing itself
	}
	switch f.n.kind {
	case kObject:
		return feedObject(f, b, out)
	case kArray:
		return feedArray(f, b, out)
	case kString:
		return feedString(f, b, out)
	case kNumber:
		if nf := feedNumber(f, b); nf != nil {
			out = emit(out, nf)
		}
		return out
	case kLiteral:
		nb := f.buf + string([]byte{b})
		for _, l := range f.n.lits {
			if len(l) >= len(nb) && l[:len(nb)] == nb {
				return emit(out, with(f, func(nf *frame) { nf.buf = nb }))
			}
		}
		return out
	case kSeq:
		return feedSeq(f, b, out)
	case kText:
		if f.ph != tText {
			return out
		}
		k := kmp(f.n.trigger, int(f.j), b)
		if k == len(f.n.trigger) {
			return push(f.n.then, with(f, func(nf *frame) { nf.ph, nf.j = tIn, 0 }), out)
		}
		return append(out, with(f, func(nf *frame) { nf.j = int32(k) }))
	}
	return out
}

// keyCandidates is the range [i, end) of properties that may come next: the following ones up to and
// including the first required one.
func keyCandidates(n *node, i int) int {
	end := i
	for end < len(n.props) {
		end++
		if n.props[end-1].required {
			break
		}
	}
	return end
}

func requiredLeft(n *node, i int) bool {
	return slices.ContainsFunc(n.props[i:], func(p prop) bool { return p.required })
}

func feedObject(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.ph {
	case oStart:
		if b == '{' {
			out = append(out, with(f, func(nf *frame) { nf.ph = oOpen }))
		}
	case oOpen, oComma:
		var ws bool
		if out, ws = gap(f, b, out); ws {
			return out
		}
		switch {
		case b == '"' && n.free:
			out = start(freeKey, with(f, func(nf *frame) { nf.ph, nf.ws = oKeyIn, 0 }), b, out)
		case b == '"' && keyCandidates(n, int(f.i)) > int(f.i):
			out = append(out, with(f, func(nf *frame) { nf.ph, nf.ws, nf.buf = oKey, 0, `"` }))
		case b == '}' && f.ph == oOpen && (n.free || !requiredLeft(n, int(f.i))):
			out = emit(out, with(f, func(nf *frame) { nf.ph, nf.ws = oDone, 0 }))
		}
	case oKey:
		nb := f.buf + string([]byte{b})
		for k, end := int(f.i), keyCandidates(n, int(f.i)); k < end; k++ {
			key := n.props[k].key
			if key == nb {
				return append(out, with(f, func(nf *frame) { nf.ph, nf.buf, nf.i = oColon, "", int32(k) }))
			}
			if len(key) > len(nb) && key[:len(nb)] == nb {
				return append(out, with(f, func(nf *frame) { nf.buf = nb }))
			}
		}
	case oColon:
		var ws bool
		if out, ws = gap(f, b, out); !ws && b == ':' {
			out = append(out, with(f, func(nf *frame) { nf.ph, nf.ws = oValue, 0 }))
		}
	case oValue:
		var ws bool
		if out, ws = gap(f, b, out); !ws {
			v := n.items
			if !n.free {
				v = n.props[f.i].value
			}
			out = start(v, with(f, func(nf *frame) { nf.ph, nf.ws = oValueIn, 0 }), b, out)
		}
	case oNext:
		var ws bool
		if out, ws = gap(f, b, out); ws {
			return out
		}
		switch {
		case b == ',' && (n.free || int(f.i) < len(n.props)):
			out = append(out, with(f, func(nf *frame) { nf.ph, nf.ws = oComma, 0 }))
		case b == '}' && (n.free || !requiredLeft(n, int(f.i))):
			out = emit(out, with(f, func(nf *frame) { nf.ph, nf.ws = oDone, 0 }))
		}
	}
	return out
}

// inBody reports whether f is inside a string's body, between characters: a token of plain string characters
// (Vocab.plain) that fits the room left keeps it there.
func inBody(f *frame) bool {
	return f.n != nil && f.n.kind == kString && f.ph == sBody
}

// inText reports whether f is free text (a kText frame outside a call), where every token is allowed that
// does not complete the trigger into something the call's grammar refuses.
func inText(f *frame) bool {
	return f.n != nil && f.n.kind == kText && f.ph == tText
}

// bodyRoom is how many characters a string frame in its body may still take (-1: no bound).
func bodyRoom(f *frame) int {
	if f.n.maxLen < 0 {
		return -1
	}
	return f.n.maxLen - int(f.i)
}

// freeKey matches the keys of a free object.
var freeKey = &node{id: -1, kind: kString, maxLen: -1, maxItems: -1}

func feedArray(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.ph {
	case aStart:
		if b == '[' {
			out = append(out, with(f, func(nf *frame) { nf.ph = aOpen }))
		}
	case aOpen, aComma:
		var ws bool
		if out, ws = gap(f, b, out); ws {
			return out
		}
		if b == ']' && f.ph == aOpen && n.minItems == 0 {
			return emit(out, with(f, func(nf *frame) { nf.ph, nf.ws = aDone, 0 }))
		}
		if n.maxItems < 0 || int(f.i) < n.maxItems {
			out = start(n.items, with(f, func(nf *frame) { nf.ph, nf.ws = aIn, 0 }), b, out)
		}
	case aNext:
		var ws bool
		if out, ws = gap(f, b, out); ws {
			return out
		}
		switch {
		case b == ',' && (n.maxItems < 0 || int(f.i) < n.maxItems):
			out = append(out, with(f, func(nf *frame) { nf.ph, nf.ws = aComma, 0 }))
		case b == ']' && int(f.i) >= n.minItems:
			out = emit(out, with(f, func(nf *frame) { nf.ph, nf.ws = aDone, 0 }))
		}
	}
	return out
}

func isHex(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F' }

func feedString(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	room := n.maxLen < 0 || int(f.i) < n.maxLen
	switch f.ph {
	case sStart:
		if b == '"' {
			out = append(out, with(f, func(nf *frame) { nf.ph = sBody }))
		}
	case sBody:
		// Characters are counted only under length bounds, so that an unbounded string's body is one state
		// (its mask computed once).
		next := f.i
		if n.minLen > 0 || n.maxLen >= 0 {
			next++
		}
		switch {
		case b == '"':
			if int(f.i) >= n.minLen {
				out = emit(out, with(f, func(nf *frame) { nf.ph = sDone }))
			}
		case !room || b < 0x20:
		case b == '\\':
			out = append(out, with(f, func(nf *frame) { nf.ph, nf.i = sEsc, next }))
		case b < 0x80:
			if next == f.i {
				out = append(out, f) // frames are immutable: the same situation is the same frame
			} else {
				out = append(out, with(f, func(nf *frame) { nf.i = next }))
			}
		default:
			cont, lo, hi := utf8Lead(b)
			if cont > 0 {
				out = append(out, with(f, func(nf *frame) { nf.ph, nf.i, nf.j, nf.lo, nf.hi = sUTF, next, int32(cont), lo, hi }))
			}
		}
	case sEsc:
		switch b {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			out = append(out, with(f, func(nf *frame) { nf.ph = sBody }))
		case 'u':
			out = append(out, with(f, func(nf *frame) { nf.ph, nf.j, nf.lo = sHex, 4, 0 }))
		}
	case sHex:
		// Surrogates (\uD800–\uDFFF) are refused: a lone one is not a character, and a pair would count as
		// two towards the length bounds; the model writes such characters as UTF-8 instead.
		if !isHex(b) || f.j == 3 && (f.lo == 'd' || f.lo == 'D') && !(b >= '0' && b <= '7') {
			return out
		}
		out = append(out, with(f, func(nf *frame) {
			if f.j == 4 {
				nf.lo = b
			}
			if nf.j--; nf.j == 0 {
				nf.ph = sBody
			}
		}))
	case sUTF:
		if b < f.lo || b > f.hi {
			return out
		}
		out = append(out, with(f, func(nf *frame) {
			nf.lo, nf.hi = 0x80, 0xBF
			if nf.j--; nf.j == 0 {
				nf.ph = sBody
			}
		}))
	}
	return out
}

// utf8Lead returns how many continuation bytes a UTF-8 lead byte needs and the range of the first one
// (excluding overlong forms, surrogates and code points above U+10FFFF); 0 for a byte that cannot lead.
func utf8Lead(b byte) (int, uint8, uint8) {
	switch {
	case b >= 0xC2 && b <= 0xDF:
		return 1, 0x80, 0xBF
	case b == 0xE0:
		return 2, 0xA0, 0xBF
	case b == 0xED:
		return 2, 0x80, 0x9F
	case b >= 0xE1 && b <= 0xEF:
		return 2, 0x80, 0xBF
	case b == 0xF0:
		return 3, 0x90, 0xBF
	case b >= 0xF1 && b <= 0xF3:
		return 3, 0x80, 0xBF
	case b == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
}

func feedSeq(f *frame, b byte, out []*frame) []*frame {
	n := f.n
	switch f.ph {
	case qPart:
		p := n.parts[f.i]
		switch {
		case p.lit != "":
			if p.lit[f.j] != b {
				return out
			}
			if int(f.j)+1 < len(p.lit) {
				return append(out, with(f, func(nf *frame) { nf.j++ }))
			}
			return emit(out, nextPart(f))
		case p.until != "":
			k := kmp(p.until, int(f.j), b)
			if k == len(p.until) {
				return emit(out, nextPart(f))
			}
			return append(out, with(f, func(nf *frame) { nf.j = int32(k) }))
		case p.value == nil: // optional whitespace
			if isWS(b) {
				if f.j < maxWS {
					out = append(out, with(f, func(nf *frame) { nf.j++ }))
				}
				return out
			}
			return feedSelf(nextPart(f), b, out)
		default:
			return start(p.value, with(f, func(nf *frame) { nf.ph = qIn }), b, out)
		}
	case qEnd, qSep:
		sep := n.repeatSep
		if !canRepeat(f) || sep[f.j] != b {
			return out
		}
		if int(f.j)+1 < len(sep) {
			return append(out, with(f, func(nf *frame) { nf.ph, nf.j = qSep, f.j+1 }))
		}
		return append(out, with(f, func(nf *frame) { nf.ph, nf.i, nf.j, nf.hi = qPart, 0, 0, f.hi+1 }))
	}
	return out
}

// canRepeat reports whether the sequence f matches may start again (after its separator): it repeats and
// has not reached its limit.
func canRepeat(f *frame) bool {
	return f.n.repeatSep != "" && (f.n.maxRepeat <= 0 || int(f.hi)+1 < f.n.maxRepeat)
}

// nextPart is f moved to its next part (or to the end).
func nextPart(f *frame) *frame {
	return with(f, func(nf *frame) {
		nf.i, nf.j, nf.ph = f.i+1, 0, qPart
		if int(nf.i) == len(f.n.parts) {
			nf.ph = qEnd
		}
	})
}

// kmp returns the length of the longest prefix of t that is a suffix of t[:k]+b.
func kmp(t string, k int, b byte) int {
	s := t[:k] + string([]byte{b})
	for l := min(len(s), len(t)); l > 0; l-- {
		if s[len(s)-l:] == t[:l] {
			return l
		}
	}
	return 0
}

// complete reports whether f's value is a whole value (the frame waiting for it may continue).
func complete(f *frame) bool {
	if f.n == nil {
		return f.ph == rootDone
	}
	switch f.n.kind {
	case kObject:
		return f.ph == oDone
	case kArray:
		return f.ph == aDone
	case kString:
		return f.ph == sDone
	case kNumber:
		return numberComplete(f)
	case kLiteral:
		return slices.Contains(f.n.lits, f.buf)
	case kSeq:
		return f.ph == qEnd
	case kText:
		return f.ph == tText
	}
	return false
}

// final reports whether f is complete and no byte can continue it.
func final(f *frame) bool {
	if !complete(f) {
		return false
	}
	switch f.n.kind {
	case kNumber:
		for _, b := range []byte("0123456789.eE") {
			if feedNumber(f, b) != nil {
				return false
			}
		}
		return true
	case kLiteral:
		for _, l := range f.n.lits {
			if len(l) > len(f.buf) && l[:len(f.buf)] == f.buf {
				return false
			}
		}
		return true
	case kSeq:
		return !canRepeat(f)
	case kText:
		return false
	}
	return true
}

// childDone is parent p after the value of child c (p's waiting phase) completed.
func childDone(p *frame, c *frame) *frame {
	if p.n == nil {
		return with(p, func(nf *frame) { nf.ph = rootDone })
	}
	switch p.n.kind {
	case kObject:
		if p.ph == oKeyIn {
			return with(p, func(nf *frame) { nf.ph = oColon })
		}
		return with(p, func(nf *frame) { nf.ph, nf.i = oNext, p.i+1 })
	case kArray:
		return with(p, func(nf *frame) { nf.ph, nf.i = aNext, p.i+1 })
	case kSeq:
		return nextPart(p)
	case kText:
		return with(p, func(nf *frame) { nf.ph, nf.j = tText, 0 })
	}
	panic("grammar: childDone on a frame that waits for no child") // an invariant of push/start
}

// accepting reports whether the stack topped by f may end here (EOS allowed).
func accepting(f *frame) bool {
	for f.up != nil {
		if !complete(f) {
			return false
		}
		f = childDone(f.up, f)
	}
	return f.n == nil && f.ph == rootDone
}
