// Package graph builds one lazy MLX graph at a time on the MLX thread: Graph's ops wrap mlx-c's (through
// internal/mlxc), record the first error and turn into no-ops after it, and own every array they return until
// Keep moves it out or Release frees it. It knows nothing of models: adapters/mlx/internal/ops writes the
// block ops on it, and adapters/mlx its sessions.
package graph

import (
	"fmt"

	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// arr is an MLX array handle. The zero value is the null array (an absent optional argument).
type arr = mlxc.Array

// Graph builds one lazy MLX graph on the MLX thread. Ops record the first error and turn into no-ops after it,
// so model code reads straight through and checks g.Err once. Every array an op returns is owned by the graph
// (Owned) and freed by Release unless Keep moved it out (to a cache or a weight). Runtime and Stream are the
// MLX thread's; name prefixes the error.
type Graph struct {
	Runtime *mlxc.Runtime
	Stream  mlxc.Stream
	Err     error
	Owned   []arr
	name    string
}

// New starts a graph on rt's stream; call it on the MLX thread (rt.Do), and Release the graph there.
func New(rt *mlxc.Runtime, name string) *Graph {
	return &Graph{Runtime: rt, Stream: rt.Stream(), name: name}
}

// Release frees every array the graph still owns.
func (g *Graph) Release() {
	for _, a := range g.Owned {
		if a != 0 {
			mlxc.ArrayFree(a)
		}
	}
	g.Owned = g.Owned[:0]
}

// Keep removes a from the graph's ownership: the caller frees it.
func (g *Graph) Keep(a arr) arr {
	for i := len(g.Owned) - 1; i >= 0; i-- {
		if g.Owned[i] == a {
			g.Owned[i] = 0
			break
		}
	}
	return a
}

// KeepAll is Keep for many arrays in one pass over the graph's arrays (Keep scans them once per call, and a
// forward adopts every layer's state and tape).
func (g *Graph) KeepAll(as []arr) {
	set := make(map[arr]struct{}, len(as))
	for _, a := range as {
		set[a] = struct{}{}
	}
	for i, a := range g.Owned {
		if _, ok := set[a]; ok {
			g.Owned[i] = 0
		}
	}
}

// Done adopts r, the result of mlx-c op op, and records rc's error (the first one only); it returns r, or
// the null array once the graph has failed.
func (g *Graph) Done(op string, rc int32, r arr) arr {
	if r != 0 {
		g.Owned = append(g.Owned, r)
	}
	if rc != 0 && g.Err == nil {
		g.Err = fmt.Errorf("%s: %s: %w", g.name, op, g.Runtime.Check(rc))
	}
	if g.Err != nil {
		return 0
	}
	return r
}

// Fail records err as the graph's error unless it already has one.
func (g *Graph) Fail(err error) {
	if g.Err == nil {
		g.Err = fmt.Errorf("%s: %w", g.name, err)
	}
}

func i32s(v []int) []int32 {
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}

// UploadF32 copies Go data into a new graph-owned array (mlx_array_new_data copies the buffer); UploadU32,
// UploadI32 and UploadBool likewise.
func UploadF32(g *Graph, v []float32, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	n := 1
	for _, d := range shape {
		n *= d
	}
	if n != len(v) {
		g.Fail(fmt.Errorf("upload: %d values for shape %v", len(v), shape))
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Float32)
	return g.Done("array_new_data", errCode(g), r)
}

func UploadU32(g *Graph, v []uint32, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Uint32)
	return g.Done("array_new_data", errCode(g), r)
}

func UploadI32(g *Graph, v []int32, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Int32)
	return g.Done("array_new_data", errCode(g), r)
}

// errCode turns a pending MLX error (from a call that returns a handle) into a nonzero code for Done.
func errCode(g *Graph) int32 {
	if err := g.Runtime.Pending(); err != nil {
		g.Fail(err)
		return 1
	}
	return 0
}

func (g *Graph) Scalar(v float32) arr {
	if g.Err != nil {
		return 0
	}
	return g.Done("array_new_float32", errCode(g), mlxc.ArrayNewFloat32(v))
}

type binop func(res *arr, a, b arr, s mlxc.Stream) int32

func (g *Graph) bin(op string, f binop, a, b arr) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done(op, f(&r, a, b, g.Stream), r)
}

type unop func(res *arr, a arr, s mlxc.Stream) int32

func (g *Graph) un(op string, f unop, a arr) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done(op, f(&r, a, g.Stream), r)
}

