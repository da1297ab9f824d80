package cpu

import (
	"math"

	"github.com/higgs-go/higgs/adapters/cpu/kernel"
	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
	"github.com/higgs-go/higgs/adapters/model"
)

// gdnState is one Gated DeltaNet layer's recurrent state. The conv buffer holds the last Kc−1 raw projection
// rows, oldest first (a shift buffer, so there is no ring index to save). The SSM state [Hv, dv, dk] lives in
// two ping-pong buffers: a Forward that records a tape reads s[cur] and writes the other, so the pre-block state
// S₀ stays intact for tape replay until the next Forward; one that records none (decode, prefill) updates s[cur]
// in place, which reads and writes the state once instead of reading one buffer and filling another.
type gdnState struct {
	conv []float32
	s    [2][]float32
	cur  int
}

// gdnTape is one GDN layer's record of a block (docs/model-math.md#the-innovation-tape).
type gdnTape struct {
	delta []float32 // [T, Hv, dv]
	y     []float32 // [T, C] post-conv rows; k̂ of key head g at row t is y[t·C+Dk+g·dk:][:dk]
	alpha []float32 // [T, Hv]
	x     []float32 // [Kc−1+T, C]: the conv state before the block, then the block's raw pre-conv rows
	s0    int       // index of the ping-pong buffer holding S₀
}

// pass is one forward's view of a sequence's state (model.State): the attention caches and recurrent
// layers of a target session, or a drafter session's context caches. touched records that a layer's state
// changed, so an interrupted pass can mark its session unusable.
type pass struct {
	pool    *kernel.Pool
	mem     *arena
	kv      []*kvCache
	gdn     []*gdnState
	tape    *Tape // nil unless the forward records one
	touched bool
	// tree, set for a ForwardTree, is the block's tree shape (nil for a chain): row r sits at position
	// Pos+depth(r), attends to its ancestors only and runs the recurrence along its ancestry.
	tree *model.Tree
}

var _ model.State[act, *weight] = (*pass)(nil)

// rotate applies RoPE to each head of x's rows, row r at position pos+r, or pos+depth(r) in a tree (a copy:
// arguments stay unwritten).
func rotate(mem *arena, x act, rope *vecmath.Rope, d, pos int, tree *model.Tree) []float32 {
	out := mem.scratch(len(x.v)) // written whole by the copy
	copy(out, x.v)
	heads := x.width() / d
	half := rope.Dims / 2
	var cbuf, sbuf []float32
	for t := range x.t {
		at := pos + t
		if tree != nil {
			at = pos + tree.Depth[t]
		}
		cos, sin, ok := rope.Angles(at)
		if !ok {
			if cbuf == nil {
				cbuf, sbuf = make([]float32, half), make([]float32, half)
			}
			cos, sin = cbuf, sbuf
			rope.Table(cos, sin, at)
		}
		for h := range heads {
			off := (t*heads + h) * d
			rope.Apply(out[off:off+d], cos, sin)
		}
	}
	return out
}

func (p *pass) Remember(layer int, k, v act, a model.Attend[*weight]) {
	p.kv[layer].appendRows(rotate(p.mem, k, a.Rope.rope, a.HeadDim, a.Pos, p.tree), v.v)
	p.touched = true
}

// Attention is softmax attention of each query head over the visible cached keys, then the visible block
// keys, in position order; the weighted sum walks the keys in the same order (one rounding per product, never
// fused), and each (row, head) output is computed by one goroutine, so results depend neither on the worker
// count nor on the rows beside them.
func (p *pass) Attention(layer int, q, k, v act, a model.Attend[*weight]) act {
	j := p.attend(layer, q, k, v, a, nil)
	p.pool.For(j.units(), 1, func(lo, hi int) {
		scores, tmp := make([]float32, j.scratch()), make([]float32, j.tmp())
		for idx := lo; idx < hi; idx++ {
			j.unit(idx, scores, tmp)
		}
	})
	p.keep(j)
	return act{j.out, q.t}
}

