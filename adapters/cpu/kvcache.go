package cpu

import (
	"slices"

	"github.com/higgs-go/higgs/adapters/cpu/kernel/vecmath"
)

// kvCache is one attention layer's cache: rows of KVHeads·HeadDim values per position, in float32 (k, v) or,
// in the 8-bit mode (LoadOptions.KVBits 8), as int8 codes (k8, v8) with one float32 scale per (position,
// head) (ks, vs) in vecmath.QuantizeRow8's format. An 8-bit cache's attention reads each row back with
// vecmath.DequantizeRow8, and the block being attended is quantized and read back the same way before its
// own attention (attnJob), so every query sees every key and value, cached or in the block, as the same
// read-back bits: greedy speculative output equals greedy plain output within the mode.
type kvCache struct {
	k, v   []float32
	q8     bool
	k8, v8 []int8
	ks, vs []float32
	d      int // head dimension, set in the 8-bit mode (where a scale covers d values); 0 in a float32 cache
	// bk8, bks, bv8, bvs are the 8-bit mode's block buffers: the codes and scales of the block being attended,
	// reused by every pass (attend fills them, keep appends them to the cache).
	bk8, bv8 []int8
	bks, bvs []float32
}

// newKVCache returns an empty cache of head dimension d, 8-bit when bits is 8.
func newKVCache(bits, d int) *kvCache { return &kvCache{q8: bits == 8, d: d} }

// positions is the number of cached positions for rows of kvw values.
func (c *kvCache) positions(kvw int) int {
	if c.q8 {
		return len(c.k8) / kvw
	}
	return len(c.k) / kvw
}

// trim keeps the first n positions of rows of kvw values.
func (c *kvCache) trim(n, kvw int) {
	if c.q8 {
		h := kvw / c.d
		c.k8, c.v8, c.ks, c.vs = c.k8[:n*kvw], c.v8[:n*kvw], c.ks[:n*h], c.vs[:n*h]
		return
	}
	c.k, c.v = c.k[:n*kvw], c.v[:n*kvw]
}

// appendRows appends rows of keys and values (float32, rows of whole heads) to a float32 cache, or their
// codes and scales to an 8-bit one.
func (c *kvCache) appendRows(k, v []float32) {
	if !c.q8 {
		c.k = append(c.k, k...)
		c.v = append(c.v, v...)
		return
	}
	c.k8, c.ks = appendQuantized(c.k8, c.ks, k, c.d)
	c.v8, c.vs = appendQuantized(c.v8, c.vs, v, c.d)
}

// appendQuantized appends x's rows of d values as codes and scales.
func appendQuantized(codes []int8, scales, x []float32, d int) ([]int8, []float32) {
	n := len(codes)
	codes = slices.Grow(codes, len(x))[:n+len(x)]
	for r := 0; r < len(x); r += d {
		scales = append(scales, vecmath.QuantizeRow8(codes[n+r:n+r+d], x[r:r+d]))
	}
	return codes, scales
}

// appendCodes appends rows already quantized (a block's, by attend) to an 8-bit cache. The codes are kept
// rather than quantized again from their read-back values, whose scale could differ in the last bit.
func (c *kvCache) appendCodes(k8 []int8, ks []float32, v8 []int8, vs []float32) {
	c.k8, c.ks = append(c.k8, k8...), append(c.ks, ks...)
	c.v8, c.vs = append(c.v8, v8...), append(c.vs, vs...)
}

// dequantizeRows sets dst to the rows of d values the codes and scales hold.
func dequantizeRows(dst []float32, codes []int8, scales []float32, d int) {
	for r, s := range scales {
		vecmath.DequantizeRow8(dst[r*d:(r+1)*d], codes[r*d:], s)
	}
}

// kvChunk is how many cached rows an 8-bit attention unit reads back at a time (its scratch: kvChunk·d values).
const kvChunk = 64

// keys returns cached key rows [from, from+n) of KV head g (n ≤ kvChunk in the 8-bit mode) as float32 rows
// of d values (the head dimension; a float32 cache need not know it), stride apart: the cache's own rows (stride kvw), or the 8-bit rows read back into buf
// (stride d).
func (c *kvCache) keys(buf []float32, from, n, g, d, kvw int) (rows []float32, stride int) {
	return c.rows(c.k, c.k8, c.ks, buf, from, n, g, d, kvw)
}

// values is keys for the cached values.
func (c *kvCache) values(buf []float32, from, n, g, d, kvw int) (rows []float32, stride int) {
	return c.rows(c.v, c.v8, c.vs, buf, from, n, g, d, kvw)
}

func (c *kvCache) rows(f []float32, codes []int8, scales, buf []float32, from, n, g, d, kvw int) ([]float32, int) {
	if !c.q8 {
		return f[from*kvw+g*d:], kvw
	}
	h := kvw / d
	for r := range n {
		p := from + r
		vecmath.DequantizeRow8(buf[r*d:(r+1)*d], codes[p*kvw+g*d:], scales[p*h+g])
	}
	return buf, d
}

// export copies the first n positions' rows (a Prefix's per-layer part).
func (c *kvCache) export(n, kvw int) *kvCache {
	out := &kvCache{q8: c.q8, d: c.d}
	if c.q8 {
		h := kvw / c.d
		out.k8, out.v8 = slices.Clone(c.k8[:n*kvw]), slices.Clone(c.v8[:n*kvw])
		out.ks, out.vs = slices.Clone(c.ks[:n*h]), slices.Clone(c.vs[:n*h])
		return out
	}
	out.k, out.v = slices.Clone(c.k[:n*kvw]), slices.Clone(c.v[:n*kvw])
	return out
}

// load replaces the cache's rows by copies of p's (the same mode: a prefix of another mode's model is refused
// before this by the target check).
func (c *kvCache) load(p *kvCache) {
	c.k, c.v = append(c.k[:0], p.k...), append(c.v[:0], p.v...)
	c.k8, c.v8 = append(c.k8[:0], p.k8...), append(c.v8[:0], p.v8...)
	c.ks, c.vs = append(c.ks[:0], p.ks...), append(c.vs[:0], p.vs...)
}

// capBytes is the memory the cache's arrays hold (their capacity).
func (c *kvCache) capBytes() int64 {
	return int64(cap(c.k)+cap(c.v)+cap(c.ks)+cap(c.vs))*f32Bytes + int64(cap(c.k8)+cap(c.v8))
}

// bytes is the memory the cache's rows take.
func (c *kvCache) bytes() int64 {
	return int64(len(c.k)+len(c.v)+len(c.ks)+len(c.vs))*f32Bytes + int64(len(c.k8)+len(c.v8))
}
