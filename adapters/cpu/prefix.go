package cpu

import (
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// Target and draft sessions export and import prefix states (the prefix cache's backend side).
var (
	_ ports.PrefixExporter = (*Session)(nil)
	_ ports.PrefixExporter = (*DraftSession)(nil)
)

// Prefix is a target session's state for positions [0, n): copies of every attention layer's KV rows and of
// every recurrent layer's conv buffer and SSM state at n. Nothing writes it after export. It says what it
// holds: kvBits is the attention caches' format, 32 (k, v: float32 rows of KVHeads·HeadDim values per
// position) or 8 (k8, v8: int8 codes in the same layout; ks, vs: one float32 scale per position and KV head,
// vecmath.QuantizeRow8's format), so a serializer writes the codes and scales as they are and an import
// restores the cache bit for bit.
type Prefix struct {
	t      *Target
	n      int
	kvBits int
	k, v   [][]float32 // per layer, 32-bit KV; nil for recurrent layers
	k8, v8 [][]int8    // per layer, 8-bit KV; nil for recurrent layers
	ks, vs [][]float32
	conv   [][]float32 // per layer; nil for attention layers
	ssm    [][]float32
	model.PrefixSize
}

var _ ports.PrefixState = (*Prefix)(nil)

// Len returns the number of positions the state covers.
func (p *Prefix) Len() int { return p.n }

// ExportPrefix copies the state after positions [0, n) (see ports.PrefixExporter).
func (s *Session) ExportPrefix(n int) (ports.PrefixState, error) {
	if err := s.idle("export prefix"); err != nil {
		return nil, err
	}
	if s.broken != nil {
		return nil, fmt.Errorf("cpu: export prefix: session unusable after an interrupted forward (%w)", s.broken)
	}
	if err := s.pos.CheckExport(n); err != nil {
		return nil, fmt.Errorf("cpu: %w", err)
	}
	a := &s.t.m.Arch
	w := a.KVHeads * a.HeadDim
	L := len(s.kv)
	p := &Prefix{t: s.t, n: n, kvBits: s.t.kvBits, conv: make([][]float32, L), ssm: make([][]float32, L)}
	if p.kvBits == 8 {
		p.k8, p.v8, p.ks, p.vs = make([][]int8, L), make([][]int8, L), make([][]float32, L), make([][]float32, L)
	} else {
		p.k, p.v = make([][]float32, L), make([][]float32, L)
	}
	var floats int
	for i, c := range s.kv {
		if c != nil {
			e := c.export(n, w)
			if p.kvBits == 8 {
				p.k8[i], p.v8[i], p.ks[i], p.vs[i] = e.k8, e.v8, e.ks, e.vs
			} else {
				p.k[i], p.v[i] = e.k, e.v
			}
			p.Size += e.bytes()
		}
	}
	for i, g := range s.gdn {
		if g != nil {
			p.conv[i] = slices.Clone(g.conv)
			p.ssm[i] = slices.Clone(g.s[g.cur])
			floats += len(g.conv) + len(g.s[g.cur])
		}
	}
	p.Size += int64(floats) * 4
	return p, nil
}

// KVBits is the format of the state's attention caches: 32 (float32) or 8 (int8 codes and float32 scales).
func (p *Prefix) KVBits() int { return p.kvBits }

// ImportPrefix makes an empty session hold p (see ports.PrefixExporter). The rows are copied, so the session
// appends and trims its own arrays and p stays as it was.
func (s *Session) ImportPrefix(ps ports.PrefixState) error {
	if err := s.idle("import prefix"); err != nil {
		return err
	}
	p, ok := ps.(*Prefix)
	switch {
	case !ok || p == nil:
		return fmt.Errorf("cpu: import prefix: state %T is not a CPU target prefix", ps)
	case p.t != s.t:
		return errors.New("cpu: import prefix: the state was exported by a session of another model")
	case s.pos.N != 0 || s.broken != nil:
		return fmt.Errorf("cpu: import prefix: the session holds %d positions, want an empty session", s.pos.N)
	}
	for i, c := range s.kv {
		if c == nil {
			continue
		}
		if p.kvBits == 8 {
			c.load(&kvCache{k8: p.k8[i], v8: p.v8[i], ks: p.ks[i], vs: p.vs[i]})
		} else {
			c.load(&kvCache{k: p.k[i], v: p.v[i]})
		}
	}
	for i, g := range s.gdn {
		if g != nil {
			copy(g.conv, p.conv[i])
			copy(g.s[g.cur], p.ssm[i])
		}
	}
	s.pos.N, s.pos.Rec = p.n, p.n
	// No tape of this session describes the imported state.
	s.gen++
	s.lastTap = nil
	return nil
}

// DraftPrefix is a draft session's context for positions [0, n): the projected context K/V rows of each
// drafter layer and the queued (not yet projected) tap rows after them.
type DraftPrefix struct {
	d      *Drafter
	n      int // projected rows
	k, v   [][]float32
	queued []float32 // nq rows of taps
	nq     int
	model.PrefixSize
}

var _ ports.PrefixState = (*DraftPrefix)(nil)

// Len returns the number of context positions the state covers.
func (p *DraftPrefix) Len() int { return p.n + p.nq }

// ExportPrefix copies the context of positions [0, n), 0 < n ≤ Len() (see ports.PrefixExporter). Context
// rows depend only on their own position's taps, so a prefix of the cache is the cache that prefix alone
// would have built.
func (s *DraftSession) ExportPrefix(n int) (ports.PrefixState, error) {
	if s.closed {
		return nil, errDraftClosed
	}
	if n < 1 || n > s.Len() {
		return nil, fmt.Errorf("cpu drafter: export prefix %d outside [1,%d]", n, s.Len())
	}
	a := &s.d.m.Arch
	kvw := a.NumKVHeads * a.HeadDim
	width := len(a.TapLayers) * a.HiddenSize
	proj := min(n, s.n)
	p := &DraftPrefix{d: s.d, n: proj, nq: n - proj, k: make([][]float32, len(s.kv)), v: make([][]float32, len(s.kv))}
	floats := 0
	for i, c := range s.kv {
		p.k[i] = slices.Clone(c.k[:proj*kvw])
		p.v[i] = slices.Clone(c.v[:proj*kvw])
		floats += 2 * proj * kvw
	}
	p.queued = slices.Clone(s.queued[:p.nq*width])
	floats += len(p.queued)
	p.Size = int64(floats) * 4
	return p, nil
}

// ImportPrefix makes an empty draft session hold p (see ports.PrefixExporter); the rows are copied.
func (s *DraftSession) ImportPrefix(ps ports.PrefixState) error {
	if s.closed {
		return errDraftClosed
	}
	p, ok := ps.(*DraftPrefix)
	switch {
	case !ok || p == nil:
		return fmt.Errorf("cpu drafter: import prefix: state %T is not a CPU drafter prefix", ps)
	case p.d != s.d:
		return errors.New("cpu drafter: import prefix: the state was exported by a session of another drafter")
	case s.Len() != 0:
		return fmt.Errorf("cpu drafter: import prefix: the session holds %d positions, want an empty session", s.Len())
	}
	for i, c := range s.kv {
		c.k = append(c.k[:0], p.k[i]...)
		c.v = append(c.v[:0], p.v[i]...)
	}
	s.queued = append(s.queued[:0], p.queued...)
	s.n, s.nq = p.n, p.nq
	return nil
}
