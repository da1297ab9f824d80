// Package mlxc binds the mlx-c shared library at run time through purego (no cgo). It holds every use of
// unsafe and purego for the MLX backend: the generated function table (zz_table.go), library discovery and
// version check, the error handler, and the OS-thread-locked executor every MLX call must run on.
//
// Handles (mlx_array, mlx_stream, …) are C structs holding one pointer; they are declared here as uintptr-sized
// integers, which have the same calling convention on amd64 (System V) and arm64 (AAPCS64) as the one-pointer
// struct. They are plain values: whoever creates one frees it explicitly (no finalizers).
package mlxc

import (
	"math"
	"unsafe"
)

//go:generate sh -c "test -n \"$MLXC_SRC\" || { echo 'set MLXC_SRC to an mlx-c checkout'; exit 1; }; go run ./gen -mlxc \"$MLXC_SRC\" -out zz_table.go"

// Array is an mlx_array handle; 0 is the null array (an absent optional argument).
type Array uintptr

// Stream is an mlx_stream handle.
type Stream uintptr

// Device is an mlx_device handle.
type Device uintptr

// VectorArray is an mlx_vector_array handle.
type VectorArray uintptr

// String is an mlx_string handle.
type String uintptr

// Group is an mlx_distributed_group handle (a communication group of MLX distributed); 0 is the null group,
// which MLX reads as the global group.
type Group uintptr

// Dtype is mlx_dtype.
type Dtype int32

// The mlx_dtype values (enum order in array.h).
const (
	Bool Dtype = iota
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	Float16
	Float32
	Float64
	BFloat16
	Complex64
)

// DeviceType is mlx_device_type.
type DeviceType int32

// The device types.
const (
	CPU DeviceType = iota
	GPU
)

// OptionalInt is mlx_optional_int ({int value; bool has_value;}: 8 bytes, one INTEGER eightbyte).
type OptionalInt uint64

// OptionalFloat is mlx_optional_float ({float value; bool has_value;}).
type OptionalFloat uint64

// SomeInt returns a present optional int.
func SomeInt(v int) OptionalInt { return OptionalInt(uint64(uint32(int32(v))) | 1<<32) }

// SomeFloat returns a present optional float.
func SomeFloat(v float32) OptionalFloat { return OptionalFloat(uint64(math.Float32bits(v)) | 1<<32) }

// CString returns a NUL-terminated copy of s for a const char* argument; keep the slice alive during the call.
func CString(s string) *byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return &b[0]
}

// GoString copies a NUL-terminated C string.
func GoString(p *byte) string {
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// Ints returns a pointer to the first element of v (nil for an empty slice) and its length, for the
// (const int* x, size_t x_num) argument pairs.
func Ints(v []int32) (*int32, uintptr) {
	if len(v) == 0 {
		return nil, 0
	}
	return &v[0], uintptr(len(v))
}

// Float32s copies n float32 values from C memory p into a new Go slice.
func Float32s(p *float32, n int) []float32 {
	if p == nil || n == 0 {
		return nil
	}
	return append([]float32(nil), unsafe.Slice(p, n)...)
}

// Int32s copies n int32 values from C memory p into a new Go slice.
func Int32s(p *int32, n int) []int32 {
	if p == nil || n == 0 {
		return nil
	}
	return append([]int32(nil), unsafe.Slice(p, n)...)
}

// Pointer returns the address of the first element of a Go slice for a copying constructor
// (mlx_array_new_data copies; never pass Go memory to a constructor that keeps it).
func Pointer[T any](v []T) unsafe.Pointer {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Pointer(&v[0])
}

type symbol struct {
	name string
	fn   any
}

// OptionalDtype is mlx_optional_dtype ({mlx_dtype value; bool has_value;}).
type OptionalDtype uint64

// SomeDtype returns a present optional dtype.
func SomeDtype(d Dtype) OptionalDtype { return OptionalDtype(uint64(uint32(d)) | 1<<32) }