// attnJob is one sequence's attention of a layer, prepared (rotated rows, the cache's extent) so that its work
// units (unit) can be computed on their own: pass.Attention and the batched attention over several sequences
// (batchstate.go) run the same computation per output.
type attnJob struct {
	a                 model.Attend[*weight]
	c                 *kvCache
	qr, kr, v, out    []float32
	d, Hq, kvw, n, bs int
	group             int
	scale             float32
	rows              int
	// fast runs the fast mode's attention kernels (vecmath.FastAttention) over unitHeads query heads of one KV
	// head at a time: the whole group, or 1 when there are fewer (row, KV head) pairs than workers (decoding
	// with few KV heads on many cores). Each output's bits are the same either way. The exact mode's unit is
	// one (row, head): unitHeads 1.
	fast      bool
	unitHeads int
	// k8, ks, v8, vs: an 8-bit cache's codes and scales of the block's keys and values (kr and v then hold
	// their read-back values), which keep appends.
	k8, v8 []int8
	ks, vs []float32
	// tree, for a ForwardTree's block, replaces the causal mask: row i sees the block rows of its ancestry
	// (tree.Path(i)), in depth order, after the cached keys. Trees run on targets, whose attention has no
	// window.
	tree *model.Tree
}

// tmp is the length of the scratch unit needs besides the scores: d values, for an 8-bit cache kvChunk rows
// read back, and for a tree in the fast mode its gathered ancestry.
func (j *attnJob) tmp() int {
	return j.d + j.chunkBuf() + j.treeBuf()
}

// chunkBuf is the length of the 8-bit cache's read-back buffer (kvChunk rows), 0 for a float32 cache.
func (j *attnJob) chunkBuf() int {
	if j.c.q8 {
		return kvChunk * j.d
	}
	return 0
}

// treeBuf is the length of the fast mode's gathered ancestry in a tree: its keys, then its values, contiguous
// as the fast kernels read them (0 for a chain, or the exact mode, which reads them in place).
func (j *attnJob) treeBuf() int {
	if j.tree == nil || !j.fast {
		return 0
	}
	return 2 * (j.tree.MaxDepth + 1) * j.d
}

// units is the number of independent work units of the job (unit's idx range).
func (j *attnJob) units() int { return j.rows * j.Hq / j.unitHeads }

// scratch is the length of the scores buffer unit needs.
func (j *attnJob) scratch() int { return j.unitHeads * (j.n + j.bs) }

// unit computes work unit idx: in the exact mode one (row, head) output (head); in the fast mode unitHeads
// query heads of one row (headsFast).
func (j *attnJob) unit(idx int, scores, tmp []float32) {
	if !j.fast {
		j.head(idx, scores, tmp)
		return
	}
	per := j.Hq / j.unitHeads // units per row
	j.headsFast(idx/per, (idx%per)*j.unitHeads, j.unitHeads, scores, tmp[j.d:])
}

// headsFast computes the outputs of row i for the nh query heads from h0 (all of one KV head) with the fast
// attention kernels: the same visible keys as head (the cached ones from the window's start, then the visible
// block keys, a contiguous range), each head's softmax over them, then the weighted sum in key order.
func (j *attnJob) headsFast(i, h0, nh int, scores, buf []float32) {
	a, c, d, kvw := j.a, j.c, j.d, j.kvw
	g := h0 / j.group
	first := 0
	if a.Window > 0 {
		first = max(0, a.Pos+i-a.Window+1)
	}
	blo, bhi := 0, j.bs
	if a.Causal {
		bhi = min(bhi, i+1)
	}
	if a.Window > 0 {
		blo, bhi = max(blo, i-a.Window+1), min(bhi, i+a.Window)
	}
	// The block's visible keys and values: a contiguous range of the block's rows, or in a tree the rows of
	// row i's ancestry gathered into buf past the chunk buffer, in depth order: the same rows, in the same
	// order and the same calls, as the block of a chain forward of that path.
	bk, bv, bstride := j.kr[blo*kvw+g*d:], j.v[blo*kvw+g*d:], kvw
	if j.tree != nil {
		path := j.tree.Path(i)
		bhi = blo + len(path)
		gk := buf[j.chunkBuf():]
		gv := gk[len(path)*d:]
		for r, p := range path {
			copy(gk[r*d:(r+1)*d], j.kr[p*kvw+g*d:])
			copy(gv[r*d:(r+1)*d], j.v[p*kvw+g*d:])
		}
		bk, bv, bstride = gk, gv, d
	}
	// A window can start past every cached key (a block longer than the window).
	nc, nb := max(0, j.n-first), max(0, bhi-blo)
	nv := nc + nb
	if nv == 0 {
		return
	}
	q := j.qr[(i*j.Hq+h0)*d : (i*j.Hq+h0+nh)*d]
	sc := scores[:nh*nv]
	// The cached keys in chunks (an 8-bit cache reads kvChunk rows back at a time): every score is its own
	// dot product, so the chunking does not change a bit.
	for c0, n := 0, 0; c0 < nc; c0 += n {
		n = nc - c0
		if c.q8 {
			n = min(n, kvChunk)
		}
		rows, stride := c.keys(buf, first+c0, n, g, d, kvw)
		vecmath.AttnScores(sc[c0:], nv, q, nh, rows, stride, n, d, j.scale)
	}
	if nb > 0 {
		vecmath.AttnScores(sc[nc:], nv, q, nh, bk, bstride, nb, d, j.scale)
	}
	for h := range nh {
		vecmath.SoftmaxFast(sc[h*nv : (h+1)*nv])
	}
	o := j.out[(i*j.Hq+h0)*d : (i*j.Hq+h0+nh)*d]
	// AttnValues adds in key order, so chunks in order give the bits of one call.
	for c0, n := 0, 0; c0 < nc; c0 += n {
		n = nc - c0
		if c.q8 {
			n = min(n, kvChunk)
		}
		rows, stride := c.values(buf, first+c0, n, g, d, kvw)
		vecmath.AttnValues(o, sc[c0:], nv, nh, rows, stride, n, d)
	}
	if nb > 0 {
		vecmath.AttnValues(o, sc[nc:], nv, nh, bv, bstride, nb, d)
	}
}

