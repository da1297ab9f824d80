package graph

import (
	"github.com/higgs-go/higgs/adapters/hfmodel"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// The ops: each adds one mlx-c op to the graph on its stream and returns the result, owned by the graph
// (Done), or the null array once the graph has failed.

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

// Abs is |a| element-wise.
func (g *Graph) Abs(a arr) arr { return g.abs(a) }

// Maximum is max(a, b) element-wise, broadcasting.
func (g *Graph) Maximum(a, b arr) arr { return g.maximum(a, b) }
func (g *Graph) Neg(a arr) arr        { return g.un("negative", mlxc.Negative, a) }
func (g *Graph) square(a arr) arr     { return g.un("square", mlxc.Square, a) }
func (g *Graph) sqrt(a arr) arr       { return g.un("sqrt", mlxc.Sqrt, a) }
func (g *Graph) copy(a arr) arr       { return g.un("copy", mlxc.Copy, a) }

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

// Argpartition returns indices that put a's element of sorted position kth along axis in its place, the
// smaller ones before it and the others after, each side in no particular order (one selection pass, no
// sort).
func (g *Graph) Argpartition(a arr, kth, axis int) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("argpartition", mlxc.ArgpartitionAxis(&r, a, int32(kth), int32(axis), g.Stream), r)
}

// Max is the largest value along axis.
func (g *Graph) Max(a arr, axis int, keep bool) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("max", mlxc.MaxAxis(&r, a, int32(axis), keep, g.Stream), r)
}

// LogSumExp is log Σ exp(a) along axis (MLX subtracts the largest value first).
func (g *Graph) LogSumExp(a arr, axis int, keep bool) arr {
	if g.Err != nil {
		return 0
	}
	var r arr
	return g.Done("logsumexp", mlxc.LogsumexpAxis(&r, a, int32(axis), keep, g.Stream), r)
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
