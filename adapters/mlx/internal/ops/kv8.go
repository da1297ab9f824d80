package ops

import (
	"github.com/higgs-go/higgs/adapters/mlx/internal/graph"
	"github.com/higgs-go/higgs/adapters/mlx/internal/mlxc"
)

// The 8-bit KV cache (LoadOptions.KVBits 8): each [.., d] row of keys or values of one head at one position
// is kept as int8 codes q = round(x / s) with one float32 scale s = max|x| / 127 (the CPU backend's format,
// vecmath.QuantizeRow8), read back as q·s in float32 and cast to the compute dtype. Rows are quantized
// alone, so a position's codes do not depend on the block that wrote it, and a block's own rows are read
// back before it attends to them, so a verify row sees what the decode step at its position sees.

// minScale keeps a row of zeros from dividing by zero: its codes are 0 and read back as 0.
const minScale = 1e-30

// roundMagic is 1.5·2²³: in float32, r + roundMagic − roundMagic is r rounded half to even for |r| < 2²²
// (mlx-c's table has no round op).
const roundMagic = 12582912

// quantize8 returns x's rows [.., d] as int8 codes and float32 scales [.., 1].
func quantize8(g *graph.Graph, x arr) (q, s arr) {
	xf := g.Astype(x, mlxc.Float32)
	ax := g.Abs(xf)
	amax := g.TakeAlong(ax, g.Expand(g.Argmax(ax, -1), -1), -1)
	s = g.Div(g.Maximum(amax, g.Scalar(minScale)), g.Scalar(127))
	m := g.Scalar(roundMagic)
	r := g.Sub(g.Add(g.Div(xf, s), m), m)
	return g.Astype(r, mlxc.Int8), s
}

// dequantize8 reads codes q with scales s back in dtype dt.
func dequantize8(g *graph.Graph, q, s arr, dt mlxc.Dtype) arr {
	x := g.Mul(g.Astype(q, mlxc.Float32), s)
	if dt == mlxc.Float32 {
		return x
	}
	return g.Astype(x, dt)
}

// cat2 appends b's positions to a's along the position axis (b alone when a is empty).
func cat2(g *graph.Graph, a, b arr) arr {
	if a == 0 {
		return b
	}
	return g.Concat(2, a, b)
}

// append8 quantizes a block's rotated keys and values [1, Hkv, T, d] into an 8-bit cache.
func (p *Pass) append8(c *KVCache, kh, vh arr) {
	g := p.O.G
	kq, ks := quantize8(g, kh)
	vq, vs := quantize8(g, vh)
	c.K, c.V, c.KS, c.VS = cat2(g, c.K, kq), cat2(g, c.V, vq), cat2(g, c.KS, ks), cat2(g, c.VS, vs)
}
