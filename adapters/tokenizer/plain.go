package tokenizer

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/higgs-go/higgs/ports"
)

var _ ports.PlainEncoder = (*Tokenizer)(nil)

// SpecialIn returns the first special added token written in text (for example "<|im_end|>"), the text
// EncodePlain treats differently from Encode; "" when there is none.
func (t *Tokenizer) SpecialIn(text string) string {
	found := ""
	see := func(_ string, tok *addedToken) {
		if found == "" && tok != nil && tok.special {
			found = tok.content
		}
	}
	t.rawAdded.split(text, see)
	if found == "" {
		t.normAdded.split(t.norm.apply(text), see)
	}
	return found
}

// EncodePlain is Encode except that inside the plain spans (byte ranges of text, sorted and disjoint) the
// written form of a special token is text, not the token: what Hugging Face calls split_special_tokens,
// applied to the spans only. Non-special added tokens (Qwen3's <think>, <tool_call>) are still recognised
// there, as split_special_tokens does. Text around and across the spans' edges is tokenized as one, so
// where the spans hold no special-token text the ids are exactly Encode's.
func (t *Tokenizer) EncodePlain(text string, plain []ports.Span) ([]ports.Token, error) {
	if !utf8.ValidString(text) {
		return nil, errors.New("encode: text is not valid UTF-8")
	}
	at := 0
	for i, sp := range plain {
		if sp.Start < at || sp.End < sp.Start || sp.End > len(text) {
			return nil, fmt.Errorf("encode: plain span %d [%d, %d) is out of order or outside the text of %d bytes", i, sp.Start, sp.End, len(text))
		}
		at = sp.End
	}
	// Split every segment by its own matcher, then join neighbouring text pieces so that the BPE sees text
	// exactly as Encode would.
	type piece struct {
		text  string
		tok   *addedToken
		plain bool // the text includes plain-span bytes
	}
	var pieces []piece
	add := func(s string, tok *addedToken, isPlain bool) {
		if tok == nil && s == "" {
			return
		}
		if n := len(pieces); tok == nil && n > 0 && pieces[n-1].tok == nil {
			pieces[n-1].text += s
			pieces[n-1].plain = pieces[n-1].plain || isPlain
			return
		}
		pieces = append(pieces, piece{text: s, tok: tok, plain: isPlain})
	}
	segment := func(s string, isPlain bool) {
		m := t.rawAdded
		if isPlain {
			m = t.rawPlain
		}
		m.split(s, func(p string, tok *addedToken) { add(p, tok, isPlain) })
	}
	at = 0
	for _, sp := range plain {
		segment(text[at:sp.Start], false)
		segment(text[sp.Start:sp.End], true)
		at = sp.End
	}
	segment(text[at:], false)

	ids := make([]int32, 0, len(text)/3+1)
	emitWord := func(w string) { ids = t.model.tokenize(w, ids) }
	for _, p := range pieces {
		if p.tok != nil {
			ids = append(ids, p.tok.id)
			continue
		}
		// Normalized added tokens are matched after normalization, where span offsets no longer hold: a text
		// piece with plain bytes in it is split without special tokens at all (the safe side).
		m := t.normAdded
		if p.plain {
			m = t.normPlain
		}
		m.split(t.norm.apply(p.text), func(s string, tok *addedToken) {
			if tok != nil {
				ids = append(ids, tok.id)
				return
			}
			t.pre.run(s, emitWord)
		})
	}
	return t.post.apply(ids), nil
}
