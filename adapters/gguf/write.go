package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// Write encodes a GGUF v3 file: the metadata kvs in order, then the tensors' descriptions and their data in
// order, each data block aligned to general.alignment (a uint32 kv) or DefaultAlignment. It checks that each
// tensor's Data has exactly the size its type and dims imply and that names and keys are unique.
func Write(w io.Writer, kvs []KV, tensors []Tensor) error {
	align := uint64(DefaultAlignment)
	keys := map[string]bool{}
	for _, kv := range kvs {
		if keys[kv.Key] {
			return fmt.Errorf("gguf: duplicate key %q", kv.Key)
		}
		keys[kv.Key] = true
		if kv.Key == "general.alignment" {
			a, ok := kv.Value.(uint32)
			if !ok || a == 0 || a&(a-1) != 0 {
				return fmt.Errorf("gguf: general.alignment must be a uint32 power of two, got %v", kv.Value)
			}
			align = uint64(a)
		}
	}
	names := map[string]bool{}
	offsets := make([]uint64, len(tensors))
	var off uint64
	for i, t := range tensors {
		if names[t.Name] {
			return fmt.Errorf("gguf: duplicate tensor %q", t.Name)
		}
		names[t.Name] = true
		n, err := DataSize(t.Type, t.Dims)
		if err != nil {
			return fmt.Errorf("tensor %s: %w", t.Name, err)
		}
		if uint64(len(t.Data)) != n {
			return fmt.Errorf("gguf: tensor %s: %d data bytes, its type %s and dims %v need %d", t.Name, len(t.Data), t.Type, t.Dims, n)
		}
		offsets[i] = off
		off = alignUp(off+n, align)
	}

	e := &encoder{w: bufio.NewWriterSize(w, 1<<20)}
	e.u32(Magic)
	e.u32(Version)
	e.u64(uint64(len(tensors)))
	e.u64(uint64(len(kvs)))
	for _, kv := range kvs {
		e.str(kv.Key)
		if err := e.value(kv.Value); err != nil {
			return fmt.Errorf("gguf: key %s: %w", kv.Key, err)
		}
	}
	for i, t := range tensors {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(d)
		}
		e.u32(uint32(t.Type))
		e.u64(offsets[i])
	}
	e.pad(align)
	for _, t := range tensors {
		e.bytes(t.Data)
		e.pad(align)
	}
	if e.err != nil {
		return fmt.Errorf("gguf: write: %w", e.err)
	}
	if err := e.w.Flush(); err != nil {
		return fmt.Errorf("gguf: write: %w", err)
	}
	return nil
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) / a * a }

type encoder struct {
	w   *bufio.Writer
	n   uint64
	err error
	buf [8]byte
}

func (e *encoder) bytes(b []byte) {
	if e.err != nil {
		return
	}
	var k int
	k, e.err = e.w.Write(b)
	e.n += uint64(k)
}

func (e *encoder) u32(v uint32) { binary.LittleEndian.PutUint32(e.buf[:4], v); e.bytes(e.buf[:4]) }
func (e *encoder) u64(v uint64) { binary.LittleEndian.PutUint64(e.buf[:8], v); e.bytes(e.buf[:8]) }
func (e *encoder) str(s string) { e.u64(uint64(len(s))); e.bytes([]byte(s)) }

func (e *encoder) pad(align uint64) {
	if r := e.n % align; r != 0 {
		e.bytes(make([]byte, align-r))
	}
}

// value writes v's type tag and encoding.
func (e *encoder) value(v any) error {
	t, err := valueType(v)
	if err != nil {
		return err
	}
	e.u32(uint32(t))
	if t != TypeArray {
		e.scalar(v)
		return nil
	}
	switch a := v.(type) {
	case []string:
		e.u32(uint32(TypeString))
		e.u64(uint64(len(a)))
		for _, s := range a {
			e.str(s)
		}
	case []uint8:
		writeArray(e, TypeUint8, a)
	case []int8:
		writeArray(e, TypeInt8, a)
	case []uint16:
		writeArray(e, TypeUint16, a)
	case []int16:
		writeArray(e, TypeInt16, a)
	case []uint32:
		writeArray(e, TypeUint32, a)
	case []int32:
		writeArray(e, TypeInt32, a)
	case []float32:
		writeArray(e, TypeFloat32, a)
	case []bool:
		writeArray(e, TypeBool, a)
	case []uint64:
		writeArray(e, TypeUint64, a)
	case []int64:
		writeArray(e, TypeInt64, a)
	case []float64:
		writeArray(e, TypeFloat64, a)
	}
	return nil
}

func writeArray[T any](e *encoder, t ValueType, a []T) {
	e.u32(uint32(t))
	e.u64(uint64(len(a)))
	for _, x := range a {
		e.scalar(x)
	}
}

// scalar writes one non-array value without its tag.
func (e *encoder) scalar(v any) {
	switch x := v.(type) {
	case uint8:
		e.bytes([]byte{x})
	case int8:
		e.bytes([]byte{byte(x)})
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		e.bytes([]byte{b})
	case uint16:
		binary.LittleEndian.PutUint16(e.buf[:2], x)
		e.bytes(e.buf[:2])
	case int16:
		binary.LittleEndian.PutUint16(e.buf[:2], uint16(x))
		e.bytes(e.buf[:2])
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case string:
		e.str(x)
	}
}

// valueType maps a Go value to its GGUF tag.
func valueType(v any) (ValueType, error) {
	switch v.(type) {
	case uint8:
		return TypeUint8, nil
	case int8:
		return TypeInt8, nil
	case uint16:
		return TypeUint16, nil
	case int16:
		return TypeInt16, nil
	case uint32:
		return TypeUint32, nil
	case int32:
		return TypeInt32, nil
	case float32:
		return TypeFloat32, nil
	case bool:
		return TypeBool, nil
	case string:
		return TypeString, nil
	case uint64:
		return TypeUint64, nil
	case int64:
		return TypeInt64, nil
	case float64:
		return TypeFloat64, nil
	case []string, []uint8, []int8, []uint16, []int16, []uint32, []int32, []float32, []bool, []uint64, []int64, []float64:
		return TypeArray, nil
	}
	return 0, fmt.Errorf("value of Go type %T has no GGUF type", v)
}