// attend prepares layer's attention of q over the cache and the block's k, v; out (nil: taken from the
// pass's arena) receives q.t rows of Hq·d values.
func (p *pass) attend(layer int, q, k, v act, a model.Attend[*weight], out []float32) *attnJob {
	d := a.HeadDim
	c := p.kv[layer]
	j := &attnJob{a: a, c: c, v: v.v, d: d, Hq: q.width() / d, bs: k.t, scale: float32(1 / math.Sqrt(float64(d))), tree: p.tree}
	j.qr = rotate(p.mem, q, a.Rope.rope, d, a.Pos, p.tree)
	j.kr = rotate(p.mem, k, a.Rope.rope, d, a.Pos, p.tree)
	Hkv := k.width() / d
	j.kvw = Hkv * d
	j.n = c.positions(j.kvw) // cached positions, all before the block
	if c.q8 {
		// The block's keys and values as the cache will hold them, so that its own rows attend to the same
		// read-back bits a later step reads from the cache.
		// The codes land in the cache's block buffers, reused from pass to pass: keep copies them into the
		// cache, and a cache has one job in flight at a time.
		j.k8, j.ks = appendQuantized(c.bk8[:0], c.bks[:0], j.kr, d)
		j.v8, j.vs = appendQuantized(c.bv8[:0], c.bvs[:0], j.v, d)
		c.bk8, c.bks, c.bv8, c.bvs = j.k8, j.ks, j.v8, j.vs
		dequantizeRows(j.kr, j.k8, j.ks, d)
		j.v = p.mem.scratch(len(v.v)) // written whole by dequantizeRows
		dequantizeRows(j.v, j.v8, j.vs, d)
	}
	j.group = j.Hq / Hkv
	j.rows = q.t
	j.fast = p.pool.Mode() == kernel.ModeFast && vecmath.FastAttention(d)
	j.unitHeads = 1
	if j.fast && j.rows*Hkv >= p.pool.Threads() {
		j.unitHeads = j.group
	}
	if out == nil {
		out = p.mem.get(q.t * j.Hq * d)
	}
	j.out = out
	return j
}

