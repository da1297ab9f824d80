package cpu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/higgs-go/higgs/ports"
)

// The target and the drafter write their prefix states for the prefix cache's disk tier.
var (
	_ ports.PrefixCodec = (*Target)(nil)
	_ ports.PrefixCodec = (*Drafter)(nil)
)

// The CPU prefix format, little-endian: magic, format version (uint16), kind (uint8: target or drafter), the
// KV element (uint8: 1 float32, 2 int8 codes with float32 scales; another KV encoding takes a new value rather
// than reinterpreting these), then the kind's body. Every array is a uint64 count and that many values (IEEE
// 754 float32 bit patterns, or int8 bytes), so a state round-trips bit for bit.
//
//	target:  n (uint32), layers (uint32), per layer: kind (uint8: 0 attention, 1 recurrent), then
//	         attention, float32: K [n·KVHeads·HeadDim], V [same];
//	         attention, int8: K codes [n·KVHeads·HeadDim], V codes [same], K scales [n·KVHeads], V scales [same];
//	         recurrent: conv [(ConvKernel−1)·ConvDim], SSM [Hv·dv·dk]
//	drafter: projected rows (uint32), queued rows (uint32), layers (uint32), per layer K, V [rows·KVHeads·HeadDim],
//	         then the queued taps [queued·taps·hidden]
const (
	prefixMagic    = "HGPS"
	prefixVersion  = 1
	prefixKindT    = 1
	prefixKindD    = 2
	prefixElemF32  = 1
	prefixElemI8   = 2
	prefixHeadSize = 8
)

// errPrefixFormat wraps every decoding failure.
var errPrefixFormat = fmt.Errorf("cpu prefix format: %w", ports.ErrPrefixRecordInvalid)

func prefixHeader(kind, elem byte) []byte {
	b := append([]byte(prefixMagic), 0, 0, kind, elem)
	binary.LittleEndian.PutUint16(b[4:], prefixVersion)
	return b
}

// kvElem is the header's KV element of a target with kvBits-bit attention caches.
func kvElem(kvBits int) byte {
	if kvBits == 8 {
		return prefixElemI8
	}
	return prefixElemF32
}

func appendInt8s(b []byte, xs []int8) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(xs)))
	for _, x := range xs {
		b = append(b, byte(x))
	}
	return b
}

func appendFloats(b []byte, xs []float32) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(xs)))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// EncodePrefix writes a state exported by one of t's sessions (ports.PrefixCodec).
func (t *Target) EncodePrefix(ps ports.PrefixState) ([]byte, error) {
	p, ok := ps.(*Prefix)
	switch {
	case !ok || p == nil:
		return nil, fmt.Errorf("cpu: encode prefix: state %T is not a CPU target prefix", ps)
	case p.t != t:
		return nil, errors.New("cpu: encode prefix: the state was exported by a session of another model")
	}
	b := make([]byte, 0, prefixHeadSize+16+int(p.Size)+len(p.k)*40)
	b = append(b, prefixHeader(prefixKindT, kvElem(p.kvBits))...)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.n))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p.conv)))
	for i := range p.conv {
		switch {
		case p.conv[i] == nil && p.kvBits == 8:
			b = append(b, 0)
			b = appendInt8s(appendInt8s(b, p.k8[i]), p.v8[i])
			b = appendFloats(appendFloats(b, p.ks[i]), p.vs[i])
		case p.conv[i] == nil:
			b = append(b, 0)
			b = appendFloats(appendFloats(b, p.k[i]), p.v[i])
		default:
			b = append(b, 1)
			b = appendFloats(appendFloats(b, p.conv[i]), p.ssm[i])
		}
	}
	return b, nil
}

