package ops

import (
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// Loader uploads weights, looked up by canonical name (hfmodel.Checkpoint), into the arena graph. Every
// upload copies (mlx_array_new_data); nothing keeps a pointer into Go or mapped memory.
type Loader struct {
	Checkpoint *hfmodel.Checkpoint
	quant      *hfmodel.Quantization
	G          *graph.Graph
	dt         mlxc.Dtype // compute dtype of float weights (Float32, or BFloat16 when asked)
}

var _ model.Loader[*Weight] = (*Loader)(nil)

// Upload builds weights on the MLX thread: fill loads them through a loader over st (q its quantization,
// float weights in dt) into a fresh arena named name; then every stored tensor must have been used, and what
// is still lazy is evaluated. It returns the arena, or releases it on failure. st is closed in every case:
// each weight has been copied into MLX.
func Upload(rt *mlxc.Runtime, st *safetensors.Store, name string, q *hfmodel.Quantization,
	dt mlxc.Dtype, fill func(*Loader) error) (*graph.Graph, error) {
	var arena *graph.Graph
	err := rt.Do(func() error {
		g := graph.New(rt, name)
		ck, err := hfmodel.NewCheckpoint(st)
		l := &Loader{Checkpoint: ck, quant: q, G: g, dt: dt}
		if err == nil {
			err = fill(l)
		}
		if err == nil {
			err = l.Checkpoint.Unused()
		}
		if err == nil {
			g.Eval(g.Owned...)
			err = g.Err
		}
		if err != nil {
			g.Release()
			return err
		}
		arena = g
		return nil
	})
	if err = errors.Join(err, st.Close()); err != nil {
		return nil, err
	}
	return arena, nil
}

// Linear loads canonical module c whose weight tensor is wname, with logical dims [out,in] or [E,out,in].
func (l *Loader) Linear(wname, c string, dims ...int) (*Weight, error) {
	if len(dims) != 2 && len(dims) != 3 {
		return nil, fmt.Errorf("%s: %d dims, want [out in] or [experts out in]", wname, len(dims))
	}
	t, err := l.Checkpoint.Tensor(wname)
	if err != nil {
		return nil, err
	}
	in := dims[len(dims)-1]
	lin := &Weight{out: dims[len(dims)-2], in: in}
	if len(dims) == 3 {
		lin.experts = dims[0]
	}
	sp, quantized, err := l.Checkpoint.QuantSpec(l.quant, c)
	if err != nil {
		return nil, err
	}
	if !quantized {
		if !slices.Equal(t.Shape, dims) {
			return nil, fmt.Errorf("tensor %q: shape %v, want %v", t.Name, t.Shape, dims)
		}
		v, err := t.Float32()
		if err != nil {
			return nil, err
		}
		w := graph.UploadF32(l.G, v, dims...)
		perm := []int{1, 0}
		if len(dims) == 3 {
			perm = []int{0, 2, 1}
		}
		// Store Wᵀ contiguous ([in,out]): BLAS reads a transposed view half as fast (24 vs 14 ms for a
		// 768×32000 GEMV here). Evaluate now and drop the [out,in] upload so loading never holds both copies
		// of every matrix at once.
		tr := l.G.Transpose(w, perm...)
		x := tr
		if l.dt != mlxc.Float32 && len(dims) == 2 { // stacked float experts stay float32 (gather_mm)
			x = l.G.Astype(tr, l.dt)
		}
		lin.WT = l.G.Contiguous(x)
		l.G.Eval(lin.WT)
		if x != tr {
			l.G.Drop(x)
		}
		l.G.Drop(tr) // the view would keep the upload alive
		l.G.Drop(w)
		return lin, l.G.Err
	}
	sc, err := l.Checkpoint.Tensor(c + ".scales")
	if err != nil {
		return nil, err
	}
	bi, err := l.Checkpoint.Tensor(c + ".biases")
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", c, err)
	}
	s, err := hfmodel.CheckQuantizedLinear(sp, t.Shape, sc.Shape, bi.Shape, dims)
	if err != nil {
		return nil, fmt.Errorf("quantized %s: %w", c, err)
	}
	codes, err := t.Uint32()
	if err != nil {
		return nil, err
	}
	scales, err := sc.Float32()
	if err != nil {
		return nil, err
	}
	biases, err := bi.Float32()
	if err != nil {
		return nil, err
	}
	l.Checkpoint.MarkUsed(c+".scales", c+".biases")
	lin.bits, lin.group = s.Bits, s.GroupSize
	lin.w = graph.UploadU32(l.G, codes, t.Shape...)
	lin.scales = l.cast(graph.UploadF32(l.G, scales, sc.Shape...))
	lin.biase = l.cast(graph.UploadF32(l.G, biases, bi.Shape...))
	return lin, l.G.Err
}

