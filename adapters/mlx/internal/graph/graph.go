// Package graph builds one lazy MLX graph at a time on the MLX thread: Graph's ops wrap mlx-c's (through
// internal/mlxc), record the first error and turn into no-ops after it, and own every array they return until
// Keep moves it out or Release frees it. It knows nothing of models: adapters/mlx/internal/ops writes the
// block ops on it, and adapters/mlx its sessions.
package graph

import (
	"fmt"

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

// Drop frees a graph-owned array now (its data lives on while evaluated arrays or pending graph nodes use it).
func (g *Graph) Drop(a arr) {
	if a != 0 {
		mlxc.ArrayFree(g.Keep(a))
	}
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

// itemSize is the size of one value of a's dtype.
func itemSize(a arr) int64 {
	switch mlxc.ArrayDtype(a) {
	case mlxc.Bool, mlxc.Uint8, mlxc.Int8:
		return 1
	case mlxc.Float16, mlxc.BFloat16, mlxc.Uint16, mlxc.Int16:
		return 2
	case mlxc.Uint64, mlxc.Int64, mlxc.Float64, mlxc.Complex64:
		return 8
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