func (g *Graph) Add(a, b arr) arr    { return g.bin("add", mlxc.Add, a, b) }
func (g *Graph) Sub(a, b arr) arr    { return g.bin("subtract", mlxc.Subtract, a, b) }
func (g *Graph) Mul(a, b arr) arr    { return g.bin("multiply", mlxc.Multiply, a, b) }
func (g *Graph) Div(a, b arr) arr    { return g.bin("divide", mlxc.Divide, a, b) }
func (g *Graph) Matmul(a, b arr) arr { return g.bin("matmul", mlxc.Matmul, a, b) }
func (g *Graph) maximum(a, b arr) arr {
	return g.bin("maximum", mlxc.Maximum, a, b)
}
func (g *Graph) Sigmoid(a arr) arr { return g.un("sigmoid", mlxc.Sigmoid, a) }
func (g *Graph) Exp(a arr) arr     { return g.un("exp", mlxc.Exp, a) }
func (g *Graph) log1p(a arr) arr   { return g.un("log1p", mlxc.Log1p, a) }
func (g *Graph) abs(a arr) arr     { return g.un("abs", mlxc.Abs, a) }
func (g *Graph) Neg(a arr) arr     { return g.un("negative", mlxc.Negative, a) }
func (g *Graph) square(a arr) arr  { return g.un("square", mlxc.Square, a) }
func (g *Graph) sqrt(a arr) arr    { return g.un("sqrt", mlxc.Sqrt, a) }
func (g *Graph) copy(a arr) arr    { return g.un("copy", mlxc.Copy, a) }

// SiLU is x·σ(x).
func (g *Graph) SiLU(a arr) arr { return g.Mul(a, g.Sigmoid(a)) }

func (g *Graph) Reshape(a arr, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	sh := i32s(shape)
	p, n := mlxc.Ints(sh)
	var r arr
	return g.Done("reshape", mlxc.Reshape(&r, a, p, n, g.Stream), r)
}

func (g *Graph) Transpose(a arr, axes ...int) arr {
	if g.Err != nil {
		return 0
	}
	ax := i32s(axes)
	p, n := mlxc.Ints(ax)
	var r arr
	return g.Done("transpose", mlxc.TransposeAxes(&r, a, p, n, g.Stream), r)
}

// Slice takes a[start:stop] on every axis (stop −1 = to the end is not supported; pass the size).
func (g *Graph) Slice(a arr, start, stop []int) arr {
	if g.Err != nil {
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
	return g.Done("slice", mlxc.Slice(&r, a, p1, n1, p2, n2, p3, n3, g.Stream), r)
}

func (g *Graph) Concat(axis int, as ...arr) arr {
	if g.Err != nil {
		return 0
	}
	v := mlxc.VectorArrayNew()
	defer mlxc.VectorArrayFree(v)
	for _, a := range as {
		if rc := mlxc.VectorArrayAppendValue(v, a); rc != 0 {
			return g.Done("vector_append", rc, 0)
		}
	}
	var r arr
	return g.Done("concatenate", mlxc.ConcatenateAxis(&r, v, int32(axis), g.Stream), r)
}

func (g *Graph) Astype(a arr, dt mlxc.Dtype) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("astype", mlxc.Astype(&r, a, dt, g.Stream), r)
}

func (g *Graph) Take(a, idx arr, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("take", mlxc.TakeAxis(&r, a, idx, int32(axis), g.Stream), r)
}

func (g *Graph) TakeAlong(a, idx arr, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("take_along_axis", mlxc.TakeAlongAxis(&r, a, idx, int32(axis), g.Stream), r)
}

func (g *Graph) Sum(a arr, axis int, keep bool) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("sum", mlxc.SumAxis(&r, a, int32(axis), keep, g.Stream), r)
}

func (g *Graph) Softmax(a arr, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("softmax", mlxc.SoftmaxAxis(&r, a, int32(axis), true, g.Stream), r)
}

func (g *Graph) Argmax(a arr, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("argmax", mlxc.ArgmaxAxis(&r, a, int32(axis), false, g.Stream), r)
}

func (g *Graph) Argsort(a arr, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("argsort", mlxc.ArgsortAxis(&r, a, int32(axis), g.Stream), r)
}

func (g *Graph) Expand(a arr, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("expand_dims", mlxc.ExpandDims(&r, a, int32(axis), g.Stream), r)
}

func (g *Graph) Zeros(dt mlxc.Dtype, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	sh := i32s(shape)
	p, n := mlxc.Ints(sh)
	var r arr
	return g.Done("zeros", mlxc.Zeros(&r, p, n, dt, g.Stream), r)
}

func (g *Graph) RMSNorm(x, w arr, eps float32) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("rms_norm", mlxc.FastRmsNorm(&r, x, w, eps, g.Stream), r)
}

// RopeSpec is NeoX (non-traditional) RoPE over the first dims of a head. A scaled RoPE (YaRN, linear) has
// freqs, the periods 1/θ_i that mlx_fast_rope takes in place of a base, and may have scale, the factor
// transformers multiplies cos and sin by, as a float32 per-dim vector over the head width. Both arrays are
// uploaded once, with the weights.
type RopeSpec struct {
	dims  int
	base  float64
	freqs arr // 0: plain RoPE from base
	scale arr // 0: cos and sin unscaled
	dt    mlxc.Dtype
}