// Fuse stacks a and b along the output axis into one matrix (gate+up → one matmul). ok is false when their
// storage differs (float vs quantized, or different bits/group), in which case the caller keeps them apart.
func (l *Loader) Fuse(a, b *Weight) (*Weight, bool) {
	if a.bits != b.bits || a.group != b.group || a.in != b.in || a.experts != b.experts {
		return nil, false
	}
	g := l.G
	f := &Weight{out: a.out + b.out, in: a.in, bits: a.bits, group: a.group, experts: a.experts}
	if a.Quantized() {
		ax := len(graph.ShapeOf(a.w)) - 2
		f.w = g.Concat(ax, a.w, b.w)
		f.scales = g.Concat(ax, a.scales, b.scales)
		f.biase = g.Concat(ax, a.biase, b.biase)
	} else {
		f.WT = g.Concat(len(graph.ShapeOf(a.WT))-1, a.WT, b.WT)
	}
	// The parts are not used apart: evaluate the fused matrix and free them, only once it exists (on an MLX
	// error the caller keeps the parts, and the loader reports the graph's error).
	g.Eval(f.WT, f.w, f.scales, f.biase)
	if g.Err != nil {
		return nil, false
	}
	for _, x := range []arr{a.WT, a.w, a.scales, a.biase, b.WT, b.w, b.scales, b.biase} {
		g.Drop(x)
	}
	return f, true
}

// Vector uploads host values in the compute dtype (float32 when exact).
func (l *Loader) Vector(v []float32, exact bool) (*Weight, error) {
	a := graph.UploadF32(l.G, v, len(v))
	if !exact {
		a = l.cast(a)
	}
	return &Weight{vec: a, n: len(v)}, l.G.Err
}

// Conv stores the convolution [taps, channels], so row j is one slice.
func (l *Loader) Conv(v []float32, channels, k int) (*Weight, error) {
	if len(v) != channels*k {
		return nil, fmt.Errorf("conv: %d values for %d channels × %d taps", len(v), channels, k)
	}
	return &Weight{vec: l.G.Transpose(graph.UploadF32(l.G, v, channels, k), 1, 0), n: len(v)}, l.G.Err
}

// Stack joins float per-expert matrices into one stacked weight (MLX checkpoints store experts stacked, so
// quantized per-expert tensors are refused).
func (l *Loader) Stack(parts []*Weight) (*Weight, error) {
	if len(parts) == 0 {
		return nil, errors.New("stack: no experts")
	}
	views := make([]arr, len(parts))
	for i, p := range parts {
		if p.Quantized() {
			return nil, errors.New("quantized per-expert tensors are not supported (MLX checkpoints stack experts)")
		}
		views[i] = l.G.Expand(p.WT, 0)
	}
	s := &Weight{out: parts[0].out, in: parts[0].in, experts: len(parts), WT: l.G.Concat(0, views...)}
	l.G.Eval(s.WT)
	for i, p := range parts {
		l.G.Drop(views[i])
		l.G.Drop(p.WT)
	}
	return s, l.G.Err
}

// Rope uploads the table's frequencies and scale once, with the weights.
func (l *Loader) Rope(r model.Rope) (*Weight, error) {
	rs := graph.NewRopeSpec(l.G, r.Dims, r.Width, r.Base, r.Scaling, r.MaxPositions, l.dt)
	return &Weight{rope: &rs}, l.G.Err
}

// cast converts a freshly uploaded float32 weight to the compute dtype (evaluated; the f32 copy freed).
func (l *Loader) cast(a arr) arr {
	if l.dt == mlxc.Float32 || a == 0 {
		return a
	}
	r := l.G.Astype(a, l.dt)
	l.G.Eval(r)
	l.G.Drop(a)
	return r
}
