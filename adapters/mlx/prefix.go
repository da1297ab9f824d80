package mlx

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ring"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// Target and draft sessions export and import prefix states (the prefix cache's backend side). The state
// stays on the device: MLX arrays are immutable, so a whole-length export is a second handle to the
// session's arrays (KV and recurrent state, no copy), and a shorter KV prefix is a device-side slice.
var (
	_ ports.PrefixExporter = (*Session)(nil)
	_ ports.PrefixExporter = (*DraftSession)(nil)
)

// Prefix is a target session's state for positions [0, n): per attention layer K/V [1, Hkv, n, d], per GDN
// layer conv and ssm. Its handles are freed (on the MLX thread) once the value is unreachable.
type Prefix struct {
	t   *Target
	n   int
	kv  []ops.KVCache // zero for recurrent layers
	gdn []ops.GDNState
	// id names the workers' copies of their layers' state in a pipeline (0 when not distributed); Size
	// then counts rank 0's share only, which is what rank 0's memory holds.
	id int32
	model.PrefixSize
}

var _ ports.PrefixState = (*Prefix)(nil)

// Len returns the number of positions the state covers.
func (p *Prefix) Len() int { return p.n }

// KVBits is the format of the state's attention caches: 0 (the compute dtype) or 8 (int8 codes [1, Hkv, n, d]
// with float32 scales [1, Hkv, n, 1] in each ops.KVCache's KS, VS), the target's LoadOptions.KVBits.
func (p *Prefix) KVBits() int { return p.t.kvBits }

// ExportPrefix returns the state after positions [0, n) (see ports.PrefixExporter).
func (s *Session) ExportPrefix(n int) (ports.PrefixState, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if err := s.pos.CheckExport(n); err != nil {
		return nil, fmt.Errorf("mlx: %w", err)
	}
	a := &s.t.m.Arch
	p := &Prefix{t: s.t, n: n, kv: make([]ops.KVCache, len(s.st.kv)), gdn: make([]ops.GDNState, len(s.st.gdn))}
	if pp := s.t.ring; pp != nil && pp.Rank == 0 {
		p.id = pp.NewID()
		if err := s.broadcast(ring.Ctrl{Op: ring.OpExport, A: int32(n), B: p.id}); err != nil {
			return nil, fmt.Errorf("mlx: export prefix: %w", err)
		}
		runtime.AddCleanup(p, func(id int32) { pp.Drop(id) }, p.id)
	}
	err := s.t.rt.Do(func() error {
		if s.t.closed {
			return errTargetClosed
		}
		g := graph.New(s.t.rt, "mlx export prefix")
		defer g.Release()
		for i, c := range s.st.kv {
			if c != nil {
				var held int64
				p.kv[i], held = ops.KVPrefix(g, c, n, a.KVHeads, a.HeadDim)
				p.Size += held
			}
		}
		for i, st := range s.st.gdn {
			if st == nil || g.Err != nil {
				continue
			}
			var err1, err2 error
			p.gdn[i].Conv, err1 = graph.Dup(s.t.rt, st.Conv)
			p.gdn[i].SSM, err2 = graph.Dup(s.t.rt, st.SSM)
			if err := errors.Join(err1, err2); err != nil {
				g.Fail(err)
			}
		}
		return g.Err
	})
	hs := p.handles()
	for _, g := range p.gdn {
		p.Size += graph.ArrBytes(g.Conv) + graph.ArrBytes(g.SSM)
	}
	rt := s.t.rt
	runtime.AddCleanup(p, func(hs []arr) { rt.FreeLater(hs...) }, hs)
	if err != nil {
		return nil, fmt.Errorf("mlx: export prefix: %w", err)
	}
	return p, nil
}

func (p *Prefix) handles() []arr {
	var hs []arr
	for i := range p.kv {
		if p.kv[i].K != 0 {
			for _, h := range p.kv[i].Arrays() {
				hs = append(hs, *h)
			}
		}
	}
	for _, g := range p.gdn {
		if g.Conv != 0 {
			hs = append(hs, g.Conv)
		}
		if g.SSM != 0 {
			hs = append(hs, g.SSM)
		}
	}
	return hs
}

