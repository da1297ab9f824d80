package cpu

import (
	"cmp"
	"slices"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/model"
	"github.com/higgs-go/higgs/ports"
)

// act is an activation: t rows, row-major, len(v)/t values each.
type act struct {
	v []float32
	t int
}

func (x act) width() int {
	if x.t == 0 {
		return 0
	}
	return len(x.v) / x.t
}

func (x act) row(r int) []float32 {
	w := x.width()
	return x.v[r*w : (r+1)*w]
}

// weight is the CPU backend's weight handle: a matrix, stacked experts (one matrix view each), a vector (or a
// convolution [channels, taps]) or a RoPE table.
type weight struct {
	lin     *kernel.Linear
	pair    [2]*kernel.Linear // two matrices fused along their outputs (loader.Fuse): [pair[0]; pair[1]]
	experts []*kernel.Linear
	vec     []float32
	taps    []float32 // a conv's taps transposed, [k][channels] (Conv), for the vectorized convolution
	rope    *vecmath.Rope
}

// ops computes on the deterministic kernels. Every output element is computed by one goroutine in a fixed
// order, whatever the number of rows beside it or of workers, which keeps a verified block bit-identical to
// token-by-token decoding.
type ops struct {
	pool *kernel.Pool
	mem  *arena // nil: every value is freshly allocated
	// layers scopes the arena's buffers by decoder layer (model.LayerScope): set where nothing a layer's ops
	// return outlives the layer but its output (no tape recorded, which keeps the recurrence's buffers).
	layers bool
	// tapped[l] says a tap keeps layer l's output for the caller (nil: none does); the others are given back
	// once the next layer has read them.
	tapped []bool
}

var (
	_ model.Backend[act, *weight] = ops{}
	_ model.LayerScope[act]       = ops{}
)

// BeginLayer starts decoder layer's buffers (model.LayerScope).
func (o ops) BeginLayer(layer int) {
	if o.layers {
		o.mem.beginLayer()
	}
}

// EndLayer gives the buffers of the layer BeginLayer began back to the pass, but its output out, and its
// input where no tap keeps the layer before's output.
func (o ops) EndLayer(layer int, out act) {
	if o.layers {
		o.mem.endLayer(out.v, layer > 0 && !(layer-1 < len(o.tapped) && o.tapped[layer-1]))
	}
}

// tappedLayers returns which of n layers' outputs the tap slots keep (nil when there are none).
func tappedLayers(slots model.TapSlots, n int) []bool {
	if slots.Len() == 0 {
		return nil
	}
	t := make([]bool, n)
	for _, l := range slots.Layers() {
		t[l] = true
	}
	return t
}

// buf returns n zeroed values for an op's result.
func (o ops) buf(n int) []float32 { return o.mem.get(n) }

// out is buf for an op that writes every value before it reads any: the arena skips zeroing it.
func (o ops) out(n int) []float32 { return o.mem.scratch(n) }

func (o ops) Embed(w *weight, tokens []ports.Token) act {
	H := w.lin.In
	out := o.buf(len(tokens) * H)
	for i, tok := range tokens {
		w.lin.Row(out[i*H:(i+1)*H], int(tok))
	}
	return act{out, len(tokens)}
}

var _ model.PairLinear[act, *weight] = ops{}

func (o ops) Linear(w *weight, x act) act {
	if w.pair[0] != nil {
		// A fused pair read as one matrix: its two products side by side in each row.
		a, b, _ := o.LinearPair(w, x)
		return o.Concat(a, b)
	}
	out := o.out(x.t * w.lin.Out)
	if f := repeatedTail(x); f < x.t-1 {
		// Rows f.. have the same bits: their outputs are row f's (each row's outputs depend on that row
		// alone, whatever rows share its product).
		wo := w.lin.Out
		w.lin.Forward(out, x.v[:(f+1)*x.width()], f+1)
		for r := f + 1; r < x.t; r++ {
			copy(out[r*wo:(r+1)*wo], out[f*wo:(f+1)*wo])
		}
		return act{out, x.t}
	}
	w.lin.Forward(out, x.v, x.t)
	return act{out, x.t}
}

