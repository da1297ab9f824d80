package tokenizer

import "github.com/higgs-go/higgs/ports"

var _ ports.TokenBytes = (*Tokenizer)(nil)

// TokenBytes returns the bytes id decodes to (the ByteLevel decoder's per-token rule; the content of an added
// token) and whether it is special. The slice is shared: callers must not modify it.
func (t *Tokenizer) TokenBytes(id ports.Token) ([]byte, bool, bool) {
	if id < 0 || int(id) >= len(t.tokens) || !t.valid[id] {
		return nil, false, false
	}
	return t.pieces[id], t.special[id], true
}
