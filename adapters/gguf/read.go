package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Parse decodes a whole GGUF v2/v3 file held in b (Tensors' Data alias b). Every count and length is checked
// against the bytes left before anything is allocated, so a malformed or hostile file yields an error wrapping
// ErrFormat, never a panic or a huge allocation. Tensor types this package does not encode are an error too:
// the reader exists to check what Write produced.
func Parse(b []byte) (*File, error) {
	d := &decoder{b: b}
	if m := d.u32(); d.err == nil && m != Magic {
		return nil, fmt.Errorf("%w: magic %#x (want %#x, \"GGUF\")", ErrFormat, m, Magic)
	}
	f := &File{Version: d.u32(), Alignment: DefaultAlignment}
	if d.err == nil && f.Version != 2 && f.Version != 3 {
		return nil, fmt.Errorf("%w: version %d (want 2 or 3)", ErrFormat, f.Version)
	}
	nt, nkv := d.u64(), d.u64()
	if d.err != nil {
		return nil, d.err
	}
	// Each kv takes at least 12 bytes (key length and type tag), each tensor description at least 24.
	if nkv > uint64(d.left())/12 || nt > uint64(d.left())/24 {
		return nil, fmt.Errorf("%w: %d kvs and %d tensors cannot fit in %d bytes", ErrFormat, nkv, nt, d.left())
	}
	f.KV = make([]KV, 0, nkv)
	seen := map[string]bool{}
	for range nkv {
		k := d.str()
		v := d.value(0)
		if d.err != nil {
			return nil, d.err
		}
		if seen[k] {
			return nil, fmt.Errorf("%w: duplicate key %q", ErrFormat, k)
		}
		seen[k] = true
		if k == "general.alignment" {
			a, ok := v.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return nil, fmt.Errorf("%w: general.alignment %v is not a uint32 power of two", ErrFormat, v)
			}
			f.Alignment = uint64(a)
		}
		f.KV = append(f.KV, KV{Key: k, Value: v})
	}
	type info struct {
		t   Tensor
		off uint64
	}
	infos := make([]info, 0, nt)
	names := map[string]bool{}
	for range nt {
		var in info
		in.t.Name = d.str()
		nd := d.u32()
		if d.err != nil {
			return nil, d.err
		}
		if nd == 0 || nd > 4 {
			return nil, fmt.Errorf("%w: tensor %q has %d dimensions (want 1–4)", ErrFormat, in.t.Name, nd)
		}
		in.t.Dims = make([]uint64, nd)
		for i := range in.t.Dims {
			in.t.Dims[i] = d.u64()
		}
		in.t.Type = Type(d.u32())
		in.off = d.u64()
		if d.err != nil {
			return nil, d.err
		}
		if names[in.t.Name] {
			return nil, fmt.Errorf("%w: duplicate tensor %q", ErrFormat, in.t.Name)
		}
		names[in.t.Name] = true
		infos = append(infos, in)
	}
	start := alignUp(uint64(d.pos), f.Alignment)
	if start > uint64(len(b)) {
		return nil, fmt.Errorf("%w: tensor data would start at %d, past the end (%d bytes)", ErrFormat, start, len(b))
	}
	data := b[start:]
	f.Tensors = make([]Tensor, len(infos))
	for i, in := range infos {
		n, err := DataSize(in.t.Type, in.t.Dims)
		if err != nil {
			return nil, fmt.Errorf("%w: tensor %q: %w", ErrFormat, in.t.Name, err)
		}
		if in.off%f.Alignment != 0 || in.off > uint64(len(data)) || n > uint64(len(data))-in.off {
			return nil, fmt.Errorf("%w: tensor %q: %d bytes at offset %d do not fit the %d data bytes (alignment %d)",
				ErrFormat, in.t.Name, n, in.off, len(data), f.Alignment)
		}
		in.t.Data = data[in.off : in.off+n : in.off+n]
		f.Tensors[i] = in.t
	}
	return f, nil
}

type decoder struct {
	b   []byte
	pos int
	err error
}

