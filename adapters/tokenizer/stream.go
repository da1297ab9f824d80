package tokenizer

import (
	"strings"

	"github.com/higgs-go/higgs/ports"
)

// StreamDecoder decodes one stream of ids incrementally. It holds back the bytes of a UTF-8 character that
// is still incomplete, so the pieces it returns, concatenated with Flush, equal Decode of all ids.
type StreamDecoder struct {
	t           *Tokenizer
	skipSpecial bool
	pending     []byte
}

var _ ports.StreamDecoder = (*StreamDecoder)(nil)

// NewStreamDecoder returns a decoder for one stream of ids.
func (t *Tokenizer) NewStreamDecoder(skipSpecial bool) ports.StreamDecoder {
	return &StreamDecoder{t: t, skipSpecial: skipSpecial}
}

// Push adds one id and returns the text that became complete.
func (d *StreamDecoder) Push(id ports.Token) (string, error) {
	p, keep, err := d.t.piece(id, d.skipSpecial)
	if err != nil || !keep {
		return "", err
	}
	d.pending = append(d.pending, p...)
	var sb strings.Builder
	held := appendLossy(&sb, d.pending, true)
	d.pending = append(d.pending[:0], d.pending[len(d.pending)-held:]...)
	return sb.String(), nil
}

// Flush returns the held-back bytes, an incomplete character becoming U+FFFD, and resets the decoder.
func (d *StreamDecoder) Flush() string {
	var sb strings.Builder
	appendLossy(&sb, d.pending, false)
	d.pending = d.pending[:0]
	return sb.String()
}
