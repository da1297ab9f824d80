package portfake

import (
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.PrefixExporter = (*Session)(nil)
	_ ports.PrefixExporter = (*DraftSession)(nil)
	_ ports.PrefixState    = (*Prefix)(nil)
	_ ports.PrefixState    = (*DraftPrefix)(nil)
)

// Prefix is a fake target session's state for positions [0, Len()): the attention layers' token lists and
// the recurrent layers' hashes. Its Bytes is 4 per token per attention layer plus 8 per recurrent layer.
type Prefix struct {
	m   *Model
	n   int
	kv  [][]ports.Token
	rec []recState
}

// Len returns the number of positions covered.
func (p *Prefix) Len() int { return p.n }

// Bytes returns the fake size.
func (p *Prefix) Bytes() int64 { return int64(4*p.n*len(p.kv) + 8*len(p.rec)) }

// ExportPrefix copies the state after positions [0, n) (ports.PrefixExporter): any 0 < n ≤ Len() on an
// attention-only model, n == Len() (with every layer there) when the model has recurrent layers.
func (s *Session) ExportPrefix(n int) (ports.PrefixState, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if err := s.checkNoTree(); err != nil {
		return nil, err
	}
	if n < 1 || n > s.n {
		return nil, fmt.Errorf("portfake export prefix %d outside [1, %d]", n, s.n)
	}
	for l, r := range s.rec {
		if r.pos != s.n || n != s.n {
			return nil, fmt.Errorf("portfake export prefix %d: recurrent layer %d is at position %d, Len %d (recurrent state exists only at Len)", n, l, r.pos, s.n)
		}
	}
	p := &Prefix{m: s.m, n: n, rec: slices.Clone(s.rec)}
	for _, kv := range s.kv {
		p.kv = append(p.kv, slices.Clone(kv[:n]))
	}
	return p, nil
}

// ImportPrefix makes an empty session hold p.
func (s *Session) ImportPrefix(ps ports.PrefixState) error {
	if err := s.check(); err != nil {
		return err
	}
	if err := s.checkNoTree(); err != nil {
		return err
	}
	p, ok := ps.(*Prefix)
	switch {
	case !ok || p == nil:
		return fmt.Errorf("portfake import prefix: state %T is not a portfake prefix", ps)
	case p.m != s.m:
		return errors.New("portfake import prefix: the state comes from another model")
	case s.n != 0:
		return fmt.Errorf("portfake import prefix: the session holds %d positions, want an empty session", s.n)
	}
	for l := range s.kv {
		s.kv[l] = slices.Clone(p.kv[l])
	}
	copy(s.rec, p.rec)
	s.n = p.n
	s.serial++ // taps and tapes of before no longer describe the session
	return nil
}

// DraftPrefix is a fake draft session's context rows for positions [0, Len()); Bytes is 4 per tap value.
type DraftPrefix struct {
	d   *Drafter
	ctx []TapRow
}

// Len returns the number of context positions covered.
func (p *DraftPrefix) Len() int { return len(p.ctx) }

// Bytes returns the fake size.
func (p *DraftPrefix) Bytes() int64 {
	var n int64
	for _, r := range p.ctx {
		n += 4 * int64(len(r.Values)+1)
	}
	return n
}

// ExportPrefix copies the context rows of positions [0, n), 0 < n ≤ Len() (noise positions cannot be
// exported: they are no context).
func (s *DraftSession) ExportPrefix(n int) (ports.PrefixState, error) {
	if s.closed {
		return nil, errors.New("portfake: draft session is closed")
	}
	if n < 1 || n > len(s.ctx) {
		return nil, fmt.Errorf("portfake draft export prefix %d outside [1, %d]", n, len(s.ctx))
	}
	p := &DraftPrefix{d: s.d, ctx: make([]TapRow, n)}
	for i, r := range s.ctx[:n] {
		p.ctx[i] = TapRow{Pos: r.Pos, Token: r.Token, Values: slices.Clone(r.Values)}
	}
	return p, nil
}

// ImportPrefix makes an empty draft session hold p.
func (s *DraftSession) ImportPrefix(ps ports.PrefixState) error {
	if s.closed {
		return errors.New("portfake: draft session is closed")
	}
	p, ok := ps.(*DraftPrefix)
	switch {
	case !ok || p == nil:
		return fmt.Errorf("portfake draft import prefix: state %T is not a portfake draft prefix", ps)
	case p.d != s.d:
		return errors.New("portfake draft import prefix: the state comes from another drafter")
	case s.Len() != 0:
		return fmt.Errorf("portfake draft import prefix: the session holds %d positions, want an empty session", s.Len())
	}
	s.ctx = make([]TapRow, len(p.ctx))
	for i, r := range p.ctx {
		s.ctx[i] = TapRow{Pos: r.Pos, Token: r.Token, Values: slices.Clone(r.Values)}
	}
	return nil
}