// head computes output idx (query slot idx/Hq, head idx%Hq); scores holds at least n+bs values and tmp
// j.tmp() (scratch, their contents ignored).
func (j *attnJob) head(idx int, scores, tmp []float32) {
	a, c, d, kvw := j.a, j.c, j.d, j.kvw
	hidden := func(i, jj int) bool { // block key jj is not visible to query slot i
		return (a.Causal && jj > i) || (a.Window > 0 && (jj-i >= a.Window || i-jj >= a.Window))
	}
	i, h := idx/j.Hq, idx%j.Hq
	g := h / j.group
	qh := j.qr[idx*d : (idx+1)*d]
	first := 0
	if a.Window > 0 {
		first = max(0, a.Pos+i-a.Window+1)
	}
	sc := scores[:0]
	buf := tmp[d:]
	for c0, n := first, 0; c0 < j.n; c0 += n {
		n = j.n - c0
		if c.q8 {
			n = min(n, kvChunk)
		}
		rows, stride := c.keys(buf, c0, n, g, d, kvw)
		for r := range n {
			sc = append(sc, vecmath.Dot(qh, rows[r*stride:r*stride+d])*j.scale)
		}
	}
	if j.tree != nil {
		// Row i's ancestry, in depth order: the keys a chain forward of its path sees after the cache.
		for _, jj := range j.tree.Path(i) {
			sc = append(sc, vecmath.Dot(qh, j.kr[jj*kvw+g*d:jj*kvw+g*d+d])*j.scale)
		}
	} else {
		for jj := range j.bs {
			if !hidden(i, jj) {
				sc = append(sc, vecmath.Dot(qh, j.kr[jj*kvw+g*d:jj*kvw+g*d+d])*j.scale)
			}
		}
	}
	vecmath.Softmax(sc)
	oh := j.out[idx*d : (idx+1)*d]
	s := 0
	for c0, n := first, 0; c0 < j.n; c0 += n {
		n = j.n - c0
		if c.q8 {
			n = min(n, kvChunk)
		}
		rows, stride := c.values(buf, c0, n, g, d, kvw)
		for r := range n {
			vecmath.AddScaled(oh, rows[r*stride:r*stride+d], tmp[:d], sc[s])
			s++
		}
	}
	if j.tree != nil {
		for _, jj := range j.tree.Path(i) {
			vecmath.AddScaled(oh, j.v[jj*kvw+g*d:jj*kvw+g*d+d], tmp[:d], sc[s])
			s++
		}
		return
	}
	for jj := range j.bs {
		if !hidden(i, jj) {
			vecmath.AddScaled(oh, j.v[jj*kvw+g*d:jj*kvw+g*d+d], tmp[:d], sc[s])
			s++
		}
	}
}

// keep appends the block's rotated keys and values to the cache when the spec asks for it.
func (p *pass) keep(j *attnJob) {
	if !j.a.Keep {
		return
	}
	if j.c.q8 {
		j.c.appendCodes(j.k8, j.ks, j.v8, j.vs)
	} else {
		j.c.appendRows(j.kr, j.v)
	}
	p.touched = true
}

// DeltaNet runs one Gated DeltaNet layer's recurrence (see model.State), recording the block's innovations
// when the pass records a tape.
func (p *pass) DeltaNet(layer int, w *model.DeltaNet[*weight], pr, b, araw act) act {
	fused := w.KeyHeads >= p.pool.Threads()
	j := p.deltaNet(layer, w, pr, b, araw, nil, !fused)
	if fused {
		// One pool call for the layer: the block's channels into the conv window and the conv, then each key
		// head's norms, gates and recurrences.
		j.pr = pr.v
		p.pool.ForThen(j.C, 256, j.convWindow, j.Hk, 1, func(lo, hi int) {
			tmp := make([]float32, j.headTmp())
			for g := lo; g < hi; g++ {
				j.keyHead(g, tmp)
			}
		})
		j.shiftConv()
		j.flip()
		return act{j.o, j.T}
	}
	p.pool.For(j.C, 256, j.conv)
	j.gates()
	p.pool.For(j.Hv, 1, func(lo, hi int) {
		tmp := make([]float32, j.headTmp())
		for h := lo; h < hi; h++ {
			j.head(h, tmp)
		}
	})
	j.flip()
	return act{j.o, j.T}
}

// flip makes the buffer head wrote the current state (nothing to do after an update in place).
func (j *gdnJob) flip() {
	// A tree's recurrence leaves s untouched (its node states live in head's scratch): S₀ stays current until
	// KeepPath replays the kept path.
	if !j.inPlace && j.tree == nil {
		j.st.cur = 1 - j.st.cur
	}
}

// gdnJob is one sequence's Gated DeltaNet layer over a block, in steps that pass.DeltaNet and the batched
// recurrence over several sequences (batchstate.go) run alike: conv over channel ranges, then gates (on
// the caller), then head per value head, then the state's ping-pong flip.
type gdnJob struct {
	st                            *gdnState
	w                             *model.DeltaNet[*weight]
	b, araw                       act
	X, Y, beta, alpha, delta, o   []float32
	Hk, Hv, dk, dv, Kc, Dk, Dv, C int
	rho, T                        int
	pr                            []float32 // the block's projections, when convWindow copies them into X
	inPlace                       bool      // no tape: the recurrence updates s[cur] in place (see gdnState)
	fast                          bool
	// tree, for a ForwardTree's block (nil for a chain): row t's conv reads the conv inputs along its
	// ancestry (window[t·Kc+m] is the row of X for tap m), and its recurrence starts from its parent's state.
	tree   *model.Tree
	window []int
}

