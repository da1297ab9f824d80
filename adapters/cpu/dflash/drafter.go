package dflash

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/ports"
)

// Target is what a drafter borrows from its target model: its shape, its token embedding and its LM head.
// *cpu.Target implements it.
type Target interface {
	Info() ports.ModelInfo
	// EmbedTokens writes the embedding rows of tokens into dst[len(tokens)·H].
	EmbedTokens(dst []float32, tokens []ports.Token) error
	// LMHead writes the logits of rows hidden rows (after the final norm) into dst[rows·V].
	LMHead(dst, hidden []float32, rows int) error
}

// FloatTaps is the CPU tap matrix: row-major float32, rows positions by width = taps·H values.
type FloatTaps interface {
	Float32() (data []float32, rows, width int)
}

type layer struct {
	inNorm, postNorm []float32
	qNorm, kNorm     []float32
	q, k, v, o       *kernel.Linear
	gate, up, down   *kernel.Linear
	window           int
	causal           bool
}

// Drafter is a loaded DFlash drafter bound to one target. It is immutable after loading and safe for
// concurrent use; each generation opens its own Session.
type Drafter struct {
	arch     Arch
	target   Target
	vocab    int
	pool     *kernel.Pool
	fc       *kernel.Linear
	hidNorm  []float32
	norm     []float32
	layers   []layer
	rope     *kernel.Rope
	eps      float32
	shrink   bool // Options.ShrinkBlocks
	closeFns []func() error
}

var _ ports.Drafter = (*Drafter)(nil)

// build loads every weight the architecture needs from ws, then refuses tensors it did not consume.
func build(a Arch, ws *weightSet, target Target, pool *kernel.Pool) (*Drafter, error) {
	info := target.Info()
	if err := errors.Join(a.Validate(), a.CheckTarget(info)); err != nil {
		return nil, err
	}
	H, d := a.HiddenSize, a.HeadDim
	qw, kvw := a.NumHeads*d, a.NumKVHeads*d
	dr := &Drafter{arch: a, target: target, vocab: info.VocabSize, pool: pool,
		rope: kernel.NewRopeFreqs(a.Rope.Frequencies(d, a.RopeTheta, a.MaxPositions)), eps: float32(a.RMSNormEps)}
	dr.arch.TapLayers = slices.Clone(a.TapLayers)
	var errs []error
	lin := func(name string, out, in int) *kernel.Linear {
		l, err := ws.linear(name, out, in)
		errs = append(errs, err)
		return l
	}
	vec := func(name string, n int) []float32 {
		v, err := ws.vector(name, n)
		errs = append(errs, err)
		return v
	}
	dr.fc = lin("fc", H, len(a.TapLayers)*H)
	dr.hidNorm = vec("hidden_norm.weight", H)
	dr.norm = vec("norm.weight", H)
	for i := range a.NumLayers {
		p := fmt.Sprintf("layers.%d.", i)
		l := layer{
			inNorm:   vec(p+"input_layernorm.weight", H),
			postNorm: vec(p+"post_attention_layernorm.weight", H),
			qNorm:    vec(p+"self_attn.q_norm.weight", d),
			kNorm:    vec(p+"self_attn.k_norm.weight", d),
			q:        lin(p+"self_attn.q_proj", qw, H),
			k:        lin(p+"self_attn.k_proj", kvw, H),
			v:        lin(p+"self_attn.v_proj", kvw, H),
			o:        lin(p+"self_attn.o_proj", H, qw),
			gate:     lin(p+"mlp.gate_proj", a.IntermediateSize, H),
			up:       lin(p+"mlp.up_proj", a.IntermediateSize, H),
			down:     lin(p+"mlp.down_proj", H, a.IntermediateSize),
		}
		if len(a.SlidingWindows) > 0 {
			l.window = a.SlidingWindows[i]
		}
		if len(a.Causal) > 0 {
			l.causal = a.Causal[i]
		}
		dr.layers = append(dr.layers, l)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ws.unused(); err != nil {
		return nil, err
	}
	return dr, nil
}

// Arch returns the drafter's resolved architecture (a copy).
func (d *Drafter) Arch() Arch {
	a := d.arch
	a.TapLayers = slices.Clone(a.TapLayers)
	a.SlidingWindows = slices.Clone(a.SlidingWindows)
	return a
}

// BlockSize is the block size the drafter was trained for (anchor included).
func (d *Drafter) BlockSize() int { return d.arch.BlockSize }

// TapLayers lists the target layers whose outputs the drafter consumes, in order (a copy).
func (d *Drafter) TapLayers() []int { return slices.Clone(d.arch.TapLayers) }

// ShrinksBlocks reports whether a short Draft call runs a shortened block (Options.ShrinkBlocks) instead of the
// trained one.
func (d *Drafter) ShrinksBlocks() bool { return d.shrink }

// MaskToken is the id the noise block is filled with.
func (d *Drafter) MaskToken() ports.Token { return d.arch.MaskToken }

// NewSession opens a draft session with an empty context cache.
func (d *Drafter) NewSession(ctx context.Context) (ports.DraftSession, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Session{d: d, k: make([][]float32, len(d.layers)), v: make([][]float32, len(d.layers))}
	return s, nil
}

// Close releases the weights' memory mappings. Sessions must not be used afterwards.
func (d *Drafter) Close() error {
	var errs []error
	for _, f := range d.closeFns {
		errs = append(errs, f())
	}
	d.closeFns = nil
	return errors.Join(errs...)
}
