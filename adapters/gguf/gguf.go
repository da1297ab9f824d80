// Package gguf reads and writes GGUF version 3 files, the container llama.cpp loads: a header of typed
// key/value metadata and tensor descriptions, then the tensor data, each tensor aligned. It holds the format
// (this file, write.go, read.go), the llama.cpp block encodings higgs can produce exactly (blocks.go: F32,
// F16, BF16, Q8_0, Q4_0) and an exporter of dense Qwen3 checkpoints (export.go, tokenizer.go), so the same
// weights can be benchmarked against llama.cpp. It is an exporter, not a model loader: higgs runs
// safetensors.
package gguf

import (
	"errors"
	"fmt"
)

// Magic is the file's first four bytes ("GGUF", little-endian uint32 0x46554747); Version the one written.
const (
	Magic   = 0x46554747
	Version = 3
	// DefaultAlignment is the tensor data alignment when general.alignment is absent.
	DefaultAlignment = 32
)

// ErrFormat is wrapped by every error Parse returns for a malformed file.
var ErrFormat = errors.New("gguf: malformed file")

// ValueType is a metadata value's type tag.
type ValueType uint32

// The metadata value types of GGUF v3.
const (
	TypeUint8   ValueType = 0
	TypeInt8    ValueType = 1
	TypeUint16  ValueType = 2
	TypeInt16   ValueType = 3
	TypeUint32  ValueType = 4
	TypeInt32   ValueType = 5
	TypeFloat32 ValueType = 6
	TypeBool    ValueType = 7
	TypeString  ValueType = 8
	TypeArray   ValueType = 9
	TypeUint64  ValueType = 10
	TypeInt64   ValueType = 11
	TypeFloat64 ValueType = 12
)

// scalarSize is the encoded size of a fixed-size value type (0: string or array).
func (t ValueType) scalarSize() int {
	switch t {
	case TypeUint8, TypeInt8, TypeBool:
		return 1
	case TypeUint16, TypeInt16:
		return 2
	case TypeUint32, TypeInt32, TypeFloat32:
		return 4
	case TypeUint64, TypeInt64, TypeFloat64:
		return 8
	}
	return 0
}

// KV is one metadata entry. Value holds one of: uint8, int8, uint16, int16, uint32, int32, float32, bool,
// string, uint64, int64, float64, or a slice of one of those ([]string included); the writer derives the type
// tag from it and the reader produces the same Go types.
type KV struct {
	Key   string
	Value any
}

// Type is a tensor's element encoding (ggml_type). Only the ones this package encodes are named.
type Type uint32

// The tensor types this package writes (numbering of ggml.h).
const (
	F32  Type = 0
	F16  Type = 1
	Q4_0 Type = 2
	Q8_0 Type = 8
	BF16 Type = 30
)

// String names t as llama.cpp does.
func (t Type) String() string {
	switch t {
	case F32:
		return "f32"
	case F16:
		return "f16"
	case Q4_0:
		return "q4_0"
	case Q8_0:
		return "q8_0"
	case BF16:
		return "bf16"
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// ParseType accepts the names String returns.
func ParseType(s string) (Type, error) {
	for _, t := range []Type{F32, F16, BF16, Q8_0, Q4_0} {
		if t.String() == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("gguf: tensor type %q unsupported (want f32, f16, bf16, q8_0 or q4_0)", s)
}

// Block returns how many elements one block of t holds and its size in bytes, or ok=false for a type this
// package does not know.
func (t Type) Block() (elems, bytes int, ok bool) {
	switch t {
	case F32:
		return 1, 4, true
	case F16, BF16:
		return 1, 2, true
	case Q8_0:
		return 32, 34, true
	case Q4_0:
		return 32, 18, true
	}
	return 0, 0, false
}

// DataSize returns the bytes of a tensor of t with shape dims (ggml order: dims[0] is the innermost, a
// multiple of the block size), or an error.
func DataSize(t Type, dims []uint64) (uint64, error) {
	be, bb, ok := t.Block()
	if !ok {
		return 0, fmt.Errorf("gguf: %s has no known block size", t)
	}
	if len(dims) == 0 || len(dims) > 4 {
		return 0, fmt.Errorf("gguf: %d dimensions (want 1–4)", len(dims))
	}
	if dims[0]%uint64(be) != 0 {
		return 0, fmt.Errorf("gguf: innermost dimension %d is not a multiple of %s's block of %d", dims[0], t, be)
	}
	n := dims[0] / uint64(be) * uint64(bb)
	for _, d := range dims[1:] {
		if d != 0 && n > (1<<62)/d {
			return 0, fmt.Errorf("gguf: tensor of dims %v is too large", dims)
		}
		n *= d
	}
	return n, nil
}

// Tensor is one tensor: Dims in ggml order (Dims[0] is the contiguous one: a row-major [rows, cols] matrix
// has Dims {cols, rows}) and Data its encoded bytes, exactly DataSize(Type, Dims) long.
type Tensor struct {
	Name string
	Dims []uint64
	Type Type
	Data []byte
}

// File is a parsed GGUF file. Tensor data slices alias the parsed buffer.
type File struct {
	Version   uint32
	KV        []KV
	Tensors   []Tensor
	Alignment uint64
}

// Get returns the value of key, if present.
func (f *File) Get(key string) (any, bool) {
	for _, kv := range f.KV {
		if kv.Key == key {
			return kv.Value, true
		}
	}
	return nil, false
}

// Tensor returns the named tensor, if present.
func (f *File) Tensor(name string) (*Tensor, bool) {
	for i := range f.Tensors {
		if f.Tensors[i].Name == name {
			return &f.Tensors[i], true
		}
	}
	return nil, false
}