// deltaNet prepares layer's recurrence over the block's projections (the tape, when recorded, set up);
// o (nil: taken from the pass's arena) receives T rows of Dv values.
//
// Unless fill is false, the block's projections are copied into the conv window here; with false the caller
// sets j.pr and gdnJob.convWindow copies them, channel range by channel range.
func (p *pass) deltaNet(layer int, w *model.DeltaNet[*weight], pr, b, araw act, o []float32, fill bool) *gdnJob {
	st := p.gdn[layer]
	Hk, Hv, dk, dv, Kc := w.KeyHeads, w.ValueHeads, w.KeyDim, w.ValueDim, w.ConvKernel
	Dk, Dv := Hk*dk, Hv*dv
	C := 2*Dk + Dv
	T := pr.t
	j := &gdnJob{st: st, w: w, b: b, araw: araw, Hk: Hk, Hv: Hv, dk: dk, dv: dv, Kc: Kc, Dk: Dk, Dv: Dv, C: C, rho: Hv / Hk, T: T}
	var tp *gdnTape
	if p.tape != nil {
		tp = &gdnTape{}
		p.tape.layers[layer] = tp
	}
	j.inPlace = tp == nil
	if p.tree != nil {
		j.tree = p.tree
		j.window = make([]int, T*Kc)
		for t := range T {
			path := p.tree.Path(t)
			for m := range Kc {
				j.window[t*Kc+m] = model.ConvRow(path, Kc, Kc, m)
			}
		}
	}
	p.touched = true
	// The conv window X = [conv state; P], which the tape keeps as is. Every buffer here is written whole
	// before it is read (X by these copies, Y by conv, beta and alpha by gates, delta and o by head), so none
	// is zeroed first (a verify block's zeroing was measured at 2% of its time).
	X := p.mem.scratch((Kc - 1 + T) * C)
	copy(X, st.conv)
	if fill {
		copy(X[(Kc-1)*C:], pr.v)
	}
	j.X, j.Y = X, p.mem.scratch(T*C)
	j.fast = p.pool.Mode() == kernel.ModeFast
	j.beta, j.alpha = p.mem.scratch(T*Hv), p.mem.scratch(T*Hv)
	if tp != nil {
		j.delta = p.mem.scratch(T * Hv * dv)
		tp.x = X // never written after this point
		tp.alpha, tp.delta = j.alpha, j.delta
		tp.y = j.Y // never written after this point
		tp.s0 = st.cur
	}
	if o == nil {
		o = p.mem.scratch(T * Dv)
	}
	j.o = o
	return j
}

// conv runs the causal depthwise conv over X, then SiLU, for channels lo..hi−1.
func (j *gdnJob) conv(lo, hi int) {
	taps, X, Y, C, Kc, T, fast := j.w.Conv.taps, j.X, j.Y, j.C, j.Kc, j.T, j.fast
	// With the taps transposed at load, each step runs over contiguous channels: per row t and channel c, from
	// +0, acc += w_j·X[t+j] for j in order (each product rounded, then the add), as one vector op per tap.
	tmp := make([]float32, hi-lo)
	for t := range T {
		y := Y[t*C+lo : t*C+hi]
		clear(y)
		for jj := range Kc {
			r := t + jj
			if j.window != nil {
				r = j.window[t*Kc+jj]
			}
			vecmath.MulAdd(y, taps[jj*C+lo:jj*C+hi], X[r*C+lo:r*C+hi], tmp)
		}
		if !fast {
			for i, v := range y {
				y[i] = vecmath.SiLU(v)
			}
		}
	}
	if fast {
		// The fast mode's vectorized SiLU over the chunk's channels (elementwise: the same bits per row).
		for t := range T {
			vecmath.SiLUFastInto(Y[t*C+lo:t*C+hi], Y[t*C+lo:t*C+hi])
		}
	}
}

// gates runs, once the conv is done, the conv state's shift, the q and k normalisation and the gates.
func (j *gdnJob) gates() {
	j.shiftConv()
	for g := range j.Hk {
		j.keyGates(g)
	}
}

// shiftConv moves the conv state to the block's last Kc−1 raw rows. A tree leaves it as it was: KeepPath
// sets it from the kept path.
func (j *gdnJob) shiftConv() {
	if j.tree == nil {
		copy(j.st.conv, j.X[j.T*j.C:])
	}
}

