package mlx

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// arr is an MLX array handle. The zero value is the null array (an absent optional argument).
type arr = mlxc.Array

// graph builds one lazy MLX graph on the MLX thread. Ops record the first error and turn into no-ops after it,
// so model code reads straight through and checks g.err once. Every array an op returns is owned by the graph
// and freed by release unless keep moved it out (to a cache or a weight).
type graph struct {
	rt   *mlxc.Runtime
	s    mlxc.Stream
	err  error
	tmp  []arr
	name string
}

func newGraph(rt *mlxc.Runtime, name string) *graph {
	return &graph{rt: rt, s: rt.Stream(), name: name}
}

// release frees every array the graph still owns.
func (g *graph) release() {
	for _, a := range g.tmp {
		if a != 0 {
			mlxc.ArrayFree(a)
		}
	}
	g.tmp = g.tmp[:0]
}

// keep removes a from the graph's ownership: the caller frees it.
func (g *graph) keep(a arr) arr {
	for i := len(g.tmp) - 1; i >= 0; i-- {
		if g.tmp[i] == a {
			g.tmp[i] = 0
			break
		}
	}
	return a
}

// keepAll is keep for many arrays in one pass over the graph's arrays (keep scans them once per call, and a
// forward adopts every layer's state and tape).
func (g *graph) keepAll(as []arr) {
	set := make(map[arr]struct{}, len(as))
	for _, a := range as {
		set[a] = struct{}{}
	}
	for i, a := range g.tmp {
		if _, ok := set[a]; ok {
			g.tmp[i] = 0
		}
	}
}

func (g *graph) done(op string, rc int32, r arr) arr {
	if r != 0 {
		g.tmp = append(g.tmp, r)
	}
	if rc != 0 && g.err == nil {
		g.err = fmt.Errorf("%s: %s: %w", g.name, op, g.rt.Check(rc))
	}
	if g.err != nil {
		return 0
	}
	return r
}

func (g *graph) fail(err error) {
	if g.err == nil {
		g.err = fmt.Errorf("%s: %w", g.name, err)
	}
}

func i32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// upload copies Go data into a new graph-owned array (mlx_array_new_data copies the buffer).
func uploadF32(g *graph, v []float32, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != len(v) {
		g.fail(fmt.Errorf("upload: %d values for shape %v", len(v), shape))
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Float32)
	return g.done("array_new_data", errCode(g), r)
}

func uploadU32(g *graph, v []uint32, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Uint32)
	return g.done("array_new_data", errCode(g), r)
}

func uploadI32(g *graph, v []int32, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Int32)
	return g.done("array_new_data", errCode(g), r)
}

// errCode turns a pending MLX error (from a call that returns a handle) into a nonzero code for done.
func errCode(g *graph) int32 {
	if err := g.rt.Pending(); err != nil {
		g.fail(err)
		return 1
	}
	return 0
}

func (g *graph) scalar(v float32) arr {
	if g.err != nil {
		return 0
	}
	return g.done("array_new_float32", errCode(g), mlxc.ArrayNewFloat32(v))
}

type binop func(res *arr, a, b arr, s mlxc.Stream) int32

func (g *graph) bin(op string, f binop, a, b arr) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done(op, f(&r, a, b, g.s), r)
}

type unop func(res *arr, a arr, s mlxc.Stream) int32

func (g *graph) un(op string, f unop, a arr) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done(op, f(&r, a, g.s), r)
}

func (g *graph) add(a, b arr) arr    { return g.bin("add", mlxc.Add, a, b) }
func (g *graph) sub(a, b arr) arr    { return g.bin("subtract", mlxc.Subtract, a, b) }
func (g *graph) mul(a, b arr) arr    { return g.bin("multiply", mlxc.Multiply, a, b) }
func (g *graph) div(a, b arr) arr    { return g.bin("divide", mlxc.Divide, a, b) }
func (g *graph) matmul(a, b arr) arr { return g.bin("matmul", mlxc.Matmul, a, b) }
func (g *graph) maximum(a, b arr) arr {
	return g.bin("maximum", mlxc.Maximum, a, b)
}
func (g *graph) sigmoid(a arr) arr { return g.un("sigmoid", mlxc.Sigmoid, a) }
func (g *graph) exp(a arr) arr     { return g.un("exp", mlxc.Exp, a) }
func (g *graph) log1p(a arr) arr   { return g.un("log1p", mlxc.Log1p, a) }
func (g *graph) abs(a arr) arr     { return g.un("abs", mlxc.Abs, a) }
func (g *graph) neg(a arr) arr     { return g.un("negative", mlxc.Negative, a) }
func (g *graph) square(a arr) arr  { return g.un("square", mlxc.Square, a) }
func (g *graph) sqrt(a arr) arr    { return g.un("sqrt", mlxc.Sqrt, a) }
func (g *graph) copy(a arr) arr    { return g.un("copy", mlxc.Copy, a) }