// repeatedTail returns where x's last rows start to repeat bit for bit: the first row of the longest run of
// identical rows that ends x (x.t−1 when the last two differ). A drafter's block is its anchor and then mask
// rows, identical through the first layer's norm, so that layer's query, key and value products compute the
// anchor and one mask row (a tree's draft: 2 of 16 rows); rows that differ cost one comparison, which stops at
// the first differing byte.
func repeatedTail(x act) int {
	n := x.t
	if n < 3 {
		return n - 1
	}
	w := x.width()
	last := x.v[(n-1)*w : n*w]
	f := n - 1
	for f > 0 && vecmath.SameBits(x.v[(f-1)*w:f*w], last) {
		f--
	}
	return f
}

// LinearPair runs a fused pair (loader.Fuse) as one product, each half into its own value; other weights
// (a checkpoint's own fused gate and up) are not pairs: ok false.
func (o ops) LinearPair(w *weight, x act) (act, act, bool) {
	a, b := w.pair[0], w.pair[1]
	if a == nil {
		return act{}, act{}, false
	}
	ya, yb := o.out(x.t*a.Out), o.out(x.t*b.Out)
	kernel.ForwardPair(a, b, ya, yb, x.v, x.t)
	return act{ya, x.t}, act{yb, x.t}, true
}

func (o ops) Norm(x act, w *weight, eps float32) act {
	out := o.out(len(x.v))
	wd := x.width()
	o.rowsEvery(x.t, wd, normGrain, func(lo, hi int) {
		vecmath.RMSNorm(out[lo*wd:hi*wd], x.v[lo*wd:hi*wd], w.vec, eps)
	})
	return act{out, x.t}
}

func (o ops) Add(x, y act) act {
	out := o.out(len(x.v))
	wd := x.width()
	o.rowsEvery(x.t, wd, normGrain, func(lo, hi int) {
		vecmath.AddInto(out[lo*wd:hi*wd], x.v[lo*wd:hi*wd], y.v[lo*wd:hi*wd])
	})
	return act{out, x.t}
}

func (o ops) Gate(x, g act, a model.Act) act {
	out := o.out(len(x.v))
	f := vecmath.Sigmoid
	if a == model.SiLU {
		f = vecmath.SiLU
	}
	if o.pool.Mode() == kernel.ModeFast {
		f = vecmath.SigmoidFast
		if a == model.SiLU {
			f = vecmath.SiLUFast
		}
	}
	if g.width() == 1 && x.width() != 1 {
		w := x.width()
		for r := range x.t {
			s := f(g.v[r])
			for j, v := range x.v[r*w : (r+1)*w] {
				out[r*w+j] = v * s
			}
		}
		return act{out, x.t}
	}
	if o.pool.Mode() == kernel.ModeFast {
		// The fast mode's vectorized float32 activations (elementwise, so rows stay independent).
		o.pool.For(len(out), 4096, func(lo, hi int) {
			if a == model.SiLU {
				vecmath.SwiGLUFast(out[lo:hi], g.v[lo:hi], x.v[lo:hi])
				return
			}
			vecmath.SigmoidFastInto(out[lo:hi], g.v[lo:hi])
			for j := lo; j < hi; j++ {
				out[j] = x.v[j] * out[j]
			}
		})
		return act{out, x.t}
	}
	// The float64 exp per element is costly for verify blocks: split it between the workers.
	o.pool.For(len(out), 4096, func(lo, hi int) {
		for j := lo; j < hi; j++ {
			out[j] = x.v[j] * f(g.v[j])
		}
	})
	return act{out, x.t}
}

func (o ops) Split(x act, groups int, widths ...int) []act {
	gw := 0
	for _, w := range widths {
		gw += w
	}
	outs := make([]act, len(widths))
	for i, w := range widths {
		outs[i] = act{o.out(x.t * groups * w), x.t}
	}
	o.rows(x.t, groups*gw, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			src := x.v[t*groups*gw:]
			for g := range groups {
				off := g * gw
				for i, w := range widths {
					copy(outs[i].v[(t*groups+g)*w:(t*groups+g+1)*w], src[off:off+w])
					off += w
				}
			}
		}
	})
	return outs
}

func (o ops) Concat(xs ...act) act {
	T, W := xs[0].t, 0
	for _, x := range xs {
		W += x.width()
	}
	out := o.out(T * W)
	o.rows(T, W, func(lo, hi int) {
		for t := lo; t < hi; t++ {
			off := t * W
			for _, x := range xs {
				off += copy(out[off:], x.row(t))
			}
		}
	})
	return act{out, T}
}