// keyGates runs, for the whole block, key head g's q and k normalisation (q scaled by dk^-1/2) and the gates
// of its value heads. Every value is computed on its own, so any order of key heads gives the same bits.
func (j *gdnJob) keyGates(g int) {
	C, T, Hv, dk, Dk, rho, Y := j.C, j.T, j.Hv, j.dk, j.Dk, j.rho, j.Y
	qs := float32(1 / math.Sqrt(float64(dk)))
	for t := range T {
		vecmath.L2Normalize(Y[t*C+g*dk:t*C+(g+1)*dk], 1e-6, qs)
		vecmath.L2Normalize(Y[t*C+Dk+g*dk:t*C+Dk+(g+1)*dk], 1e-6, 1)
	}
	negA, dtBias := j.w.NegA.vec, j.w.DtBias.vec
	for t := range T {
		for h := g * rho; h < (g+1)*rho; h++ {
			i := t*Hv + h
			j.beta[i] = vecmath.Sigmoid(j.b.v[i])
			a := negA[h] * vecmath.Softplus(j.araw.v[i]+dtBias[h])
			j.alpha[i] = float32(math.Exp(float64(a)))
		}
	}
}

// convWindow copies channels lo..hi−1 of the block's projections (j.pr) into the conv window ([conv state; P],
// rows C wide), then runs the conv over them: the first loop of pass.DeltaNet's one pool call.
func (j *gdnJob) convWindow(lo, hi int) {
	C := j.C
	for t := range j.T {
		copy(j.X[(j.Kc-1+t)*C+lo:(j.Kc-1+t)*C+hi], j.pr[t*C+lo:t*C+hi])
	}
	j.conv(lo, hi)
}

// keyHead runs, once the conv is done, everything of the layer that key head g's channels feed, for the
// whole block: its norms and gates (keyGates) and its value heads' recurrences (tmp: headTmp values of
// scratch). Key heads share nothing, so pass.DeltaNet runs them on the workers in the same pool call as the
// conv (ForThen) instead of calls for the conv and the heads around a serial one (gates); the values are
// gates' and head's, so are the bits. The conv state's shift is left to the caller.
func (j *gdnJob) keyHead(g int, tmp []float32) {
	j.keyGates(g)
	for h := g * j.rho; h < (g+1)*j.rho; h++ {
		j.head(h, tmp)
	}
}

// headRowGroup is how many state rows head runs side by side (8 rows of 256 values: 8 KiB of L1).
const headRowGroup = 8

// head runs value head h's recurrence over the block (tmp: dk values of scratch). Every operation touches
// one row i of a head's state at a time (decay, the memory read S_i·k̂, the rank-1 update S_i += δ_i k̂, the
// read-out S_i·q̂), so a group of rows runs the whole block while it sits in L1: the same operations in the
// same order as a pass over the state per step, with one pass in all.
func (j *gdnJob) head(h int, tmp []float32) {
	if j.tree != nil {
		j.headTree(h, tmp)
		return
	}
	dk, dv := j.dk, j.dv
	src, dst := j.st.s[j.st.cur], j.st.s[1-j.st.cur]
	if j.inPlace {
		dst = src
	}
	S := dst[h*dv*dk : (h+1)*dv*dk]
	S0 := src[h*dv*dk : (h+1)*dv*dk]
	// Rows go in groups of headRowGroup, each group's rows one step after another: consecutive steps are then
	// independent (a row's next step waits on its dot products' reductions), so they overlap in the core,
	// while the group stays in L1 for the whole block. Rows of 64 or 128 values go a few at a time through
	// the whole block in registers first (run).
	for i0 := j.run(S, S0, h); i0 < dv; i0 += headRowGroup {
		for t := range j.T {
			from := S // the rows' state before step t
			if t == 0 {
				from = S0
			}
			j.steps(S[i0*dk:], from[i0*dk:], t, h, i0, min(i0+headRowGroup, dv), tmp)
		}
	}
}

// run runs value head h's state rows through the whole block a few at a time where a kernel holds them in
// registers from the first step to the last (vecmath.GDNRunFast: four rows of 64 values, two of 128, on
// AVX-512, with GDNStep4Fast's bits), and returns how many rows it ran (0 where none can). S and S0 are the
// head's state after and before the block (they may be the same).
func (j *gdnJob) run(S, S0 []float32, h int) int {
	rows := vecmath.GDNRunRows(j.dk)
	if !j.fast || rows == 0 || !useGDNRun {
		return 0
	}
	Y, C, Hv, dk, dv, Dk := j.Y, j.C, j.Hv, j.dk, j.dv, j.Dk
	kh := h / j.rho
	k, q := Y[Dk+kh*dk:], Y[kh*dk:]
	n := dv - dv%rows
	for i := 0; i < n; i += rows {
		var d []float32
		if j.delta != nil {
			d = j.delta[h*dv+i:]
		}
		vecmath.GDNRunFast(S[i*dk:], S0[i*dk:], k, q, Y[2*Dk+h*dv+i:], C, j.alpha[h:], j.beta[h:], Hv, j.o[h*dv+i:], Hv*dv, d, Hv*dv, dk, j.T)
	}
	return n
}