// decoder reads the format; the first problem sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errPrefixFormat, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.fail("truncated: want %d more bytes, %d left", n, len(d.b))
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() byte {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

// floats reads an array that must hold exactly want values.
func (d *decoder) floats(want int, what string) []float32 {
	nb := d.take(8)
	if nb == nil {
		return nil
	}
	if n := binary.LittleEndian.Uint64(nb); n != uint64(want) {
		d.fail("%s holds %d values, the model's shape needs %d", what, n, want)
		return nil
	}
	raw := d.take(4 * want)
	if raw == nil {
		return nil
	}
	out := make([]float32, want)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

// int8s reads an array of int8 codes that must hold exactly want values.
func (d *decoder) int8s(want int, what string) []int8 {
	nb := d.take(8)
	if nb == nil {
		return nil
	}
	if n := binary.LittleEndian.Uint64(nb); n != uint64(want) {
		d.fail("%s holds %d values, the model's shape needs %d", what, n, want)
		return nil
	}
	raw := d.take(want)
	if raw == nil {
		return nil
	}
	out := make([]int8, want)
	for i, c := range raw {
		out[i] = int8(c)
	}
	return out
}

// header checks the magic, version, kind and element.
func (d *decoder) header(kind, elem byte) {
	h := d.take(prefixHeadSize)
	if h == nil {
		return
	}
	switch {
	case string(h[:4]) != prefixMagic:
		d.fail("not a CPU prefix state (magic %q)", h[:4])
	case binary.LittleEndian.Uint16(h[4:]) != prefixVersion:
		d.fail("format version %d, this build reads %d", binary.LittleEndian.Uint16(h[4:]), prefixVersion)
	case h[6] != kind:
		d.fail("a state of kind %d where kind %d was expected (target 1, drafter 2)", h[6], kind)
	case h[7] != elem:
		d.fail("KV element %d where this model's is %d (1 float32, 2 int8 with scales)", h[7], elem)
	}
}

// maxPrefixPositions bounds a decoded state's positions before any allocation depends on it.
const maxPrefixPositions = 1 << 24

// DecodePrefix reads bytes EncodePrefix wrote for a model of t's shapes (ports.PrefixCodec).
func (t *Target) DecodePrefix(b []byte) (ports.PrefixState, error) {
	a := &t.m.Arch
	d := &decoder{b: b}
	d.header(prefixKindT, kvElem(t.kvBits))
	n, layers := int(d.u32()), int(d.u32())
	if d.err == nil && (n < 1 || n > maxPrefixPositions) {
		d.fail("%d positions", n)
	}
	if d.err == nil && layers != a.Layers {
		d.fail("%d layers, the model has %d", layers, a.Layers)
	}
	if d.err != nil {
		return nil, d.err
	}
	w := a.KVHeads * a.HeadDim
	p := &Prefix{t: t, n: n, kvBits: t.kvBits, conv: make([][]float32, layers), ssm: make([][]float32, layers)}
	if p.kvBits == 8 {
		p.k8, p.v8, p.ks, p.vs = make([][]int8, layers), make([][]int8, layers), make([][]float32, layers), make([][]float32, layers)
	} else {
		p.k, p.v = make([][]float32, layers), make([][]float32, layers)
	}
	var floats int
	for i, kind := range a.Kinds {
		got := d.u8()
		if kind == ports.LayerAttention {
			if got != 0 && d.err == nil {
				d.fail("layer %d is recurrent in the state, attention in the model", i)
			}
			if p.kvBits == 8 {
				p.k8[i] = d.int8s(n*w, fmt.Sprintf("layer %d's K codes", i))
				p.v8[i] = d.int8s(n*w, fmt.Sprintf("layer %d's V codes", i))
				p.ks[i] = d.floats(n*a.KVHeads, fmt.Sprintf("layer %d's K scales", i))
				p.vs[i] = d.floats(n*a.KVHeads, fmt.Sprintf("layer %d's V scales", i))
				// What the exporter counts (kvCache.export's bytes): the codes and their scales.
				p.Size += int64(2*n*w) + int64(2*n*a.KVHeads)*4
			} else {
				p.k[i] = d.floats(n*w, fmt.Sprintf("layer %d's K", i))
				p.v[i] = d.floats(n*w, fmt.Sprintf("layer %d's V", i))
				p.Size += int64(2*n*w) * 4
			}
			continue
		}
		if got != 1 && d.err == nil {
			d.fail("layer %d is attention in the state, recurrent in the model", i)
		}
		p.conv[i] = d.floats((a.ConvKernel-1)*a.ConvDim(), fmt.Sprintf("layer %d's conv buffer", i))
		p.ssm[i] = d.floats(a.ValueHeads*a.ValueDim*a.KeyDim, fmt.Sprintf("layer %d's SSM state", i))
		floats += len(p.conv[i]) + len(p.ssm[i])
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the state", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	p.Size += int64(floats) * 4
	return p, nil
}

// EncodePrefix writes a state exported by one of d's sessions (ports.PrefixCodec).
func (dr *Drafter) EncodePrefix(ps ports.PrefixState) ([]byte, error) {
	p, ok := ps.(*DraftPrefix)
	switch {
	case !ok || p == nil:
		return nil, fmt.Errorf("cpu drafter: encode prefix: state %T is not a CPU drafter prefix", ps)
	case p.d != dr:
		return nil, errors.New("cpu drafter: encode prefix: the state was exported by a session of another drafter")
	}
	b := make([]byte, 0, prefixHeadSize+24+int(p.Size)+len(p.k)*16)
	b = append(b, prefixHeader(prefixKindD, prefixElemF32)...)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.n))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.nq))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(p.k)))
	for i := range p.k {
		b = appendFloats(appendFloats(b, p.k[i]), p.v[i])
	}
	return appendFloats(b, p.queued), nil
}

// DecodePrefix reads bytes EncodePrefix wrote for a drafter of dr's shapes (ports.PrefixCodec).
func (dr *Drafter) DecodePrefix(b []byte) (ports.PrefixState, error) {
	a := &dr.m.Arch
	d := &decoder{b: b}
	d.header(prefixKindD, prefixElemF32)
	proj, nq, layers := int(d.u32()), int(d.u32()), int(d.u32())
	if d.err == nil && (proj < 0 || nq < 0 || proj+nq < 1 || proj+nq > maxPrefixPositions) {
		d.fail("%d projected and %d queued positions", proj, nq)
	}
	if d.err == nil && layers != len(dr.m.Layers) {
		d.fail("%d layers, the drafter has %d", layers, len(dr.m.Layers))
	}
	if d.err != nil {
		return nil, d.err
	}
	kvw := a.NumKVHeads * a.HeadDim
	width := len(a.TapLayers) * a.HiddenSize
	p := &DraftPrefix{d: dr, n: proj, nq: nq, k: make([][]float32, layers), v: make([][]float32, layers)}
	floats := 0
	for i := range layers {
		p.k[i] = d.floats(proj*kvw, fmt.Sprintf("layer %d's K", i))
		p.v[i] = d.floats(proj*kvw, fmt.Sprintf("layer %d's V", i))
		floats += 2 * proj * kvw
	}
	p.queued = d.floats(nq*width, "the queued taps")
	floats += nq * width
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the state", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	p.Size = int64(floats) * 4
	return p, nil
}
