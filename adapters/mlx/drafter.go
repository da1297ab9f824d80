package mlx

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/higgs-go/higgs/adapters/cpu/dflash"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/safetensors"
	"github.com/higgs-go/higgs/ports"
)

var (
	_ ports.Drafter      = (*Drafter)(nil)
	_ ports.DraftSession = (*DraftSession)(nil)
)

// DrafterOptions tune LoadDrafter.
type DrafterOptions struct {
	// TapLayers, when non-nil, overrides the config's target_layer_ids.
	TapLayers []int
	// AllowDerivedTapLayers accepts the reference formula for drafters without target_layer_ids.
	AllowDerivedTapLayers bool
	// ShrinkBlocks makes a Draft call with bs < BlockSize() run a block of only bs slots; by default it runs
	// the trained block and returns its first bs−1 proposals, as the CPU drafter does (see
	// dflash.Options.ShrinkBlocks: drafters are trained on full blocks only, so a shrunk block drafts worse).
	ShrinkBlocks bool
}

type draftLayer struct {
	inNorm, postNorm, qNorm, kNorm arr
	q, k, v, o                     *linear
	mlp                            *ffnWeights
	window                         int
	causal                         bool
}

// Drafter is a DFlash drafter whose weights live in MLX, bound to an MLX target (it borrows the target's
// embedding and LM head on the device). Safe for concurrent use; sessions are not.
type Drafter struct {
	t       *Target
	arch    dflash.Arch
	fc      *linear
	hidNorm arr
	norm    arr
	layers  []draftLayer
	arena   *graph
	rope    ropeSpec
	shrink  bool // DrafterOptions.ShrinkBlocks
	closed  bool // MLX thread only, as Target.closed
}

// LoadDrafter reads a DFlash drafter from dir and uploads it to MLX, bound to target. The configuration is
// resolved and validated by dflash.ResolveArch (one definition of the DFlash config rules, without loading the
// CPU drafter's weights); weights are then read with the shared safetensors/quant parsers and copied into MLX,
// which checks their shapes and refuses unexpected tensors.
func LoadDrafter(ctx context.Context, dir string, target *Target, opts DrafterOptions) (*Drafter, error) {
	if target == nil {
		return nil, errors.New("mlx drafter: no target")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a, cfg, err := dflash.ResolveArch(dir, target.Info(), opts.TapLayers, opts.AllowDerivedTapLayers)
	if err != nil {
		return nil, fmt.Errorf("mlx %w", err)
	}
	st, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, fmt.Errorf("mlx drafter %s: %w", dir, err)
	}
	d := &Drafter{t: target, arch: a, shrink: opts.ShrinkBlocks}
	// The drafter computes in its target's dtype.
	if d.arena, err = upload(target.rt, st, "mlx drafter load", nil, cfg.Quantization, target.m.dt, d.load); err != nil {
		return nil, fmt.Errorf("mlx drafter %s: %w", dir, err)
	}
	return d, nil
}