// copyGrain is the fewest values a worker copies in rows: a verify block's splits and concatenations (tens
// of KiB) are split between the workers, while a decode step's row is copied by the caller alone.
const copyGrain = 8192

// normGrain is the fewest values a worker normalises or adds in rows: a verify block's norms and residual
// adds (10 K values on gocoder) are split between the workers, a decode step's row stays on the caller.
const normGrain = 4096

// rows runs fn over row ranges of T rows of width values each, split between the workers when large
// (each row is copied by one worker; copies give the same values whoever makes them).
func (o ops) rows(T, width int, fn func(lo, hi int)) { o.rowsEvery(T, width, copyGrain, fn) }

// rowsEvery is rows with grain values at least per worker's range. Every row (and so every norm group, which
// never crosses a row) is computed whole by one worker, by the same operations whoever runs it.
func (o ops) rowsEvery(T, width, grain int, fn func(lo, hi int)) {
	if T*width < 2*grain {
		fn(0, T)
		return
	}
	o.pool.For(T, max(1, grain/max(width, 1)), fn)
}

func (o ops) Rows(x act, lo, hi int) act {
	w := x.width()
	return act{x.v[lo*w : hi*w], hi - lo}
}

func (o ops) Join(xs ...act) act {
	n, T := 0, 0
	for _, x := range xs {
		n += len(x.v)
		T += x.t
	}
	out := o.out(n)
	off := 0
	for _, x := range xs {
		off += copy(out[off:], x.v)
	}
	return act{out, T}
}

func (o ops) Scale(x act, s float32) act {
	out := o.out(len(x.v))
	vecmath.ScaleInto(out, x.v, s)
	return act{out, x.t}
}

func (o ops) GatedNorm(x, z act, w *weight, eps float32) act {
	out := o.out(len(x.v))
	o.pool.GatedRMSNorm(out, x.v, z.v, w.vec, eps)
	return act{out, x.t}
}

// Experts routes each row to its top-k experts and sums their outputs in rank order, so a row's result does
// not depend on the rows beside it; each expert runs once over the rows routed to it.
func (o ops) Experts(m *model.MoE[*weight], x act, K int, normTopK bool) act {
	T, H := x.t, x.width()
	probs := o.Linear(m.Router, x).v
	E := len(probs) / max(T, 1)
	idx := make([]int, T*K)
	wts := make([]float32, T*K)
	order := make([]int, E)
	for t := range T {
		p := probs[t*E : (t+1)*E]
		vecmath.Softmax(p)
		for e := range order {
			order[e] = e
		}
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(p[b], p[a]) })
		var sum float32
		for j := range K {
			idx[t*K+j] = order[j]
			wts[t*K+j] = p[order[j]]
			sum += p[order[j]]
		}
		if normTopK {
			for j := range K {
				wts[t*K+j] /= sum
			}
		}
	}
	// Group (token, slot) pairs by expert so each expert runs once over its rows.
	slotOut := o.buf(T * K * H)
	rowsOf := make([][]int, E)
	for i, e := range idx {
		rowsOf[e] = append(rowsOf[e], i)
	}
	for e, slots := range rowsOf {
		if len(slots) == 0 {
			continue
		}
		n := len(slots)
		xin := o.buf(n * H)
		for r, s := range slots {
			t := s / K
			copy(xin[r*H:(r+1)*H], x.v[t*H:(t+1)*H])
		}
		y := o.expert(m, e, act{xin, n})
		for r, s := range slots {
			copy(slotOut[s*H:(s+1)*H], y.v[r*H:(r+1)*H])
		}
	}
	out := o.buf(T * H)
	tmp := o.buf(H)
	for t := range T {
		row := out[t*H : (t+1)*H]
		for j := range K {
			vecmath.AddScaled(row, slotOut[(t*K+j)*H:(t*K+j+1)*H], tmp, wts[t*K+j])
		}
	}
	return act{out, T}
}

// expert runs expert e's SwiGLU over x.
func (o ops) expert(m *model.MoE[*weight], e int, x act) act {
	pick := func(w *weight) *weight { return &weight{lin: w.experts[e]} }
	f := &model.FFN[*weight]{Down: pick(m.Down), Inter: m.Inter}
	if m.GateUp != nil {
		f.GateUp = pick(m.GateUp)
	} else {
		f.Gate, f.Up = pick(m.Gate), pick(m.Up)
	}
	return model.FeedForward[act, *weight](o, f, x)
}