// ImportPrefix makes an empty session hold p (see ports.PrefixExporter): the session takes new handles to
// p's arrays, and its next Forward builds new arrays from them, as every Forward does.
func (s *Session) ImportPrefix(ps ports.PrefixState) error {
	if err := s.usable(); err != nil {
		return err
	}
	p, ok := ps.(*Prefix)
	switch {
	case !ok || p == nil:
		return fmt.Errorf("mlx: import prefix: state %T is not an MLX target prefix", ps)
	case p.t != s.t:
		return errors.New("mlx: import prefix: the state was exported by a session of another model")
	case s.pos.N != 0:
		return fmt.Errorf("mlx: import prefix: the session holds %d positions, want an empty session", s.pos.N)
	}
	if err := s.broadcast(ring.Ctrl{Op: ring.OpImport, A: p.id}); err != nil {
		return fmt.Errorf("mlx: import prefix: %w", err)
	}
	err := s.t.rt.Do(func() error {
		if s.t.closed {
			return errTargetClosed
		}
		// Take every new handle first, so a failure leaves the session as it was.
		var taken []arr
		take := func(a arr) (arr, error) {
			if a == 0 {
				return 0, nil
			}
			h, err := graph.Dup(s.t.rt, a)
			if err == nil {
				taken = append(taken, h)
			}
			return h, err
		}
		kv := make([]ops.KVCache, len(s.st.kv))
		gdn := make([]ops.GDNState, len(s.st.gdn))
		var errs []error
		for i := range s.st.kv {
			kv[i].Q8 = p.kv[i].Q8
			src := p.kv[i].Arrays()
			for j, h := range kv[i].Arrays() {
				var err error
				*h, err = take(*src[j])
				errs = append(errs, err)
			}
		}
		for i := range s.st.gdn {
			var e1, e2 error
			gdn[i].Conv, e1 = take(p.gdn[i].Conv)
			gdn[i].SSM, e2 = take(p.gdn[i].SSM)
			errs = append(errs, e1, e2)
		}
		if err := errors.Join(errs...); err != nil {
			for _, h := range taken {
				mlxc.ArrayFree(h)
			}
			return err
		}
		s.dropLast()
		for i, c := range s.st.kv {
			if c != nil {
				for _, h := range c.Arrays() {
					if *h != 0 {
						mlxc.ArrayFree(*h)
					}
				}
				*c = kv[i]
			}
		}
		for i, st := range s.st.gdn {
			if st != nil {
				mlxc.ArrayFree(st.Conv)
				mlxc.ArrayFree(st.SSM)
				st.Conv, st.SSM = gdn[i].Conv, gdn[i].SSM
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mlx: import prefix: %w", err)
	}
	s.pos.N, s.pos.Rec = p.n, p.n
	s.gen++
	return nil
}

// DraftPrefix is a draft session's context K/V for positions [0, n), per drafter layer [1, Hkv, n, d].
type DraftPrefix struct {
	d  *Drafter
	n  int
	kv []ops.KVCache
	model.PrefixSize
}

var _ ports.PrefixState = (*DraftPrefix)(nil)

// Len returns the number of context positions the state covers.
func (p *DraftPrefix) Len() int { return p.n }

// ExportPrefix returns the context of positions [0, n), 0 < n ≤ Len() (see ports.PrefixExporter).
func (s *DraftSession) ExportPrefix(n int) (ports.PrefixState, error) {
	if s.closed {
		return nil, errors.New("mlx drafter: session is closed")
	}
	if n < 1 || n > s.n {
		return nil, fmt.Errorf("mlx drafter: export prefix %d outside [1,%d]", n, s.n)
	}
	a := &s.d.m.Arch
	rt := s.d.t.rt
	p := &DraftPrefix{d: s.d, n: n, kv: make([]ops.KVCache, len(s.kv))}
	err := rt.Do(func() error {
		g := graph.New(rt, "mlx drafter export prefix")
		defer g.Release()
		for i, c := range s.kv {
			var held int64
			p.kv[i], held = ops.KVPrefix(g, c, n, a.NumKVHeads, a.HeadDim)
			p.Size += held
		}
		return g.Err
	})
	var hs []arr
	for _, c := range p.kv {
		if c.K != 0 {
			hs = append(hs, c.K, c.V)
		}
	}
	runtime.AddCleanup(p, func(hs []arr) { rt.FreeLater(hs...) }, hs)
	if err != nil {
		return nil, fmt.Errorf("mlx drafter: export prefix: %w", err)
	}
	return p, nil
}

// ImportPrefix makes an empty draft session hold p (see ports.PrefixExporter).
func (s *DraftSession) ImportPrefix(ps ports.PrefixState) error {
	if s.closed {
		return errors.New("mlx drafter: session is closed")
	}
	p, ok := ps.(*DraftPrefix)
	switch {
	case !ok || p == nil:
		return fmt.Errorf("mlx drafter: import prefix: state %T is not an MLX drafter prefix", ps)
	case p.d != s.d:
		return errors.New("mlx drafter: import prefix: the state was exported by a session of another drafter")
	case s.n != 0:
		return fmt.Errorf("mlx drafter: import prefix: the session holds %d positions, want an empty session", s.n)
	}
	rt := s.d.t.rt
	err := rt.Do(func() error {
		var taken []arr
		var errs []error
		kv := make([]ops.KVCache, len(s.kv))
		for i, c := range p.kv {
			if c.K == 0 {
				continue
			}
			k, e1 := graph.Dup(rt, c.K)
			v, e2 := graph.Dup(rt, c.V)
			if e1 == nil {
				taken = append(taken, k)
			}
			if e2 == nil {
				taken = append(taken, v)
			}
			errs = append(errs, e1, e2)
			kv[i] = ops.KVCache{K: k, V: v}
		}
		if err := errors.Join(errs...); err != nil {
			for _, h := range taken {
				mlxc.ArrayFree(h)
			}
			return err
		}
		for i, c := range s.kv {
			if c.K != 0 {
				mlxc.ArrayFree(c.K)
				mlxc.ArrayFree(c.V)
			}
			c.K, c.V = kv[i].K, kv[i].V
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("mlx drafter: import prefix: %w", err)
	}
	s.n = p.n
	return nil
}