// silu is x·σ(x).
func (g *graph) silu(a arr) arr { return g.mul(a, g.sigmoid(a)) }

func (g *graph) reshape(a arr, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	p, n := mlxc.Ints(sh)
	var r arr
	return g.done("reshape", mlxc.Reshape(&r, a, p, n, g.s), r)
}

func (g *graph) transpose(a arr, axes ...int) arr {
	if g.err != nil {
		return 0
	}
	ax := i32s(axes)
	p, n := mlxc.Ints(ax)
	var r arr
	return g.done("transpose", mlxc.TransposeAxes(&r, a, p, n, g.s), r)
}

// slice takes a[start:stop] on every axis (stop −1 = to the end is not supported; pass the size).
func (g *graph) slice(a arr, start, stop []int) arr {
	if g.err != nil {
		return 0
	}
	st, sp := i32s(start), i32s(stop)
	strides := make([]int32, len(st))
	for i := range strides {
		strides[i] = 1
	}
	p1, n1 := mlxc.Ints(st)
	p2, n2 := mlxc.Ints(sp)
	p3, n3 := mlxc.Ints(strides)
	var r arr
	return g.done("slice", mlxc.Slice(&r, a, p1, n1, p2, n2, p3, n3, g.s), r)
}

func (g *graph) concat(axis int, as ...arr) arr {
	if g.err != nil {
		return 0
	}
	v := mlxc.VectorArrayNew()
	defer mlxc.VectorArrayFree(v)
	for _, a := range as {
		if rc := mlxc.VectorArrayAppendValue(v, a); rc != 0 {
			return g.done("vector_append", rc, 0)
		}
	}
	var r arr
	return g.done("concatenate", mlxc.ConcatenateAxis(&r, v, int32(axis), g.s), r)
}

func (g *graph) astype(a arr, dt mlxc.Dtype) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("astype", mlxc.Astype(&r, a, dt, g.s), r)
}

func (g *graph) take(a, idx arr, axis int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("take", mlxc.TakeAxis(&r, a, idx, int32(axis), g.s), r)
}

func (g *graph) takeAlong(a, idx arr, axis int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("take_along_axis", mlxc.TakeAlongAxis(&r, a, idx, int32(axis), g.s), r)
}

func (g *graph) sum(a arr, axis int, keep bool) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("sum", mlxc.SumAxis(&r, a, int32(axis), keep, g.s), r)
}

func (g *graph) softmax(a arr, axis int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("softmax", mlxc.SoftmaxAxis(&r, a, int32(axis), true, g.s), r)
}

func (g *graph) argmax(a arr, axis int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("argmax", mlxc.ArgmaxAxis(&r, a, int32(axis), false, g.s), r)
}

func (g *graph) argsort(a arr, axis int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("argsort", mlxc.ArgsortAxis(&r, a, int32(axis), g.s), r)
}

func (g *graph) expand(a arr, axis int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("expand_dims", mlxc.ExpandDims(&r, a, int32(axis), g.s), r)
}

func (g *graph) zeros(dt mlxc.Dtype, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	p, n := mlxc.Ints(sh)
	var r arr
	return g.done("zeros", mlxc.Zeros(&r, p, n, dt, g.s), r)
}

func (g *graph) rmsNorm(x, w arr, eps float32) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("rms_norm", mlxc.FastRmsNorm(&r, x, w, eps, g.s), r)
}

// ropeSpec is NeoX (non-traditional) RoPE over the first dims of a head. A scaled RoPE (YaRN, linear) has
// freqs, the periods 1/θ_i that mlx_fast_rope takes in place of a base, and may have scale, the factor
// transformers multiplies cos and sin by, as a float32 per-dim vector over the head width. Both arrays are
// uploaded once, with the weights.
type ropeSpec struct {
	dims  int
	base  float64
	freqs arr // 0: plain RoPE from base
	scale arr // 0: cos and sin unscaled
	dt    mlxc.Dtype
}