func (d *decoder) left() int { return len(d.b) - d.pos }

// take returns the next n bytes, or nil after recording an error.
func (d *decoder) take(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(d.left()) {
		d.err = fmt.Errorf("%w: %d bytes needed at offset %d, %d left", ErrFormat, n, d.pos, d.left())
		return nil
	}
	s := d.b[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return s
}

func (d *decoder) u8() uint8 {
	if s := d.take(1); s != nil {
		return s[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if s := d.take(2); s != nil {
		return binary.LittleEndian.Uint16(s)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if s := d.take(4); s != nil {
		return binary.LittleEndian.Uint32(s)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if s := d.take(8); s != nil {
		return binary.LittleEndian.Uint64(s)
	}
	return 0
}

func (d *decoder) str() string { return string(d.take(d.u64())) }

// value reads one tagged value; depth bounds nesting (arrays of arrays are legal GGUF but nothing here
// writes them, and unbounded nesting would let a file recurse without limit).
func (d *decoder) value(depth int) any {
	t := ValueType(d.u32())
	if d.err != nil {
		return nil
	}
	if t != TypeArray {
		return d.scalar(t)
	}
	if depth > 0 {
		d.err = fmt.Errorf("%w: nested arrays are not supported", ErrFormat)
		return nil
	}
	et, n := ValueType(d.u32()), d.u64()
	if d.err != nil {
		return nil
	}
	// Bound the count by the bytes left: a string element takes at least 8, a scalar its size.
	min := uint64(et.scalarSize())
	switch {
	case et == TypeString:
		min = 8
	case et == TypeArray:
		d.err = fmt.Errorf("%w: nested arrays are not supported", ErrFormat)
		return nil
	case min == 0:
		d.err = fmt.Errorf("%w: array of unknown type %d", ErrFormat, et)
		return nil
	}
	if n > uint64(d.left())/min {
		d.err = fmt.Errorf("%w: array of %d elements cannot fit in %d bytes", ErrFormat, n, d.left())
		return nil
	}
	switch et {
	case TypeString:
		return readArray(d, n, func() string { return d.str() })
	case TypeUint8:
		return readArray(d, n, d.u8)
	case TypeInt8:
		return readArray(d, n, func() int8 { return int8(d.u8()) })
	case TypeBool:
		return readArray(d, n, func() bool { return d.u8() != 0 })
	case TypeUint16:
		return readArray(d, n, d.u16)
	case TypeInt16:
		return readArray(d, n, func() int16 { return int16(d.u16()) })
	case TypeUint32:
		return readArray(d, n, d.u32)
	case TypeInt32:
		return readArray(d, n, func() int32 { return int32(d.u32()) })
	case TypeFloat32:
		return readArray(d, n, func() float32 { return math.Float32frombits(d.u32()) })
	case TypeUint64:
		return readArray(d, n, d.u64)
	case TypeInt64:
		return readArray(d, n, func() int64 { return int64(d.u64()) })
	default: // TypeFloat64
		return readArray(d, n, func() float64 { return math.Float64frombits(d.u64()) })
	}
}

func readArray[T any](d *decoder, n uint64, next func() T) []T {
	a := make([]T, n)
	for i := range a {
		a[i] = next()
	}
	if d.err != nil {
		return nil
	}
	return a
}

func (d *decoder) scalar(t ValueType) any {
	switch t {
	case TypeUint8:
		return d.u8()
	case TypeInt8:
		return int8(d.u8())
	case TypeBool:
		return d.u8() != 0
	case TypeUint16:
		return d.u16()
	case TypeInt16:
		return int16(d.u16())
	case TypeUint32:
		return d.u32()
	case TypeInt32:
		return int32(d.u32())
	case TypeFloat32:
		return math.Float32frombits(d.u32())
	case TypeUint64:
		return d.u64()
	case TypeInt64:
		return int64(d.u64())
	case TypeFloat64:
		return math.Float64frombits(d.u64())
	case TypeString:
		return d.str()
	}
	d.err = fmt.Errorf("%w: unknown value type %d", ErrFormat, t)
	return nil
}
