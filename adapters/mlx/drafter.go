package mlx

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/mlx/internal/ops"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.Drafter         = (*Drafter)(nil)
	_ ports.DraftSession    = (*DraftSession)(nil)
	_ ports.SamplingDrafter = (*DraftSession)(nil)
	_ ports.TopDrafter      = (*DraftSession)(nil)
)

// DrafterOptions tune LoadDrafter (see model.DrafterOptions).
type DrafterOptions = model.DrafterOptions

// Drafter is a DFlash drafter whose weights live in MLX, bound to an MLX target (it borrows the target's
// embedding and LM head on the device). Safe for concurrent use; sessions are not.
type Drafter struct {
	t      *Target
	m      *model.Drafter[*ops.Weight]
	arena  *graph.Graph
	opts   DrafterOptions
	closed bool // MLX thread only, as Target.closed
}

// LoadDrafter reads a DFlash drafter from dir and uploads it to MLX, bound to target. The configuration is
// resolved and validated by hfmodel.ResolveDrafter (one definition of the DFlash config rules) and the
// weights loaded by the shared model.LoadDrafter, copied into MLX, which refuses unexpected tensors.
func LoadDrafter(ctx context.Context, dir string, target *Target, opts DrafterOptions) (*Drafter, error) {
	if target == nil {
		return nil, errors.New("mlx drafter: no target")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, cfg, err := hfmodel.ResolveDrafter(dir, target.Info(), opts.TapLayers, opts.AllowDerivedTapLayers)
	if err != nil {
		return nil, fmt.Errorf("mlx %w", err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("mlx drafter %s: %w", dir, err)
	}
	d := &Drafter{t: target, opts: opts}
	// The drafter computes in its target's dtype.
	d.arena, err = ops.Upload(target.rt, st, "mlx drafter load", cfg.Quantization, target.dt, func(l *ops.Loader) (err error) {
		d.m, err = model.LoadDrafter(l, l.Checkpoint, a, target.m)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mlx drafter %s: %w", dir, err)
	}
	return d, nil
}

// BlockSize is the drafter's configured block_size (anchor included): the default block, not a bound.
func (d *Drafter) BlockSize() int { return d.m.Arch.BlockSize }

// TapLayers lists the target layers whose outputs the drafter consumes, in order (a copy).
func (d *Drafter) TapLayers() []int { return slices.Clone(d.m.Arch.TapLayers) }

// NewSession opens a draft session with an empty context cache.
func (d *Drafter) NewSession(ctx context.Context) (ports.DraftSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &DraftSession{d: d, kv: model.PerLayer[ops.KVCache](len(d.m.Layers))}, nil
}

// Close frees the drafter's weights; sessions must be closed first.
func (d *Drafter) Close() error {
	return d.t.rt.Do(func() error {
		if !d.closed {
			d.closed = true
			d.arena.Release()
		}
		return nil
	})
}

// DraftSession holds the drafter's context K/V ([1,Hkv,n,d] per layer) in MLX.
type DraftSession struct {
	d      *Drafter
	n      int
	kv     []*ops.KVCache
	closed bool
}

// Len returns the number of committed context positions cached.
func (s *DraftSession) Len() int { return s.n }

// Crop truncates the context cache to n positions.
func (s *DraftSession) Crop(n int) error {
	if s.closed {
		return errors.New("mlx drafter: session is closed")
	}
	if n < 0 || n > s.n {
		return fmt.Errorf("mlx drafter: crop to %d outside 0..%d", n, s.n)
	}
	if n == s.n {
		return nil
	}
	a := &s.d.m.Arch
	err := s.d.t.rt.Do(func() error {
		g := graph.New(s.d.t.rt, "mlx drafter crop")
		defer g.Release()
		nk, nv := make([]arr, len(s.kv)), make([]arr, len(s.kv))
		for i, c := range s.kv {
			if n > 0 {
				nk[i] = g.Slice(c.K, []int{0, 0, 0, 0}, []int{1, a.NumKVHeads, n, a.HeadDim})
				nv[i] = g.Slice(c.V, []int{0, 0, 0, 0}, []int{1, a.NumKVHeads, n, a.HeadDim})
			}
		}
		if g.Err != nil {
			return g.Err
		}
		for i, c := range s.kv {
			mlxc.ArrayFree(c.K)
			mlxc.ArrayFree(c.V)
			c.K, c.V = g.Keep(nk[i]), g.Keep(nv[i])
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.n = n
	return nil
}

// Close releases the session's caches.
func (s *DraftSession) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	return s.d.t.rt.Do(func() error {
		for _, c := range s.kv {
			if c.K != 0 {
				mlxc.ArrayFree(c.K)
				mlxc.ArrayFree(c.V)
			}
		}
		s.kv = nil
		return nil
	})
}

// Draft appends newCtx's rows to the context cache, then drafts bs−1 tokens for [anchor, mask…] at positions
// Len()..Len()+bs−1 (docs/model-math.md#dflash-drafter). bs = 1 only appends the context. Exactly bs slots are
// drafted, whatever the drafter's configured block size (as the authors' loop does); bs is bounded only by the
// target's context length.
// The host reads are the drafted token ids (DFlash), or each slot's candidates and the selector's small
// projections (DFlash2, whose greedy walk runs on the host).
func (s *DraftSession) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	return s.draft(ctx, anchor, newCtx, bs, 0, nil, 0)
}

// DraftTop is Draft that also fills Proposal.Top with each proposed slot's top.K candidates (see
// ports.TopDrafter): only the first top.Slots slots run through the last layer's queries and the LM head, and
// their candidates are selected and normalised on the device (ops.Backend.Top), which reads back a few
// candidates' ids and logits per slot instead of the slots' whole logit rows.
func (s *DraftSession) DraftTop(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, top ports.TopRequest) (ports.Proposal, error) {
	if top.K < 1 {
		return ports.Proposal{}, fmt.Errorf("mlx drafter: top-k %d must be ≥ 1", top.K)
	}
	return s.draftRows(ctx, anchor, newCtx, bs, top.SlotsOf(bs), 0, nil, top.K, top.Narrow)
}

// DraftSampled is Draft at temperature > 0 (ports.SamplingDrafter): a DFlash2 drafter's selector draws each
// slot from its candidates' softmax(score/temperature) with uniforms from rnd and reports those
// distributions; a DFlash drafter drafts greedily.
func (s *DraftSession) DraftSampled(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand) (ports.Proposal, error) {
	if err := model.CheckSampledDraft(temperature, rnd); err != nil {
		return ports.Proposal{}, fmt.Errorf("mlx drafter: %w", err)
	}
	return s.draft(ctx, anchor, newCtx, bs, temperature, rnd, 0)
}

// draft is Draft (DraftSampled with rnd, DraftTop with topK > 0, which reads the slots' logits back).
func (s *DraftSession) draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand, topK int) (ports.Proposal, error) {
	return s.draftRows(ctx, anchor, newCtx, bs, bs-1, temperature, rnd, topK, false)
}

// rankOnDevice says whether DraftTop ranks the candidates on the device (ops.Backend.Top: a few values per slot
// read back) or reads the slots' logits back and ranks them on the host. On the GPU the device ranks them; on
// MLX's CPU device the host path measured faster (BenchmarkTop: 37.5–39.2 against 46.6–47.8 ms for 15 slots
// of a 151,936-token vocabulary), its exps no dearer than MLX's and nothing to copy. Tests flip it to run both.
var rankOnDevice = func(rt *mlxc.Runtime) bool { return rt.GPU() }

// draftRows is draft proposing only the first slots of the bs-slot block (1 ≤ slots ≤ bs−1), narrow as
// ports.TopRequest.Narrow.
func (s *DraftSession) draftRows(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs, slots int, temperature float64, rnd ports.Rand, topK int, narrow bool) (ports.Proposal, error) {
	in, err := s.admit(anchor, newCtx, bs, temperature, rnd)
	if err != nil {
		return ports.Proposal{}, err
	}
	if err := ctx.Err(); err != nil {
		return ports.Proposal{}, err
	}
	d := s.d
	a := &d.m.Arch
	width := len(a.TapLayers) * a.HiddenSize
	ctxRows := in.rows
	var toks []int32
	var dists []ports.Distribution
	var top [][]ports.Candidate // the proposed slots' candidates, for DraftTop
	var topErr error            // a slot without a distribution: refused once the context is appended
	err = d.t.rt.Do(func() error {
		if d.closed || d.t.closed {
			return errors.New("mlx drafter: drafter or target is closed")
		}
		g := graph.New(d.t.rt, "mlx draft")
		defer g.Release()
		be := ops.Backend{G: g, DT: d.t.dt}
		// The pass works on copies of the cache handles: the session adopts the new ones after evaluation.
		work := make([]*ops.KVCache, len(s.kv))
		for i, c := range s.kv {
			work[i] = &ops.KVCache{K: c.K, V: c.V}
		}
		st := &ops.Pass{O: be, KV: work}
		if ctxRows > 0 {
			model.Context(d.m, be, st, in.contextRows(g, be, width), s.n)
		}
		var outs []arr
		for _, c := range work {
			outs = append(outs, c.K, c.V)
		}
		if bs > 1 {
			block := model.NoiseBlock(anchor, a.MaskToken, bs)
			if rnd != nil {
				_, toks, dists = model.ProposeSampled(d.m, be, st, block, s.n+ctxRows, slots, temperature, rnd)
			} else {
				var lg ops.Act
				lg, toks = model.Propose(d.m, be, st, block, s.n+ctxRows, slots, narrow)
				switch {
				case topK == 0 || toks == nil:
				case lg.C != d.t.info.VocabSize:
					topErr = fmt.Errorf("%d logits per slot for a vocabulary of %d", lg.C, d.t.info.VocabSize)
				case rankOnDevice(d.t.rt):
					top, topErr = be.Top(lg, toks, topK)
				default:
					// MLX's CPU device: reading the rows back and ranking them on the host is the faster path there
					// (docs/mlx.md#tree-verification).
					top, topErr = model.TopCandidates(be.Host(lg), d.t.info.VocabSize, toks, topK)
				}
			}
		}
		g.Eval(outs...)
		if g.Err != nil {
			return g.Err
		}
		if ctxRows > 0 {
			for i, c := range s.kv {
				if c.K != 0 {
					mlxc.ArrayFree(c.K)
					mlxc.ArrayFree(c.V)
				}
				c.K, c.V = g.Keep(work[i].K), g.Keep(work[i].V)
			}
		}
		return nil
	})
	if err != nil {
		return ports.Proposal{}, err
	}
	s.n += ctxRows
	if bs == 1 {
		p := ports.Proposal{Tokens: []ports.Token{}}
		if topK > 0 {
			p.Top = [][]ports.Candidate{}
		}
		return p, nil
	}
	if len(toks) != slots {
		return ports.Proposal{}, fmt.Errorf("mlx drafter: drafted %d tokens for %d slots of a block of %d", len(toks), slots, bs)
	}
	out := make([]ports.Token, len(toks))
	copy(out, toks)
	p := ports.Proposal{Tokens: out, Dists: dists}
	if topK > 0 {
		if topErr != nil {
			return ports.Proposal{}, fmt.Errorf("mlx drafter: %w", topErr)
		}
		p.Top = top
	}
	return p, nil
}

// draftInput is an admitted draft call's context rows: on the device (dev) or the host (host), rows of them.
type draftInput struct {
	rows int
	host []float32
	dev  *Taps
}

// admit checks a draft call before any work (closed session, block size and its room, anchor, the sampling settings when
// temperature ≠ 0 or rnd is set, the context taps' shape and residency).
func (s *DraftSession) admit(anchor ports.Token, newCtx ports.Taps, bs int, temperature float64, rnd ports.Rand) (draftInput, error) {
	var in draftInput
	if s.closed {
		return in, errors.New("mlx drafter: session is closed")
	}
	a := &s.d.m.Arch
	if err := model.CheckDraft(anchor, bs, s.d.t.info.VocabSize); err != nil {
		return in, fmt.Errorf("mlx drafter: %w", err)
	}
	if temperature != 0 || rnd != nil {
		if err := model.CheckSampledDraft(temperature, rnd); err != nil {
			return in, fmt.Errorf("mlx drafter: %w", err)
		}
	}
	if newCtx != nil {
		in.rows = newCtx.Rows()
	}
	if err := model.CheckRoom(s.Len()+in.rows, bs, s.d.t.info.ContextLength); err != nil {
		return in, fmt.Errorf("mlx drafter: %w", err)
	}
	if in.rows == 0 {
		return in, nil
	}
	width := len(a.TapLayers) * a.HiddenSize
	switch c := newCtx.(type) {
	case *Taps:
		if c.width != width {
			return in, fmt.Errorf("mlx drafter: context taps are %d wide, want %d", c.width, width)
		}
		if c.a == 0 {
			return in, errors.New("mlx drafter: context taps were released (pass Detach()ed taps across Forward calls)")
		}
		in.dev = c
	case ports.HostTaps:
		data, rows, w, err := c.Host()
		if err != nil {
			return in, fmt.Errorf("mlx drafter: context taps: %w", err)
		}
		if w != width || len(data) < rows*w {
			return in, fmt.Errorf("mlx drafter: context taps are %d×%d, want width %d", rows, w, width)
		}
		in.host, in.rows = data[:rows*w], rows
	default:
		return in, fmt.Errorf("mlx drafter: context taps of type %T are not readable", newCtx)
	}
	return in, nil
}

// contextRows is the graph value of an admitted call's context rows [rows, width].
func (in draftInput) contextRows(g *graph.Graph, be ops.Backend, width int) ops.Act {
	var f arr
	if in.dev != nil {
		f = in.dev.a
		if in.rows < graph.ShapeOf(f)[0] {
			f = g.Slice(f, []int{0, 0}, []int{in.rows, width})
		}
	} else {
		f = be.Cast(graph.UploadF32(g, in.host, in.rows, width))
	}
	return ops.Act{A: f, R: in.rows, C: width}
}