// NewRopeSpec resolves a checkpoint's RoPE scaling (hfmodel.RopeScaling.Frequencies) for heads of width in
// compute dtype dt, uploading its arrays on arena (the graph that owns the weights).
func NewRopeSpec(arena *Graph, dims, width int, base float64, s hfmodel.RopeScaling, maxPositions int, dt mlxc.Dtype) RopeSpec {
	rs := RopeSpec{dims: dims, base: base, dt: dt}
	if s.Type == "" {
		return rs
	}
	inv, scale := s.Frequencies(dims, base, maxPositions)
	periods := make([]float32, len(inv))
	for i, f := range inv {
		periods[i] = float32(1 / f)
	}
	rs.freqs = UploadF32(arena, periods, len(periods))
	if scale != 1 {
		m := make([]float32, width)
		for i := range m {
			m[i] = 1
			if i < dims {
				m[i] = float32(scale)
			}
		}
		rs.scale = UploadF32(arena, m, width)
	}
	return rs
}

// Rope applies rs to x ([B, heads, T, width]) at positions offset..offset+T−1. RoPE is linear, so scaled cos
// and sin are a rotation followed by a per-dim factor (exactly 1 past the rotated dims), multiplied in float32
// so that a bf16 model does not round the factor itself.
func (g *Graph) Rope(x arr, rs RopeSpec, offset int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	if rs.freqs == 0 {
		return g.Done("rope", mlxc.FastRope(&r, x, int32(rs.dims), false, mlxc.SomeFloat(float32(rs.base)), 1, int32(offset), 0, g.Stream), r)
	}
	r = g.Done("rope", mlxc.FastRope(&r, x, int32(rs.dims), false, 0, 1, int32(offset), rs.freqs, g.Stream), r)
	switch {
	case rs.scale == 0:
		return r
	case rs.dt == mlxc.Float32:
		return g.Mul(r, rs.scale)
	}
	return g.Astype(g.Mul(g.Astype(r, mlxc.Float32), rs.scale), rs.dt)
}

// SDPA is scaled dot-product attention: q [B,Hq,T,d], k/v [B,Hkv,S,d]; causal masks key j > query i+S−T.
func (g *Graph) SDPA(q, k, v arr, scale float32, causal bool) arr {
	if g.Err != nil {
		return 0
	}
	mode := ""
	if causal {
		mode = "causal"
	}
	m := mlxc.CString(mode)
	var r arr
	return g.Done("scaled_dot_product_attention", mlxc.FastScaledDotProductAttention(&r, q, k, v, scale, m, 0, 0, g.Stream), r)
}

func (g *Graph) QMM(x, w, scales, biases arr, group, bits int) arr {
	if g.Err != nil {
		return 0
	}
	mode := mlxc.CString("affine")
	var r arr
	return g.Done("quantized_matmul", mlxc.QuantizedMatmul(&r, x, w, scales, biases, true,
		mlxc.SomeInt(group), mlxc.SomeInt(bits), mode, g.Stream), r)
}

// GatherQMM multiplies x [..., 1, in] by the experts idx selects from stacked quantized weights [E, out, in·b/32].
func (g *Graph) GatherQMM(x, w, scales, biases, idx arr, group, bits int, sorted bool) arr {
	if g.Err != nil {
		return 0
	}
	mode := mlxc.CString("affine")
	var r arr
	return g.Done("gather_qmm", mlxc.GatherQmm(&r, x, w, scales, biases, 0, idx, true,
		mlxc.SomeInt(group), mlxc.SomeInt(bits), mode, sorted, g.Stream), r)
}

func (g *Graph) GatherMM(x, w, idx arr, sorted bool) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("gather_mm", mlxc.GatherMm(&r, x, w, 0, idx, sorted, g.Stream), r)
}

// Drop frees a graph-owned array now (its data lives on while evaluated arrays or pending graph nodes use it).
func (g *Graph) Drop(a arr) {
	if a != 0 {
		mlxc.ArrayFree(g.Keep(a))
	}
}

func (g *Graph) Contiguous(a arr) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("contiguous", mlxc.Contiguous(&r, a, false, g.Stream), r)
}

// SDPAMask is scaled dot-product attention with a boolean mask [T,S] (true = attend), broadcast over heads.
func (g *Graph) SDPAMask(q, k, v arr, scale float32, mask arr) arr {
	if g.Err != nil {
		return 0
	}
	mode := mlxc.CString("array")
	var r arr
	return g.Done("scaled_dot_product_attention", mlxc.FastScaledDotProductAttention(&r, q, k, v, scale, mode, mask, 0, g.Stream), r)
}

