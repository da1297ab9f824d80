package mlx

import (
	"errors"
	"fmt"
	"slices"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/adapters/safetensors"
)

// loader uploads weights, looked up by canonical name (hfmodel.Checkpoint), into the arena graph. Every
// upload copies (mlx_array_new_data); nothing keeps a pointer into Go or mapped memory.
type loader struct {
	ck    *hfmodel.Checkpoint
	quant *hfmodel.Quantization
	g     *graph
	dt    mlxc.Dtype // compute dtype of float weights (Float32, or BFloat16 when asked)
}

var _ model.Loader[*weight] = (*loader)(nil)

// upload builds weights on the MLX thread: fill loads them through a loader over st (q its quantization,
// float weights in dt) into a fresh arena named name; then every stored tensor must have been used, and what
// is still lazy is evaluated. It returns the arena, or releases it on failure. st is closed in every case:
// each weight has been copied into MLX.
func upload(rt *mlxc.Runtime, st *safetensors.Store, name string, q *hfmodel.Quantization,
	dt mlxc.Dtype, fill func(*loader) error) (*graph, error) {
	var arena *graph
	err := rt.Do(func() error {
		g := newGraph(rt, name)
		ck, err := hfmodel.NewCheckpoint(st)
		l := &loader{ck: ck, quant: q, g: g, dt: dt}
		if err == nil {
			err = fill(l)
		}
		if err == nil {
			err = l.ck.Unused()
		}
		if err == nil {
			g.eval(g.tmp...)
			err = g.err
		}
		if err != nil {
			g.release()
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
func (l *loader) Linear(wname, c string, dims ...int) (*weight, error) {
	if len(dims) != 2 && len(dims) != 3 {
		return nil, fmt.Errorf("%s: %d dims, want [out in] or [experts out in]", wname, len(dims))
	}
	t, err := l.ck.Tensor(wname)
	if err != nil {
		return nil, err
	}
	in := dims[len(dims)-1]
	lin := &weight{out: dims[len(dims)-2], in: in}
	if len(dims) == 3 {
		lin.experts = dims[0]
	}
	sp, quantized, err := l.ck.QuantSpec(l.quant, c)
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
		w := uploadF32(l.g, v, dims...)
		perm := []int{1, 0}
		if len(dims) == 3 {
			perm = []int{0, 2, 1}
		}
		// Store Wᵀ contiguous ([in,out]): BLAS reads a transposed view half as fast (24 vs 14 ms for a
		// 768×32000 GEMV here). Evaluate now and drop the [out,in] upload so loading never holds both copies
		// of every matrix at once.
		tr := l.g.transpose(w, perm...)
		x := tr
		if l.dt != mlxc.Float32 && len(dims) == 2 { // stacked float experts stay float32 (gather_mm)
			x = l.g.astype(tr, l.dt)
		}
		lin.wt = l.g.contiguous(x)
		l.g.eval(lin.wt)
		if x != tr {
			l.g.drop(x)
		}
		l.g.drop(tr) // the view would keep the upload alive
		l.g.drop(w)
		return lin, l.g.err
	}
	sc, err := l.ck.Tensor(c + ".scales")
	if err != nil {
		return nil, err
	}
	bi, err := l.ck.Tensor(c + ".biases")
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
	l.ck.MarkUsed(c+".scales", c+".biases")
	lin.bits, lin.group = s.Bits, s.GroupSize
	lin.w = uploadU32(l.g, codes, t.Shape...)
	lin.scales = l.cast(uploadF32(l.g, scales, sc.Shape...))
	lin.biase = l.cast(uploadF32(l.g, biases, bi.Shape...))
	return lin, l.g.err
}

// Fuse stacks a and b along the output axis into one matrix (gate+up → one matmul). ok is false when their
// storage differs (float vs quantized, or different bits/group), in which case the caller keeps them apart.
func (l *loader) Fuse(a, b *weight) (*weight, bool) {
	if a.bits != b.bits || a.group != b.group || a.in != b.in || a.experts != b.experts {
		return nil, false
	}
	g := l.g
	f := &weight{out: a.out + b.out, in: a.in, bits: a.bits, group: a.group, experts: a.experts}
	if a.quantized() {
		ax := len(shapeOf(a.w)) - 2
		f.w = g.concat(ax, a.w, b.w)
		f.scales = g.concat(ax, a.scales, b.scales)
		f.biase = g.concat(ax, a.biase, b.biase)
	} else {
		f.wt = g.concat(len(shapeOf(a.wt))-1, a.wt, b.wt)
	}
	// The parts are not used apart: evaluate the fused matrix and free them, only once it exists (on an MLX
	// error the caller keeps the parts, and the loader reports the graph's error).
	g.eval(f.wt, f.w, f.scales, f.biase)
	if g.err != nil {
		return nil, false
	}
	for _, x := range []arr{a.wt, a.w, a.scales, a.biase, b.wt, b.w, b.scales, b.biase} {
		g.drop(x)
	}
	return f, true
}

// Vector uploads host values in the compute dtype (float32 when exact).
func (l *loader) Vector(v []float32, exact bool) (*weight, error) {
	a := uploadF32(l.g, v, len(v))
	if !exact {
		a = l.cast(a)
	}
	return &weight{vec: a, n: len(v)}, l.g.err
}

// Conv stores the convolution [taps, channels], so row j is one slice.
func (l *loader) Conv(v []float32, channels, k int) (*weight, error) {
	if len(v) != channels*k {
		return nil, fmt.Errorf("conv: %d values for %d channels × %d taps", len(v), channels, k)
	}
	return &weight{vec: l.g.transpose(uploadF32(l.g, v, channels, k), 1, 0), n: len(v)}, l.g.err
}

// Stack joins float per-expert matrices into one stacked weight (MLX checkpoints store experts stacked, so
// quantized per-expert tensors are refused).
func (l *loader) Stack(parts []*weight) (*weight, error) {
	if len(parts) == 0 {
		return nil, errors.New("stack: no experts")
	}
	views := make([]arr, len(parts))
	for i, p := range parts {
		if p.quantized() {
			return nil, errors.New("quantized per-expert tensors are not supported (MLX checkpoints stack experts)")
		}
		views[i] = l.g.expand(p.wt, 0)
	}
	s := &weight{out: parts[0].out, in: parts[0].in, experts: len(parts), wt: l.g.concat(0, views...)}
	l.g.eval(s.wt)
	for i, p := range parts {
		l.g.drop(views[i])
		l.g.drop(p.wt)
	}
	return s, l.g.err
}

// Rope uploads the table's frequencies and scale once, with the weights.
func (l *loader) Rope(r model.Rope) (*weight, error) {
	rs := newRopeSpec(l.g, r.Dims, r.Width, r.Base, r.Scaling, r.MaxPositions, l.dt)
	return &weight{rope: &rs}, l.g.err
}

// cast converts a freshly uploaded float32 weight to the compute dtype (evaluated; the f32 copy freed).
func (l *loader) cast(a arr) arr {
	if l.dt == mlxc.Float32 || a == 0 {
		return a
	}
	r := l.g.astype(a, l.dt)
	l.g.eval(r)
	l.g.drop(a)
	return r
}
