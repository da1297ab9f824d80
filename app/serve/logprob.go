package serve

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/higgs-go/higgs/ports"
)

// logprobText gives each generated token's log-probability its text and bytes (and its alternatives'), its
// offset in the output, and releases it with its text: an entry goes out once the stop matcher has released
// the first byte of its token's text, and the entries of tokens that start at or after a stop string are
// dropped with their text. Stop tokens have no entry (they are never text).
type logprobText struct {
	tok   ports.Tokenizer
	bytes ports.TokenBytes // nil: each piece is decoded on its own
	// fed and runes are the bytes and characters of decoded text so far; released the bytes the stop matcher
	// has let through.
	fed, runes, released int
	held                 []heldLogprob
	// ready go out with the next event; all are every entry released.
	ready, all []ports.TokenLogprob
}

type heldLogprob struct {
	lp    ports.TokenLogprob
	start int // the byte offset of the token's text in the decoded stream
}

func newLogprobText(tok ports.Tokenizer) *logprobText {
	l := &logprobText{tok: tok, all: []ports.TokenLogprob{}}
	l.bytes, _ = tok.(ports.TokenBytes)
	return l
}

// add holds lp, whose token decoded to piece (possibly "" while a character is incomplete).
func (l *logprobText) add(lp ports.TokenLogprob, piece string) error {
	var err error
	if lp.Text, lp.Bytes, err = l.spell(lp.Token); err != nil {
		return err
	}
	top := make([]ports.TopLogprob, len(lp.Top))
	for i, alt := range lp.Top {
		if alt.Text, alt.Bytes, err = l.spell(alt.Token); err != nil {
			return err
		}
		top[i] = alt
	}
	lp.Top = top
	lp.Offset = l.runes
	l.held = append(l.held, heldLogprob{lp: lp, start: l.fed})
	l.fed += len(piece)
	l.runes += utf8.RuneCountInString(piece)
	return nil
}

// spell returns a token's text and bytes.
func (l *logprobText) spell(id ports.Token) (string, []byte, error) {
	if l.bytes != nil {
		if b, _, ok := l.bytes.TokenBytes(id); ok {
			return strings.ToValidUTF8(string(b), "\uFFFD"), slices.Clone(b), nil
		}
	}
	s, err := l.tok.Decode([]ports.Token{id}, false)
	if err != nil {
		return "", nil, fmt.Errorf("logprobs: token %d: %w", id, err)
	}
	return s, []byte(s), nil
}

// release records that the stop matcher let n more bytes through; cut means a stop string follows them, so
// the entries of tokens starting past them are dropped.
func (l *logprobText) release(n int, cut bool) {
	l.released += n
	k := 0
	for k < len(l.held) && l.held[k].start < l.released {
		k++
	}
	for _, h := range l.held[:k] {
		l.ready = append(l.ready, h.lp)
		l.all = append(l.all, h.lp)
	}
	l.held = l.held[k:]
	if cut {
		l.held = nil
	}
}

// flush releases every entry still held (the output has ended without a stop string).
func (l *logprobText) flush() {
	for _, h := range l.held {
		l.ready = append(l.ready, h.lp)
		l.all = append(l.all, h.lp)
	}
	l.held = nil
}