// newRopeSpec resolves a checkpoint's RoPE scaling (hfmodel.RopeScaling.Frequencies) for heads of width in
// compute dtype dt, uploading its arrays on arena (the graph that owns the weights).
func newRopeSpec(arena *graph, dims, width int, base float64, s hfmodel.RopeScaling, maxPositions int, dt mlxc.Dtype) ropeSpec {
	rs := ropeSpec{dims: dims, base: base, dt: dt}
	if s.Type == "" {
		return rs
	}
	inv, scale := s.Frequencies(dims, base, maxPositions)
	periods := make([]float32, len(inv))
	for i, f := range inv {
		periods[i] = float32(1 / f)
	}
	rs.freqs = uploadF32(arena, periods, len(periods))
	if scale != 1 {
		m := make([]float32, width)
		for i := range m {
			m[i] = 1
			if i < dims {
				m[i] = float32(scale)
			}
		}
		rs.scale = uploadF32(arena, m, width)
	}
	return rs
}

// rope applies rs to x ([B, heads, T, width]) at positions offset..offset+T−1. RoPE is linear, so scaled cos
// and sin are a rotation followed by a per-dim factor (exactly 1 past the rotated dims), multiplied in float32
// so that a bf16 model does not round the factor itself.
func (g *graph) rope(x arr, rs ropeSpec, offset int) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	if rs.freqs == 0 {
		return g.done("rope", mlxc.FastRope(&r, x, int32(rs.dims), false, mlxc.SomeFloat(float32(rs.base)), 1, int32(offset), 0, g.s), r)
	}
	r = g.done("rope", mlxc.FastRope(&r, x, int32(rs.dims), false, 0, 1, int32(offset), rs.freqs, g.s), r)
	switch {
	case rs.scale == 0:
		return r
	case rs.dt == mlxc.Float32:
		return g.mul(r, rs.scale)
	}
	return g.astype(g.mul(g.astype(r, mlxc.Float32), rs.scale), rs.dt)
}

// sdpa is scaled dot-product attention: q [B,Hq,T,d], k/v [B,Hkv,S,d]; causal masks key j > query i+S−T.
func (g *graph) sdpa(q, k, v arr, scale float32, causal bool) arr {
	if g.err != nil {
		return 0
	}
	mode := ""
	if causal {
		mode = "causal"
	}
	m := mlxc.CString(mode)
	var r arr
	return g.done("scaled_dot_product_attention", mlxc.FastScaledDotProductAttention(&r, q, k, v, scale, m, 0, 0, g.s), r)
}

func (g *graph) qmm(x, w, scales, biases arr, group, bits int) arr {
	if g.err != nil {
		return 0
	}
	mode := mlxc.CString("affine")
	var r arr
	return g.done("quantized_matmul", mlxc.QuantizedMatmul(&r, x, w, scales, biases, true,
		mlxc.SomeInt(group), mlxc.SomeInt(bits), mode, g.s), r)
}

// gatherQmm multiplies x [..., 1, in] by the experts idx selects from stacked quantized weights [E, out, in·b/32].
func (g *graph) gatherQmm(x, w, scales, biases, idx arr, group, bits int, sorted bool) arr {
	if g.err != nil {
		return 0
	}
	mode := mlxc.CString("affine")
	var r arr
	return g.done("gather_qmm", mlxc.GatherQmm(&r, x, w, scales, biases, 0, idx, true,
		mlxc.SomeInt(group), mlxc.SomeInt(bits), mode, sorted, g.s), r)
}

func (g *graph) gatherMm(x, w, idx arr, sorted bool) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("gather_mm", mlxc.GatherMm(&r, x, w, 0, idx, sorted, g.s), r)
}

// drop frees a graph-owned array now (its data lives on while evaluated arrays or pending graph nodes use it).
func (g *graph) drop(a arr) {
	if a != 0 {
		mlxc.ArrayFree(g.keep(a))
	}
}

func (g *graph) contiguous(a arr) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("contiguous", mlxc.Contiguous(&r, a, false, g.s), r)
}

// sdpaMask is scaled dot-product attention with a boolean mask [T,S] (true = attend), broadcast over heads.
func (g *graph) sdpaMask(q, k, v arr, scale float32, mask arr) arr {
	if g.err != nil {
		return 0
	}
	mode := mlxc.CString("array")
	var r arr
	return g.done("scaled_dot_product_attention", mlxc.FastScaledDotProductAttention(&r, q, k, v, scale, mode, mask, 0, g.s), r)
}

func uploadBool(g *graph, v []bool, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Bool)
	return g.done("array_new_data", errCode(g), r)
}

