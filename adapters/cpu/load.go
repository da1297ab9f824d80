package cpu

import (
	"fmt"
	"strings"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/cpu/weights"
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/model"
)

// loader builds kernel values from one checkpoint: matrices stay in their stored form (F32, BF16 or MLX
// affine-quantized, zero-copy over the mapping where aligned) and run on pool.
type loader struct {
	ck    *hfmodel.Checkpoint
	quant *hfmodel.Quantization
	pool  *kernel.Pool
}

var _ model.Loader[*weight] = (*loader)(nil)

func (l *loader) Linear(tensor, module string, dims ...int) (*weight, error) {
	sn, err := l.ck.Stored(tensor)
	if err != nil {
		return nil, err
	}
	sp, _, err := l.ck.QuantSpec(l.quant, module)
	if err != nil {
		return nil, err
	}
	base := strings.TrimSuffix(sn, ".weight")
	if len(dims) == 3 {
		xs, err := weights.LoadStacked(l.ck.Store, sn, base, sp, dims[0], dims[1], dims[2])
		if err != nil {
			return nil, err
		}
		for _, x := range xs {
			x.Pool = l.pool
			x.Prepare() // the kernels' own layout, if the pool's mode has one: built now, not in the first request
		}
		return &weight{experts: xs}, nil
	}
	if len(dims) != 2 {
		return nil, fmt.Errorf("%s: %d dims, want [out in] or [experts out in]", tensor, len(dims))
	}
	lin, err := weights.LoadTensorLinear(l.ck.Store, sn, base, sp, dims[0], dims[1])
	if err != nil {
		return nil, err
	}
	lin.Pool = l.pool
	// The kernels' own layout (if the pool's mode has one) is built now, not in the first request; except for
	// the input embedding, which only Row reads unless it is tied to the LM head (then its first product
	// builds it).
	if !strings.HasSuffix(module, "embed_tokens") {
		lin.Prepare()
	}
	return &weight{lin: lin}, nil
}

// Vector keeps v: the CPU backend computes in float32 throughout.
func (l *loader) Vector(v []float32, exact bool) (*weight, error) { return &weight{vec: v}, nil }

// Conv keeps the [channels, taps] order the checkpoint stores (w[c·k + j]), which is how the convolution
// walks it.
func (l *loader) Conv(v []float32, channels, k int) (*weight, error) {
	if len(v) != channels*k {
		return nil, fmt.Errorf("conv: %d values for %d channels × %d taps", len(v), channels, k)
	}
	return &weight{vec: v, taps: convTaps(v, channels, k)}, nil
}

// convTaps transposes conv weights [channels, k] to [k, channels].
func convTaps(v []float32, channels, k int) []float32 {
	taps := make([]float32, len(v))
	for c := range channels {
		for j := range k {
			taps[j*channels+c] = v[c*k+j]
		}
	}
	return taps
}

// Fuse pairs two matrices the panel form runs as one product over the same inputs (kernel.CanPair: fast
// mode, 4- or 8-bit panels of one input width and group), so a SwiGLU's gate and up quantize their input once
// and take one pool call, not two. Each output keeps the bits of its own product. Other pairs stay apart.
func (l *loader) Fuse(a, b *weight) (*weight, bool) {
	if a.lin == nil || b.lin == nil || !kernel.CanPair(a.lin, b.lin) {
		return nil, false
	}
	return &weight{pair: [2]*kernel.Linear{a.lin, b.lin}}, true
}

func (l *loader) Stack(parts []*weight) (*weight, error) {
	w := &weight{experts: make([]*kernel.Linear, len(parts))}
	for i, p := range parts {
		if p.lin == nil {
			return nil, fmt.Errorf("stack: part %d is not a matrix", i)
		}
		w.experts[i] = p.lin
	}
	return w, nil
}

func (l *loader) Rope(r model.Rope) (*weight, error) {
	return &weight{rope: vecmath.NewRopeFreqs(r.Scaling.Frequencies(r.Dims, r.Base, r.MaxPositions))}, nil
}