func (d *Drafter) load(l *loader) error {
	a := &d.arch
	H, hd := a.HiddenSize, a.HeadDim
	qw, kvw := a.NumHeads*hd, a.NumKVHeads*hd
	var errs []error
	lin := func(name string, out, in int) *linear {
		x, err := l.linear(name+".weight", name, out, in)
		errs = append(errs, err)
		return x
	}
	vec := func(name string, n int) arr {
		x, err := l.norm(name, n)
		errs = append(errs, err)
		return x
	}
	d.rope = newRopeSpec(l.g, hd, hd, a.RopeTheta, a.Rope, a.MaxPositions, l.dt)
	d.fc = lin("fc", H, len(a.TapLayers)*H)
	d.hidNorm = vec("hidden_norm.weight", H)
	d.norm = vec("norm.weight", H)
	for i := range a.NumLayers {
		p := fmt.Sprintf("layers.%d.", i)
		ly := draftLayer{
			inNorm: vec(p+"input_layernorm.weight", H), postNorm: vec(p+"post_attention_layernorm.weight", H),
			qNorm: vec(p+"self_attn.q_norm.weight", hd), kNorm: vec(p+"self_attn.k_norm.weight", hd),
			q: lin(p+"self_attn.q_proj", qw, H), k: lin(p+"self_attn.k_proj", kvw, H),
			v: lin(p+"self_attn.v_proj", kvw, H), o: lin(p+"self_attn.o_proj", H, qw),
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
		mlp, err := l.ffn(p+"mlp", a.IntermediateSize, H)
		if err != nil {
			return err
		}
		ly.mlp = mlp
		if len(a.SlidingWindows) > 0 {
			ly.window = a.SlidingWindows[i]
		}
		if len(a.Causal) > 0 {
			ly.causal = a.Causal[i]
		}
		d.layers = append(d.layers, ly)
	}
	return errors.Join(errs...)
}

// BlockSize is the block size the drafter was trained for (anchor included).
func (d *Drafter) BlockSize() int { return d.arch.BlockSize }

// TapLayers lists the target layers whose outputs the drafter consumes, in order (a copy).
func (d *Drafter) TapLayers() []int { return slices.Clone(d.arch.TapLayers) }

// NewSession opens a draft session with an empty context cache.
func (d *Drafter) NewSession(ctx context.Context) (ports.DraftSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &DraftSession{d: d, k: make([]arr, len(d.layers)), v: make([]arr, len(d.layers))}, nil
}

// Close frees the drafter's weights; sessions must be closed first.
func (d *Drafter) Close() error {
	return d.t.rt.Do(func() error {
		if !d.closed {
			d.closed = true
			d.arena.release()
		}
		return nil
	})
}

// DraftSession holds the drafter's context K/V ([1,Hkv,n,d] per layer) in MLX.
type DraftSession struct {
	d      *Drafter
	n      int
	k, v   []arr
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
	a := &s.d.arch
	err := s.d.t.rt.Do(func() error {
		g := newGraph(s.d.t.rt, "mlx drafter crop")
		defer g.release()
		nk, nv := make([]arr, len(s.k)), make([]arr, len(s.v))
		for i := range s.k {
			if n > 0 {
				nk[i] = g.slice(s.k[i], []int{0, 0, 0, 0}, []int{1, a.NumKVHeads, n, a.HeadDim})
				nv[i] = g.slice(s.v[i], []int{0, 0, 0, 0}, []int{1, a.NumKVHeads, n, a.HeadDim})
			}
		}
		if g.err != nil {
			return g.err
		}
		for i := range s.k {
			mlxc.ArrayFree(s.k[i])
			mlxc.ArrayFree(s.v[i])
			s.k[i], s.v[i] = g.keep(nk[i]), g.keep(nv[i])
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
		for i := range s.k {
			if s.k[i] != 0 {
				mlxc.ArrayFree(s.k[i])
				mlxc.ArrayFree(s.v[i])
			}
		}
		s.k, s.v = nil, nil
		return nil
	})
}

// Draft appends newCtx's rows to the context cache, then drafts bs−1 tokens for [anchor, mask…] at positions
// Len()..Len()+bs−1 (MODEL-REFERENCE §5). bs = 1 only appends the context. A block shorter than the trained
// one runs the trained block and returns its first bs−1 proposals unless DrafterOptions.ShrinkBlocks is set.
// The only host read is the drafted token ids.
func (s *DraftSession) Draft(ctx context.Context, anchor ports.Token, newCtx ports.Taps, bs int) (ports.Proposal, error) {
	if s.closed {
		return ports.Proposal{}, errors.New("mlx drafter: session is closed")
	}
	d := s.d
	a := &d.arch
	vocab := d.t.info.VocabSize
	if bs < 1 || bs > a.BlockSize {
		return ports.Proposal{}, fmt.Errorf("mlx drafter: block size %d outside 1..%d", bs, a.BlockSize)
	}
	if anchor < 0 || int(anchor) >= vocab {
		return ports.Proposal{}, fmt.Errorf("mlx drafter: anchor token %d outside the vocabulary of %d", anchor, vocab)
	}
	if err := ctx.Err(); err != nil {
		return ports.Proposal{}, err
	}
	H := a.HiddenSize
	width := len(a.TapLayers) * H
	var ctxRows int
	var host []float32
	var dev *Taps
	if newCtx != nil && newCtx.Rows() > 0 {
		ctxRows = newCtx.Rows()
		switch c := newCtx.(type) {
		case *Taps:
			if c.width != width {
				return ports.Proposal{}, fmt.Errorf("mlx drafter: context taps are %d wide, want %d", c.width, width)
			}
			if c.a == 0 {
				return ports.Proposal{}, errors.New("mlx drafter: context taps were released (pass Detach()ed taps across Forward calls)")
			}
			dev = c
		case dflash.FloatTaps:
			data, rows, w := c.Float32()
			if w != width || len(data) < rows*w {
				return ports.Proposal{}, fmt.Errorf("mlx drafter: context taps are %d×%d, want width %d", rows, w, width)
			}
			host, ctxRows = data[:rows*w], rows
		default:
			return ports.Proposal{}, fmt.Errorf("mlx drafter: context taps of type %T are not readable", newCtx)
		}
	}
	var toks []int32
	err := d.t.rt.Do(func() error {
		if d.closed || d.t.closed {
			return errors.New("mlx drafter: drafter or target is closed")
		}
		g := newGraph(d.t.rt, "mlx draft")
		defer g.release()
		newK, newV := slices.Clone(s.k), slices.Clone(s.v)
		if ctxRows > 0 {
			var f arr
			if dev != nil {
				f = dev.a
				if ctxRows < shapeOf(f)[0] {
					f = g.slice(f, []int{0, 0}, []int{ctxRows, width})
				}
			} else {
				f = d.t.m.cast(g, uploadF32(g, host, ctxRows, width))
			}
			c := g.rmsNorm(d.fc.apply(g, f), d.hidNorm, float32(a.RMSNormEps))
			for i := range d.layers {
				ly := &d.layers[i]
				k := g.rmsNorm(g.reshape(ly.k.apply(g, c), ctxRows, a.NumKVHeads, a.HeadDim), ly.kNorm, float32(a.RMSNormEps))
				k = g.rope(g.expand(g.transpose(k, 1, 0, 2), 0), d.rope, s.n)
				v := g.expand(g.transpose(g.reshape(ly.v.apply(g, c), ctxRows, a.NumKVHeads, a.HeadDim), 1, 0, 2), 0)
				if s.k[i] != 0 {
					k, v = g.concat(2, s.k[i], k), g.concat(2, s.v[i], v)
				}
				newK[i], newV[i] = k, v
			}
		}
		pos := s.n + ctxRows
		var ids arr
		outs := append(slices.Clone(newK), newV...)
		if bs > 1 {
			rows, bs := bs-1, bs
			if !d.shrink {
				bs = a.BlockSize
			}
			block := make([]int32, bs)
			block[0] = anchor
			for i := 1; i < bs; i++ {
				block[i] = a.MaskToken
			}
			x := d.t.m.embedRows(g, uploadI32(g, block, bs))
			if a.EmbedScale != 0 && a.EmbedScale != 1 {
				x = g.mul(x, d.t.m.cast(g, g.scalar(float32(a.EmbedScale))))
			}
			eps := float32(a.RMSNormEps)
			scale := float32(1 / math.Sqrt(float64(a.HeadDim)))
			for i := range d.layers {
				ly := &d.layers[i]
				h := g.rmsNorm(x, ly.inNorm, eps)
				q := g.rmsNorm(g.reshape(ly.q.apply(g, h), bs, a.NumHeads, a.HeadDim), ly.qNorm, eps)
				k := g.rmsNorm(g.reshape(ly.k.apply(g, h), bs, a.NumKVHeads, a.HeadDim), ly.kNorm, eps)
				v := g.reshape(ly.v.apply(g, h), bs, a.NumKVHeads, a.HeadDim)
				q = g.rope(g.expand(g.transpose(q, 1, 0, 2), 0), d.rope, pos)
				k = g.rope(g.expand(g.transpose(k, 1, 0, 2), 0), d.rope, pos)
				v = g.expand(g.transpose(v, 1, 0, 2), 0)
				if newK[i] != 0 {
					k, v = g.concat(2, newK[i], k), g.concat(2, newV[i], v)
				}
				var o arr
				if ly.window > 0 {
					// Sliding layers see keys with |Δposition| < W (and, when causal, no later block slot):
					// drop the context keys no query can see, mask the rest.
					lo := max(0, pos-ly.window+1)
					if lo > 0 {
						L := shapeOf(k)[2]
						k = g.slice(k, []int{0, 0, lo, 0}, []int{1, a.NumKVHeads, L, a.HeadDim})
						v = g.slice(v, []int{0, 0, lo, 0}, []int{1, a.NumKVHeads, L, a.HeadDim})
					}
					o = g.sdpaMask(q, k, v, scale, uploadBool(g, slidingMask(pos, lo, bs, ly.window, ly.causal), bs, pos-lo+bs))
				} else {
					// Full layers: no mask (the block is denoised jointly); causal layers: the lower-right
					// causal mask lets slot i see all context and block slots ≤ i.
					o = g.sdpa(q, k, v, scale, ly.causal)
				}
				o = g.reshape(g.transpose(o, 0, 2, 1, 3), bs, a.NumHeads*a.HeadDim)
				x = g.add(x, ly.o.apply(g, o))
				x = g.add(x, d.t.m.ffn(g, ly.mlp, g.rmsNorm(x, ly.postNorm, eps), bs))
			}
			// Only the returned rows go through the final norm and the LM head.
			y := g.rmsNorm(g.slice(x, []int{1, 0}, []int{rows + 1, H}), d.norm, eps)
			ids = g.astype(g.argmax(d.t.m.lmHead.apply(g, y), -1), mlxc.Int32)
			outs = append(outs, ids)
		}
		g.eval(outs...)
		if ids != 0 {
			toks = g.readI32(ids)
		}
		if g.err != nil {
			return g.err
		}
		if ctxRows > 0 {
			for i := range s.k {
				if s.k[i] != 0 {
					mlxc.ArrayFree(s.k[i])
					mlxc.ArrayFree(s.v[i])
				}
				s.k[i], s.v[i] = g.keep(newK[i]), g.keep(newV[i])
			}
		}
		return nil
	})
	if err != nil {
		return ports.Proposal{}, err
	}
	s.n += ctxRows
	if bs == 1 {
		return ports.Proposal{Tokens: []ports.Token{}}, nil
	}
	out := make([]ports.Token, len(toks))
	copy(out, toks)
	return ports.Proposal{Tokens: out}, nil
}

// slidingMask is the [bs, pos−lo+bs] visibility of a sliding layer (MODEL-REFERENCE §5.2, as the CPU drafter):
// block slot i (position pos+i) sees context key j (lo ≤ j < pos) when pos+i−j < W, and block slot j when
// |i−j| < W and, for causal layers, j ≤ i.
func slidingMask(pos, lo, bs, w int, causal bool) []bool {
	cols := pos - lo + bs
	m := make([]bool, bs*cols)
	for i := range bs {
		for c := range cols {
			if c < pos-lo {
				m[i*cols+c] = pos+i-(lo+c) < w
				continue
			}
			j := c - (pos - lo)
			m[i*cols+c] = (!causal || j <= i) && i-j < w && j-i < w
		}
	}
	return m
}