// useGDNRun lets the fast recurrence run rows through a block in registers (gdnJob.run); tests turn it off to
// compare with the step-by-step path. A tree's block (headTree) steps node by node: run along its chains of
// single children measured no faster on a tree of 4 nodes (2.07–2.15 ms either way).
var useGDNRun = true

// steps runs step t of value head h on its state rows i0..end−1: S receives them, from holds them before
// the step (both start at row i0, rows dk apart; they may be the same), and the read-outs (and innovations,
// when recorded) go to o (and delta). tmp holds dk values of scratch.
func (j *gdnJob) steps(S, from []float32, t, h, i0, end int, tmp []float32) {
	Y, C, Hv, dk, dv, Dk := j.Y, j.C, j.Hv, j.dk, j.dv, j.Dk
	o, delta := j.o, j.delta
	kh := h / j.rho
	khat := Y[t*C+Dk+kh*dk : t*C+Dk+(kh+1)*dk]
	qhat := Y[t*C+kh*dk : t*C+(kh+1)*dk]
	a, b := j.alpha[t*Hv+h], j.beta[t*Hv+h]
	i := i0
	if j.fast {
		// Four rows per call (vecmath.GDNStep4Fast: GDNStepFast's bits).
		for ; i+4 <= end; i += 4 {
			v0 := t*C + 2*Dk + h*dv + i
			r := vecmath.GDNStep4Fast(S[(i-i0)*dk:], from[(i-i0)*dk:], khat, qhat, dk, dk, a, b, Y[v0:v0+4])
			oi := (t*Hv+h)*dv + i
			copy(o[oi:oi+4], r[:4])
			if delta != nil {
				copy(delta[oi:oi+4], r[4:])
			}
		}
	}
	for ; i < end; i++ {
		Si, Fi := S[(i-i0)*dk:(i-i0+1)*dk], from[(i-i0)*dk:(i-i0+1)*dk]
		vi := Y[t*C+2*Dk+h*dv+i]
		var di float32
		if j.fast {
			// One vectorized pass per step (the fast mode's dot order; the same state updates).
			o[(t*Hv+h)*dv+i], di = vecmath.GDNStepFast(Si, Fi, khat, qhat, a, b, vi)
		} else {
			decay(Si, Fi, a)
			mem := vecmath.Dot(Si, khat)
			di = b * (vi - mem)
			vecmath.AddScaled(Si, khat, tmp, di)
			o[(t*Hv+h)*dv+i] = vecmath.Dot(Si, qhat)
		}
		if delta != nil {
			delta[(t*Hv+h)*dv+i] = di
		}
	}
}

// headTmp is the length of head's scratch: dk values, and in a tree every node's state rows of one row
// group (T × headRowGroup × dk).
func (j *gdnJob) headTmp() int {
	if j.tree == nil {
		return j.dk
	}
	return j.dk + j.T*headRowGroup*j.dk
}

// headTree is head over a tree's block: node t's rows start from its parent's state rows (S₀ for a root),
// which the group keeps per node in tmp, so each node's state, read-out and innovation are those of a chain
// over its path: the same operations on the same rows in the same order. s itself is not written (S₀ stays
// for KeepPath's replay).
func (j *gdnJob) headTree(h int, tmp []float32) {
	dk, dv := j.dk, j.dv
	S0 := j.st.s[j.st.cur][h*dv*dk : (h+1)*dv*dk]
	nodes := tmp[dk:] // node t's rows of the group at nodes[t·headRowGroup·dk:], stride dk
	gs := headRowGroup * dk
	for i0 := 0; i0 < dv; i0 += headRowGroup {
		for t := range j.T {
			from := S0[i0*dk:] // the rows' state before node t: its parent's, S₀ for a root
			if p := j.tree.Parents[t]; p >= 0 {
				from = nodes[p*gs : (p+1)*gs]
			}
			j.steps(nodes[t*gs:(t+1)*gs], from, t, h, i0, min(i0+headRowGroup, dv), tmp[:dk])
		}
	}
}

