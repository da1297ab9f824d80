package generation

import (
	"context"
	"fmt"

	"github.com/higgs-go/higgs/adapters/sampling"
	"github.com/higgs-go/higgs/ports"
)

// Log-probabilities under speculation. Every committed token was predicted by a row of a target forward the
// decoder ran through its session: the prefill's last row for the first token, and for the others a row of
// the verify block that committed them — whether the token is an accepted draft, the bonus token or the
// correction, row r of a block fed at positions p… predicts position p+r+1. logprobSession sits outermost
// (around the constraint's decorator when there is one, so the rows are the masked ones the decoder
// verified against), asks each forward for its raw logits and keeps, per generated position, the row that
// predicted it. A row stays valid while the tokens before its position are unchanged: a forward that feeds
// a different token at a position (the correction after a rejected draft) drops the rows of every later
// position, and a forward that feeds the same tokens again (snapshot + recompute after a partial accept)
// keeps the verify's rows. The decoder and its rollback are untouched, so logprobs cannot change the output;
// and the values are those of the target's row at that position, so on a backend whose rows do not depend on
// how positions are grouped into forwards (the CPU backend's exact kernels) they are bit-identical with and
// without a drafter, at any block size, batched or alone, after a prefix-cache hit or not.
//
// Nothing of this runs unless the request asks: Run wraps the session only then.

// logprobSession is the ports.Session decorator that keeps the rows of generated positions.
type logprobSession struct {
	inner ports.Session
	// start is the prompt's length: positions from start on hold generated tokens.
	start int
	top   int
	// fed[k] is the token last fed at position start+k.
	fed []ports.Token
	// rows[q] is the logits row that predicted position q ≥ start (a view into a forward's logits).
	rows map[int][]float32
}

// lpReplayer keeps the TapeReplayer ability of the wrapped session visible to the decoder's rollback.
type lpReplayer struct {
	*logprobSession
	replay ports.TapeReplayer
}

func (s lpReplayer) ReplayTape(ctx context.Context, tape ports.Tape, n int) error {
	return s.replay.ReplayTape(ctx, tape, n)
}

// wrapLogprobs wraps sess for a generation of prompt length promptLen reporting top alternatives.
func wrapLogprobs(sess ports.Session, promptLen, top int) (ports.Session, *logprobSession) {
	s := &logprobSession{inner: sess, start: promptLen, top: top, rows: map[int][]float32{}}
	if r, ok := sess.(ports.TapeReplayer); ok {
		return lpReplayer{s, r}, s
	}
	return s, s
}

func (s *logprobSession) Len() int                                   { return s.inner.Len() }
func (s *logprobSession) TrimKV(n int) error                         { return s.inner.TrimKV(n) }
func (s *logprobSession) Snapshot() (ports.RecurrentSnapshot, error) { return s.inner.Snapshot() }
func (s *logprobSession) Restore(r ports.RecurrentSnapshot) error    { return s.inner.Restore(r) }
func (s *logprobSession) Close() error                               { return s.inner.Close() }

// Forward runs the inner forward with raw logits and keeps the rows of generated positions not yet held.
func (s *logprobSession) Forward(ctx context.Context, tokens []ports.Token, opts ports.ForwardOptions) (ports.ForwardResult, error) {
	pos0 := s.inner.Len()
	for i, t := range tokens {
		p := pos0 + i
		if p < s.start {
			continue
		}
		k := p - s.start
		if k < len(s.fed) && s.fed[k] == t {
			continue
		}
		if k < len(s.fed) {
			// Another token at p: every row after it was predicted from what is no longer the sequence.
			s.fed = s.fed[:k]
			for q := range s.rows {
				if q > p {
					delete(s.rows, q)
				}
			}
		}
		if k != len(s.fed) {
			return ports.ForwardResult{}, fmt.Errorf("logprobs: %d generated positions seen, the block starts at %d", len(s.fed), k)
		}
		s.fed = append(s.fed, t)
	}
	inner := opts
	inner.Logits = true
	fr, err := s.inner.Forward(ctx, tokens, inner)
	if err != nil {
		return fr, err
	}
	n := len(fr.Greedy)
	if n == 0 || len(fr.Logits)%n != 0 {
		return fr, fmt.Errorf("logprobs: backend returned %d logits for %d rows", len(fr.Logits), n)
	}
	lg := fr.Logits
	if opts.Logits {
		lg = append([]float32(nil), lg...) // the caller's copy stays the caller's
	} else {
		fr.Logits = nil
	}
	v := len(lg) / n
	first := pos0 + len(tokens) - n // the position row 0 was computed at
	for r := range n {
		q := first + r + 1
		if _, ok := s.rows[q]; q >= s.start && !ok {
			s.rows[q] = lg[r*v : (r+1)*v : (r+1)*v]
		}
	}
	return fr, nil
}

// take returns the log-probability of tok at generated position q and drops the row.
func (s *logprobSession) take(q int, tok ports.Token) (ports.TokenLogprob, error) {
	row, ok := s.rows[q]
	if !ok {
		return ports.TokenLogprob{}, fmt.Errorf("logprobs: no target row for position %d", q)
	}
	delete(s.rows, q)
	lp, top, err := sampling.Logprobs(row, tok, s.top)
	if err != nil {
		return ports.TokenLogprob{}, fmt.Errorf("logprobs at position %d: %w", q, err)
	}
	return ports.TokenLogprob{Token: tok, Logprob: lp, Top: top}, nil
}