// eval evaluates the arrays together (one graph execution).
func (g *graph) eval(as ...arr) {
	if g.err != nil {
		return
	}
	v := mlxc.VectorArrayNew()
	defer mlxc.VectorArrayFree(v)
	for _, a := range as {
		if a == 0 {
			continue
		}
		if rc := mlxc.VectorArrayAppendValue(v, a); rc != 0 {
			g.done("vector_append", rc, 0)
			return
		}
	}
	if rc := mlxc.Eval(v); rc != 0 {
		// Ops already scheduled may still be running on the stream's worker: wait for them before anyone
		// frees the arrays they write (freeing early corrupts the heap).
		msg := g.rt.Check(rc)
		mlxc.Synchronize(g.s)
		g.rt.Pending()
		if g.err == nil {
			g.err = fmt.Errorf("%s: eval: %w", g.name, msg)
		}
	}
}

// shape returns a's shape.
func shapeOf(a arr) []int {
	n := int(mlxc.ArrayNdim(a))
	p := mlxc.Int32s(mlxc.ArrayShape(a), n)
	out := make([]int, n)
	for i, d := range p {
		out[i] = int(d)
	}
	return out
}

// readF32 copies an evaluated float32 array to Go memory.
func (g *graph) readF32(a arr) []float32 {
	if g.err != nil {
		return nil
	}
	n := int(mlxc.ArraySize(a))
	p := mlxc.ArrayDataFloat32(a)
	if p == nil && n > 0 {
		g.fail(fmt.Errorf("read: array is not evaluated or not float32: %v", g.rt.Pending()))
		return nil
	}
	return mlxc.Float32s(p, n)
}

// readI32 copies an evaluated int32/uint32 array to Go memory.
func (g *graph) readI32(a arr) []int32 {
	if g.err != nil {
		return nil
	}
	n := int(mlxc.ArraySize(a))
	p := mlxc.ArrayDataInt32(a)
	if p == nil && n > 0 {
		g.fail(fmt.Errorf("read: array is not evaluated or not int32: %v", g.rt.Pending()))
		return nil
	}
	return mlxc.Int32s(p, n)
}

// softplus is max(x,0) + log1p(exp(−|x|)) (the stable form).
func (g *graph) softplus(x arr) arr {
	return g.add(g.maximum(x, g.scalar(0)), g.log1p(g.exp(g.neg(g.abs(x)))))
}

// l2norm divides by sqrt(Σx² + eps) over the last axis.
func (g *graph) l2norm(x arr, eps float32) arr {
	return g.div(x, g.sqrt(g.add(g.sum(g.square(x), -1, true), g.scalar(eps))))
}

// row returns x[t:t+1] of x [T, dims...] (x itself when T is 1).
func (g *graph) row(x arr, t, T int, dims ...int) arr {
	if T == 1 {
		return x
	}
	start, stop := make([]int, len(dims)+1), append([]int{t + 1}, dims...)
	start[0] = t
	return g.slice(x, start, stop)
}

func (g *graph) tanh(a arr) arr { return g.un("tanh", mlxc.Tanh, a) }

// send and recv are MLX distributed's point-to-point ops on the CPU stream (the only one implementing them).
func (g *graph) send(x arr, dst int, grp mlxc.Group) arr {
	if g.err != nil {
		return 0
	}
	var r arr
	return g.done("distributed_send", mlxc.DistributedSend(&r, x, int32(dst), grp, g.rt.CPUStream()), r)
}

func (g *graph) recv(dt mlxc.Dtype, src int, grp mlxc.Group, shape ...int) arr {
	if g.err != nil {
		return 0
	}
	sh := i32s(shape)
	var r arr
	return g.done("distributed_recv", mlxc.DistributedRecv(&r, &sh[0], uintptr(len(sh)), dt, int32(src), grp, g.rt.CPUStream()), r)
}

// itemSize is the size of one value of a's dtype.
func itemSize(a arr) int64 {
	switch mlxc.ArrayDtype(a) {
	case mlxc.Float16, mlxc.BFloat16:
		return 2
	default:
		return 4
	}
}

// arrBytes is the size of a's data (0 for the null array).
func arrBytes(a arr) int64 {
	if a == 0 {
		return 0
	}
	return int64(mlxc.ArraySize(a)) * itemSize(a)
}

// dup returns a new handle to the same array (MLX arrays are immutable, so this is a snapshot).
func dup(rt *mlxc.Runtime, a arr) (arr, error) {
	var r arr
	if err := rt.Check(mlxc.ArraySet(&r, a)); err != nil {
		return 0, err
	}
	return r, nil
}