// decay sets S = α·S0 (one rounding per element). S may alias S0. The exact mode's step runs it before its
// rank-1 update; tape replay runs the same two roundings per element in one pass (vecmath.DecayRank1).
func decay(S, S0 []float32, alpha float32) {
	vecmath.ScaleInto(S, S0, alpha)
}

// replayRows is how many state rows tape replay takes through all its steps at once (replayHead): 32 rows of
// 64 or 128 values are 8 or 16 KiB, which stay in L1 from step to step.
const replayRows = 32

// replayGDNs rebuilds the state of every recurrent layer of s after the first n steps of the taped block tp
// (docs/model-math.md#the-innovation-tape), with the forward's float operations in the forward's order. path,
// when not nil, names the block rows of the steps (a tree's kept path, n = len(path)); nil means rows 0..n−1.
// Every layer's heads go to the workers in one pool call: a call per layer cost a hand-off each, which on a
// small model weighed as much as the replay's arithmetic.
func (s *Session) replayGDNs(tp *Tape, n int, path []int) {
	type unit struct {
		w  *model.DeltaNet[*weight]
		st *gdnState
		tp *gdnTape
	}
	var layers []unit
	heads := 0
	for i, g := range s.gdn {
		if g != nil {
			layers = append(layers, unit{s.t.m.Layers[i].GDN, g, tp.layers[i]})
			heads = max(heads, s.t.m.Layers[i].GDN.ValueHeads)
		}
	}
	if n > 0 && len(layers) > 0 {
		s.t.pool.For(len(layers)*heads, 1, func(lo, hi int) {
			for u := lo; u < hi; u++ {
				l := layers[u/heads]
				if h := u % heads; h < l.w.ValueHeads {
					replayHead(l.w, l.st, l.tp, h, n, path)
				}
			}
		})
	}
	for _, l := range layers {
		finishReplay(l.w, l.st, l.tp, n, path)
	}
}

// replayHead replays value head h of a GDN layer's state through the first n steps of its tape (replayGDNs):
// from the state before the block into the other buffer of st.
func replayHead(w *model.DeltaNet[*weight], st *gdnState, tp *gdnTape, h, n int, path []int) {
	Hk, Hv, dk, dv := w.KeyHeads, w.ValueHeads, w.KeyDim, w.ValueDim
	C, Dk := w.Channels(), Hk*dk
	kh := h / (Hv / Hk)
	S := st.s[1-tp.s0][h*dv*dk : (h+1)*dv*dk]
	S0 := st.s[tp.s0][h*dv*dk : (h+1)*dv*dk]
	// A block of rows goes through every step while it stays in L1, rather than every step passing over the
	// whole head: each element still takes the same operations in the same order.
	for r0 := 0; r0 < dv; r0 += replayRows {
		r1 := min(dv, r0+replayRows)
		for step := range n {
			t := step
			if path != nil {
				t = path[step]
			}
			from := S
			if step == 0 {
				from = S0
			}
			// decay then rank1, in one pass (vecmath.DecayRank1: the same bits).
			d := tp.delta[(t*Hv+h)*dv:]
			vecmath.DecayRank1(S[r0*dk:r1*dk], from[r0*dk:r1*dk], tp.alpha[t*Hv+h], tp.y[t*C+Dk+kh*dk:t*C+Dk+(kh+1)*dk], d[r0:r1])
		}
	}
}

// finishReplay completes a GDN layer's replay of n steps once its heads are done: the replayed buffer becomes
// the state (after zero steps, the state before the block, copied), and the conv buffer takes the last
// inputs the steps leave.
func finishReplay(w *model.DeltaNet[*weight], st *gdnState, tp *gdnTape, n int, path []int) {
	if n == 0 {
		copy(st.s[1-tp.s0], st.s[tp.s0])
	}
	st.cur = 1 - tp.s0
	C := w.Channels()
	if path == nil {
		// Conv state = rows n..n+Kc−2 of [cs₀; P].
		copy(st.conv, tp.x[n*C:])
		return
	}
	// The last Kc−1 conv inputs along the path (cs₀'s rows first when the path is shorter).
	Kc := w.ConvKernel
	for m := range Kc - 1 {
		r := model.ConvRow(path, Kc, Kc-1, m)
		copy(st.conv[m*C:(m+1)*C], tp.x[r*C:(r+1)*C])
	}
}