func UploadBool(g *Graph, v []bool, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	sh := i32s(shape)
	r := mlxc.ArrayNewData(mlxc.Pointer(v), &sh[0], int32(len(sh)), mlxc.Bool)
	return g.Done("array_new_data", errCode(g), r)
}

// Eval evaluates the arrays together (one graph execution).
func (g *Graph) Eval(as ...arr) {
	if g.Err != nil {
		return
	}
	v := mlxc.VectorArrayNew()
	defer mlxc.VectorArrayFree(v)
	for _, a := range as {
		if a == 0 {
			continue
		}
		if rc := mlxc.VectorArrayAppendValue(v, a); rc != 0 {
			g.Done("vector_append", rc, 0)
			return
		}
	}
	if rc := mlxc.Eval(v); rc != 0 {
		// Ops already scheduled may still be running on the stream's worker: wait for them before anyone
		// frees the arrays they write (freeing early corrupts the heap).
		msg := g.Runtime.Check(rc)
		mlxc.Synchronize(g.Stream)
		g.Runtime.Pending()
		if g.Err == nil {
			g.Err = fmt.Errorf("%s: eval: %w", g.name, msg)
		}
	}
}

// ShapeOf returns a's shape.
func ShapeOf(a arr) []int {
	n := int(mlxc.ArrayNdim(a))
	p := mlxc.Int32s(mlxc.ArrayShape(a), n)
	out := make([]int, n)
	for i, d := range p {
		out[i] = int(d)
	}
	return out
}

// ReadF32 copies an evaluated float32 array to Go memory.
func (g *Graph) ReadF32(a arr) []float32 {
	if g.Err != nil {
		return nil
	}
	n := int(mlxc.ArraySize(a))
	p := mlxc.ArrayDataFloat32(a)
	if p == nil && n > 0 {
		g.Fail(fmt.Errorf("read: array is not evaluated or not float32: %v", g.Runtime.Pending()))
		return nil
	}
	return mlxc.Float32s(p, n)
}

// ReadI32 copies an evaluated int32/uint32 array to Go memory.
func (g *Graph) ReadI32(a arr) []int32 {
	if g.Err != nil {
		return nil
	}
	n := int(mlxc.ArraySize(a))
	p := mlxc.ArrayDataInt32(a)
	if p == nil && n > 0 {
		g.Fail(fmt.Errorf("read: array is not evaluated or not int32: %v", g.Runtime.Pending()))
		return nil
	}
	return mlxc.Int32s(p, n)
}

// Softplus is max(x,0) + log1p(exp(−|x|)) (the stable form).
func (g *Graph) Softplus(x arr) arr {
	return g.Add(g.maximum(x, g.Scalar(0)), g.log1p(g.Exp(g.Neg(g.abs(x)))))
}

// L2Norm divides by sqrt(Σx² + eps) over the last axis.
func (g *Graph) L2Norm(x arr, eps float32) arr {
	return g.Div(x, g.sqrt(g.Add(g.Sum(g.square(x), -1, true), g.Scalar(eps))))
}

// Row returns x[t:t+1] of x [T, dims...] (x itself when T is 1).
func (g *Graph) Row(x arr, t, T int, dims ...int) arr {
	if T == 1 {
		return x
	}
	start, stop := make([]int, len(dims)+1), append([]int{t + 1}, dims...)
	start[0] = t
	return g.Slice(x, start, stop)
}

func (g *Graph) Tanh(a arr) arr { return g.un("tanh", mlxc.Tanh, a) }

// Send and Recv are MLX distributed's point-to-point ops on the CPU stream (the only one implementing them).
func (g *Graph) Send(x arr, dst int, grp mlxc.Group) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("distributed_send", mlxc.DistributedSend(&r, x, int32(dst), grp, g.Runtime.CPUStream()), r)
}

func (g *Graph) Recv(dt mlxc.Dtype, src int, grp mlxc.Group, shape ...int) arr {
	if g.Err != nil {
		return 0
	}
	sh := i32s(shape)
	var r arr
	return g.Done("distributed_recv", mlxc.DistributedRecv(&r, &sh[0], uintptr(len(sh)), dt, int32(src), grp, g.Runtime.CPUStream()), r)
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

// ArrBytes is the size of a's data (0 for the null array).
func ArrBytes(a arr) int64 {
	if a == 0 {
		return 0
	}
	return int64(mlxc.ArraySize(a)) * itemSize(a)
}

// Dup returns a new handle to the same array (MLX arrays are immutable, so this is a snapshot).
func Dup(rt *mlxc.Runtime, a arr) (arr, error) {
	var r arr
	if err := rt.Check(mlxc.ArraySet(&r, a)); err != nil {
		return 0, err
	}
	return r, nil
}
